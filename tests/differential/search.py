"""An eager worst-case search that owns its expected value (issue 27, item 2).

The expected value of a differential comparison is the largest float workspace FlashInfer's
own planner (the compiled ``scheduler.cuh`` of tests/realcalls/standin.py) plans for a batch
the framework could send, each batch run through the framework's own code (vLLM's metadata
builder, SGLang's backend). This module finds those batches without guard_core: it knows only
the server's limits (max requests, max batched tokens, max length, speculative tokens, the
layer's window and page size) and the planner's answer for each batch it tries.

Two stages, one evaluation budget:

1. **Exhaustive over the small dimensions**: every uniform batch on a grid of request counts
   (all counts up to 16, then about x1.5 steps up to the limit), every query length up to
   ``1 + draft`` and a ladder of prefill chunk lengths, and KV lengths at the limit, at half
   and quarter of it, and (for a windowed layer) at the window plus a page, a query tile and
   two. Where this grid is larger than half the budget, the request-count ladder thins to x2.
2. **An optimizer**: random restarts (batches of one to three groups of identical requests,
   log-uniform counts, query and KV lengths) plus the best grid batches as starting points, each
   climbed by first-improvement hill-climbing over the groups' request count, query length and
   KV length (x2, /2, x1.1, /1.1, +-1, +-a page, +-128, to the limit, to the window), adding,
   removing and splitting groups (part of a group's requests at another KV length); equal scores are accepted now and then so plateaus can be crossed; each
   climb ends with coordinate ascent in small steps (1, 8, a page, 128). Every candidate is
   repaired into the server's limits first.

A batch is a tuple of groups ``(count, q, kv)``: ``count`` requests of ``q`` new tokens and
``kv`` tokens of KV each (``q <= kv <= max_len``); all counts at most ``max_seqs``, all new
tokens at most ``max_tokens``. ``expand`` turns it into per-request lists, decodes first (the
order vLLM's model runner and SGLang's scheduler give a batch).
"""

from __future__ import annotations

import dataclasses
import math
import random
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Limits:
    max_seqs: int
    max_tokens: int
    max_len: int
    draft: int = 0  # speculative tokens: verify queries of 1 + draft
    window: int | None = None  # the layer's sliding window in tokens (None: full attention)
    page: int = 16
    single_kind: bool = False  # SGLang: a batch is all decode (q = 1) or all extend
    min_prefix: int = 0  # SGLang extends: at least this many KV tokens besides the new ones
    one_request: int = 0  # SGLang without chunked prefill: one request alone may bring this many new tokens


Batch = tuple  # of (count, q, kv)


