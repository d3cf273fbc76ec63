"""Mixed prefill batches: a few long prompts plus one-token requests fill the planner's split cap.

A non-CUDA-graph split plan holds at most ``2 x SMs / kv_heads`` (query tile, KV chunk) entries.
Batches of one shape reach only multiples of tiles x chunks; vLLM's mixed batches (prefill chunks
beside decodes) add any number of one-tile entries. Found by the differential search's wider vLLM
space (issue 27 item 4): vLLM 0.33 and 0.23, RTX PRO 6000, Qwen2.5-Omni thinker (28 q / 4 kv heads,
head dim 128), ``--max-model-len 464 --max-num-seqs 8 --block-size 32``: 3 x 127 query tokens @ 432
KV plus 5 x 6 @ 139 planned 24,836,112 B (173,838,336 B on FlashInfer 0.6.12) where the guard said
24,315,984 B (170,139,648 B).

The expected value never comes from guard_core: a grid that knows nothing of the guard (n long
requests, every query length on a ladder, KV on every page boundary, plus up to the remaining
seats of one-token requests, KV on every page boundary) asks the compiled planner (oracle.py,
FlashInfer's own scheduler.cuh) and keeps the largest; the guard's eager prefill need must reach
it, and the guard's witness, replayed through the compiled planner, must need exactly the
guard's figure.
"""

from __future__ import annotations

import pytest

from .test_window_worst_case import Space, _scores, assert_guard_covers, guard_eager_prefill, independent_worst
from . import oracle

# (id, FlashInfer release, GPU, (q, kv heads, head dim) per rank, page size, window (0: none),
#  max seqs, max batched tokens, max_model_len)
SHAPES = (
    ("qwen25-omni-rtxpro6000-464", "0.7.2.post1", "rtxpro6000", (28, 4, 128), 32, 0, 8, 44160, 464),
    ("qwen25-omni-rtxpro6000-464-fi0612", "0.6.12", "rtxpro6000", (28, 4, 128), 32, 0, 8, 44160, 464),
)

# seats and tokens bind at once, with requests of several query lengths (outside the grid's family)
BOTH_LIMITS = (
    # issue 27's scale run, vLLM 0.23.0 (FlashInfer 0.6.12), L40S, Qwen3-VL-32B at TP 8 (8 q / 1 kv heads):
    # --max-num-seqs 7 --max-num-batched-tokens 480 --max-model-len 592: the differential search's
    # 1 x 145 @ 513 + 2 x 130 @ 514 + 4 x 17 @ 576 plans 95,109,120 B (180 split entries) where the
    # guard said 92,467,200 B (175: its knapsack kept only the fewest requests per entry count)
    ("qwen3vl32b-tp8-l40s-480", "0.6.12", "l40s", (8, 1, 128), 16, 0, 7, 480, 592),
    # the same shape on FlashInfer 0.7.2.post1 (query-row scratch) and with fewer tokens
    ("qwen3vl32b-tp8-l40s-480-fi072", "0.7.2.post1", "l40s", (8, 1, 128), 16, 0, 7, 480, 592),
    ("qwen3vl32b-tp8-l40s-300", "0.6.12", "l40s", (8, 1, 128), 16, 0, 5, 300, 592),
)


def _ladder(top: int):
    out, q = [], 1
    while q <= top:
        out.append(q)
        q = max(q + 1, int(q * 1.3))
    return out + ([top] if out[-1] != top else [])


def _grid(space: Space):
    kvs = sorted({min(space.max_len, p * space.page) for p in range(1, -(-space.max_len // space.page) + 1)})
    out = []
    for n in range(1, min(space.max_seqs, 8) + 1):
        for q in _ladder(space.max_len):
            if n * q > space.max_tokens:
                break
            for kv in (k for k in kvs if k >= q):
                out.append([(q, kv)] * n)
                for f in range(1, min(space.max_seqs, 8) - n + 1):
                    if n * q + f > space.max_tokens:
                        break
                    out += [[(q, kv)] * n + [(1, kf)] * f for kf in kvs]
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_mixed_batches_covered(shape):
    space, batches, real, worst, s = assert_guard_covers(shape, _grid)
    print(f"\n{space.id}: {len(batches)} batches, independent worst {real} B ({worst[0]} x "
          f"{worst.count(worst[0])} + {len(worst) - worst.count(worst[0])} more); "
          f"guard {s.float_bytes} B (witness {s.witness})")


@pytest.mark.parametrize("shape", BOTH_LIMITS, ids=[s[0] for s in BOTH_LIMITS])
def test_both_limits_covered(shape):
    """The expected value: the independent hill-climbing search (random restarts, per-request query
    and KV moves; no guard_core), over three seeds; the guard's witness replays to its figure."""
    space = Space(shape)
    oracle.build_many([space.version])
    real, batch = max(independent_worst(space, seed=s) for s in (27, 1, 2))
    guard = guard_eager_prefill(space)
    print(f"\n{space.id}: independent worst {real} B ({batch}); guard {guard.float_bytes} B (witness {guard.witness})")
    assert guard.float_bytes >= real, (space.id, guard.float_bytes, real, batch)
    witness = [(q, min(space.max_len, p * space.page)) for q, p, c in guard.witness for _ in range(c)]
    assert space.valid(witness), (space.id, guard.witness)
    assert _scores(space, [witness]) == [guard.float_bytes], (space.id, guard.witness)
