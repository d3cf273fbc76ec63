"""Core benchmark: import cost, envelope time, and sizing ratios on the conformance grid.

Prints figures; asserts nothing about time. Run from the repository root:

    python benchmarks/bench_core.py            # all three parts
    python benchmarks/bench_core.py --no-grid  # skip the FlashInfer-oracle part

1. Import time of guard_core and of the entry-point modules in a fresh
   interpreter (target: < 10 ms, and no torch import), median of N runs,
   beside a bare ``python -c pass``.
2. Time to compute one serving envelope (target: < 1 ms).
3. On the conformance grid, for every plan that uses the float workspace:
   our chosen size (the model's need rounded up to 1 MiB) divided by
   FlashInfer's real need from its own compiled planner (target: 1.00 up to
   the rounding, never below 1), beside the same ratio for the fixed anchors:
   vLLM's 394 MiB default, the blanket 1 GiB workaround, SGLang's 384 and
   512 MiB. A ratio below 1 is a start-up crash.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
MIB = 1 << 20


def _fresh(code: str, n: int) -> list[float]:
    out = []
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONDONTWRITEBYTECODE="0")
    for _ in range(n):
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
        out.append(float(r.stdout.strip().splitlines()[-1]))
    return out


def bench_imports(n: int) -> None:
    print("== import cost in a fresh interpreter (median of %d)" % n)
    timer = ("import time,sys;t=time.perf_counter();{imp};d=time.perf_counter()-t;"
             "assert not [m for m in ('torch','flashinfer','vllm','sglang') if m in sys.modules], sys.modules.keys();"
             "print(d*1e3)")
    base = statistics.median(_fresh(timer.format(imp="pass"), n))
    mods = ["guard_core", "guard_core.flashinfer.sizing, guard_core.decide.records, guard_core.runtime.wrapping, guard_core.runtime.settings"]
    for ep in ("vllm_guard.plugin", "sglang_guard.plugin"):
        if (ROOT / ep.replace(".", "/")).with_suffix(".py").exists():
            mods.append(ep)
    for m in mods:
        ms = statistics.median(_fresh(timer.format(imp=f"import {m}"), n)) - base
        print(f"  import {m:<75} {ms:6.2f} ms  (target < 10 ms; torch/flashinfer/frameworks not imported)")


def bench_envelope() -> None:
    from guard_core.deployment.server_defaults import vllm_capture_grid
    from guard_core.gpus import lookup_gpu
    from guard_core.flashinfer.sizing import AttentionLayout, ServingLimits, compute_requirement

    print("== one serving envelope (vLLM default capture list up to 512, eager decode and prefill)")
    layout = AttentionLayout(32, 2, 256, page_size=16)
    limits = ServingLimits(capture_sizes=tuple(vllm_capture_grid(512)), max_num_seqs=512,
                           max_num_batched_tokens=8192)
    gpu = lookup_gpu("b300")
    for v in ("0.6.12", "0.7.0.post1", "0.7.2.post1"):
        compute_requirement(layout, limits, gpu, v)
        n = 300
        t = timeit.timeit(lambda v=v: compute_requirement(layout, limits, gpu, v), number=n) / n
        print(f"  FlashInfer {v:<12} {len(limits.capture_sizes)} capture sizes: {t * 1e3:.3f} ms per envelope (target < 1 ms)")
    # the eager prefill's mixed-batch knapsack where seats and tokens both bind (issue 27's scale run):
    # the slowest of 4,400 random layouts tried when it learned both limits at once; it runs once per
    # attention group at start-up, so the target is a start-up cost, not a per-step one
    print("== eager prefill, seats and tokens binding (8 q / 1 kv heads, page 64, RTX PRO 6000)")
    slow = (AttentionLayout(8, 1, 128, page_size=64),
            ServingLimits(capture_sizes=(), max_num_seqs=64, max_num_batched_tokens=1000, max_model_len=300))
    l40s = (AttentionLayout(8, 1, 128, page_size=16, kv_dtype_bytes=1),
            ServingLimits(capture_sizes=(), max_num_seqs=7, max_num_batched_tokens=480, max_model_len=592))
    for name, (lay, lim), g in (("64 seats, 1000 tokens, 300 context", slow, "rtxpro6000"),
                                ("Qwen3-VL-32B TP 8 on L40S, 7 seats, 480 tokens", l40s, "l40s")):
        n = 5
        t = timeit.timeit(lambda lay=lay, lim=lim, g=g: compute_requirement(lay, lim, lookup_gpu(g), "0.6.12"),
                          number=n) / n
        print(f"  {name:<48} {t * 1e3:8.1f} ms per envelope (target < 250 ms, once per group at start-up)")


def bench_grid(releases: list[str]) -> None:
    from guard_core.flashinfer import planner as fm
    from guard_core.flashinfer.sizing import round_up_mib
    from tests.conformance import grid as G
    from tests.conformance import oracle as O

    print("== sizing ratio on the conformance grid: allocated / FlashInfer's real float need")
    anchors = {"ours": None, "vLLM 394 MiB": 394 * MIB, "1 GiB": 1024 * MIB, "SGLang 384 MiB": 384 * MIB,
               "SGLang 512 MiB": 512 * MIB}
    O.build_many(releases)
    for v in releases:
        reqs = G.make_grid(v)
        real = O.run_oracle(v, reqs)
        ratios = {k: [] for k in anchors}
        excess = []
        for req, got in zip(reqs, real):
            if not got.get("ok") or got["float_bytes"] == 0 or req["planner"] == "sm90":
                continue
            need = got["float_bytes"]
            ours = fm.run_planner(v, req["planner"], req["params"])
            ratios["ours"].append(round_up_mib(ours["float_bytes"]) / need)
            excess.append(round_up_mib(ours["float_bytes"]) - need)
            for k, size in anchors.items():
                if size:
                    ratios[k].append(size / need)
        n = len(ratios["ours"])
        print(f"  FlashInfer {v}: {n} plans with float scratch; ours over-allocates at most "
              f"{max(excess):,} bytes (the rounding up to 1 MiB), never under")
        for k, rs in ratios.items():
            rs.sort()
            below = sum(1 for r in rs if r < 1)
            med = statistics.median(rs)
            print(f"    {k:<15} min {rs[0]:9.3f}  median {med:9.3f}  max {rs[-1]:9.2f}   "
                  f"below 1 (crash): {below:5d} ({100 * below / n:5.1f} %)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--no-grid", action="store_true")
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--releases", default="0.6.12,0.7.0.post1,0.7.2.post1")
    a = ap.parse_args()
    bench_imports(a.runs)
    bench_envelope()
    if not a.no_grid:
        bench_grid(a.releases.split(","))


if __name__ == "__main__":
    main()