def repair(lim: Limits, groups) -> Batch | None:
    """The batch clipped into the limits (None when nothing is left)."""
    groups = list(groups)
    if lim.one_request > lim.max_tokens and groups and groups[0][1] > lim.max_tokens:
        q = min(int(groups[0][1]), lim.one_request, lim.max_len - lim.min_prefix)  # one request, alone
        return ((1, q, max(q + lim.min_prefix, min(int(groups[0][2]), lim.max_len))),)
    out, seqs, tokens = [], 0, 0
    for c, q, kv in groups:
        q = max(1, min(int(q), lim.max_tokens, lim.max_len - lim.min_prefix))
        kv = max(q + lim.min_prefix, min(int(kv), lim.max_len))
        c = min(int(c), lim.max_seqs - seqs, (lim.max_tokens - tokens) // q)
        if c < 1:
            continue
        out.append((c, q, kv))
        seqs += c
        tokens += c * q
    if not out:
        return None
    if lim.single_kind and any(q == 1 for _, q, _ in out) and any(q > 1 for _, q, _ in out):
        out = [(c, q, kv) for c, q, kv in out if q > 1] or out
    # one canonical form: merge equal groups, sorted
    merged: dict = {}
    for c, q, kv in out:
        merged[(q, kv)] = merged.get((q, kv), 0) + c
    return tuple(sorted((c, q, kv) for (q, kv), c in merged.items()))


def expand(batch: Batch) -> tuple[list[int], list[int]]:
    """(query lengths, KV lengths) per request, decodes (shortest queries) first."""
    reqs = sorted(((q, kv) for c, q, kv in batch for _ in range(c)), key=lambda r: r[0])
    return [q for q, _ in reqs], [kv for _, kv in reqs]


def label(batch: Batch) -> str:
    return "+".join(f"{c}x{q}@{kv}" for c, q, kv in batch)


def _ladder(lo: int, hi: int, step: float) -> list[int]:
    out, x = set(), float(lo)
    while x < hi:
        out.add(int(x))
        x = max(x + 1, x * step)
    out.add(hi)
    return sorted(v for v in out if lo <= v <= hi)


def grid(lim: Limits, budget: int) -> list[Batch]:
    """Stage 1: every uniform batch on the grid (see the module text); without chunked prefill
    (``one_request``) first one request alone at prompt lengths past the batch budget."""
    singles = []
    if lim.one_request > lim.max_tokens:
        for q in _ladder(lim.max_tokens + 1, lim.one_request, 2.0):
            for kv in (lim.max_len, max(1, lim.max_len // 2)):
                b = repair(lim, [(1, q, kv)])
                if b and b not in singles:
                    singles.append(b)
    return singles + _uniform_grid(lim, max(2, budget - 2 * len(singles)))


def _uniform_grid(lim: Limits, budget: int) -> list[Batch]:
    qs = sorted({q for q in list(range(1, 2 + lim.draft)) + [8, 32, 128, 512, 2048, 8192, lim.max_tokens]
                 if q <= min(lim.max_tokens, lim.max_len - lim.min_prefix)})
    if lim.single_kind and lim.draft:
        qs = sorted(set(qs) - set(range(2, 2 + lim.draft)) | {1 + lim.draft})
    kvs = {lim.max_len, max(1, lim.max_len // 2), max(1, lim.max_len // 4)}
    if lim.window is not None and lim.window >= 0:
        for extra in (1, lim.page, 64, 128, 2 * lim.page + 128):
            kvs.add(min(lim.max_len, lim.window + extra))
    for step in (1.5, 2.0, 4.0):
        ns = sorted(set(range(1, min(16, lim.max_seqs) + 1)) | set(_ladder(16, max(16, lim.max_seqs), step)))
        ns = [n for n in ns if n <= lim.max_seqs]
        out = []
        for q in qs:
            for n in ns:
                if n * q > lim.max_tokens:
                    break
                for kv in sorted(kvs):
                    b = repair(lim, [(n, q, kv)])
                    if b and b not in out:
                        out.append(b)
        if len(out) <= budget // 2:
            return out
        if step == 2.0:  # still too large: keep every count up to 16 only for one-token queries
            qs_small = set(range(1, 2 + lim.draft))
            out = [b for b in out if b[0][0] <= 16 or b[0][1] not in qs_small or (b[0][0] & (b[0][0] - 1)) == 0
                   or b[0][0] == lim.max_seqs]
            if len(out) <= budget // 2:
                return out
    rng = random.Random(len(out))
    return sorted(rng.sample(out, budget // 2), key=out.index)


def _random_batch(rng: random.Random, lim: Limits) -> Batch | None:
    groups = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        c = int(math.exp(rng.uniform(0, math.log(max(1, lim.max_seqs)))))
        q = rng.choice([1, 1 + lim.draft, int(math.exp(rng.uniform(0, math.log(max(1, lim.max_tokens)))))])
        kv = rng.choice([lim.max_len, int(math.exp(rng.uniform(math.log(max(1, q)), math.log(max(q, lim.max_len)))))])
        if lim.window is not None and lim.window >= 0 and rng.random() < 0.4:
            kv = lim.window + rng.randint(1, 4 * lim.page + 128)
        groups.append((c, q, kv))
    return repair(lim, groups)


def _mutate(rng: random.Random, lim: Limits, batch: Batch) -> Batch | None:
    groups = [list(g) for g in batch]
    op = rng.random()
    if op < 0.08 and len(groups) < 3:
        groups.append([rng.choice([1, 2, 4, 8, 16]), rng.choice([1, 1 + lim.draft, 16, 128, 1024]),
                       rng.choice([lim.max_len, 128, 1024])])
    elif op < 0.14 and len(groups) > 1:
        groups.pop(rng.randrange(len(groups)))
    elif op < 0.18 and len(groups) < 3 and any(g[0] > 1 for g in groups):
        # split a group: some of its requests with another KV length (the planner's split search
        # packs KV chunks per request, so a batch of unequal KV can plan more than any equal one)
        g = rng.choice([g for g in groups if g[0] > 1])
        k = rng.randint(1, g[0] - 1)
        g[0] -= k
        kv = rng.choice([g[2] // 2, g[2] // 3, g[2] - lim.page * rng.randint(1, 8), rng.randint(g[1], max(g[1], g[2])),
                         min(lim.max_len, g[2] * 2)])
        groups.append([k, g[1], max(1, kv)])
    else:
        g = groups[rng.randrange(len(groups))]
        dim = rng.randrange(3)
        x = g[dim]
        moves = [lambda v: v * 2, lambda v: v // 2, lambda v: int(v * 1.1) + 1, lambda v: int(v / 1.1),
                 lambda v: v + 1, lambda v: v - 1]
        if dim == 0:
            moves += [lambda v: lim.max_seqs, lambda v: v + 8, lambda v: v - 8]
        elif dim == 1:
            moves += [lambda v: 1, lambda v: 1 + lim.draft, lambda v: lim.max_tokens // max(1, g[0])]
        else:
            moves += [lambda v: v + lim.page, lambda v: v - lim.page, lambda v: v + 128, lambda v: v - 128,
                      lambda v: lim.max_len]
            if lim.window is not None and lim.window >= 0:
                moves += [lambda v: lim.window + rng.randint(1, 4 * lim.page + 128)]
        g[dim] = max(1, int(rng.choice(moves)(x)))
    return repair(lim, [tuple(g) for g in groups])


def _polish(lim: Limits, batch: Batch, score, budget_left) -> tuple[Batch, int]:
    """Coordinate ascent from ``batch``: each group's count, query and KV length moved by the
    small steps in turn (1, 8 and a page, up and down), kept while the score rises."""
    cur, f = batch, score(batch)
    improved = True
    while improved and budget_left():
        improved = False
        for gi in range(len(cur)):
            for dim in range(3):
                for step in (1, -1, lim.page, -lim.page, 8, -8, 128, -128):
                    if gi >= len(cur) or not budget_left():
                        break
                    g = list(cur[gi])
                    g[dim] = max(1, g[dim] + step)
                    cand = repair(lim, [tuple(g) if i == gi else x for i, x in enumerate(cur)])
                    if cand is None or cand == cur:
                        continue
                    s = score(cand)
                    if s > f:
                        cur, f, improved = cand, s, True
    return cur, f


def search(lim: Limits, evaluate: Callable[[Batch], int], budget: int, seed: int,
           seeds: list[Batch] = ()) -> dict:
    """Stages 1 and 2 within ``budget`` evaluations of ``evaluate`` (the framework's code and
    FlashInfer's planner on one batch, its float bytes). ``seeds``: more starting batches that
    do not come from guard_core (e.g. the harness's own fixed batches). Returns the best batch,
    its bytes, the number of evaluations and where the best was found."""
    rng = random.Random(f"search:{seed}")
    seen: dict = {}

    def score(b):
        if b is None:
            return -1
        if b not in seen:
            if len(seen) >= budget:
                return -1
            seen[b] = int(evaluate(b))
        return seen[b]

    stage = {}
    for b in list(seeds) + grid(lim, budget):
        b = repair(lim, b)
        if b is not None and b not in seen and len(seen) < budget:
            score(b)
    stage["grid"] = len(seen)
    ranked = sorted(seen, key=lambda b: -seen[b])
    starts = ranked[:3]
    best = ranked[0] if ranked else None
    found_in = "grid" if best is not None else None
    patience = 24
    while len(seen) < budget:
        cur = starts.pop(0) if starts else _random_batch(rng, lim)
        if cur is None:
            continue
        f = score(cur)
        stale, stalls = 0, 0
        while stale < patience and len(seen) < budget:
            cand = _mutate(rng, lim, cur)
            if cand is None or cand == cur:
                stalls += 1
                if stalls > 200:
                    break
                continue
            before = len(seen)
            g = score(cand)
            if len(seen) == before and cand in seen and g <= f:
                stalls += 1
                if stalls > 200:
                    break
            if g > f or (g == f and rng.random() < 0.3):
                stale = 0 if g > f else stale + 1
                cur, f = cand, g
            else:
                stale += 1
        cur, f = _polish(lim, cur, score, lambda: len(seen) < budget)
        if best is None or (cur in seen and seen[cur] > seen.get(best, -1)):
            best, found_in = cur, "climb"
    top = max(seen, key=lambda b: seen[b]) if seen else None
    if top is not None and (best is None or seen[top] > seen[best]):
        best = top
        found_in = "climb" if stage["grid"] <= list(seen).index(top) else "grid"
    return {"evaluations": len(seen), "grid": stage["grid"], "best_float_bytes": seen.get(best, -1),
            "best": None if best is None else label(best), "found_in": found_in}
