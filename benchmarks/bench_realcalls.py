"""The guard's workspace against the largest need seen in vLLM's own plan() calls.

Runs the real-calls matrix of tests/vllm/realcalls_scenarios.py for the installed vLLM line (one
process per GPU group: vLLM alone, then with the guard loaded by vLLM's plugin loader; FlashInfer's
real planner from the installed release under vLLM's builders, see tests/realcalls/README.md) and
prints, per case: the largest real need (float bytes of the largest plan() call, with the guard),
the guard's buffer and vLLM's own buffer, each divided by that need. Target for the guard: 1.00 up
to the 1 MiB rounding, never below 1; where vLLM's own buffer is larger the guard keeps it. "none":
no buffer was allocated (every phase ran TRT-LLM-gen, nothing planned in it).

    <env python> benchmarks/bench_realcalls.py [--json]
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
VLLM_TESTS = REPO / "tests" / "vllm"
sys.path[:0] = [str(REPO), str(VLLM_TESTS)]

from realcalls_scenarios import LINES  # noqa: E402

MIB = 1 << 20


def run_group(group: str) -> tuple[str, list[dict], float, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "VLLM_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(VLLM_TESTS)]))
    t0 = time.time()
    proc = subprocess.run([sys.executable, str(VLLM_TESTS / "realcalls_scenarios.py"), group], env=env,
                          capture_output=True, text=True, cwd=str(REPO))
    results = [json.loads(l[len("RESULT: "):]) for l in proc.stdout.splitlines() if l.startswith("RESULT: ")]
    return group, results, time.time() - t0, proc.stderr[-2000:]


def rows(results: list[dict]) -> list[dict]:
    by = {}
    for r in results:
        by.setdefault(r["case"], {})[r.get("phase")] = r
    out = []
    for case, ph in by.items():
        g, b = ph.get("guard"), ph.get("baseline")
        if not g or "setup_error" in g:
            out.append({"case": case, "error": (g or {}).get("setup_error", "no result")})
            continue
        need = max((c["float_bytes"] for c in g["calls"]), default=0)
        guard_buf = max((x["bytes"] for x in g["buffers"] if x), default=None)  # None: never allocated
        own = max(int(p.get("server_bytes") or 0) for p in g["prediction"])
        pred = [p.get("planners") for p in g["prediction"]]
        seen = sorted({(c["wrapper"].replace("With", " ").split()[0], c["backend"]) for c in g["calls"]})
        out.append({
            "case": case, "gpu": g["gpu"][0], "need": need, "guard": guard_buf, "vllm": own,
            "guard_over_need": guard_buf / need if need and guard_buf else None,
            "vllm_over_need": own / need if need else None,
            "overflows_guard": sum(1 for c in g["calls"] if not c["ok"]),
            "vllm_alone": "crash" if b and b.get("crash") else "ok",
            "predicted": pred, "seen": seen,
            "adapter_need": max(int(p.get("need_bytes") or 0) for p in g["prediction"]),
        })
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--jobs", type=int, default=max(2, os.cpu_count() or 2))
    args = ap.parse_args()
    line = md.version("vllm")
    groups = LINES.get(line)
    if not groups:
        print(f"no real-calls matrix for vLLM {line} (lines: {', '.join(LINES)})", file=sys.stderr)
        return 2
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=args.jobs) as ex:
        done = list(ex.map(run_group, groups))
    table = []
    for group, results, secs, err in done:
        if not results:
            print(f"group {group}: no results after {secs:.0f} s\n{err}", file=sys.stderr)
        table += rows(results)
    if args.json:
        print(json.dumps({"vllm": line, "flashinfer": md.version("flashinfer-python"), "rows": table}, indent=1))
        return 0
    print(f"vLLM {line}, FlashInfer {md.version('flashinfer-python')}: largest real need per case "
          f"(FlashInfer's planner under vLLM's own plan() calls), {time.time() - t0:.0f} s")
    hdr = f"{'case':22} {'gpu':12} {'need MiB':>9} {'guard MiB':>9} {'guard/need':>10} {'vLLM MiB':>9} " \
          f"{'vLLM/need':>9} {'vLLM alone':>10} {'adapter need':>12}"
    print(hdr)
    print("-" * len(hdr))
    for r in table:
        if "error" in r:
            print(f"{r['case']:22} error: {r['error']}")
            continue
        f = lambda x: f"{x:.3f}" if x is not None else "-"  # noqa: E731
        guard = f"{r['guard'] / MIB:9.1f}" if r["guard"] is not None else f"{'none':>9}"
        print(f"{r['case']:22} {r['gpu'][:12]:12} {r['need'] / MIB:9.1f} {guard} "
              f"{f(r['guard_over_need']):>10} {r['vllm'] / MIB:9.1f} {f(r['vllm_over_need']):>9} "
              f"{r['vllm_alone']:>10} {r['adapter_need'] / MIB:12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
