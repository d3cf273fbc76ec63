"""Short contexts with few requests: long prompts are the eager prefill's worst case.

When ``max_num_seqs`` requests of ``max_model_len`` KV hold fewer minimum KV chunks than the
planner's split cap, FlashInfer's ``PrefillPlan`` fills its split batch (query tiles x KV
chunks per request) with the query tiles of long prompts. Found by the differential search's
wider vLLM space (issue 27 item 4): vLLM 0.33, B300, Qwen2.5-7B at TP 2 (14 q / 2 kv heads,
head dim 128), ``--max-model-len 864 --max-num-seqs 1 --block-size 64``: one 572-token prompt
planned 21,137,424 B where the guard said 1,849,344 B.

The expected value never comes from guard_core: a grid that knows nothing of the guard (request
counts, every query length on a ladder up to the limits, KV from the query's own length up to
max_model_len) asks the compiled planner (oracle.py, FlashInfer's own scheduler.cuh) and keeps
the largest; the guard's eager prefill need must reach it, and the guard's witness, replayed
through the compiled planner, must need exactly the guard's figure.
"""

from __future__ import annotations

import pytest

from .test_window_worst_case import Space, assert_guard_covers

# (id, FlashInfer release, GPU, (q, kv heads, head dim) per rank, page size, window (0: none),
#  max seqs, max batched tokens, max_model_len)
SHAPES = (
    ("qwen25-7b-tp2-b300-864", "0.7.2.post1", "b300", (14, 2, 128), 64, 0, 1, 13992, 864),
    ("llama8b-h100-2k-4seqs", "0.6.12", "h100", (32, 8, 128), 16, 0, 4, 8192, 2048),
    ("qwen3-l40s-512-2seqs", "0.7.2.post1", "l40s", (16, 4, 128), 32, 0, 2, 4096, 512),
)


def _grid(space: Space):
    ns = sorted({n for n in (1, 2, 3, 4, 6, 8) if n <= space.max_seqs})
    qs, q = [], 1
    while q <= space.max_len:
        qs.append(q)
        q = max(q + 1, int(q * 1.15))
    out = []
    for n in ns:
        for q in qs:
            if n * q > space.max_tokens:
                break
            for kv in sorted({q, min(space.max_len, q + space.page), space.max_len}):
                out.append([(q, kv)] * n)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_long_prompts_covered(shape):
    space, batches, real, worst, s = assert_guard_covers(shape, _grid)
    print(f"\n{space.id}: independent worst {real} B ({len(worst)} x q {worst[0][0]}, kv {worst[0][1]}); "
          f"guard {s.float_bytes} B ({s.batch} x {s.q_len})")
