"""Write docs/compatibility.md from ci/matrix.sh's results folder.

    python3 ci/matrix_report.py RESULTS_DIR OUT.md "COMMAND" [README.md]

Lines whose results are absent keep their row from the existing OUT.md, so a
partial run (`bash ci/matrix.sh vllm-0.19.1`) updates only what it ran. With a
README, its per-version table (between the ``<!-- compat:begin -->`` and
``<!-- compat:end -->`` markers) is rewritten from OUT.md's rows.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

MIB = 1 << 20
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from guard_core.flashinfer.releases import matrix_lines  # noqa: E402  (the one list of checked lines)

ORDER = list(matrix_lines())
HEADER = ("| line | FlashInfer | torch | suite | planner, byte for byte | workspace, Qwen3.5-397B shape | workspace, Qwen3-VL-32B shape "
          "| MoE guard (aarch64, SM100) | checked |")


def mib(n) -> str:
    return f"{n / MIB:.0f} MiB" if isinstance(n, int) else "?"


def suite(folder: Path, line: str) -> str:
    try:
        root = ET.parse(folder / f"{line}.xml").getroot()
    except (OSError, ET.ParseError):
        return "not run"
    suites = [root] if root.tag == "testsuite" else list(root.iter("testsuite"))
    t = sum(int(s.get("tests", 0)) for s in suites)
    f = sum(int(s.get("failures", 0)) + int(s.get("errors", 0)) for s in suites)
    sk = sum(int(s.get("skipped", 0)) for s in suites)
    return f"{t - f - sk} passed, {f} failed" + (f", {sk} skipped" if sk else "")


def conformance(folder: Path, line: str) -> str:
    """The conformance suite on the line's installed FlashInfer headers: how many planner
    requests agreed byte for byte with FlashInfer's own planner code."""
    try:
        root = ET.parse(folder / f"{line}.conformance.xml").getroot()
    except (OSError, ET.ParseError):
        return "not run"
    failed, requests = 0, None
    for tc in root.iter("testcase"):
        if tc.find("failure") is not None or tc.find("error") is not None:
            failed += 1
    for prop in root.iter("property"):  # "requests <version>" (testsuite) or "requests" (testcase)
        if prop.get("name", "").split(" ")[0] == "requests":
            requests = prop.get("value")
    if failed or requests is None:
        return f"FAILED ({failed} tests)" if failed else "no conformance result"
    return f"{requests} requests equal"


def _bytes(r: dict) -> int | None:
    v = r.get("allocated", r.get("workspace_bytes"))
    return int(v) if isinstance(v, (int, float)) else None


def workspace(p: dict, shape: str) -> str:
    g, alone = p.get(f"ws_{shape}", {}), p.get(f"ws_{shape}_alone", {})
    if g.get("error") or g.get("rc"):
        return f"probe failed: {g.get('error', '?')}"
    a, b = _bytes(alone), _bytes(g)
    line = next((ln for ln in g.get("lines", []) if ln.startswith("workspace:")), "")
    m = re.search(r"needs ([\d.]+ [KMG]iB)", line) or re.search(r"need ([\d.]+ [KMG]iB)", line)
    need = m.group(1) if m else "?"
    if a is not None and b is not None and b > a:
        return f"acts: {mib(a)} -> {mib(b)} (need {need})"
    if "ok" in line or (a is not None and a == b):
        return f"stands down: need {need} <= {mib(a if a is not None else b)}"
    return line[:120] or "?"


def moe(p: dict, fw: str) -> str:
    g, alone = p.get("moe_aarch64", {}), p.get("moe_aarch64_alone", {})
    if g.get("error") or g.get("rc"):
        return f"probe failed: {g.get('error', '?')}"
    if fw == "vllm":
        if alone.get("has_trtllm") and not g.get("has_trtllm"):
            rew = g.get("config_backend")
            return f"acts: TRT-LLM fused MoE reported unavailable; explicit flashinfer_trtllm -> {rew}"
        return f"stands down (TRT-LLM fused MoE available: {g.get('has_trtllm')})"
    a, b = alone.get("moe_runner_backend"), g.get("moe_runner_backend")
    rt = p.get("moe_runtime_aarch64", {}).get("runner_backend")
    if a != b:
        return f"acts: explicit {a} -> {b}; NVFP4 auto at runtime -> {rt}"
    return f"stands down ({b}; runtime {rt})"


def row(folder: Path, line: str, stamp: str) -> str | None:
    path = folder / f"{line}.probe.json"
    if not path.exists():
        return None
    try:
        p = json.loads(path.read_text() or "{}")
    except json.JSONDecodeError:
        p = {"install": "unreadable probe output"}
    if p.get("install"):
        return f"| {line} | ? | ? | install failed | | | | | {stamp} |"
    fw = p.get("framework", line.split("-")[0])
    return (f"| {line} | {p.get('flashinfer')} | {p.get('torch')} | {suite(folder, line)} | "
            f"{conformance(folder, line)} | "
            f"{workspace(p, 'qwen35')} | {workspace(p, 'qwen3vl')} | {moe(p, fw)} | {stamp} |")


