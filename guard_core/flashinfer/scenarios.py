"""The request shapes a server can send, each run through the planner model (``guard_core.flashinfer.planner``):
CUDA-graph decode and verify, eager decode, eager prefill, and the fixed-split modes; ``SCENARIO_KINDS`` in order."""

from __future__ import annotations

from dataclasses import replace

from guard_core.flashinfer import planner as fm
from guard_core.flashinfer import prefill_witnesses as pw
from guard_core.flashinfer.sizing_records import AttentionLayout, Planners, Scenario
from guard_core.gpus import Gpu

__all__ = ["PlanContext", "SCENARIO_KINDS", "decode_blocks_per_sm_bound"]

def _uniform_for(caller: str, version: str, planners: Planners) -> bool:
    if planners.decode_uniform_q_len is not None:
        return planners.decode_uniform_q_len
    # FlashInfer 0.7.4's own tensor-core decode plan passes uniform_q_len=1 and
    # fixed_uniform_q_len=True; SGLang and vLLM both plan through FlashInfer's decode
    # wrapper (releases.FOLLOWS_FLASHINFER_DECODE).
    return fm.decode_uniform_q_len(caller, version)


def decode_blocks_per_sm_bound(layout: AttentionLayout, gpu: Gpu) -> int:
    """An upper bound on the CUDA-core decode kernel's occupancy.

    The real value comes from ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``
    on the device; without a device we bound it by threads and shared memory
    (registers can only lower it), which over-sizes, never under-sizes.
    """
    d, g, kvb = layout.head_dim_vo, layout.gqa_group, layout.kv_dtype_bytes
    vec = max(16 // kvb, d // 32)
    bdx = max(d // vec, 1)
    bdy = g
    threads = max(128, bdx * bdy)
    bdz = max(threads // (bdx * bdy), 1)
    stages = 2 if gpu.cc[0] >= 8 else 1
    tile = (2 if kvb == 1 else 4) if g == 1 else 1
    smem = 2 * stages * tile * bdy * bdz * d * kvb + max(tile * threads * 8, 2 * bdy * bdz * 4)
    smem_sm = gpu.max_smem_per_sm or 228 * 1024
    by_smem = max(smem_sm // (smem + 1024), 1)
    by_threads = max(2048 // threads, 1)
    return int(min(by_smem, by_threads, 32))


class PlanContext:
    def __init__(self, layout, gpu, version, planners, caller):
        self.l, self.gpu, self.v, self.p, self.caller = layout, gpu, version, planners, caller
        self.rejected: list[str] = []

    def fa2(self, groups, total_rows, graph, uniform=0, fixed=False, window=False, split_size=-1,
            no_split=False):
        l = self.l
        return fm.prefill_plan(
            self.v, groups, total_num_rows=total_rows, num_qo_heads=l.num_qo_heads,
            num_kv_heads=l.num_kv_heads, head_dim_qk=l.head_dim_qk, head_dim_vo=l.head_dim_vo,
            page_size=l.page_size, enable_cuda_graph=graph, num_sms=self.gpu.num_sms,
            # Decode plans size the split by the full KV length (the decode
            # wrappers do not pass the window to the planner); prefill plans
            # clip it by the window. Seen through vLLM's real calls (tests/vllm
            # swa_shared): only the prefill kinds pass window=True.
            window_left=l.window_left if window else -1, uniform_q_len=uniform, fixed_uniform_q_len=fixed,
            fixed_split_size=split_size, disable_split_kv=no_split, kv_dtype_bytes=l.kv_dtype_bytes, cc_major=self.gpu.cc[0],
            max_smem_per_block_optin=_optin_smem(self.gpu))

    def cuda_decode(self, kv_pages, graph):
        l = self.l
        bps = self.p.decode_blocks_per_sm or decode_blocks_per_sm_bound(l, self.gpu)
        return fm.decode_plan(
            self.v, kv_pages, num_qo_heads=l.num_qo_heads, num_kv_heads=l.num_kv_heads,
            head_dim=l.head_dim_vo, page_size=l.page_size, enable_cuda_graph=graph,
            num_sms=self.gpu.num_sms, blocks_per_sm=bps)

    def fa3(self, qo_groups, total_rows, graph):
        l = self.l
        return fm.sm90_plan(
            self.v, qo_groups, total_num_rows=total_rows, num_qo_heads=l.num_qo_heads,
            num_kv_heads=l.num_kv_heads, head_dim_vo=l.head_dim_vo, enable_cuda_graph=graph,
            num_sms=self.gpu.num_sms)


def _optin_smem(gpu: Gpu) -> int:
    """Opt-in shared memory per block, the limit FA2DetermineCtaTileQ reads."""
    if gpu.cc[0] >= 9 and gpu.cc[0] != 12:
        return 232448  # Hopper / datacenter Blackwell: 227 KiB
    if gpu.cc == (8, 0):
        return 166912  # A100: 163 KiB
    return 101376  # SM86/89/120/121: 99 KiB


def _long_kv_batch(chunks: int, max_requests: int, min_chunk_pages: int, max_pages: int | None):
    """KV lengths (pages, count) that split into exactly ``chunks`` minimum-size chunks.

    The planner's binary search then lands on the minimum chunk, so the split
    batch is ``chunks`` (times the query tiles per request), the largest the
    planner allows when ``chunks`` is its cap. At least one request spans two
    chunks, so the planner does split. None when no such batch exists within
    the limits (a request holds at most ``max_pages``).
    """
    # a request of max_pages pages holds ceil(max_pages / min_chunk_pages) chunks (its
    # last one partial): the planner counts ceil(kv / chunk) per request (scheduler.cuh
    # 0.6.12:581-582)
    per_req = chunks if max_pages is None else min(chunks, -(-max_pages // min_chunk_pages))
    if per_req < 2 or chunks < 2 or max_requests < 1:
        return None
    n = -(-chunks // per_req)
    if n > max_requests:
        n, chunks = max_requests, max_requests * per_req
    groups: dict[int, int] = {}
    left = chunks
    for _ in range(n):
        share = min(per_req, left)
        left -= share
        pages = share * min_chunk_pages if max_pages is None else min(share * min_chunk_pages, max_pages)
        groups[pages] = groups.get(pages, 0) + 1
    return list(groups.items())


def _graph_scenarios(ctx, layout, limits, gpu, flashinfer_version, planners, caller, scenarios):
    """CUDA-graph decode: each capture size, one query token per request."""
    uniform = _uniform_for(caller, flashinfer_version, planners)
    if planners.decode not in ("fa2", "fa3", "decode"):
        return
    if not limits.one_token_graphs and limits.speculative and limits.verify_in_graph:
        return
    k = int(limits.decode_requests_per_seq)
    for size in limits.capture_sizes:
        b = limits.graph_requests(size, 1) * k
        if b < 1:
            continue
        if planners.decode == "fa2":
            # deterministic mode: SGLang captures decode with disable_split_kv=True
            plan = ctx.fa2([(1, 1, b)], b, True, 1 if uniform else 0, uniform, no_split=limits.disable_graph_kv_split)
        elif planners.decode == "fa3":
            plan = ctx.fa3([(1, b)], b, True)
        else:
            plan = ctx.cuda_decode([(1, b)], True)
        scenarios.append(Scenario("cuda_graph_decode", b, 1, plan, planners.decode))


def _verify_scenarios(ctx, layout, limits, gpu, flashinfer_version, planners, caller, scenarios):
    """Speculative verify graphs: ``verify_tokens`` query tokens per request."""
    if not (limits.speculative and limits.verify_in_graph and planners.decode in ("fa2", "fa3", "decode")):
        return
    qs = range(2, limits.verify_tokens + 1) if limits.partial_verify_graphs else (limits.verify_tokens,)
    for q in qs:
        _verify_graphs(ctx, limits, planners, caller, q, scenarios)


def _verify_graphs(ctx, limits, planners, caller, q, scenarios):
    """The verify graphs of ``q`` query tokens per request, one per capture size."""
    # vLLM verifies through FlashInfer's decode wrapper (plan / fast_decode_plan with
    # q_len_per_req), which passes uniform_q_len = q_len_per_req to the planner from 0.6.16
    # (flashinfer/decode.py 0.6.16:1200,3902; 0.7.2:1795,5025); SGLang verifies through
    # the paged prefill wrapper, which passes 0 (prefill.py 0.7.2:2522).
    uniform = q if (caller == "vllm" and q > 1) else 0  # fm.prefill_plan drops it before 0.6.16
    for size in limits.capture_sizes:
        b = limits.graph_requests(size, q)
        if b < 1:
            continue
        if planners.decode == "fa3":
            plan, name = ctx.fa3([(q, b)], b * q, True), "fa3"
        else:
            plan, name = ctx.fa2([(q, 1, b)], b * q, True, uniform), "fa2"
        scenarios.append(Scenario("cuda_graph_verify", b, q, plan, name))


def _eager_decode_scenarios(ctx, layout, limits, gpu, flashinfer_version, planners, caller, scenarios):
    """A decode batch outside CUDA graphs, split up to the planner's cap."""
    if not limits.eager:
        return
    if limits.fixed_split_decode and planners.decode == "fa2":
        _fixed_split_decode(ctx, layout, limits, scenarios)
        return
    min_chunk_pages, max_pages = _page_bounds(layout, limits)
    fa2_max_bs = max(0, 2 * gpu.num_sms) // layout.num_kv_heads
    max_requests = limits.max_num_seqs * int(limits.decode_requests_per_seq)
    if planners.decode == "fa2":
        kv = _long_kv_batch(fa2_max_bs, max_requests, min_chunk_pages, max_pages)
        if kv:
            groups = [(1, p, c) for p, c in kv]
            n = sum(c for _, c in kv)
            scenarios.append(Scenario("eager_decode", n, 1, ctx.fa2(groups, n, False), "fa2", tuple(groups)))
    elif planners.decode == "fa3":
        n = max(1, max_requests)
        scenarios.append(Scenario("eager_decode", n, 1, ctx.fa3([(1, n)], n, False), "fa3"))
    elif planners.decode == "decode":
        bps = planners.decode_blocks_per_sm or decode_blocks_per_sm_bound(layout, gpu)
        cap = (bps * gpu.num_sms) // layout.num_kv_heads
        kv = _long_kv_batch(cap, max_requests, min_chunk_pages, max_pages)
        if kv:
            n = sum(c for _, c in kv)
            scenarios.append(Scenario("eager_decode", n, 1, ctx.cuda_decode(kv, False), "decode",
                                      tuple((1, p, c) for p, c in kv)))


def _eager_prefill_scenarios(ctx, layout, limits, gpu, flashinfer_version, planners, caller, scenarios):
    """A prefill/mixed batch up to the max batched tokens (one short prompt
    against a long KV cache is the float worst case; a full batch of short
    prompts the int worst case)."""
    if not limits.eager:
        return
    if limits.fixed_split_prefill and planners.prefill == "fa2":
        _fixed_split_prefill(ctx, layout, limits, scenarios)
        return
    g = layout.gqa_group
    min_chunk_pages, max_pages = _page_bounds(layout, limits)
    fa2_max_bs = max(0, 2 * gpu.num_sms) // layout.num_kv_heads
    if planners.prefill == "fa2":
        best = None
        # one request of q tokens per tile: float grows with the CTA tile, so try the
        # shortest query reaching each tile size the release can pick
        seen_tiles = set()
        cands = {1}
        for th in (16, 32, 64, 128):
            cands.add(max(1, -(-(th + 1) // g)))
            cands.add(max(1, th // g))
        for q in sorted(cands):
            if q > limits.max_num_batched_tokens:
                continue
            cta = fm.cta_tile_q(flashinfer_version, q * g, layout.head_dim_vo, layout.head_dim_qk,
                                layout.kv_dtype_bytes, gpu.cc[0], _optin_smem(gpu))
            tiles = -(-(q * g) // cta)
            if (cta, tiles) in seen_tiles:
                continue
            seen_tiles.add((cta, tiles))
            chunks = fa2_max_bs // tiles if tiles else 0
            max_req = max(1, min(limits.max_num_seqs, limits.max_num_batched_tokens // q))
            kv = _long_kv_batch(chunks, max_req, min_chunk_pages, _window_pages(layout, cta, max_pages)) \
                if chunks else None
            if not kv:
                continue
            groups = [(q, p, c) for p, c in kv]
            n = sum(c for _, c in kv)
            plan = ctx.fa2(groups, n * q, False, window=True)
            if best is None or plan.float_bytes > best[0].float_bytes:
                best = (plan, n, q, tuple(groups))
        smem = _optin_smem(gpu)
        big = fm.cta_tile_q(flashinfer_version, 1 << 16, layout.head_dim_vo, layout.head_dim_qk,
                            layout.kv_dtype_bytes, gpu.cc[0], smem)
        more = [*pw.long_query_batches(ctx, layout, limits, big, fa2_max_bs, min_chunk_pages, max_pages,
                                       _window_pages(layout, big, max_pages)),
                *pw.mixed_fill_batches(ctx, layout, limits, pw.tile_ranges(flashinfer_version, layout, gpu.cc[0], smem),
                                       fa2_max_bs, min_chunk_pages, max_pages,
                                       lambda cta: None if layout.window_left < 0 else _window_pages(layout, cta, None))]
        for plan, n, q, groups in more:
            if best is None or plan.float_bytes > best[0].float_bytes:
                best = (plan, n, q, groups)
        # the int side: a full batch of short-KV prefills (no split, most tiles)
        t = limits.max_num_batched_tokens
        n = max(1, min(limits.max_num_seqs, t))
        groups = [(1, 1, n - 1), (t - (n - 1), 1, 1)] if n > 1 else [(t, 1, 1)]
        int_plan = ctx.fa2(groups, t, False, window=True)
        if best is not None:
            plan, n_best, q_best, witness = best
            if int_plan.int_bytes > plan.int_bytes:
                plan = replace(plan, int_bytes=int_plan.int_bytes)
            scenarios.append(Scenario("eager_prefill", n_best, q_best, plan, "fa2", witness))
        else:
            scenarios.append(Scenario("eager_prefill", n, t // n, int_plan, "fa2"))
    elif planners.prefill == "fa3":
        t = limits.max_num_batched_tokens
        n = max(1, min(limits.max_num_seqs, t))
        groups = [(1, n - 1), (t - (n - 1), 1)] if n > 1 else [(t, 1)]
        scenarios.append(Scenario("eager_prefill", n, t // n, ctx.fa3(groups, t, False), "fa3"))


def _fixed_split_context(limits) -> int:
    """The longest KV a request reaches in tokens: max_model_len (the server's context
    length), never more than the KV pool."""
    if not limits.max_model_len:
        raise fm.PlannerError("a fixed split size needs the longest context (max_model_len) to be sized")
    ctx = int(limits.max_model_len)
    if limits.kv_pool_tokens:
        ctx = min(ctx, int(limits.kv_pool_tokens))
    return ctx


def _fixed_split_prefill(ctx, layout, limits, scenarios):
    """Fixed-split prefill (SGLang deterministic inference, every line 0.5.5-0.5.23:
    ``fixed_split_size=self.prefill_split_tile_size`` on the paged wrapper, the ragged
    one off: 0.5.5 flashinfer_backend.py:469,488; 0.5.23 :1059,1085). No SM cap: the
    scratch is one tile row set per (query tile, KV chunk), so the worst case is the
    longest prompt's last full chunk: ``min(chunk, context)`` query tokens against the
    whole context. Every query tile and KV chunk count below it needs no more (the
    need is monotone in both)."""
    kv_tokens = _fixed_split_context(limits)
    q = min(int(limits.max_num_batched_tokens), kv_tokens)
    pages = -(-kv_tokens // layout.page_size)
    plan = ctx.fa2([(q, pages, 1)], q, False, window=True, split_size=int(limits.fixed_split_prefill))
    scenarios.append(Scenario("fixed_split_prefill", 1, q, plan, "fa2"))


def _decode_kv_groups(limits, page_size: int, split_pages: int):
    """KV lengths (pages, count) of the decode batch with the most fixed-size KV chunks:
    max_num_seqs requests, each at most the context, all of them together at most the
    KV pool (or, the pool unknown, one full-context request and one-token requests).
    A request of ``(c - 1) * split + 1`` pages has ``c`` chunks; each extra chunk costs
    ``split`` pages of the pool."""
    ctx_tokens = _fixed_split_context(limits)
    ctx_pages = -(-ctx_tokens // page_size)
    n = int(limits.max_num_seqs)
    c_max = -(-ctx_pages // split_pages)
    full_pages = (c_max - 1) * split_pages + 1  # the fewest pages with c_max chunks (<= the context)
    if limits.kv_pool_tokens:
        pool_pages = int(limits.kv_pool_tokens) // page_size
        n = max(1, min(n, pool_pages))
        extra = max(0, (pool_pages - n) // split_pages) if c_max > 1 else 0
    else:
        extra = c_max - 1
    extra = min(extra, n * (c_max - 1))
    groups: dict[int, int] = {}
    if c_max > 1 and extra:
        full = extra // (c_max - 1)
        rem = extra - full * (c_max - 1)
        if full:
            groups[full_pages] = groups.get(full_pages, 0) + full
        used = full
        if rem:
            groups[rem * split_pages + 1] = groups.get(rem * split_pages + 1, 0) + 1
            used += 1
    else:
        groups[min(full_pages, split_pages)] = 1
        used = 1
    if n > used:
        groups[1] = groups.get(1, 0) + (n - used)
    return list(groups.items())


def _fixed_split_decode(ctx, layout, limits, scenarios):
    """Fixed-split eager decode (tensor cores, ``fixed_split_size=self.decode_split_tile_size``:
    0.5.5 flashinfer_backend.py:421; 0.5.23 :1017): one query token per request, every
    request's KV cut into ``split``-page chunks."""
    split = int(limits.fixed_split_decode)
    kv = _decode_kv_groups(limits, layout.page_size, split)
    groups = [(1, p, c) for p, c in kv]
    n = sum(c for _, c in kv)
    plan = ctx.fa2(groups, n, False, split_size=split)
    scenarios.append(Scenario("fixed_split_decode", n, 1, plan, "fa2"))


def _window_pages(layout, cta: int, max_pages: int | None) -> int | None:
    """The most KV pages of one request the prefill planner's split search sees: with a
    window (window_left >= 0) FlashInfer clips each request's KV to
    ``ceil((window_left + cta_tile_q) / page_size)`` pages before it (scheduler.cuh
    0.6.12:558-563, 0.7.2.post1:628-633), so a windowed group's worst batch is many
    requests of that many pages, not one long one."""
    if layout.window_left < 0:
        return max_pages
    clip = max(1, -(-(layout.window_left + cta) // layout.page_size))
    return clip if max_pages is None else min(clip, max_pages)


def _page_bounds(layout, limits):
    min_chunk_pages = max(128 // layout.page_size, 1)
    max_pages = None
    if limits.max_model_len:
        max_pages = max(1, -(-int(limits.max_model_len) // layout.page_size))
    return min_chunk_pages, max_pages


SCENARIO_KINDS = (
    ("CUDA-graph decode", _graph_scenarios),
    ("CUDA-graph verify", _verify_scenarios),
    ("eager decode", _eager_decode_scenarios),
    ("eager prefill", _eager_prefill_scenarios),
)
