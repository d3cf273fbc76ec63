"""Eager prefill witnesses beyond one short prompt per tile size (``scenarios._eager_prefill_scenarios``):
long prompts, and mixed batches whose short requests fill the planner's split batch to its cap.

Every figure is the planner model's own (``PlanContext.fa2``) for a concrete batch the server can
send (at most ``max_num_seqs`` requests and ``max_num_batched_tokens`` query tokens, every request
``q <= kv <= max_model_len``), so each witness, replayed through FlashInfer's compiled planner,
needs exactly the figure (tests/conformance).
"""

from __future__ import annotations

from guard_core.flashinfer import planner as fm

__all__ = ["long_query_batches", "mixed_fill_batches"]


def long_query_batches(ctx, layout, limits, big: int, fa2_max_bs: int, min_chunk_pages, max_pages, window_pages):
    """Prefill batches of ``n`` long prompts: where ``max_num_seqs`` requests of
    ``max_model_len`` KV hold fewer minimum chunks than the split cap, the planner's split batch
    (query tiles x KV chunks per request, scheduler.cuh 0.7.2.post1:640-660) is filled by the
    query tiles of long prompts instead (issue 27 item 4: vLLM 0.33, B300, Qwen2.5-7B at TP 2,
    --max-model-len 864 --max-num-seqs 1 --block-size 64: one 572-token prompt, 32 tiles x 5
    chunks, plans 21,137,424 B where the short-query witness reached 1,849,344 B). ``big``: the
    release's largest CTA tile. Yields (plan, n, q, witness groups)."""
    if max_pages is None or fa2_max_bs < 2:
        return
    g = layout.gqa_group
    per_req = -(-window_pages // min_chunk_pages)
    max_q = min(int(limits.max_num_batched_tokens), max_pages * layout.page_size)
    max_req = max(1, min(limits.max_num_seqs, limits.max_num_batched_tokens))
    ns = sorted({1, 2, 3, 4, 6, 8, 12, 16, 24, 32, max_req} & set(range(1, max_req + 1)))
    for n in ns:
        if n * per_req >= fa2_max_bs:
            break
        # every tile count the split can hold (more tiles than cap / n: no split), the longest
        # prompt of that many tiles, against the longest KV and against its own length
        for t in range(1, fa2_max_bs // n + 1):
            q = min((t * big) // g, max_q, int(limits.max_num_batched_tokens) // n)
            if q < 1:
                break
            for p in {max_pages, -(-q // layout.page_size)}:
                groups = ((q, p, n),)
                yield ctx.fa2(groups, n * q, False, window=True), n, q, groups
            if q < (t * big) // g:  # clipped by the limits: longer prompts are not possible
                break


def _pages_for(k: int, q: int, m: int, page: int, clip: int | None, max_pages: int | None):
    """The fewest KV pages of a request of ``q`` query tokens whose (window-clipped) KV splits
    into exactly ``k`` chunks of ``m`` pages, or None (the KV holds the query: pages >= q / page)."""
    p = max(-(-q // page), (k - 1) * m + 1, 1)
    if max_pages is not None and p > max_pages:
        return None
    eff = p if clip is None else min(p, clip)
    return p if -(-eff // m) == k else None


def mixed_fill_batches(ctx, layout, limits, tiles, fa2_max_bs: int, min_chunk_pages: int, max_pages, clip_for):
    """Mixed batches whose (query tile, KV chunk) entries add up to the planner's split cap, or as
    close to it as the seats and tokens allow: for each CTA tile, every (requests, query tokens)
    trade-off reaching each entry count, by a small knapsack over what one request can contribute.

    Why (issue 27 item 4, vLLM 0.33 and 0.23, RTX PRO 6000, Qwen2.5-Omni thinker: 28 q / 4 kv
    heads, page 32, ``--max-model-len 464 --max-num-seqs 8``: 3 x 127 query tokens @ 432 KV plus
    5 x 6 @ 139 plan 94 = 2 * 188 / 4 split entries at CTA tile 128, 24,836,112 B, where every
    batch of one shape stops at 92, 24,315,984 B): a non-CUDA-graph split plan's scratch is
    ``num_qo_heads x rows x (4 head_dim + 4)`` bytes with rows ``ceil(new_batch_size x cta_tile_q /
    gqa)`` (before 0.7.1 ``new_batch_size x cta_tile_q``; ``padded_batch_size = new_batch_size``),
    and PrefillBinarySearchKVChunkSize returns the smallest chunk with ``sum(tiles x ceil(kv /
    chunk)) <= max_batch_size_if_split`` (scheduler.cuh 0.7.2.post1:101-129, 0.6.12 the same), so
    ``new_batch_size <= 2 x SMs / kv_heads`` whenever it splits. A batch landing on the minimum
    chunk with exactly that many entries is therefore the largest any batch at that CTA tile can
    plan. On the minimum chunk a request of ``t`` query tiles and ``k`` chunks contributes
    ``t x k`` entries (``t`` fixes its query length within a tile, ``k`` its KV pages, at least
    the query's own); the knapsack over those contributions is exact for the entry count under
    the seat and token limits (``_min_tokens``), and the batch is then checked against the tokens
    and the tile's average query length (longer queries within their tiles where the average must rise). Plans that land
    on a larger chunk are the one-shape witnesses' part. ``tiles``: (cta_tile_q, lowest and
    highest average packed query length that picks it); ``clip_for(cta)``: the KV pages the window
    leaves the split search (None: no window). Yields (plan, n, q, witness groups)."""
    g, page, m, cap = layout.gqa_group, layout.page_size, min_chunk_pages, fa2_max_bs
    seats, tokens = int(limits.max_num_seqs), int(limits.max_num_batched_tokens)
    max_len = int(limits.max_model_len) if limits.max_model_len else None
    most = 0  # the largest new_batch_size x cta_tile_q yielded: a smaller tile's cap below it plans less
    for cta, a_lo, a_hi in sorted(tiles, reverse=True):
        if cta < g or cap < 2 or cap * cta <= most:
            continue
        clip = clip_for(cta)
        vals = _contributions(cta, g, page, m, clip, max_pages, max_len, cap)
        room = _RaiseRoom(vals, cta, g, page, m, clip, max_pages, max_len)

        def fill(rows, r, e, vals=vals, cta=cta, clip=clip, a_lo=a_lo, a_hi=a_hi, room=room):
            # the tile's average packed query length bounds the tokens of r requests both ways
            hi = min(tokens, ((a_hi + 1) * r - 1) // g)
            need = -(-a_lo * r // g)
            if r >= len(rows) or need > hi or rows[r][e] > hi:
                return None
            if rows[r][e] < need and rows[r][e] + room.total(rows, r, e) < need:
                return None  # what _concrete finds after raising every request to its room: too few tokens
            return _fill(rows, vals, r, e, cta, g, page, m, clip, max_pages, max_len, tokens, a_lo, a_hi)

        rows = _min_tokens(vals, cap, seats, tokens, lambda rows, r: fill(rows, r, cap))
        found = 0
        for e in range(cap, 0, -1):
            batch = next((x for x in (fill(rows, r, e) for r in range(1, len(rows))) if x is not None), None)
            if batch is None:
                continue
            found += 1
            groups = tuple(batch)
            plan = ctx.fa2(groups, sum(q * c for q, _, c in groups), False, window=True)
            most = max(most, plan.padded_batch_size * plan.cta_tile_q)
            yield plan, sum(c for _, _, c in groups), groups[0][0], groups
            if e == cap and plan.padded_batch_size == cap and plan.cta_tile_q == cta:
                return  # the cap at the largest tile left: no batch plans more (the proof above)
            if found >= 4:
                break


def _min_tokens(vals, cap: int, seats: int, tokens: int, reaches_cap):
    """``rows[r][e]``: the fewest query tokens of ``r`` requests adding up to exactly ``e`` entries
    (more than ``tokens`` where none fits), for ``r`` up to the seats. Both limits at once (issue
    27's scale run, vLLM 0.23.0, L40S, Qwen3-VL-32B at TP 8: 8 q / 1 kv heads, ``--max-num-seqs 7
    --max-num-batched-tokens 480 --max-model-len 592``: keeping only the fewest requests per entry
    count chose one 561-token request for 180 entries, over the token limit, and missed 1 x 145 + 2
    x 130 + 4 x 17 query tokens, 180 entries, 95,109,120 B, where the guard said 92,467,200 B, 175
    entries). Stops early once ``reaches_cap(rows, r)`` (a concrete batch of ``r`` requests fills the
    cap: no batch has more entries)."""
    from itertools import repeat
    from operator import add

    none = tokens + 1
    rows = [[0] + [none] * cap]
    items = sorted((v, c) for v, (c, _t, _k) in vals.items())
    for r in range(1, min(seats, tokens, cap) + 1):
        prev, cur = rows[-1], [none] * (cap + 1)
        for v, c in items:  # min-plus, in C: cur[e] = min(cur[e], prev[e - v] + c)
            cur[v:] = map(min, cur[v:], map(add, prev[: cap + 1 - v], repeat(c)))
        rows.append(cur)
        if cur[cap] <= tokens and reaches_cap(rows, r) is not None:
            break
        if min(cur) > tokens:
            break
    return rows


def _choice(rows, order, r: int, e: int) -> int:
    """The entry count of the request ``_fill`` takes last for (``r`` requests, ``e`` entries): the
    first contribution, in ``vals``' order, on which the knapsack's fewest tokens are reached."""
    tok, prev = rows[r][e], rows[r - 1]
    return next(v for v, c in order if v <= e and prev[e - v] + c == tok)


class _RaiseRoom:
    """How far ``_concrete`` can lengthen the queries of the batch ``_fill`` builds for (r, e), in
    query tokens, without building it: a request of ``t`` tiles and ``k`` chunks rises from its
    fewest tokens to the longest query of its tile whose pages still split into ``k`` chunks (the
    same walk as ``_concrete``'s), a figure of (t, k) alone; the batch's room is the sum over the
    requests ``_fill`` takes, memoized along the knapsack's reconstruction (each (r, e) step once,
    where rebuilding each candidate batch walked ~90 steps: 7 s of a 7.2 s plan for gemma-4-26B-A4B
    at TP 2 on H100, of which every candidate but two fell short of the tile's average). Exact:
    ``total() < need`` exactly where ``_concrete``'s raised tokens stay under ``need``."""

    def __init__(self, vals, cta, g, page, m, clip, max_pages, max_len):
        self.order = [(v, c) for v, (c, _t, _k) in vals.items()]
        self.per = {v: max(0, _longest_query(t, k, q_lo, cta, g, page, m, clip, max_pages, max_len) - q_lo)
                    for v, (q_lo, t, k) in vals.items()}
        self.memo: dict = {}
        self.rows = None

    def total(self, rows, r: int, e: int) -> int:
        if rows is not self.rows:  # another knapsack table: its reconstruction differs
            self.rows, self.memo = rows, {}
        memo, path = self.memo, []
        while r and (r, e) not in memo:
            v = _choice(rows, self.order, r, e)
            path.append((r, e, v))
            r, e = r - 1, e - v
        acc = memo.get((r, e), 0)
        for rr, ee, v in reversed(path):
            acc += self.per[v]
            memo[(rr, ee)] = acc
        return acc


def _fill(rows, vals, r: int, e: int, cta, g, page, m, clip, max_pages, max_len, tokens, a_lo, a_hi):
    """The concrete batch (``_concrete``) of ``r`` requests, ``e`` entries and the fewest tokens
    ``rows`` found, or None."""
    reqs = []
    order = [(v, c) for v, (c, _t, _k) in vals.items()]
    while r:
        v = _choice(rows, order, r, e)
        reqs.append(vals[v][1:])
        r, e = r - 1, e - v
    return _concrete(reqs, cta, g, page, m, clip, max_pages, max_len, tokens, a_lo, a_hi)


def _longest_query(t, k, q, cta, g, page, m, clip, max_pages, max_len) -> int:
    """The longest query (at least ``q``) of a request of ``t`` tiles whose pages still split into
    ``k`` chunks: what ``_concrete`` may raise it to, and ``_RaiseRoom``'s room."""
    hi = _q_range(t, cta, g, max_len)[1]
    while hi > q and _pages_for(k, hi, m, page, clip, max_pages) is None:
        hi -= 1
    return hi


def _q_range(t, cta, g, max_len):
    lo, hi = ((t - 1) * cta) // g + 1, (t * cta) // g
    return lo, (hi if max_len is None else min(hi, max_len))


def _contributions(cta, g, page, m, clip, max_pages, max_len, cap):
    """Entries one request can add on the minimum chunk: {t x k: (fewest query tokens, t, k)}."""
    top = clip if clip is not None else max_pages
    kmax = cap if top is None else -(-top // m)
    vals: dict = {}
    for t in range(1, cap + 1):
        q_lo, q_hi = _q_range(t, cta, g, max_len)
        if q_lo > q_hi:
            break
        for k in range(1, min(kmax, cap // t) + 1):
            if _pages_for(k, q_lo, m, page, clip, max_pages) is not None and (
                    t * k not in vals or q_lo < vals[t * k][0]):
                vals[t * k] = (q_lo, t, k)
    return vals


def _concrete(reqs, cta, g, page, m, clip, max_pages, max_len, tokens, a_lo, a_hi):
    """Query and KV lengths for requests of (t tiles, k chunks): the fewest query tokens, then
    longer queries within their tiles until the average packed length reaches ``a_lo``; None if
    the limits forbid it."""
    qs = [_q_range(t, cta, g, max_len)[0] for t, _ in reqs]
    need = -(-a_lo * len(reqs) // g)  # sum(q) x g >= a_lo x requests: floor(sum / requests) >= a_lo
    total = sum(qs)
    for i, (t, k) in enumerate(reqs):
        if total >= need:
            break
        hi = _longest_query(t, k, qs[i], cta, g, page, m, clip, max_pages, max_len)
        add = max(0, min(hi - qs[i], need - total))
        qs[i] += add
        total += add
    if total < need or total > tokens or (total * g) // len(reqs) > a_hi:
        return None
    out: dict = {}
    for q, (_, k) in zip(qs, reqs):
        p = _pages_for(k, q, m, page, clip, max_pages)
        if p is None:
            return None
        out[(q, p)] = out.get((q, p), 0) + 1
    if max(p for _, p in out) <= m:
        return None  # nothing to split: the planner would not
    return [(q, p, c) for (q, p), c in sorted(out.items(), reverse=True)]


def tile_ranges(version, layout, cc_major, optin_smem):
    """The CTA tiles FA2DetermineCtaTileQ picks for this layout, each with the lowest and highest
    average packed query length that picks it (FlashInfer's thresholds: 16, 32, 64)."""
    out: dict[int, list[int]] = {}
    for a in (1, 16, 17, 32, 33, 64, 65, 1 << 20):
        cta = fm.cta_tile_q(version, a, layout.head_dim_vo, layout.head_dim_qk, layout.kv_dtype_bytes, cc_major,
                            optin_smem)
        lo_hi = out.setdefault(cta, [a, a])
        lo_hi[0], lo_hi[1] = min(lo_hi[0], a), max(lo_hi[1], a)
    return [(cta, lo, hi) for cta, (lo, hi) in sorted(out.items())]
