"""What FLASHINFER_GUARD_WORKSPACE=exact gives back, per deployment (issue 12).

    python benchmarks/bench_exact_memory.py

For each case: the float workspace the server allocates on its own (the line's
default on that GPU, from `flashinfer-guard plan`, which the defaults cross-check
in tests/vllm and tests/sglang holds to the real frameworks), what `exact`
allocates (the computed need rounded up to 1 MiB; the need is checked against
FlashInfer's real planner code in tests/conformance and against the frameworks'
own plan() calls in tests/*/test_realcalls.py), and the difference per GPU and
per 8-GPU node. Only exact's checked ranges are listed; elsewhere exact acts as
auto. Where the server allocates less than the need (FlashInfer < 0.7.1), exact
and auto both raise it: the difference is negative.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MIB = 1 << 20
CASES = [
    # (label, plan arguments)
    ("vLLM 0.33 Qwen3.5-397B B300", ["--framework", "vllm", "--framework-version", "0.33.0", "--gpu", "b300",
                                     "--model", "Qwen3.5-397B-A17B"]),
    ("vLLM 0.33 Qwen3.5-397B H200", ["--framework", "vllm", "--framework-version", "0.33.0", "--gpu", "h200",
                                     "--model", "Qwen3.5-397B-A17B"]),
    ("vLLM 0.33 Llama-3.1-70B H200 TP8", ["--framework", "vllm", "--framework-version", "0.33.0", "--gpu", "h200",
                                          "--model", "Llama-3.1-70B-Instruct", "--tp", "8"]),
    ("vLLM 0.33 Qwen3-VL-32B B200", ["--framework", "vllm", "--framework-version", "0.33.0", "--gpu", "b200",
                                     "--model", "Qwen3-VL-32B-Instruct", "--trtllm-attention", "off"]),
    ("vLLM 0.32 Qwen3.5-397B B200", ["--framework", "vllm", "--framework-version", "0.32.0", "--gpu", "b200",
                                     "--model", "Qwen3.5-397B-A17B", "--trtllm-attention", "off"]),
    ("vLLM 0.23 Qwen3.5-397B L40S", ["--framework", "vllm", "--framework-version", "0.23.0", "--gpu", "l40s",
                                     "--model", "Qwen3.5-397B-A17B"]),
    ("SGLang 0.5.23 Qwen3-VL-32B H200", ["--framework", "sglang", "--framework-version", "0.5.23", "--gpu", "h200",
                                         "--model", "Qwen3-VL-32B-Instruct"]),
    ("SGLang 0.5.23 Qwen3-32B H200", ["--framework", "sglang", "--framework-version", "0.5.23", "--gpu", "h200",
                                      "--model", "Qwen3-32B"]),
    ("SGLang 0.5.5 Qwen3-VL-32B B200", ["--framework", "sglang", "--framework-version", "0.5.5", "--gpu", "b200",
                                        "--model", "Qwen3-VL-32B-Instruct"]),
]


def plan(args: list[str]) -> dict:
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", *args], capture_output=True,
                       text=True, cwd=repo, env=dict(os.environ, PYTHONPATH=repo))
    if p.returncode != 0:
        raise SystemExit(f"plan {' '.join(args)} failed: {p.stderr.strip()}")
    return json.loads(p.stdout)


def main() -> int:
    print(f"{'case':36} {'FlashInfer':12} {'server':>10} {'exact':>8} {'freed/GPU':>10} {'freed/node':>11}")
    for label, args in CASES:
        d = plan(args)
        server = int(d["server_default_bytes"])
        exact = max(-(-int(d["need"]["float_bytes"]) // MIB) * MIB, MIB)
        freed = server - exact
        print(f"{label:36} {d['flashinfer']:12} {server // MIB:>6} MiB {exact // MIB:>4} MiB "
              f"{freed / MIB:>6.0f} MiB {8 * freed / MIB:>7.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
