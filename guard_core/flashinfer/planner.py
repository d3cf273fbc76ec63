"""FlashInfer's workspace planners, modelled allocation by allocation.

For one ``plan()`` call this module returns the exact list of allocations
FlashInfer's host planner makes in the float and int workspace buffers
(name, buffer, bytes, alignment, offset), for each release family that sizes
differently.  Ground truth is ``include/flashinfer/attention/scheduler.cuh``
and ``include/flashinfer/utils.cuh`` (``FA2DetermineCtaTileQ``) in the
``flashinfer-python`` wheel of each release; ``tests/conformance`` compiles
that real code and checks this model against it byte for byte.

Release families (first release of each; the data lives in the one release
table, ``guard_core.flashinfer.releases.FLASHINFER_RELEASES``, which also holds the decode
GQA groups, the ``uniform_q_len`` callers and the MoE fix release):

=============  =============================================================
0.5.0          baseline (no ``num_colocated_ctas`` before 0.5.1..0.5.3)
0.6.14         ``FA2DetermineCtaTileQ``: value head dim >= 512 -> 16/32
0.6.16         ``uniform_q_len`` for CUDA-graph plans
0.6.18         query head dim >= 512 -> 16; shared-memory fallback that
               depends on the KV dtype and the device's opt-in smem limit
0.7.1          PR #5177: scratch rows ``ceil(padded * cta_tile_q / gqa)``;
               ``block_valid_mask`` whenever CUDA graphs are on
0.7.4          ``fixed_uniform_q_len``: no split past the split budget
=============  =============================================================

Requests are handled as groups of identical ``(qo_len, kv_len)`` pairs so
that an envelope over dozens of capture sizes costs microseconds, while the
arithmetic is the planner's own (same integer types where they matter).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, NamedTuple, Sequence

from guard_core.flashinfer import releases

__all__ = ["Allocation", "FAMILIES", "Features", "Plan", "PlannerError", "cta_tile_q", "decode_group_sizes",
           "decode_plan", "decode_uniform_q_len", "family", "features", "prefill_plan", "run_planner", "sm90_plan"]

U32 = 0xFFFFFFFF

# (first release, family name) in ascending order, from the one release table
# (guard_core.flashinfer.releases.FLASHINFER_RELEASES).
FAMILIES = releases.families()
family = releases.family  # the sizing family of a release: the release table's answer


@dataclass(frozen=True)
class Features:
    vo512_rule: bool  # 0.6.14: D_vo >= 512 -> 16 / 32
    uniform_q_len: bool  # 0.6.16
    qk512_and_smem: bool  # 0.6.18: D_qk >= 512 -> 16; smem fallback
    rows_by_query: bool  # 0.7.1 (#5177)
    fixed_uniform_q_len: bool  # 0.7.4
    colocated: bool


@lru_cache(maxsize=64)
def features(version: str) -> Features:
    return Features(**{name: releases.has(version, name) for name in Features.__dataclass_fields__})


class PlannerError(ValueError):
    """FlashInfer itself would raise for this call."""


class Allocation(NamedTuple):
    name: str
    buffer: str  # "float" | "int"
    bytes: int
    align: int
    offset: int

    def as_dict(self) -> dict:
        return {"name": self.name, "buffer": self.buffer, "bytes": self.bytes,
                "align": self.align, "offset": self.offset}


@dataclass(frozen=True)
class Plan:
    allocations: tuple[Allocation, ...]
    float_bytes: int
    int_bytes: int
    padded_batch_size: int = 0
    cta_tile_q: int = 0
    split_kv: bool = False

    def largest(self) -> Allocation | None:
        return max(self.allocations, key=lambda a: a.bytes, default=None)

    def first_overflow(self, float_buffer_bytes: int) -> dict | None:
        """The float allocation FlashInfer's allocator would fail on with this buffer.

        Mirrors its error: the allocation's name, size and alignment, and the
        bytes left in the buffer at that point.
        """
        for a in self.allocations:
            if a.buffer == "float" and a.offset + a.bytes > float_buffer_bytes:
                return {"allocation": a.name, "bytes": a.bytes, "alignment": a.align,
                        "available": max(0, float_buffer_bytes - a.offset)}
        return None

    def as_dict(self) -> dict:
        return {"ok": True, "float_bytes": self.float_bytes, "int_bytes": self.int_bytes,
                "padded_batch_size": self.padded_batch_size, "cta_tile_q": self.cta_tile_q,
                "split_kv": self.split_kv,
                "allocations": [a.as_dict() for a in self.allocations]}


class _Allocator:
    """FlashInfer's AlignedAllocator on a buffer aligned to every request."""

    __slots__ = ("buffer", "used", "out")

    def __init__(self, buffer: str, out: list):
        self.buffer, self.used, self.out = buffer, 0, out

    def alloc(self, size: int, align: int, name: str) -> int:
        offset = self.used
        if align > 1:
            rem = offset % align
            if rem:
                offset += align - rem
        self.used = offset + size
        self.out.append(Allocation(name, self.buffer, size, align, offset))
        return offset


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------- FA2 tiles