def overrides(locks: Path) -> list[str]:
    """Each checked line whose lock overrides a pin of the framework's own (ci/lock.sh says why),
    from the lock's ``# Overrides:`` header."""
    out = []
    for line in ORDER:
        try:
            head = [ln for ln in (locks / f"{line}.txt").read_text().splitlines()[:8] if ln.startswith("# Overrides:")]
        except OSError:
            continue
        if head:
            what = head[0][len("# Overrides:"):].split("(why")[0].strip()
            out.append(f"- {line}: {what} overrides the release's own requirement (why: ci/lock.sh)")
    return out


BEGIN, END = "<!-- compat:begin -->", "<!-- compat:end -->"


def readme_table(rows: list[str]) -> str:
    """The README's per-version table: OUT.md's rows without the suite and date columns."""
    out = ["| line | FlashInfer | workspace, Qwen3.5-397B shape | workspace, Qwen3-VL-32B shape "
           "| MoE guard (aarch64, SM100) |", "|---|---|---|---|---|"]
    for r in rows:
        cells = [c.strip() for c in r.strip().strip("|").split("|")]
        if len(cells) == 8:  # a row from before the conformance column
            cells.insert(4, "not run")
        if len(cells) >= 9:
            line, fi, _torch, _suite, _conf, q35, vl, moe_, _date = cells[:9]
            out.append(f"| {line} | {fi} | {q35} | {vl} | {moe_} |")
    return "\n".join(out)


def update_readme(path: Path, rows: list[str]) -> bool:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        print(f"{path}: no {BEGIN} ... {END} markers; README not updated", file=sys.stderr)
        return False
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    path.write_text(head + BEGIN + "\n" + readme_table(rows) + "\n" + END + tail)
    return True


def _trailer(over: list[str], missing: list[str] = ()) -> str:
    text = ""
    if missing:
        text += ("\nChecked lines without a row yet (not run through `bash ci/matrix.sh` since they became "
                 "lines; `bash ci/matrix.sh " + " ".join(missing) + "` adds them): " + ", ".join(missing) + ".\n")
    if over:
        text += ("\nOverrides: where a release pins a distribution the registry does not have, its lock "
                 "installs the nearest one that installs and imports in its place, and the line is checked "
                 "with that:\n\n" + "\n".join(over) + "\n")
    text += ("\nNewer releases than these lines: `bash ci/canary.sh` installs the newest vLLM, SGLang and "
             "FlashInfer on the registry as a user does (unlocked), loads the guard through the server's "
             "own plugin loader, runs `flashinfer-guard doctor` and `plan`, and prints one table; it is "
             "not part of the test command (its header says each step).\n")
    return text


def main(folder: str, out: str, command: str, readme: str | None = None) -> int:
    folder_p, out_p = Path(folder), Path(out)
    old = {}
    if out_p.exists():
        for ln in out_p.read_text().splitlines():
            m = re.match(r"\| ((?:vllm|sglang)-[\d.]+) \|", ln)
            if m:
                old[m.group(1)] = ln
    stamp = dt.date.today().isoformat()
    rows = []
    for line in ORDER:
        r = row(folder_p, line, stamp) or old.get(line)
        if r:
            rows.append(r)
    out_p.parent.mkdir(parents=True, exist_ok=True)
    out_p.write_text(
        "# Compatibility matrix\n\n"
        "Generated by `bash ci/matrix.sh` (ci/matrix.sh, ci/matrix_report.py): the whole matrix; "
        "`bash ci/matrix.sh LINE...` re-checks only those lines and keeps the other rows "
        f"(last run: `{command.strip()}`). Each row shows the date it was last checked. Every line is installed from its lock (ci/locks/) and runs its suite (tests/vllm or "
        "tests/sglang) inside the real framework through the real plugin loader; the planner column is the "
        "conformance suite (tests/conformance) compiled against the line's installed FlashInfer headers: "
        "requests whose allocations agree byte for byte with FlashInfer's own planner code; the workspace columns are "
        "the framework's own FlashInfer workspace allocation with the guard against the same process without "
        "it, for the full-attention shape at CUDA-graph capture up to 512 (vLLM: 142-SM test GPU, SGLang: "
        "H200); the MoE column is a simulated aarch64 host with an SM100 GPU and an explicit "
        "`flashinfer_trtllm` MoE backend.\n\n"
        + HEADER + "\n|" + "---|" * 9 + "\n" + "\n".join(rows) + "\n"
        + _trailer(overrides(Path(__file__).resolve().parent / "locks"),
                   [ln for ln in ORDER if not any(r.startswith(f"| {ln} |") for r in rows)]))
    print(f"wrote {out_p} ({len(rows)} lines)")
    if readme and update_readme(Path(readme), rows):
        print(f"updated the per-version table in {readme}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
