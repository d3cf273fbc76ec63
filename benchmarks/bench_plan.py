"""`flashinfer-guard plan -- <command>` against importing the server's config module, side by side
in one run and one environment (issue 42 item 1's goal: a ratio of at most 1.3).

    <vllm env>/bin/python benchmarks/bench_plan.py vllm [--rounds 3]
    <sglang env>/bin/python benchmarks/bench_plan.py sglang [--rounds 3]
    <any python without the servers>/bin/python benchmarks/bench_plan.py none   # plan with no server: < 2 s

Each round runs, one after another in fresh processes: the import (vLLM: ``vllm.engine.arg_utils`` and
``vllm.config``; SGLang: ``sglang.srt.server_args``), then plan (auto resolution: the server's parser,
model reader and resolution in plan's one server process) on Qwen3-32B at TP 2 on H200. Prints each
wall time, the medians and plan / import. Bytecode is warm from the first round on (the first
round is printed but not in the medians when there are more than two).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
IMPORTS = {"vllm": "import vllm.engine.arg_utils, vllm.config", "sglang": "import sglang.srt.server_args"}


def _launch(fw: str, model: str) -> list[str]:
    if fw == "sglang":
        return ["python", "-m", "sglang.launch_server", "--model-path", model, "--attention-backend", "flashinfer",
                "--tp-size", "2", "--context-length", "8192"]
    return ["vllm", "serve", model, "--attention-backend", "FLASHINFER", "-tp", "2", "--max-model-len", "8192"]


def _timed(cmd: list[str], env: dict) -> tuple[float, int]:
    t = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO))
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:])
    return time.perf_counter() - t, p.returncode


def main(argv: list[str]) -> int:
    fw = argv[0] if argv else "vllm"
    rounds = int(argv[argv.index("--rounds") + 1]) if "--rounds" in argv else 3
    env = dict(os.environ, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "Qwen3-32B")
        os.mkdir(model)
        with open(REPO / "tests" / "data" / "model_configs" / "Qwen3-32B.json") as src, \
                open(os.path.join(model, "config.json"), "w") as dst:
            dst.write(src.read())
        plan = [sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--gpu", "h200"]
        if fw == "none":
            rows = [_timed(plan + ["--framework-version", "0.33.0", "--", *_launch("vllm", model)], env)
                    for _ in range(rounds)]
            med = statistics.median(t for t, _ in rows)
            print(json.dumps({"plan_without_server_s": [round(t, 2) for t, _ in rows], "median_s": round(med, 2),
                              "goal_s": 2.0, "exit": [rc for _, rc in rows]}))
            return 0 if all(rc == 0 for _, rc in rows) else 1
        imp, pl = [], []
        for _ in range(rounds):
            imp.append(_timed([sys.executable, "-c", IMPORTS[fw]], env))
            pl.append(_timed(plan + ["--", *_launch(fw, model)], env))
        keep = slice(1, None) if rounds > 2 else slice(None)
        mi = statistics.median(t for t, _ in imp[keep])
        mp = statistics.median(t for t, _ in pl[keep])
        print(json.dumps({"server": fw, "import_s": [round(t, 2) for t, _ in imp], "plan_s": [round(t, 2) for t, _ in pl],
                          "median_import_s": round(mi, 2), "median_plan_s": round(mp, 2),
                          "ratio_plan_over_import": round(mp / mi, 2), "goal": 1.3,
                          "exit": [rc for _, rc in imp + pl]}))
    return 0 if all(rc == 0 for _, rc in imp + pl) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