def cta_tile_q(version: str, avg_packed_qo_len: int, head_dim_vo: int, head_dim_qk: int = 0,
               kv_dtype_bytes: int = 2, cc_major: int = 9, max_smem_per_block_optin: int | None = None,
               feats: Features | None = None) -> int:
    """``FA2DetermineCtaTileQ`` of the given release."""
    f = feats or features(version)
    head_dim = head_dim_vo
    if f.vo512_rule and head_dim >= 512:
        return 16 if avg_packed_qo_len <= 32 else 32
    qk = head_dim_qk if head_dim_qk else head_dim
    if f.qk512_and_smem and qk >= 512:
        return 16
    if avg_packed_qo_len > 64 and head_dim < 256:
        return 128
    if cc_major >= 8:
        if avg_packed_qo_len > 16:
            return 64
        if f.qk512_and_smem:
            smem = max_smem_per_block_optin if max_smem_per_block_optin is not None else 232448
            q_tile_smem = (16 * qk * 2) & U32
            kv_step = ((qk + head_dim) * 16 * 4 * kv_dtype_bytes) & U32
            if ((q_tile_smem + kv_step) & U32) > (smem & U32):
                return 64
        return 16
    return 64


# ------------------------------------------------------------ FA2 PrefillPlan

def _groups_from_indptr(qo_indptr: Sequence[int], kv_indptr: Sequence[int], batch_size: int):
    groups: dict[tuple[int, int], int] = {}
    order = []
    for i in range(batch_size):
        q = int(qo_indptr[i + 1]) - int(qo_indptr[i])
        k = int(kv_indptr[i + 1]) - int(kv_indptr[i])
        if q < 0:
            raise PlannerError(f"qo_indptr[{i + 1}] - qo_indptr[{i}] should be non-negative")
        if k < 0:
            raise PlannerError(f"kv_indptr[{i + 1}] - kv_indptr[{i}] should be non-negative")
        key = (q, k)
        if key not in groups:
            order.append(key)
            groups[key] = 0
        groups[key] += 1
    return [(q, k, groups[(q, k)]) for (q, k) in order]


