"""The wider vLLM space of issue 27 item 4: what users run, drawn by a seeded generator.

Each deployment is a published model of the corpus (tests/data/model_configs and
tests/data/model_configs_published), built by vLLM's own model class with its own layer list,
windows, sinks, soft-cap and hybrid layers (tests/vllm/realcalls_models.py), and the rest is
what a user passes: tensor parallel size, ``--block-size`` 16/32/64, chunked prefill on or off,
``--max-model-len`` from 256 up (clipped to what vLLM allows for the model),
``--max-num-batched-tokens`` up to 65536, ``--max-num-seqs`` up to 4096, every
``cudagraph_mode``, a capture ceiling, KV-cache dtype, n-gram or EAGLE/EAGLE3 speculation, and on SM10x TRT-LLM
attention forced on (or off) where the line has the switch. Nothing here comes from guard_core.
"""

from __future__ import annotations

import math
import random

from .space import SEARCH_BUDGET

CUDAGRAPH_MODES = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")


def _log_int(rng: random.Random, lo: int, hi: int, step: int = 1) -> int:
    x = int(math.exp(rng.uniform(math.log(lo), math.log(hi))))
    return max(lo, min(hi, x - x % step))


def _tps(heads: int) -> list[int]:
    return [tp for tp in (1, 2, 4, 8) if heads and heads % tp == 0] or [1]


def vllm_wide_cases(seed: int, n: int, gpu: str, models: list[tuple[str, int]], *, trtllm_switch: bool = False,
                    sm10: bool = False, alternates: int = 6) -> list[dict]:
    """``n`` deployments on ``gpu`` from ``seed`` (dicts of realcalls_scenarios.Case fields).
    ``models``: (corpus name, total attention heads) to draw from; each case also carries the
    next ``alternates`` draws, run in its place where vLLM cannot build the model on the CPU."""
    rng = random.Random(f"vllm-wide:{seed}:{gpu}")
    out = []
    for i in range(n):
        picks = rng.sample(models, min(len(models), 1 + alternates))
        name, heads = picks[0]
        mns = rng.choice([_log_int(rng, 1, 1024), _log_int(rng, 1, 1024), rng.choice([1536, 2048, 4096])])
        mbt = max(mns, _log_int(rng, 256, 65536, 8))
        mml = _log_int(rng, 256, 131072, 16)
        mode = rng.choice(CUDAGRAPH_MODES)
        case = dict(
            name=f"wide{seed}_{gpu}_{i}", config=name, alternates=[p[0] for p in picks[1:]],
            tp=rng.choice(_tps(heads)), block_size=rng.choice([16, 32, 64]),
            chunked_prefill=rng.random() > 0.3, max_num_seqs=mns, max_num_batched_tokens=mbt,
            max_model_len=mml, cudagraph_mode=mode, cudagraphs=mode != "NONE",
            capture=rng.choice([None, None, _log_int(rng, 1, 2048)]),
            kv_cache_dtype=rng.choice(["auto", "auto", "fp8", "fp8_e5m2"]),
            draft=rng.choice([0, 0, 0, 1, 2, 3, 5]), disable_q_quant=rng.random() < 0.15,
            trtllm=(rng.choice([True, True, None, False]) if sm10 else None) if trtllm_switch else None,
            search=SEARCH_BUDGET, seed=seed * 1000 + i, eager=True, source=name)
        if case["draft"]:  # n-gram, or an EAGLE/EAGLE3 drafter built by vLLM (realcalls_models.py)
            case["spec_method"] = rng.choice(["ngram", "eagle", "eagle3"])
        if not case["chunked_prefill"]:  # vLLM refuses fewer (SchedulerConfig.verify_max_model_len)
            case["max_num_batched_tokens"] = max(mbt, mml)
        out.append(case)
    return out
