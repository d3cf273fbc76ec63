"""KV tokens SGLang sizes without the guard, with it (auto) and with ``exact`` (issue 28).

Run with the python of an SGLang test environment, from the repository root:

    $ENV/bin/python benchmarks/bench_kv_budget_sglang.py [--deployments qwen3vl-h200,qwen35-h200]
        [--mem-fraction-static 0.88] [--json]

Each row is one process of tests/sglang/kv_budget_scenarios.py: SGLang's own KV sizing
code of the installed line (0.5.2x ``KVCacheConfigurator``, 0.5.11 the runner's
``_profile_available_bytes``, 0.5.5 ``profile_max_num_token``) and its
``FlashInferAttnBackend.__init__``, on a CPU ledger standing in for the device memory
(weights, the pool and every ``device="cuda"`` tensor charged to it). Columns:

- tokens: SGLang's ``max_total_num_tokens`` without the guard / auto / exact;
- delta: the change against without the guard (negative: the guard's bigger buffer
  paid for inside the budget; positive: the bytes ``exact`` gives back);
- buffer: the workspace FlashInfer plans in, in each mode.

``rows(python=...)`` is the importable form (benchmarks/bench_kv_budget.py can call it
with an SGLang environment's python).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SCENARIOS = os.path.join(REPO, "tests", "sglang", "kv_budget_scenarios.py")
DEPLOYMENTS = ("qwen3vl-h200", "qwen35-h200")
MODES = (("without", {"FLASHINFER_GUARD": "0"}), ("auto", {}), ("exact", {"FLASHINFER_GUARD_WORKSPACE": "exact"}))
MIB = 1 << 20


def _run(python, env_extra, opts):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))}
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(env_extra)
    argv = [python, SCENARIOS, "start", json.dumps(opts)]
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        # forked from one warm interpreter of this environment (tests/common/forkserver.py)
        sys.path.insert(0, REPO)
        from tests.common import forkserver

        p = forkserver.run(argv, env=env, timeout=1800)
    else:
        p = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=1800)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode or not lines:
        raise RuntimeError(f"{opts} {env_extra} failed (rc={p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def _line(python):
    out = subprocess.run([python, "-c", "from importlib import metadata as m; print(m.version('sglang'), "
                          "m.version('flashinfer-python'))"], capture_output=True, text=True, timeout=120)
    return out.stdout.split()


def rows(python: str = sys.executable, deployments=DEPLOYMENTS, mem_fraction_static: float = 0.88) -> list[dict]:
    """One row per deployment on the SGLang of ``python``."""
    sglang, flashinfer = _line(python)
    out = []
    for dep in deployments:
        row = {"sglang": sglang, "flashinfer": flashinfer, "deployment": dep,
               "mem_fraction_static": mem_fraction_static}
        for mode, env in MODES:
            r = _run(python, env, {"deployment": dep, "mem_fraction_static": mem_fraction_static})
            row[f"tokens_{mode}"] = r["tokens"]
            row[f"buffer_{mode}"] = r.get("workspace_bytes")
            row["cell"] = r["cell"]
            row["sizer"] = r["sizer"]
            if mode != "without":
                row[f"line_{mode}"] = (r.get("reservation") or {}).get("line")
        row["delta_auto"] = row["tokens_auto"] - row["tokens_without"]
        row["delta_exact"] = row["tokens_exact"] - row["tokens_without"]
        out.append(row)
    return out


def table(rs: list[dict]) -> str:
    head = (f"{'SGLang':8} {'FlashInfer':11} {'deployment':14} {'B/token':>8} {'without':>11} {'auto':>11} "
            f"{'delta':>7} {'exact':>11} {'delta':>7}  buffer without/auto/exact (MiB)")
    lines = [head, "-" * len(head)]
    for r in rs:
        bufs = "/".join(str((r[f"buffer_{m}"] or 0) // MIB) for m, _ in MODES)
        lines.append(f"{r['sglang']:8} {r['flashinfer']:11} {r['deployment']:14} {r['cell']:>8,} "
                     f"{r['tokens_without']:>11,} {r['tokens_auto']:>11,} {r['delta_auto']:>+7,} "
                     f"{r['tokens_exact']:>11,} {r['delta_exact']:>+7,}  {bufs}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--deployments", default=",".join(DEPLOYMENTS))
    ap.add_argument("--mem-fraction-static", type=float, default=0.88)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rs = rows(sys.executable, tuple(a.deployments.split(",")), a.mem_fraction_static)
    print(json.dumps(rs, indent=1) if a.json else table(rs))


if __name__ == "__main__":
    main()
