"""Run the differential search at any size, in the current (framework) environment.

    python -m tests.differential --framework vllm --n 5000 --seed S [--gpus h200,b200]

Each GPU is one process of tests/vllm/realcalls_scenarios.py ``gen`` (vLLM caches
device checks per process); every mismatch prints one line: the deployment as a launch
command, the real largest plan, the guard's size. Exit 1 when anything was found.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from .compare import findings, guard_need, largest_real, ratio
from .space import VLLM_GPUS, launch_command
from tests.common import forkserver

REPO = Path(__file__).resolve().parents[2]


def run_vllm(gpu: str, seed: int, n: int, cubins: bool = True, timeout: int = 3600) -> list[dict]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "VLLM_")) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(REPO / "tests" / "vllm")]))
    cmd = [sys.executable, str(REPO / "tests" / "vllm" / "realcalls_scenarios.py"), "gen", "--seed", str(seed),
           "--n", str(n), "--gpu", gpu, "--phases", "guard"] + ([] if cubins else ["--no-cubins"])
    proc = forkserver.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, cwd=str(REPO))
    out = [json.loads(line[len("RESULT: "):]) for line in proc.stdout.splitlines() if line.startswith("RESULT: ")]
    if not out:
        out = [{"case": f"gen{seed}_{gpu}", "setup_error": f"no result (rc {proc.returncode}): {proc.stderr[-2000:]}"}]
    return out


def report(results: list[dict], line: str) -> tuple[int, list[str]]:
    lines, bad = [], 0
    for r in results:
        found = findings(r)
        if found:
            bad += 1
            cmd = launch_command(dict(r.get("config") or {}, source=r.get("source")), (r.get("gpu") or ["?"])[0], line)
            for kind, detail in found:
                lines.append(f"{kind}: {cmd} | real largest plan {largest_real(r)} B, guard {guard_need(r)} B | {detail}")
    return bad, lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.differential")
    p.add_argument("--framework", default="vllm", choices=["vllm"])
    p.add_argument("--n", type=int, default=10, help="deployments per GPU")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--gpus", default=",".join(VLLM_GPUS))
    args = p.parse_args(argv)
    import importlib.metadata as md

    line = f"vllm-{md.version('vllm')}"
    results = []
    for gpu in args.gpus.split(","):
        results += run_vllm(gpu, args.seed, args.n)
    bad, lines = report(results, line)
    calls = sum(len(r.get("calls") or []) for r in results)
    ratios = [x for x in (ratio(r) for r in results) if x]
    for ln in lines:
        print(ln)
    print(f"{line}: {len(results)} deployments, {calls} planning calls, {bad} with findings, "
          f"largest guard/real {max(ratios, default=0):.3f}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
