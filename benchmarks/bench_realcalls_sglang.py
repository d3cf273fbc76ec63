"""Guard's buffer vs SGLang's own, against the largest need of SGLang's real plan() calls.

Run with the python of an SGLang test environment (``ci/sglang/install.sh VERSION``
prints one), from the repository root:

    $ENV/bin/python benchmarks/bench_realcalls_sglang.py [--cases qwen3vl,qwen35] [--json]

Each matrix case of tests/sglang/test_realcalls.py runs in a fresh interpreter
(tests/sglang/realcalls_scenarios.py): SGLang's FlashInferAttnBackend on FlashInfer's real
Python wrappers and FlashInfer's own planner code (the installed release's scheduler.cuh,
compiled for the host), through SGLang's CUDA-graph capture path and the eager batches the
core names as worst; first with the guard loaded through SGLang's own route, then (same
process) with the guard's wrapper undone. Per case it prints

- need:   the largest float-workspace need FlashInfer's planner reported over every call;
- guard:  the buffer SGLang ended up with under the guard, and guard / need
          (target 1.00 up to the 1 MiB rounding, never below; where SGLang's own size is
          larger the guard keeps it in ``auto`` mode);
- sglang: SGLang's own buffer without the guard, and sglang / need (below 1.00: SGLang
          overflows, the "overflow" column names the first call FlashInfer refused).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "sglang"))

MIB = 1 << 20


def _matrix():
    from realcalls_scenarios import MATRIX  # the test's cases

    return [(c, dict(o, also_without_guard=True)) for c, o in MATRIX]


def run_case(opts):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))}
    if os.environ.get("FLASHINFER_GUARD_CACHE"):
        env["FLASHINFER_GUARD_CACHE"] = os.environ["FLASHINFER_GUARD_CACHE"]
    t = time.time()
    p = subprocess.run([sys.executable, os.path.join(REPO, "tests", "sglang", "realcalls_scenarios.py"), "run",
                        json.dumps(opts)], capture_output=True, text=True, env=env, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("RESULT ")]
    if p.returncode or not lines:
        raise SystemExit(f"case {opts} failed (rc={p.returncode}):\n{p.stderr[-4000:]}")
    r = json.loads(lines[-1][len("RESULT "):])
    r["wall_s"] = round(time.time() - t, 1)
    return r


_SHORT = {"BatchDecodeWithPagedKVCacheWrapper": "decode", "BatchPrefillWithPagedKVCacheWrapper": "paged-prefill",
          "BatchPrefillWithRaggedKVCacheWrapper": "ragged-prefill"}


def row(case, r):
    need = max(c["float_bytes"] for c in r["calls"])
    wg = r.get("without_guard") or {}
    own = wg.get("workspace_bytes", r.get("sglang_server_bytes"))
    pred = r.get("prediction") or {}
    first = None
    for c in wg.get("calls", []):
        if not c["ok"]:
            m = re.search(r"allocating memory for (\S+) with size (\d+)", c.get("error") or "")
            what = f"{m.group(1)} ({int(m.group(2)) / MIB:.1f} MiB)" if m else (c.get("error") or "")[:60]
            first = f"{c['phase']} {_SHORT.get(c['wrapper'], c['wrapper'])} bs {c['batch_size']}: {what}"
            break
    planners = sorted({f"{_SHORT.get(c['wrapper'], c['wrapper'])}={c['backend']}" for c in r["calls"]})
    return {
        "case": case, "need": need, "guard": r["workspace_bytes"], "guard_ratio": r["workspace_bytes"] / need,
        "guard_predicted_need": pred.get("float_bytes"), "sglang": own, "sglang_ratio": own / need if own else None,
        "guard_overflows": len(r["errors"]), "sglang_overflows": len(wg.get("errors", [])), "first_overflow": first,
        "predicted_planners": pred.get("planners"), "seen": planners, "wall_s": r["wall_s"],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", help="comma-separated case ids (default: all)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cases = _matrix()
    if args.cases:
        want = set(args.cases.split(","))
        cases = [(c, o) for c, o in cases if c in want]
    rows = [row(c, run_case(o)) for c, o in cases]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"SGLang {metadata.version('sglang')}, FlashInfer {metadata.version('flashinfer-python')}, "
          f"H200 (132 SMs), TP1; float workspace, MiB")
    hdr = f"{'case':<16} {'need':>9} {'guard':>9} {'g/need':>7} {'sglang':>9} {'s/need':>7} {'guard ovf':>9} " \
          f"{'sglang ovf':>10}  first SGLang overflow"
    print(hdr)
    print("-" * len(hdr))
    for x in rows:
        print(f"{x['case']:<16} {x['need'] / MIB:>9.1f} {x['guard'] / MIB:>9.1f} {x['guard_ratio']:>7.3f} "
              f"{x['sglang'] / MIB:>9.1f} {x['sglang_ratio']:>7.3f} {x['guard_overflows']:>9} "
              f"{x['sglang_overflows']:>10}  {x['first_overflow'] or '-'}")
    print()
    for x in rows:
        print(f"{x['case']:<16} predicted {x['predicted_planners']}; seen {', '.join(x['seen'])}; {x['wall_s']} s")


if __name__ == "__main__":
    main()