def prefill_plan(
    version: str,
    groups: Iterable[tuple[int, int, int]],
    *,
    total_num_rows: int,
    num_qo_heads: int,
    num_kv_heads: int,
    head_dim_qk: int,
    head_dim_vo: int,
    page_size: int,
    enable_cuda_graph: bool,
    num_sms: int,
    window_left: int = -1,
    fixed_split_size: int = -1,
    disable_split_kv: bool = False,
    num_colocated_ctas: int = 0,
    uniform_q_len: int = 0,
    fixed_uniform_q_len: bool = False,
    kv_dtype_bytes: int = 2,
    cc_major: int = 9,
    max_smem_per_block_optin: int | None = None,
    id_bytes: int = 4,
) -> Plan:
    """``PrefillPlan`` (FA2) for requests given as ``(qo_len, kv_len_in_pages, count)`` groups."""
    f = features(version)
    groups = [(int(q), int(k), int(c)) for q, k, c in groups if c > 0]
    batch_size = sum(c for _, _, c in groups)
    if num_kv_heads <= 0 or num_qo_heads % num_kv_heads != 0:
        raise PlannerError(f"num_qo_heads {num_qo_heads} should be divisible by num_kv_heads {num_kv_heads}")
    if not f.colocated:
        num_colocated_ctas = 0
    if not f.uniform_q_len:
        uniform_q_len = 0
    if not f.fixed_uniform_q_len:
        fixed_uniform_q_len = False
    if not f.qk512_and_smem:
        kv_dtype_bytes = 2

    available = 2 * num_sms - num_colocated_ctas
    max_grid_size = max(0, available)
    max_bs = (max_grid_size // num_kv_heads) & U32
    g = num_qo_heads // num_kv_heads
    tile = lambda packed: cta_tile_q(version, packed, head_dim_vo, head_dim_qk, kv_dtype_bytes,  # noqa: E731
                                     cc_major, max_smem_per_block_optin, f)

    # step 2: cta_tile_q and total_num_tiles_q
    min_kv_chunk = max(128 // page_size, 1)
    if enable_cuda_graph:
        if uniform_q_len > 0:
            packed_uniform = uniform_q_len * g
            for q, _, _ in groups:
                if q * g != packed_uniform:
                    raise PlannerError(f"qo_indptr gives a packed qo length of {q * g}, "
                                       f"but uniform_q_len={uniform_q_len} promises {packed_uniform}")
            cta = tile(packed_uniform)
            total_tiles = (batch_size * _cdiv(packed_uniform, cta)) & U32
        else:
            max_seq_len = (total_num_rows - batch_size + 1) & U32
            cta = tile(max_seq_len * g)
            total_tiles = (_cdiv((total_num_rows * g) & U32, cta) + batch_size - 1) & U32
    else:
        if batch_size == 0:
            raise PlannerError("batch_size must be positive for a non-CUDA-graph plan")
        avg = sum(q * g * c for q, _, c in groups) // batch_size
        cta = tile(avg)
        total_tiles = sum(_cdiv(q * g, cta) * c for q, _, c in groups)

    if window_left >= 0:
        eff = [(q, min(_cdiv(window_left + cta, page_size), k), c) for q, k, c in groups]
    else:
        eff = groups

    split_kv = False
    if disable_split_kv:
        kv_chunk = None  # infinite
    elif fixed_split_size > 0:
        kv_chunk = fixed_split_size
    else:
        max_kv = max([1] + [k for _, k, _ in eff])
        low, high = min_kv_chunk, max_kv
        while low < high:
            mid = (low + high) // 2
            nb = sum(_cdiv(q * g, cta) * _cdiv(max(k, 1), mid) * c for q, k, c in eff)
            if nb > max_bs:
                low = mid + 1
            else:
                high = mid
        split_kv = enable_cuda_graph or low < max_kv
        kv_chunk = low
        if fixed_uniform_q_len and uniform_q_len > 0 and total_tiles > max_bs:
            split_kv = False

    # step 3
    new_batch_size = 0
    partial_rows = 0
    for q, k, c in eff:
        kv_len = max(k, 1)
        chunks = 1 if (disable_split_kv or kv_chunk is None) else _cdiv(kv_len, kv_chunk)
        if fixed_split_size > 0 and not disable_split_kv:
            split_kv = split_kv or chunks > 1
        new_batch_size += _cdiv(q * g, cta) * chunks * c
        partial_rows += q * chunks * c
    padded = max(max_bs, total_tiles) if enable_cuda_graph else new_batch_size
    if new_batch_size > padded:
        raise PlannerError("new batch size should not exceed padded batch size")

    allocs: list[Allocation] = []
    ints, floats = _Allocator("int", allocs), _Allocator("float", allocs)
    ints.alloc(id_bytes * padded, 16, "batch_prefill_request_indices")
    ints.alloc(id_bytes * padded, 16, "batch_prefill_qo_tile_indices")
    ints.alloc(id_bytes * padded, 16, "batch_prefill_kv_tile_indices")
    ints.alloc(id_bytes * (batch_size + 1), 16, "batch_prefill_o_indptr")
    ints.alloc(id_bytes, 1, "batch_prefill_kv_chunk_size_ptr")
    if enable_cuda_graph:
        ints.alloc(4, 16, "batch_prefill_total_num_rows")
    if split_kv:
        if f.rows_by_query:
            rows = _cdiv(padded * cta, g)
            if partial_rows > rows:
                raise PlannerError(f"batch_prefill partial outputs need {partial_rows} rows "
                                   f"but the plan reserved {rows}")
        else:
            rows = padded * cta
        floats.alloc(num_qo_heads * rows * head_dim_vo * 4, 16, "batch_prefill_tmp_v")
        floats.alloc(num_qo_heads * rows * 4, 16, "batch_prefill_tmp_s")
        ints.alloc(id_bytes * (total_num_rows + 1), 16, "batch_prefill_merge_indptr")
        if not f.rows_by_query:
            ints.alloc(padded, 16, "batch_prefill_block_valid_mask")
    if f.rows_by_query and enable_cuda_graph:
        ints.alloc(padded, 16, "batch_prefill_block_valid_mask")
    return Plan(tuple(allocs), floats.used, ints.used, padded, cta, split_kv)


# ------------------------------------------------------- CUDA-core DecodePlan

@lru_cache(maxsize=64)
def decode_group_sizes(version: str) -> frozenset:
    """GQA groups the CUDA-core decode kernels are dispatched for (DISPATCH_GQA_GROUP_SIZE)."""
    return releases.decode_group_sizes(version)


def decode_uniform_q_len(caller: str, version: str) -> bool:
    """Whether ``caller``'s tensor-core decode plan passes uniform_q_len=1 and
    fixed_uniform_q_len=True (FlashInfer 0.7.4's own decode wrapper, which SGLang and vLLM call)."""
    return releases.decode_passes_uniform_q_len(caller, version)


def decode_plan(
    version: str,
    kv_pages: Iterable[tuple[int, int]],
    *,
    num_qo_heads: int,
    num_kv_heads: int,
    head_dim: int,
    page_size: int,
    enable_cuda_graph: bool,
    num_sms: int,
    blocks_per_sm: int,
    id_bytes: int = 4,
) -> Plan:
    """``DecodePlan`` with ``BatchDecodeWithPagedKVCacheWorkEstimationDispatched``.

    ``kv_pages`` are ``(pages, count)`` groups. ``blocks_per_sm`` is the
    occupancy of the compiled decode kernel (``cudaOccupancyMaxActiveBlocks
    PerMultiprocessor``), which only a GPU can tell.
    """
    kv = [(int(p), int(c)) for p, c in kv_pages if c > 0]
    batch_size = sum(c for _, c in kv)
    if num_kv_heads <= 0 or num_qo_heads % num_kv_heads != 0:
        raise PlannerError(f"num_qo_heads {num_qo_heads} should be divisible by num_kv_heads {num_kv_heads}")
    group = num_qo_heads // num_kv_heads
    if group not in decode_group_sizes(version):
        # DISPATCH_GQA_GROUP_SIZE in utils.cuh: the CUDA-core decode kernel is compiled for these only
        raise PlannerError(f"Unsupported group_size: {group}")
    gdy = num_kv_heads
    max_grid = (blocks_per_sm * num_sms) & U32
    if batch_size * gdy >= max_grid:
        split_kv = False
        new_batch_size = batch_size
    else:
        low, high = max(128 // page_size, 1), max([0] + [p for p, _ in kv])
        while low < high:
            mid = (low + high) // 2
            nb = sum(_cdiv(p, mid) * c for p, c in kv)
            if nb * gdy > max_grid:
                low = mid + 1
            else:
                high = mid
        new_batch_size = sum(_cdiv(max(p, 1), low) * c for p, c in kv)
        split_kv = not (new_batch_size == batch_size and not enable_cuda_graph)
    if enable_cuda_graph:
        padded = (max_grid // gdy) if split_kv else batch_size
    else:
        padded = new_batch_size
    allocs: list[Allocation] = []
    ints, floats = _Allocator("int", allocs), _Allocator("float", allocs)
    ints.alloc(padded * id_bytes, 16, "batch_decode_request_indices")
    ints.alloc(padded * id_bytes, 16, "batch_decode_kv_tile_indices")
    ints.alloc((padded + 1) * id_bytes, 16, "batch_decode_o_indptr")
    ints.alloc(id_bytes, 1, "batch_decode_kv_chunk_size_ptr")
    if split_kv:
        floats.alloc(num_qo_heads * padded * head_dim * 4, 16, "batch_decode_tmp_v")
        floats.alloc(num_qo_heads * padded * 4, 16, "batch_decode_tmp_s")
        ints.alloc(padded, 16, "batch_decode_block_valid_mask")
    return Plan(tuple(allocs), floats.used, ints.used, padded, 0, split_kv)


# ---------------------------------------------------------- SM90 (FA3) plan

def sm90_plan(
    version: str,
    qo_lens: Iterable[tuple[int, int]],
    *,
    total_num_rows: int,
    num_qo_heads: int,
    num_kv_heads: int,
    head_dim_vo: int,
    enable_cuda_graph: bool,
    num_sms: int,
    id_bytes: int = 4,
) -> Plan:
    """``PrefillSM90Plan``: int buffer only. ``qo_lens`` are ``(qo_len, count)`` groups."""
    q = [(int(l), int(c)) for l, c in qo_lens if c > 0]
    batch_size = sum(c for _, c in q)
    if num_kv_heads <= 0 or num_qo_heads % num_kv_heads != 0:
        raise PlannerError(f"num_qo_heads {num_qo_heads} should be divisible by num_kv_heads {num_kv_heads}")
    cta = 192 if head_dim_vo == 64 else 128
    per_head = _cdiv(total_num_rows, cta) + batch_size - 1
    same = per_head > 4096
    total_works = (1 if same else num_qo_heads) * sum(_cdiv(l, cta) * c for l, c in q)
    if enable_cuda_graph:
        works = per_head if same else per_head * num_qo_heads
    else:
        works = total_works
    allocs: list[Allocation] = []
    ints = _Allocator("int", allocs)
    for name in ("qo_tile_indices", "qo_offset", "kv_offset", "qo_len", "kv_len", "head_indices"):
        ints.alloc(id_bytes * works, 16, "batch_prefill_sm90_" + name)
    ints.alloc(id_bytes * (num_sms + 1), 16, "batch_prefill_sm90_work_indptr")
    ints.alloc(id_bytes * works, 16, "batch_prefill_sm90_batch_indices")
    return Plan(tuple(allocs), 0, ints.used, 0, cta, False)


# ------------------------------------------------ the conformance entry point

def run_planner(version: str, planner: str, params: dict) -> dict:
    """One planner call described with FlashInfer's own parameter names.

    Same request/response shape as ``tests/conformance``'s harness.
    """
    p = params
    try:
        if planner == "prefill":
            bs = int(p["batch_size"])
            groups = _groups_from_indptr(p["qo_indptr"], p["kv_indptr"], bs)
            plan = prefill_plan(
                version, groups,
                total_num_rows=int(p["total_num_rows"]),
                num_qo_heads=int(p["num_qo_heads"]), num_kv_heads=int(p["num_kv_heads"]),
                head_dim_qk=int(p.get("head_dim_qk", p.get("head_dim_vo"))),
                head_dim_vo=int(p["head_dim_vo"]), page_size=int(p["page_size"]),
                enable_cuda_graph=bool(p["enable_cuda_graph"]), num_sms=int(p["num_sms"]),
                window_left=int(p.get("window_left", -1)),
                fixed_split_size=int(p.get("fixed_split_size", -1)),
                disable_split_kv=bool(p.get("disable_split_kv", False)),
                num_colocated_ctas=int(p.get("num_colocated_ctas", 0)),
                uniform_q_len=int(p.get("uniform_q_len", 0)),
                fixed_uniform_q_len=bool(p.get("fixed_uniform_q_len", False)),
                kv_dtype_bytes=int(p.get("kv_dtype_bytes", 2)),
                cc_major=int(p.get("cc_major", 9)),
                max_smem_per_block_optin=p.get("max_smem_per_block_optin", p.get("max_smem_per_sm")),
            )
        elif planner == "decode":
            bs = int(p["batch_size"])
            ind = p["indptr"]
            pages: dict[int, int] = {}
            for i in range(bs):
                n = int(ind[i + 1]) - int(ind[i])
                pages[n] = pages.get(n, 0) + 1
            plan = decode_plan(
                version, list(pages.items()),
                num_qo_heads=int(p["num_qo_heads"]), num_kv_heads=int(p["num_kv_heads"]),
                head_dim=int(p["head_dim"]), page_size=int(p["page_size"]),
                enable_cuda_graph=bool(p["enable_cuda_graph"]), num_sms=int(p["num_sms"]),
                blocks_per_sm=int(p["blocks_per_sm"]),
            )
        elif planner == "sm90":
            bs = int(p["batch_size"])
            qi = p["qo_indptr"]
            lens: dict[int, int] = {}
            for i in range(bs):
                n = int(qi[i + 1]) - int(qi[i])
                if n < 0:
                    raise PlannerError("qo_indptr should be non-decreasing")
                lens[n] = lens.get(n, 0) + 1
            for k in list(p.get("kv_len_arr", []))[:bs]:
                if int(k) < 0:
                    raise PlannerError("kv_len should be non-negative")
            plan = sm90_plan(
                version, list(lens.items()),
                total_num_rows=int(p["total_num_rows"]),
                num_qo_heads=int(p["num_qo_heads"]), num_kv_heads=int(p["num_kv_heads"]),
                head_dim_vo=int(p["head_dim_vo"]),
                enable_cuda_graph=bool(p["enable_cuda_graph"]), num_sms=int(p["num_sms"]),
            )
        else:
            raise ValueError(f"unknown planner {planner!r}")
    except PlannerError as exc:
        return {"ok": False, "error": str(exc)}
    return plan.as_dict()
