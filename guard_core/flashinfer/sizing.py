"""The serving envelope: the most bytes FlashInfer will ask of the workspace.

Adapters describe the situation in framework-free terms (``AttentionLayout``
per rank, ``ServingLimits``, ``Planners``, a ``Gpu`` and the installed
FlashInfer version); ``compute_requirement`` runs the planner model over every
request shape the server can send and names the scenario and the allocation
that dominate:

- ``cuda_graph_decode``: each CUDA-graph capture size, one query token each (also
  under speculation where the server plans one-token decode batches through its
  graph wrapper: ``ServingLimits.one_token_graphs``);
- ``cuda_graph_verify``: each capture size with ``1 + draft_tokens`` queries
  (speculative verify), when the server captures verify graphs, and every shorter
  query length where the server plans those too (``partial_verify_graphs``);
- ``eager_decode``: a decode batch outside CUDA graphs;
- ``eager_prefill``: a prefill/mixed batch up to the max batched tokens.

The eager figures are the planner's output for concrete batches that reach
the bound (split-KV scratch grows with the split batch, which the planner caps
at ``2 * SMs / kv_heads``; the worst case is a short query against a long KV
cache), not a loose product. With a window (``AttentionLayout.window_left >= 0``)
FlashInfer clips each request's KV to the window before its split search, so the
eager prefill witness is many requests of window-length KV (``_window_pages``);
each attention group is sized with its own layout, window included.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from guard_core.flashinfer import planner as fm
from guard_core.gpus import Gpu
from guard_core.units import MIB

__all__ = ["AttentionLayout", "INT_WORKSPACE_BYTES", "Planners", "Requirement", "ServingLimits",
           "compute_requirement", "decode_blocks_per_sm_bound", "fixed_split_fixes", "largest_fitting", "largest_fitting_capture",
           "longest_fitting_context", "merge_requirements", "round_up_mib"]

INT_WORKSPACE_BYTES = 8 * MIB  # FlashInfer wrappers' own int buffer


@dataclass(frozen=True)
class AttentionLayout:
    """Attention of one rank: heads per rank, head dims, page size."""

    num_qo_heads: int
    num_kv_heads: int
    head_dim_qk: int
    head_dim_vo: int | None = None
    page_size: int = 1
    kv_dtype_bytes: int = 2
    window_left: int = -1

    def __post_init__(self):
        if self.head_dim_vo is None:
            object.__setattr__(self, "head_dim_vo", self.head_dim_qk)
        for name in ("num_qo_heads", "num_kv_heads", "head_dim_qk", "head_dim_vo", "page_size", "kv_dtype_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or v <= 0:
                raise ValueError(f"{name} must be a positive integer, got {v!r}")
        if self.num_qo_heads % self.num_kv_heads:
            raise ValueError(f"query heads ({self.num_qo_heads}) must be a multiple of KV heads ({self.num_kv_heads})")

    @property
    def gqa_group(self) -> int:
        return self.num_qo_heads // self.num_kv_heads


@dataclass(frozen=True)
class ServingLimits:
    capture_sizes: tuple[int, ...] = ()
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    draft_tokens: int = 0
    eager: bool = True
    max_model_len: int | None = None
    verify_in_graph: bool = True
    # What a CUDA-graph capture size counts: "requests" (SGLang's batch sizes)
    # or "tokens" (vLLM's cudagraph_capture_sizes: a verify graph of T tokens
    # holds T // (1 + draft) requests).
    capture_unit: str = "requests"
    # Query tokens per request in a verify batch. None: 1 + draft_tokens
    # (vLLM's num_speculative_tokens); SGLang's speculative_num_draft_tokens
    # already counts the bonus token and is passed here as is.
    verify_q_len: int | None = None
    # Fixed-split modes (SGLang --enable-deterministic-inference): eager prefill and
    # eager decode plan with FlashInfer's fixed_split_size (in KV pages) instead of the
    # SM-capped binary search, so the split-KV scratch grows with the KV length up to
    # max_model_len; CUDA graphs plan with disable_split_kv (no float scratch).
    # None: the SM-capped planner as usual.
    fixed_split_prefill: int | None = None
    fixed_split_decode: int | None = None
    disable_graph_kv_split: bool = False
    # Tokens the KV pool holds (SGLang's max_total_num_tokens): bounds the total KV of
    # one fixed-split decode batch (deterministic mode disables the radix cache with
    # FlashInfer, so requests share no KV). None: one full-context request plus
    # one-token requests.
    kv_pool_tokens: int | None = None
    # Decode requests planned per running sequence: SGLang's EAGLE draft steps with
    # --speculative-eagle-topk k plan k x bs decode requests (flashinfer_backend.py
    # 0.5.23:2501 ``bs = self.topk * num_seqs``; per-graph wrappers for ``bs * topk``).
    decode_requests_per_seq: int = 1
    # Whether CUDA-graph decode batches of one query token are captured besides the
    # verify graphs. vLLM with speculative decoding captures its uniform decode graphs
    # with 1 + draft tokens each (CudagraphDispatcher.initialize_cudagraph_keys(mode,
    # uniform_decode_query_len=1 + num_speculative_tokens)), none of one token.
    one_token_graphs: bool = True
    # Whether the verify graph wrapper is also planned with every query length between 1
    # and the verify length: vLLM 0.33's fa2-native decode (below SM90) plans a pure decode
    # batch of up to ``_decode_cudagraph_max_bs`` tokens with the CUDA-graph wrapper and
    # ``q_len_per_req = num_decode_tokens // num_decodes`` (v1/attention/backends/
    # flashinfer.py 0.33.0:1938-1951), so n-gram drafts of any length 0..draft each plan.
    partial_verify_graphs: bool = False

    def __post_init__(self):
        object.__setattr__(self, "capture_sizes", tuple(sorted({int(b) for b in self.capture_sizes})))
        for b in self.capture_sizes:
            if b <= 0:
                raise ValueError(f"capture sizes must be positive, got {b}")
        for name in ("max_num_seqs", "max_num_batched_tokens"):
            if int(getattr(self, name)) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.draft_tokens < 0:
            raise ValueError("draft_tokens must be >= 0")
        if self.capture_unit not in ("requests", "tokens"):
            raise ValueError(f"capture_unit must be 'requests' or 'tokens', got {self.capture_unit!r}")
        if self.verify_q_len is not None and int(self.verify_q_len) < 1:
            raise ValueError("verify_q_len must be >= 1")
        if int(self.decode_requests_per_seq) < 1:
            raise ValueError("decode_requests_per_seq must be >= 1")
        for name in ("fixed_split_prefill", "fixed_split_decode", "kv_pool_tokens"):
            v = getattr(self, name)
            if v is not None and int(v) <= 0:
                raise ValueError(f"{name} must be positive or None, got {v!r}")

    @property
    def fixed_split(self) -> bool:
        return bool(self.fixed_split_prefill or self.fixed_split_decode)

    @property
    def verify_tokens(self) -> int:
        """Query tokens per request in a speculative verify batch."""
        return int(self.verify_q_len) if self.verify_q_len is not None else 1 + int(self.draft_tokens)

    @property
    def speculative(self) -> bool:
        return self.verify_tokens > 1 and (self.draft_tokens > 0 or self.verify_q_len is not None)

    def graph_requests(self, capture_size: int, q_len: int) -> int:
        """Requests in a CUDA graph of ``capture_size`` with ``q_len`` query tokens each.

        In tokens (vLLM) a graph holds ``capture_size // q_len`` requests, and
        never more than max seqs (vLLM's capture batches take
        ``min(tokens // q_len, max_num_reqs)``); in requests (SGLang) the
        capture batch is the size itself, dummy requests included.
        """
        if self.capture_unit == "tokens":
            return max(0, min(capture_size // q_len, self.max_num_seqs))
        return capture_size


@dataclass(frozen=True)
class Planners:
    """Which FlashInfer planner serves each phase in this buffer.

    prefill: ``fa2`` | ``fa3`` (SM90 backend, int buffer only) | ``none``
    (e.g. TRT-LLM-gen prefill). decode: ``fa2`` (tensor-core decode through
    the prefill planner) | ``fa3`` (tensor-core decode on the SM90 backend,
    int buffer only) | ``decode`` (CUDA-core decode planner) | ``trtllm`` /
    ``none`` (plans nothing in this buffer). ``guard_core.flashinfer.planner_choice`` chooses.
    """

    prefill: str = "fa2"
    decode: str = "fa2"
    decode_blocks_per_sm: int | None = None
    decode_uniform_q_len: bool | None = None  # None: what the caller passes for that release

    def __post_init__(self):
        if self.prefill not in ("fa2", "fa3", "none", "trtllm"):
            raise ValueError(f"unknown prefill planner {self.prefill!r}")
        if self.decode not in ("fa2", "fa3", "decode", "trtllm", "none"):
            raise ValueError(f"unknown decode planner {self.decode!r}")


@dataclass(frozen=True)
class Scenario:
    name: str
    batch: int
    q_len: int
    plan: fm.Plan
    planner: str
    # The concrete batch behind an eager figure: ((query tokens, KV pages, requests), ...),
    # so a test can run exactly this batch through the framework and FlashInfer's real planner.
    witness: tuple = ()

    @property
    def float_bytes(self) -> int:
        return self.plan.float_bytes

    @property
    def int_bytes(self) -> int:
        return self.plan.int_bytes

    @property
    def dominant_allocation(self) -> fm.Allocation | None:
        floats = [a for a in self.plan.allocations if a.buffer == "float"]
        return max(floats or self.plan.allocations, key=lambda a: a.bytes, default=None)

    def as_dict(self) -> dict:
        dom = self.dominant_allocation
        return {
            "name": self.name, "batch": self.batch, "q_len": self.q_len, "planner": self.planner,
            "float_bytes": self.float_bytes, "int_bytes": self.int_bytes,
            "split_kv": self.plan.split_kv, "padded_batch_size": self.plan.padded_batch_size,
            "cta_tile_q": self.plan.cta_tile_q,
            "dominant_allocation": dom.name if dom else None,
            "allocations": [{"name": a.name, "buffer": a.buffer, "bytes": a.bytes} for a in self.plan.allocations],
        }


@dataclass(frozen=True)
class Requirement:
    float_bytes: int
    int_bytes: int
    scenarios: tuple[Scenario, ...]
    dominant: Scenario | None
    flashinfer_version: str
    layout: AttentionLayout
    gpu: Gpu
    planners: Planners
    notes: tuple[str, ...] = field(default=())

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


class _Ctx:
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


_KINDS = (
    ("CUDA-graph decode", _graph_scenarios),
    ("CUDA-graph verify", _verify_scenarios),
    ("eager decode", _eager_decode_scenarios),
    ("eager prefill", _eager_prefill_scenarios),
)


def compute_requirement(
    layout: AttentionLayout,
    limits: ServingLimits,
    gpu: Gpu,
    flashinfer_version: str,
    planners: Planners = Planners(),
    caller: str = "vllm",
) -> Requirement:
    """The most bytes FlashInfer will ask of the workspace over every scenario.

    Each scenario kind is sized on its own: a plan FlashInfer itself rejects in
    one kind (e.g. a GQA group the CUDA-core decode kernels are not built for)
    becomes a note and leaves the other kinds' needs intact.
    """
    ctx = _Ctx(layout, gpu, flashinfer_version, planners, caller)
    scenarios: list[Scenario] = []
    notes: list[str] = []
    for label, kind in _KINDS:
        try:
            kind(ctx, layout, limits, gpu, flashinfer_version, planners, caller, scenarios)
        except fm.PlannerError as exc:
            # FlashInfer itself rejects this plan; the server fails there, not in the buffer
            notes.append(f"{label}: FlashInfer {flashinfer_version} rejects the plan ({exc})")
    if planners.decode in ("trtllm", "none"):
        notes.append(f"decode plans nothing in this buffer ({planners.decode})")
    if planners.prefill in ("trtllm", "none"):
        notes.append(f"prefill plans nothing in this buffer ({planners.prefill})")
    from guard_core.flashinfer.releases import flashinfer_extrapolation

    extrapolated = flashinfer_extrapolation(flashinfer_version)
    if extrapolated:
        notes.insert(0, extrapolated)

    dominant = max(scenarios, key=lambda s: s.float_bytes, default=None)
    return Requirement(
        float_bytes=max((s.float_bytes for s in scenarios), default=0),
        int_bytes=max((s.int_bytes for s in scenarios), default=0),
        scenarios=tuple(scenarios), dominant=dominant, flashinfer_version=flashinfer_version,
        layout=layout, gpu=gpu, planners=planners, notes=tuple(notes))


def merge_requirements(requirements, extra_notes=()) -> Requirement:
    """One requirement over several (alternative planner choices, or phases
    sized on different layouts): every scenario kept, the largest dominates;
    layout and planners are those of the requirement holding the dominant."""
    reqs = list(requirements)
    best = max(reqs, key=lambda r: (r.float_bytes, r.int_bytes))
    scenarios = tuple(s for r in reqs for s in r.scenarios)
    notes: list[str] = []
    for n in (*extra_notes, *(n for r in reqs for n in r.notes)):
        if n not in notes:
            notes.append(n)
    dominant = max(scenarios, key=lambda s: s.float_bytes, default=None)
    return replace(best, scenarios=scenarios, dominant=dominant, notes=tuple(notes),
                   float_bytes=max((s.float_bytes for s in scenarios), default=0),
                   int_bytes=max((s.int_bytes for s in scenarios), default=0))


def largest_fitting_capture(layout, limits, gpu, version, planners, caller, budget_bytes) -> int:
    """Largest CUDA-graph batch whose decode/verify plans fit ``budget_bytes``."""
    probe = lambda b: compute_requirement(  # noqa: E731
        layout, replace(limits, capture_sizes=(b,), eager=False), gpu, version, planners, caller).float_bytes
    return largest_fitting(max(limits.capture_sizes, default=0), lambda b: probe(b) <= budget_bytes)


def largest_fitting(hi: int, fits) -> int:
    """The largest batch in 0..``hi`` for which ``fits(batch)`` holds (the need grows with the
    batch), by bisection; 0 when none does."""
    lo = 0
    if hi and fits(hi):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def round_up_mib(n: int) -> int:
    return -(-n // MIB) * MIB


# ------------------------------------------------------------ fixed-split limits

def _fits(layout, limits, gpu, version, planners, caller, budget_bytes, only: str | None = None) -> bool:
    """Whether the need (or, with ``only``, that scenario's need) fits ``budget_bytes``."""
    try:
        req = compute_requirement(layout, limits, gpu, version, planners, caller)
    except (fm.PlannerError, ValueError):
        return False
    if only is None:
        return req.float_bytes <= budget_bytes
    return max((s.float_bytes for s in req.scenarios if s.name == only), default=0) <= budget_bytes


def _largest(lo: int, hi: int, ok) -> int:
    """Largest v in [lo, hi] with ok(v) (ok monotone: true up to some point), or lo - 1."""
    if hi < lo:
        return lo - 1
    if ok(hi):
        return hi
    if not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def longest_fitting_context(layout, limits, gpu, version, planners, caller, budget_bytes) -> int:
    """Longest prompt/context (tokens) whose fixed-split plans fit ``budget_bytes``, up to
    ``limits.max_model_len``; 0 when not even a one-token context fits. The need is
    monotone in the context (more KV chunks, never fewer)."""
    top = int(limits.max_model_len or 0)
    return max(0, _largest(1, top, lambda L: _fits(layout, replace(limits, max_model_len=L), gpu, version,
                                                   planners, caller, budget_bytes)))


def fixed_split_fixes(layout, limits, gpu, version, planners, caller, budget_bytes) -> dict:
    """Settings that make the full context fit ``budget_bytes`` in a fixed-split mode,
    each computed with the others unchanged and judged on its own phase's plan (None
    where no value of it is enough):

    - ``chunked_prefill_size``: the largest prefill chunk whose prefill plan fits;
    - ``prefill_split_tile_size``: the smallest prefill split (pages) whose prefill plan fits;
    - ``decode_split_tile_size``: the smallest decode split (pages) whose decode plan fits.
    """
    out: dict = {}
    ctx_pages = -(-int(limits.max_model_len or 1) // layout.page_size)

    def fits(**kw):
        only = "fixed_split_decode" if "fixed_split_decode" in kw else "fixed_split_prefill"
        return _fits(layout, replace(limits, **kw), gpu, version, planners, caller, budget_bytes, only)

    if limits.fixed_split_prefill:
        top = int(limits.max_num_batched_tokens)
        c = _largest(1, top, lambda v: fits(max_num_batched_tokens=v))
        out["chunked_prefill_size"] = c if c >= 1 else None

        def smallest_split(name, current):
            # fits() is monotone increasing in the split size; search [current, ctx_pages]
            hi = max(int(current), ctx_pages)
            if not fits(**{name: hi}):
                return None
            lo = int(current)
            while lo < hi:
                mid = (lo + hi) // 2
                if fits(**{name: mid}):
                    hi = mid
                else:
                    lo = mid + 1
            return lo

        out["prefill_split_tile_size"] = smallest_split("fixed_split_prefill", limits.fixed_split_prefill)
    if limits.fixed_split_decode:
        hi = max(int(limits.fixed_split_decode), ctx_pages)
        if fits(fixed_split_decode=hi):
            lo = int(limits.fixed_split_decode)
            while lo < hi:
                mid = (lo + hi) // 2
                if fits(fixed_split_decode=mid):
                    hi = mid
                else:
                    lo = mid + 1
            out["decode_split_tile_size"] = lo
        else:
            out["decode_split_tile_size"] = None
    return out
