"""What the envelope is asked about and what it answers: an attention layout per rank, the server's limits,
the planners serving each phase (facts in), one scenario's need and the requirement over all (out)."""

from __future__ import annotations

from dataclasses import dataclass, field

from guard_core.flashinfer import planner as fm
from guard_core.gpus import Gpu
from guard_core.units import MIB

__all__ = ["AttentionLayout", "INT_WORKSPACE_BYTES", "Planners", "Requirement", "Scenario", "ServingLimits"]

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
