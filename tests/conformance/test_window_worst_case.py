"""Sliding-window layers: an independent worst-case search against FlashInfer's compiled planner.

With ``window_left >= 0`` FlashInfer's ``PrefillPlan`` clips every request's KV to
``ceil((window_left + cta_tile_q) / page_size)`` pages before its split search (scheduler.cuh
0.6.12:558-563, 0.7.2.post1:628-633), so a windowed group's worst eager batch is many requests
of window-length KV, not one long request (issue 27, item 2: gemma-3-27b on 8x L40S, vLLM 0.23:
guard 9,477,888 B, real 36,986,880 B).

The expected value here never comes from guard_core: for each window shape a search that knows
nothing of the guard (a grid over request count, query length and KV length, then random
restarts plus hill-climbing over per-request query and KV lengths, within the server's limits:
max seqs, max batched tokens, max_model_len) asks the compiled planner (oracle.py, FlashInfer's
own scheduler.cuh) for each batch's float bytes and keeps the largest. The guard's eager prefill
need for the group must be at least that. Separately (never part of the expected maximum), the
guard's own witness batch, replayed through the compiled planner, must need exactly the guard's
figure. A test of the search itself: it must find a worst case that an envelope blind to it
(the guard before this fix) misses.
"""

from __future__ import annotations

import random

import pytest

from guard_core.gpus import lookup_gpu
from guard_core.flashinfer.sizing import AttentionLayout, Planners, ServingLimits, compute_requirement

from . import grid, oracle

# (id, FlashInfer release, GPU, (q heads, kv heads, head dim) per rank, page size, window (tokens),
#  max seqs, max batched tokens, max_model_len)
SHAPES = (
    # issue 27's report: google/gemma-3-27b-it (32 q / 16 kv heads, head dim 128, window 1024) at
    # TP 8 on L40S, vLLM 0.23.0 (FlashInfer 0.6.12), its API-server defaults on a 44 GiB GPU
    ("gemma3-27b-tp8-l40s", "0.6.12", "l40s", (4, 2, 128), 16, 1024, 256, 2048, 131072),
    # gemma-2-9b (16 / 8 / 256, window 4096), H100, FlashInfer 0.7.2.post1 (PR #5177's row count)
    ("gemma2-9b-h100", "0.7.2.post1", "h100", (16, 8, 256), 16, 4096, 1024, 8192, 8192),
    # gpt-oss-120b at TP 4 (16 / 2 / 64, window 128): a window shorter than two minimum chunks
    ("gpt-oss-tp4-b200", "0.7.2.post1", "b200", (16, 2, 64), 16, 128, 512, 8192, 131072),
    # Mistral-7B-v0.1-like (32 / 8 / 128, window 4096), A100, page 32, few requests allowed
    ("mistral-a100-p32", "0.6.12", "a100", (32, 8, 128), 32, 4096, 16, 4096, 32768),
    # a one-page-per-token window group (SGLang's page size 1), window 2048
    ("p1-w2048-h200", "0.7.2.post1", "h200", (8, 1, 128), 1, 2048, 256, 16384, 65536),
)


class Space:
    """The batches the server can send one prefill planner call (no guard_core inside)."""

    def __init__(self, shape):
        (self.id, self.version, gpu_key, (self.hq, self.hkv, self.hd), self.page, window,
         self.max_seqs, self.max_tokens, self.max_len) = shape
        self.window_left = window - 1  # vLLM's builder: window_left = sliding_window - 1
        g = lookup_gpu(gpu_key)
        self.gpu_tuple = (gpu_key, g.num_sms, g.cc[0], g.cc[1])
        self.gpu_key = gpu_key

    def valid(self, batch) -> bool:
        return (0 < len(batch) <= self.max_seqs and sum(q for q, _ in batch) <= self.max_tokens
                and all(1 <= q <= kv <= self.max_len for q, kv in batch))

    def request(self, rid, batch) -> dict:
        return grid.prefill_request(
            rid, [q for q, _ in batch], [kv for _, kv in batch], num_qo_heads=self.hq, num_kv_heads=self.hkv,
            head_dim_qk=self.hd, head_dim_vo=self.hd, page_size=self.page, enable_cuda_graph=False,
            gpu=self.gpu_tuple, window_left=self.window_left)

    def clamp(self, batch):
        out = []
        left = self.max_tokens
        for q, kv in batch[: self.max_seqs]:
            if left < 1:
                break
            q = max(1, min(int(q), left, self.max_len))
            kv = max(q, min(int(kv), self.max_len))
            out.append((q, kv))
            left -= q
        return out


