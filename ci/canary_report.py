"""The canary's one table (ci/canary.sh writes the facts and steps it reads).

    python3 ci/canary_report.py .reports/canary vllm sglang

One row per newest release (each framework asked, then FlashInfer): the release, whether it is a
checked line or release (guard_core.flashinfer.releases: CHECKED_LINES, FLASHINFER_CHECKED and the
matrix's pins), what the guard does there (the workspace guard's line from ``plan``, the MoE guard's
verdict, or for FlashInfer its sizing family), and what failed (each failed step with its reason;
the override where a pin could not be met). Markdown, so that it can be pasted into an issue.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from guard_core.flashinfer import releases  # noqa: E402

STEPS = ("resolve", "install", "flashinfer-guard", "records", "loader", "doctor", "plan")


def _facts(path: Path) -> dict:
    out = {}
    if path.exists():
        for ln in path.read_text().splitlines():
            k, _, v = ln.partition("\t")
            out[k] = v
    return out


def _steps(path: Path) -> list[tuple[str, str, str]]:
    if not path.exists():
        return []
    return [tuple((ln.split("\t") + ["", ""])[:3]) for ln in path.read_text().splitlines() if ln.strip()]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ").strip() or "-"


def _checked_line(fw: str, version: str) -> str:
    status = releases.line_status(fw, version)
    return {"checked": "yes", "within": "no (between checked lines)",
            "newer": f"no (newer than {releases.CHECKED_LINES[fw][-1]})",
            "older": "no (older than the checked lines)"}.get(status, "unknown")


def framework_row(out: Path, fw: str) -> list[str]:
    facts, steps = _facts(out / f"{fw}.facts"), _steps(out / f"{fw}.steps")
    ver = facts.get("release", "?")
    name = f"{releases.DISPLAY[fw]} {ver}"
    if facts.get("unpinned") and facts["unpinned"] != ver:
        name += f" (an unpinned install resolves {facts['unpinned']})"
    fi = facts.get("installed_flashinfer")
    does = []
    if fi:
        does.append(f"FlashInfer {fi}")
    if facts.get("guard_line"):
        does.append(f"workspace: {facts['guard_line']}")
    elif fi:
        need = releases.workspace_guard_needed(fi)
        does.append(f"workspace: {'acts, ' + need if need else 'stands down (FlashInfer >= 0.7.1)'} (from the table; plan did not run)")
    if facts.get("moe"):
        does.append(f"MoE: {facts['moe']}")
    if facts.get("plan_used"):
        does.append(f"plan: {facts['plan_used']}")
    failed = [f"{s}: {d}" for s, st, d in steps if st != "ok"]
    ran = {s for s, _st, _d in steps}
    if steps and not failed and not set(STEPS[1:]) <= ran:
        failed.append("not run: " + ", ".join(s for s in STEPS[1:] if s not in ran))
    if not steps:
        failed.append("not run")
    if facts.get("override"):
        failed.insert(0, f"override {facts['override']}")
    return [name, _checked_line(fw, ver) if ver != "?" else "?", "; ".join(does), "; ".join(failed) or "nothing"]


def flashinfer_row(out: Path, frameworks: list[str]) -> list[str]:
    v = _facts(out / "flashinfer.facts").get("flashinfer", "none")
    if v == "none":
        return ["FlashInfer ?", "?", "-", "the registry answered no flashinfer-python"]
    checked = v in releases.FLASHINFER_CHECKED
    matrix = v in releases.FLASHINFER_MATRIX_CHECKED
    where = ("yes (planner conformance)" if checked else "yes (matrix conformance)" if matrix else
             "no" + (f" ({releases.flashinfer_extrapolation(v)})" if releases.flashinfer_extrapolation(v) else ""))
    try:
        fam = releases.family(v)
    except Exception:
        fam = "?"
    need = releases.workspace_guard_needed(v)
    does = f"sized with family {fam}; workspace guard {'acts: ' + need if need else 'stands down'}"
    used = [f"{releases.DISPLAY[fw]}" for fw in frameworks
            if _facts(out / f"{fw}.facts").get("installed_flashinfer") == v]
    does += f"; installed by {', '.join(used)}" if used else "; installed by no canary environment"
    return [f"FlashInfer {v}", where, does, "nothing" if used or not frameworks else "not exercised"]


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    out, frameworks = Path(argv[0]), argv[1:] or ["vllm", "sglang"]
    rows = [framework_row(out, fw) for fw in frameworks] + [flashinfer_row(out, frameworks)]
    print("| newest release | checked line | what the guard does there | what failed |")
    print("|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(_cell(c) for c in r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
