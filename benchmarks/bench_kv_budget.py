"""KV tokens without the guard, with it (auto) and with `exact`, from the servers' own sizing code (issue 28).

    python benchmarks/bench_kv_budget.py [--frameworks vllm,sglang] [--markdown]

Each framework contributes rows through one function (``vllm_rows``; the SGLang side adds
``sglang_rows`` to ``FRAMEWORKS``). A row: framework, line, deployment, the workspace
FlashInfer gets without the guard / with auto / with exact, and the KV tokens the server sizes
in each case. The numbers come from the servers' own memory profiling and KV sizing run on a
CPU ledger standing in for device memory (vLLM: tests/vllm/kv_budget_scenarios.py, whose
docstring names every stand-in; the weights and the profile run's activation peak are ledger
figures, the same in all three columns, so the differences are the guard's alone).
Row keys (what ``table`` prints): framework, line, deployment, ws_without, ws_auto, ws_exact
(bytes), kv_without, kv_auto, kv_exact (tokens), per_token (bytes); or ``error`` instead of the
numbers. Environments: /root/.cache/flashinfer-guard/envs/<framework>-<line> (ci/install_env.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ENVS = Path(os.environ.get("FLASHINFER_GUARD_ENVS", "/root/.cache/flashinfer-guard/envs"))
MIB = 1 << 20

# (line, ledger case, V2 model runner): 0.23 defaults to V1, 0.32/0.33 to V2 on a GPU
VLLM_LINES = [("0.23.0", "seed-h200", False), ("0.23.0", "seed-b300", False),
              ("0.32.0", "seed-h200", True), ("0.32.0", "seed-b300", True),
              ("0.33.0", "seed-h200", True), ("0.33.0", "seed-b300", True)]
VLLM_DEPLOYMENT = {"seed-h200": "Qwen3.5-397B-A17B TP8, H200, capture 512, 8192 batched tokens",
                   "seed-b300": "Qwen3.5-397B-A17B TP8, B300, capture 1024, 16384 batched tokens"}


def vllm_rows(lines=VLLM_LINES) -> list[dict]:
    rows = []
    for line, case, v2 in lines:
        py = ENVS / f"vllm-{line}" / "bin" / "python"
        if not py.exists():
            rows.append(dict(framework="vLLM", line=line, deployment=VLLM_DEPLOYMENT[case], error="env missing"))
            continue
        keys = "v2=1" if v2 else ""
        variants = [f"base:0.9:{','.join(k for k in ('plugins=0', keys) if k)}", f"auto:0.9:{keys}",
                    f"exact:0.9:{','.join(k for k in ('FLASHINFER_GUARD_WORKSPACE=exact', keys) if k)}"]
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLASHINFER_GUARD", "VLLM_FLASHINFER", "VLLM_PLUGINS"))}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests" / "vllm")]))
        proc = subprocess.run([str(py), str(REPO / "tests" / "vllm" / "kv_budget_scenarios.py"), case, *variants],
                              capture_output=True, text=True, env=env, cwd=str(REPO), timeout=1800)
        got = {}
        for ln in proc.stdout.splitlines():
            if ln.startswith("RESULT: "):
                r = json.loads(ln[len("RESULT: "):])
                got[r["variant"]] = r
        if set(got) != {"base", "auto", "exact"} or any("error" in r for r in got.values()):
            rows.append(dict(framework="vLLM", line=line, deployment=VLLM_DEPLOYMENT[case],
                             error=(proc.stderr or proc.stdout)[-300:]))
            continue
        b, a, e = got["base"], got["auto"], got["exact"]
        rows.append(dict(framework="vLLM", line=f"{line} (FlashInfer {b['flashinfer']})",
                         deployment=VLLM_DEPLOYMENT[case], runner="V2" if v2 else "V1",
                         ws_without=b["workspace_bytes"], ws_auto=a["workspace_bytes"], ws_exact=e["workspace_bytes"],
                         kv_without=b["kv_tokens"], kv_auto=a["kv_tokens"], kv_exact=e["kv_tokens"],
                         per_token=b["per_token_bytes"]))
    return rows


FRAMEWORKS = {"vllm": vllm_rows}


def table(rows: list[dict]) -> str:
    head = ("| server | line | deployment | workspace without / auto / exact | KV tokens without guard | "
            "with auto | with exact |\n|---|---|---|---|---:|---:|---:|\n")
    out = []
    for r in rows:
        if "error" in r:
            out.append(f"| {r['framework']} | {r['line']} | {r['deployment']} | error: {r['error'][:80]} | | | |")
            continue
        ws = f"{r['ws_without'] / MIB:.0f} / {r['ws_auto'] / MIB:.0f} / {r['ws_exact'] / MIB:.0f} MiB"
        out.append(f"| {r['framework']} | {r['line']} | {r['deployment']} | {ws} | {r['kv_without']:,} | "
                   f"{r['kv_auto']:,} ({r['kv_auto'] - r['kv_without']:+,}) | "
                   f"{r['kv_exact']:,} ({r['kv_exact'] - r['kv_without']:+,}) |")
    return head + "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows = []
    for name in a.frameworks.split(","):
        rows += FRAMEWORKS[name.strip()]()
    print(json.dumps(rows, indent=1) if a.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