def _scores(space: Space, batches) -> list[int]:
    reqs = [space.request(f"{space.id}-{i}", b) for i, b in enumerate(batches)]
    replies = oracle.run_oracle(space.version, reqs)
    return [r["float_bytes"] if r.get("ok") else -1 for r in replies]


def _grid_batches(space: Space):
    ns = sorted({n for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 512, 1024)
                 if n <= space.max_seqs})
    qs = (1, 2, 4, 8, 16, 17, 32, 33, 48, 64, 65, 96, 128, 129, 256)
    kvs = sorted({min(space.max_len, k) for k in (64, 128, 256, 512, 1024, 1536, 2048, 3072, 4096, 6144,
                                                   8192, 16384, 32768, 131072)})
    out = []
    for n in ns:
        for q in qs:
            if n * q > space.max_tokens:
                continue
            for kv in kvs:
                if kv >= q:
                    out.append([(q, kv)] * n)
    return out


def _mutate(rng: random.Random, space: Space, batch):
    b = list(batch)
    r = rng.random()
    if r < 0.2:  # request count
        n = max(1, int(len(b) * rng.choice((0.5, 0.75, 1.25, 1.5, 2))) + rng.choice((-1, 0, 1)))
        b = (b * (n // len(b) + 1))[:n]
    elif r < 0.45:  # every query length
        f = rng.choice((0.5, 0.9, 1.1, 2))
        b = [(max(1, int(q * f) + rng.choice((-1, 0, 1))), kv) for q, kv in b]
    elif r < 0.7:  # every KV length
        step = rng.choice((1, space.page, 16, 64, 128, 512))
        d = rng.choice((-1, 1)) * step * rng.randint(1, 4)
        b = [(q, kv + d) for q, kv in b]
    else:  # one request's KV or query length
        i = rng.randrange(len(b))
        q, kv = b[i]
        if rng.random() < 0.5:
            kv = kv + rng.choice((-1, 1)) * rng.choice((1, space.page, 128, 1024))
        else:
            q = q + rng.choice((-1, 1)) * rng.choice((1, 8, 32))
        b[i] = (q, kv)
    return space.clamp(b)


def independent_worst(space: Space, seed: int = 27, restarts: int = 6, rounds: int = 12, width: int = 48):
    """(largest float bytes, its batch): the grid, then hill-climbing from the best grid batches
    and from random restarts, every score the compiled planner's."""
    rng = random.Random(f"{space.id}:{seed}")
    cands = [b for b in _grid_batches(space) if space.valid(b)]
    scores = _scores(space, cands)
    ranked = sorted(zip(scores, range(len(cands))), reverse=True)
    starts = [cands[i] for _, i in ranked[:restarts]]
    for _ in range(restarts):  # random restarts: uneven batches
        n = rng.randint(1, space.max_seqs)
        starts.append(space.clamp([(rng.randint(1, 256), rng.randint(1, space.max_len)) for _ in range(n)]))
    best = max(zip(scores, range(len(cands))))
    best = (best[0], cands[best[1]])
    pool = [(s, b) for s, b in zip(_scores(space, starts), starts)]
    for _ in range(rounds):
        kids = []
        for _s, b in pool:
            kids += [_mutate(rng, space, b) for _ in range(width // len(pool) + 1)]
        kids = [k for k in kids if k and space.valid(k)]
        pool = sorted(pool + list(zip(_scores(space, kids), kids)), key=lambda x: -x[0])[: len(starts)]
        if pool[0][0] > best[0]:
            best = pool[0]
    return best


def guard_eager_prefill(space: Space):
    """The guard's eager prefill scenario for this windowed group (prefill on FA2)."""
    layout = AttentionLayout(space.hq, space.hkv, space.hd, space.hd, space.page, 2, window_left=space.window_left)
    limits = ServingLimits(capture_sizes=(), max_num_seqs=space.max_seqs, max_num_batched_tokens=space.max_tokens,
                           max_model_len=space.max_len)
    req = compute_requirement(layout, limits, lookup_gpu(space.gpu_key), space.version, Planners("fa2", "fa2"),
                              "vllm")
    return next(s for s in req.scenarios if s.name == "eager_prefill")


def assert_guard_covers(shape, grid_of):
    """For the shape's space: the guard's eager prefill need reaches the largest plan FlashInfer's
    compiled planner makes for the valid batches of ``grid_of(space)`` (found without guard_core),
    and its witness, replayed through that planner, needs exactly the guard's figure. Returns
    (space, the batches, the largest real plan, its batch, the guard's scenario)."""
    space = Space(shape)
    oracle.build_many([space.version])
    batches = [b for b in grid_of(space) if space.valid(b)]
    scores = _scores(space, batches)
    real, i = max(zip(scores, range(len(batches))))
    s = guard_eager_prefill(space)
    assert s.float_bytes >= real, (space.id, s.float_bytes, real, batches[i][:2])
    batch = [(q, min(space.max_len, p * space.page)) for q, p, c in s.witness for _ in range(c)]
    assert space.valid(batch), (space.id, s.witness)
    (got,) = _scores(space, [batch])
    assert got == s.float_bytes, (space.id, s.witness, got, s.float_bytes)
    return space, batches, real, batches[i], s


_FOUND: dict = {}


def _found(shape):
    if shape[0] not in _FOUND:
        space = Space(shape)
        oracle.build_many([space.version])
        _FOUND[shape[0]] = (space, independent_worst(space))
    return _FOUND[shape[0]]


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_window_envelope_covers_the_independent_worst(shape):
    space, (real, batch) = _found(shape)
    assert real > 0, f"{space.id}: the search found no split plan at all"
    guard = guard_eager_prefill(space).float_bytes
    print(f"\n{space.id} (FlashInfer {space.version}): independent worst {real} B "
          f"({len(batch)} requests, q {sorted({q for q, _ in batch})[:4]}, kv {sorted({k for _, k in batch})[:4]}); "
          f"guard {guard} B; guard/real {guard / real:.3f}")
    assert guard >= real, (f"{space.id}: the guard's eager prefill need {guard} B is below a batch FlashInfer's "
                           f"planner sizes at {real} B: {len(batch)} requests {batch[:3]}...")


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_window_witness_is_real(shape):
    """The guard's own witness batch (a separate check, not part of the expected maximum):
    replayed through the compiled planner it needs exactly the guard's figure."""
    space = Space(shape)
    oracle.build_many([space.version])
    s = guard_eager_prefill(space)
    assert s.witness, f"{space.id}: no witness batch for the eager prefill figure"
    batch = [(q, p * space.page) for q, p, c in s.witness for _ in range(c)]
    assert space.valid(batch), f"{space.id}: the witness is not a batch the server can send: {s.witness}"
    (got,) = _scores(space, [batch])
    assert got == s.float_bytes, (space.id, s.witness, got, s.float_bytes)


# the shapes where one window-length request holds fewer KV chunks than the planner's split cap
GAP_SHAPES = [s for s in SHAPES if s[0] in ("gemma3-27b-tp8-l40s", "gpt-oss-tp4-b200", "p1-w2048-h200")]


@pytest.mark.parametrize("shape", GAP_SHAPES, ids=[s[0] for s in GAP_SHAPES])
def test_search_finds_an_injected_envelope_gap(shape, monkeypatch):
    """A test of the search: an envelope made blind to window clipping (guard_core's witness
    search told that a request's KV is not clipped, as before issue 27) is still right about
    its own witness, but the independent search must find a worse batch. The mixed-batch witnesses
    (issue 27 item 4, after the window fix) are left out too: they reach the split cap whatever the
    window, so with them no blinded envelope is wrong."""
    import guard_core.flashinfer.scenarios as scenarios

    space, (real, _batch) = _found(shape)
    monkeypatch.setattr(scenarios, "_window_pages", lambda layout, cta, max_pages: max_pages)
    monkeypatch.setattr(scenarios.pw, "mixed_fill_batches", lambda *a, **k: iter(()))
    blind = guard_eager_prefill(space)
    if blind.witness:  # right about its own witness ...
        wb = [(q, p * space.page) for q, p, c in blind.witness for _ in range(c)]
        assert _scores(space, [wb]) == [blind.float_bytes]
    assert real > blind.float_bytes, (space.id, real, blind.float_bytes)  # ... and the search finds the gap


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_unwindowed_envelope_covers_the_windowed_worst(shape):
    """SGLang's adapter hands the core no window (sglang_guard/workspace_facts.py): SGLang trims
    each window wrapper request's KV itself (flashinfer_backend.py 0.5.11:1313-1318, decode
    1029-1037) and passes window_left to the planner only from 0.5.23 (:2095-2099, 2391-2393),
    and its window and full wrappers share one buffer. Sizing the group without the window is
    then the envelope over every KV length: it must cover the windowed worst case too."""
    space, (real, _batch) = _found(shape)
    unwindowed = Space(shape)
    unwindowed.window_left = -1
    need = guard_eager_prefill(unwindowed).float_bytes
    assert need >= real, (space.id, need, real)
