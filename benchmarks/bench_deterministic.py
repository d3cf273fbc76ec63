"""The deterministic-inference table of docs/deterministic.md, from `flashinfer-guard plan --json`.

SGLang --enable-deterministic-inference on each checked line (the FlashInfer it pins), for a
deployment x context length (8k, 32k, 128k) x chunked-prefill size: the need, SGLang's forced
size, and the verdict (fits SGLang's 2 GiB / the guard raises the buffer to the need / not
affordable: the longest prompt that fits). Prints a Markdown table.

    python benchmarks/bench_deterministic.py [--gpu gb10] [--heads 24,4,256]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from guard_core.commands import cli  # noqa: E402

LINES = ("0.5.5", "0.5.11", "0.5.15", "0.5.20", "0.5.22", "0.5.23")
CONTEXTS = (8192, 32768, 131072)
CHUNKS = (2048, 8192, 16384)


def plan(line, gpu, heads, ctx, chunk):
    q, kv, d = heads
    argv = ["plan", "--json", "--framework-version", line, "--gpu", gpu, "--qo-heads", str(q), "--kv-heads", str(kv),
            "--head-dim", str(d), "--", "python", "-m", "sglang.launch_server", "--model-path", "m",
            "--attention-backend", "flashinfer", "--enable-deterministic-inference", "--context-length", str(ctx),
            "--chunked-prefill-size", str(chunk)]
    out, old = io.StringIO(), sys.stdout
    sys.stdout = out
    try:
        code = cli.main(argv)
    finally:
        sys.stdout = old
    if code != 0:
        raise SystemExit(f"plan failed ({code}): {' '.join(argv)}")
    return json.loads(out.getvalue())


def _gib(n):
    return f"{n / (1 << 30):.2f} GiB"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpu", default="gb10")
    ap.add_argument("--heads", default="24,4,256", help="q heads, kv heads, head dim per rank")
    a = ap.parse_args()
    heads = tuple(int(x) for x in a.heads.split(","))
    print("| SGLang (FlashInfer) | context | chunk | need | SGLang's size | verdict without the guard | with the guard |")
    print("|---|---:|---:|---:|---:|---|---|")
    for line in LINES:
        for ctx in CONTEXTS:
            for chunk in CHUNKS:
                r = plan(line, a.gpu, heads, ctx, chunk)
                fx = r["fixed_split"]
                need, forced = r["need"]["float_bytes"], r["server_default_bytes"]
                if need <= forced:
                    before, after = "fits", "keeps 2 GiB"
                else:
                    before = f"overflow past {fx['longest_prompt_in_buffer']:,} tokens"
                    after = (f"raises to {_gib(fx['allocate_bytes'])}" if fx["affordable"] else
                             f"not affordable (> {_gib(fx['max_bytes'])}): {_gib(fx['allocate_bytes'])}, "
                             f"prompts <= {fx['longest_prompt']:,}; warns")
                print(f"| {line} ({r['flashinfer']}) | {ctx:,} | {chunk:,} | {_gib(need)} | {_gib(forced)} | "
                      f"{before} | {after} |")


if __name__ == "__main__":
    main()
