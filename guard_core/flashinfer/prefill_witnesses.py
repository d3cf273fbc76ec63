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
    """Mixed batches: ``n`` long requests of ``t`` query tiles and ``k`` KV chunks each, plus
    one-tile requests whose chunks fill the split batch up to the planner's cap.

    Why this family (issue 27 item 4, vLLM 0.33 and 0.23, RTX PRO 6000, Qwen2.5-Omni thinker: 28 q /
    4 kv heads, page 32, ``--max-model-len 464 --max-num-seqs 8``: 3 x 127 query tokens @ 432 KV
    plus 5 x 6 @ 139 plan 94 = 2 * 188 / 4 split entries at CTA tile 128, 24,836,112 B, where every
    batch of one shape stops at 92, 24,315,984 B): a non-CUDA-graph split plan's scratch is
    ``num_qo_heads x rows x (4 head_dim + 4)`` bytes with rows ``ceil(new_batch_size x cta_tile_q /
    gqa)`` (``padded_batch_size = new_batch_size``), and PrefillBinarySearchKVChunkSize returns the
    smallest chunk with ``sum(tiles x ceil(kv / chunk)) <= max_batch_size_if_split`` (scheduler.cuh
    0.7.2.post1:101-129, 0.6.12 the same), so ``new_batch_size <= 2 x SMs / kv_heads`` whenever
    it splits. A batch landing on the minimum chunk with exactly that many entries is therefore the
    largest any batch at that CTA tile can plan. Requests of one shape reach only multiples of
    ``t x k``; one-tile requests add any number of entries from 1 to ``ceil(kv_max / chunk)`` each,
    so with enough seats this family reaches the cap exactly (for every tile size, the average
    packed query length kept in that tile's range). Where seats or tokens run out it is the
    largest total this construction reaches, evaluated as a real batch, beside the one-shape
    witnesses. ``tiles``: (cta_tile_q, lowest and highest average packed query length that picks
    it); ``clip_for(cta)``: the KV pages the window leaves the split search (None: no window).
    Yields (plan, n, q, witness groups)."""
    g, page, m = layout.gqa_group, layout.page_size, min_chunk_pages
    seats, tokens = int(limits.max_num_seqs), int(limits.max_num_batched_tokens)
    max_len = int(limits.max_model_len) if limits.max_model_len else None
    for cta, a_lo, a_hi in sorted(tiles, reverse=True):
        if cta < g:
            continue
        clip = clip_for(cta)
        top = clip if clip is not None else max_pages
        kmax = fa2_max_bs if top is None else -(-top // m)
        f_q = cta // g if max_len is None else min(cta // g, max_len)  # the longest one-tile request
        best = []
        for t in range(1, fa2_max_bs + 1):
            q_lo, q_hi = ((t - 1) * cta) // g + 1, (t * cta) // g
            if max_len is not None:
                q_hi = min(q_hi, max_len)
            if q_lo > q_hi:
                break
            for k in range(1, min(kmax, fa2_max_bs // t) + 1):
                for n in range(1, min(seats, fa2_max_bs // (t * k)) + 1):
                    rest, left = fa2_max_bs - n * t * k, seats - n
                    fill = min(-(-rest // kmax), left)
                    if fill * kmax < rest:
                        rest = fill * kmax
                    total = n * t * k + rest
                    best.append((total, -n - fill, t, k, n, fill, rest))
        best.sort(reverse=True)
        found = 0
        for total, _, t, k, n, fill, rest in best:
            batch = _concrete(t, k, n, fill, rest, cta, g, page, m, clip, max_pages, max_len, kmax, f_q,
                              tokens, a_lo, a_hi)
            if batch is None:
                continue
            found += 1
            groups = tuple(batch)
            rows = sum(q * c for q, _, c in groups)
            plan = ctx.fa2(groups, rows, False, window=True)
            yield plan, sum(c for _, _, c in groups), groups[0][0], groups
            if total == fa2_max_bs and plan.padded_batch_size == fa2_max_bs and plan.cta_tile_q == cta:
                return  # the cap at the largest tile left: no batch plans more (the proof above)
            if found >= 4:
                break


def _concrete(t, k, n, fill, rest, cta, g, page, m, clip, max_pages, max_len, kmax, f_q, tokens, a_lo, a_hi):
    """Query and KV lengths for the shape: the fewest query tokens, then longer queries (fillers
    first, up to one tile) until the average packed length reaches ``a_lo``; None if the limits
    forbid it."""
    q_lo, q_hi = ((t - 1) * cta) // g + 1, (t * cta) // g
    if max_len is not None:
        q_hi = min(q_hi, max_len)
    chunks = [kmax] * (fill - 1) + [rest - kmax * (fill - 1)] if fill else []
    reqs = n + fill
    q_long, q_fill = q_lo, [1] * fill
    need = -(-a_lo * reqs // g)  # sum(q) x g >= a_lo x reqs: floor(sum / reqs) >= a_lo
    total = n * q_long + fill
    for i in range(fill):
        if total >= need:
            break
        add = min(f_q - 1, need - total)
        q_fill[i] += add
        total += add
    if total < need:
        add = min(q_hi - q_long, -(-(need - total) // n))
        q_long += add
        total += n * add
    if total < need or total > tokens or (total * g) // reqs > a_hi:
        return None
    p_long = _pages_for(k, q_long, m, page, clip, max_pages)
    if p_long is None:
        return None
    out = {(q_long, p_long): n}
    for q, c in zip(q_fill, chunks):
        p = _pages_for(c, q, m, page, clip, max_pages)
        if p is None:
            return None
        out[(q, p)] = out.get((q, p), 0) + 1
    if max(p for _, p in out) <= m:
        return None  # nothing to split: the planner would not
    return [(q, p, c) for (q, p), c in out.items()]


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
