"""Issue 27 item 4: the SGLang deployments users run, each resolved by SGLang's own code.

A deployment is the whole model's attention shape (SHAPES: published configs) and the command
line: TP, DP attention (``--enable-dp-attention --dp-size``; SGLang's own attention-TP width and
head division, tests/sglang/realcalls_wide.py), KV dtype, context length, ``--chunked-prefill-size``
(absent: SGLang's own per-GPU choice; -1: chunked prefill off), ``--max-running-requests``, ``--page-size``,
``--cuda-graph-max-bs`` (absent: SGLang's per-GPU choice), ``--disable-cuda-graph``, EAGLE with
topk 1 or > 1, NGRAM, the GPU (its memory decides SGLang's defaults). What SGLang resolves from these
(capture sizes, chunk, heads per rank) is never written here: ``resolve: True`` hands the record
to SGLang's ServerArgs resolution on the table GPU.
"""

from __future__ import annotations

import random

from .space import SEARCH_BUDGET, SHAPES, _tp_options

# GPUs whose SGLang attention path the CPU harness replays. Not B200/B300 (SM100): SGLang's backend
# builds its ragged prefill wrapper with FlashInfer's CUTLASS FMHA there (flashinfer_backend.py
# 0.5.11:243-257, 0.5.23:509-522), a module the planner stand-in does not replace (the run
# stops with FlashInfer's JIT "No supported CUDA architectures found for major versions [10, 11]")
WIDE_GPUS = ("h200", "h100", "l40s", "a100", "rtx6000")


def sglang_wide_cases(seed: int, n: int) -> list[dict]:
    """``n`` SGLang deployments from ``seed`` (options of realcalls_scenarios.py ``run``)."""
    rng = random.Random(f"sglang-wide:{seed}")
    out = []
    for i in range(n):
        name, q, kv, hd = rng.choice(SHAPES)
        tp = rng.choice(_tp_options(q, kv))
        dps = [d for d in (2, 4, 8) if d <= tp and tp % d == 0]
        dp = rng.choice(dps) if dps and rng.random() < 0.3 else 1
        ctx = rng.choice([4096, 8192, 16384, 32768])
        opts = {"model_shape": [q, kv, hd], "source": name, "resolve": True, "tp_size": tp,
                "kv": rng.choice(["auto", "auto", "fp8"]), "context": ctx, "kv_width": ctx + 64,
                "gpu": rng.choice(WIDE_GPUS), "search": SEARCH_BUDGET, "seed": seed * 1000 + i,
                "chunked_prefill_size": rng.choice([None, None, None, -1, 2048, 8192]),
                "max_running_requests": rng.choice([None, None, 16, 64, 256, 1024]),
                "max_bs": rng.choice([None, None, None, 32, 64, 160]),
                "disable_cuda_graph": rng.random() < 0.2 or None}
        if dp > 1:
            opts.update(dp_size=dp, enable_dp_attention=True)
        # --page-size, from its own generator (the draws above stay those of before it was added).
        # SGLang's FlashInfer backend plans with page size 1 whatever --page-size says
        # (flashinfer_backend.py 0.5.11:1174,1193,1491; 0.5.23:1847,1866,2403)
        page = random.Random(f"sglang-wide-page:{seed}:{i}").choice([None, None, 16, 64])
        spec = rng.choice(["none", "none", "eagle", "eagle_topk"])
        if spec == "eagle":
            opts.update(draft_tokens=rng.choice([2, 4]), topk=1)
        elif spec == "eagle_topk":
            opts.update(draft_tokens=rng.choice([4, 8]), topk=rng.choice([2, 4, 8]), draft_steps=3)
            opts["max_bs"] = rng.choice([16, 32, 64])
        opts["page_size"] = page
        # --speculative-algorithm NGRAM where no EAGLE was drawn (own generator, as the page size)
        ng = random.Random(f"sglang-wide-ngram:{seed}:{i}")
        if "draft_tokens" not in opts and ng.random() < 0.25:
            opts["ngram"] = ng.choice([4, 8, 12])
        out.append({k: v for k, v in opts.items() if v is not None})
    return out


def sglang_wide_launch_command(opts: dict, line: str) -> str:
    parts = [f"python -m sglang.launch_server --model {opts.get('source', 'MODEL')}",
             f"--tp-size {opts.get('tp_size', 1)}",
             f"--kv-cache-dtype {'fp8_e4m3' if opts.get('kv') == 'fp8' else 'auto'}",
             f"--context-length {opts.get('context')}", "--attention-backend flashinfer"]
    if opts.get("enable_dp_attention"):
        parts.append(f"--enable-dp-attention --dp-size {opts['dp_size']}")
    for key, flag in (("chunked_prefill_size", "--chunked-prefill-size"),
                      ("max_running_requests", "--max-running-requests"), ("max_bs", "--cuda-graph-max-bs")):
        if opts.get(key) is not None:
            parts.append(f"{flag} {opts[key]}")
    if opts.get("page_size"):
        parts.append(f"--page-size {opts['page_size']}")
    if opts.get("disable_cuda_graph"):
        parts.append("--disable-cuda-graph")
    if opts.get("ngram"):
        parts.append(f"--speculative-algorithm NGRAM --speculative-num-draft-tokens {opts['ngram']}")
    if opts.get("draft_tokens"):
        parts.append(f"--speculative-algorithm EAGLE --speculative-num-draft-tokens {opts['draft_tokens']} "
                     f"--speculative-eagle-topk {opts.get('topk', 1)} --speculative-num-steps "
                     f"{opts.get('draft_steps', max(1, opts['draft_tokens'] - 1))}")
    return f"[{line}, {opts.get('gpu', 'h200')}] " + " ".join(parts)
