"""FlashInfer's MLA planner (``MLAPlan``), mirrored per release: its works count and layout.

``MLAPlan`` (``include/flashinfer/attention/scheduler.cuh``; the FA2 MLA plan,
``csrc/batch_mla_plan.cu``, and the FA3/SM90 one, ``csrc/batch_mla_sm90_plan.cu``, both call
it) cuts every request into query tiles of ``64 x cluster_size`` packed rows (tokens x heads)
and every tile's KV into chunks of at most ``kv_len_limit``; one *work* is one (request, query
tile, KV chunk). It lays out nine per-work int arrays of a fixed stride,
``int max_total_num_works = 16384``, back to back in the int workspace and writes
``total_num_works`` entries into eight of them without ever comparing the two: past the stride
each array spills into the next (silently wrong attention rows, then illegal addresses; FlashInfer
PR #5170, open, through 0.7.4). This module answers, for one plan call, what the compiled planner
does: the cluster size, the clusters, the KV chunk limit, the tiles, ``total_num_works``, the merge
CTAs, the int and float allocations (name, bytes, alignment, offset), and whether the per-work
arrays overran their stride. ``tests/conformance/test_mla_conformance.py`` checks it against the
real ``MLAPlan`` of every pinned release, every work and every offset.

Release families (first release of each; the planning arithmetic is the same in all of them):

=============  =============================================================
0.5.0          ``MLAPlan`` copies the int workspace to the device itself
0.7.0          ``MLAPlan`` returns ``staged_int_workspace_bytes`` for the
               caller to copy (same layout, same works)
=============  =============================================================

The per-work stride (``capacity``) is 16,384 in every pinned release (0.5.0 .. 0.7.4).
Framework-free: no torch, no flashinfer.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

from guard_core.flashinfer.planner import Allocation, PlannerError

__all__ = ["CAPACITY", "CHECKED_THROUGH", "MLA_FAMILIES", "MLAPlanResult", "MLATile", "capacity",
           "family", "kv_len_limit_of", "mla_plan", "run_mla_planner"]

# (first release, family) ascending; see the module docstring.
MLA_FAMILIES = (("0.5.0", "copies"), ("0.7.0", "staged"))
# ``int max_total_num_works = 16384;  // NOTE(Zihao): adjust it later`` in MLAPlan, per family.
CAPACITY = {"copies": 16384, "staged": 16384}
# The last release whose MLAPlan was read and compiled (tests/conformance/oracle.RELEASES).
CHECKED_THROUGH = "0.7.4"

CTA_TILE_Q = 64
ID_BYTES = 4  # IdType = int32_t in both callers
SIZEOF_DTYPE_O = 2  # ``constexpr size_t sizeof_dtype_o = 2`` in MLAPlan

# The int arrays in allocation order: (name, per-work?) -- per-work arrays take the stride,
# the merge arrays ``num_sm`` entries.
INT_ARRAYS = (
    ("mla_q_indptr", True),
    ("mla_kv_indptr", True),
    ("mla_partial_indptr", True),
    ("mla_merge_packed_offset_start", False),
    ("mla_merge_packed_offset_end", False),
    ("mla_merge_partial_packed_offset_start", False),
    ("mla_merge_partial_packed_offset_end", False),
    ("mla_merge_partial_stride", False),
    ("mla_q_len", True),
    ("mla_kv_len", True),
    ("mla_q_start", True),
    ("mla_kv_start", True),
    ("mla_kv_end", True),
    ("mla_work_indptr", True),
)
# The eight per-work arrays MLAPlan fills with total_num_works entries (work_indptr gets
# num_clusters + 1).
FILLED_PER_WORK = ("mla_q_indptr", "mla_kv_indptr", "mla_partial_indptr", "mla_q_len", "mla_kv_len",
                   "mla_q_start", "mla_kv_start", "mla_kv_end")

_U32 = 0xFFFFFFFF


def _i32(x: int) -> int:
    x &= _U32
    return x - (1 << 32) if x >> 31 else x


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _key(version: str) -> tuple:
    from guard_core.versions import parse_version

    return parse_version(version)


def family(version: str) -> str:
    """The MLAPlan family of FlashInfer ``version`` (``copies`` before 0.7.0, ``staged`` from it)."""
    key = _key(version)
    name = MLA_FAMILIES[0][1]
    for first, fam in MLA_FAMILIES:
        if key >= _key(first):
            name = fam
    return name


def capacity(version: str) -> int:
    """The per-work stride of ``version``'s MLAPlan: the most works a plan can hold (16,384
    in every release read, 0.5.0 through ``CHECKED_THROUGH``)."""
    return CAPACITY[family(version)]


class MLATile(NamedTuple):
    """One query tile of one request, as MLAPlan walks them (last tile of a request first)."""

    request: int
    qo_tile_idx: int
    remaining_len: int  # the KV length the tile attends (causal: packed_causal_kv_end)
    row_tile_size: int  # packed rows in the tile
    works: int  # KV chunks: max(ceil(remaining_len / kv_len_limit), 1); 0 for remaining_len < 0
    split_kv: bool  # remaining_len > kv_len_limit
    merge_ctas: int  # merge CTAs the split tile takes (0 when not split)


@dataclass(frozen=True)
class MLAPlanResult:
    version: str
    family: str
    capacity: int
    num_sms: int
    cluster_size: int
    num_clusters: int
    cluster_tile_q: int
    avg_packed_qo_len: int
    total_kv_lens: int
    kv_len_limit: int
    total_num_works: int
    merge_ctas: int
    partial_rows: int  # partial_o_nnz: packed rows of partial output the split works write
    tiles: tuple
    allocations: tuple
    int_bytes: int
    float_bytes: int
    works: tuple | None = field(default=None, compare=False)

    @property
    def overflows(self) -> bool:
        """More works than the per-work arrays hold: the arrays spill into each other."""
        return self.total_num_works > self.capacity

    def offsets(self) -> dict:
        return {a.name: a.offset for a in self.allocations}

    def spilled_arrays(self) -> tuple:
        """The per-work arrays whose ``total_num_works`` entries run past their stride."""
        return FILLED_PER_WORK if self.overflows else ()

    def int_write_end(self) -> int:
        """One past the last int byte MLAPlan writes in the page-locked buffer (its own
        ``int_bytes`` unless the works overrun the stride: then ``mla_kv_end`` runs on)."""
        offs = self.offsets()
        end = self.int_bytes
        for name in FILLED_PER_WORK:
            end = max(end, offs[name] + ID_BYTES * self.total_num_works)
        return end

    def as_dict(self) -> dict:
        return {"ok": True, "float_bytes": self.float_bytes, "int_bytes": self.int_bytes,
                "total_num_works": self.total_num_works, "cluster_size": self.cluster_size,
                "num_clusters": self.num_clusters, "merge_ctas": self.merge_ctas,
                "stride": self.capacity, "kv_len_limit": self.kv_len_limit,
                "allocations": [a.as_dict() for a in self.allocations]}


def packed_causal_kv_end(qo_len: int, kv_len: int, qo_tile_idx: int, cluster_tile_q: int,
                         num_qo_tiles: int, group_size: int) -> int:
    """scheduler.cuh ``packed_causal_kv_end``: the KV a causal query tile attends."""
    if qo_tile_idx + 1 == num_qo_tiles:
        return kv_len
    kv_len_init = kv_len - qo_len  # right aligned
    return max(min(kv_len_init + _cdiv((qo_tile_idx + 1) * cluster_tile_q, group_size), kv_len), 0)


def kv_len_limit_of(total_kv_lens: int, num_clusters: int) -> int:
    """MLAPlan's KV chunk limit: ``f(max(ceil(total_kv_lens / num_clusters), 1))``."""
    x = _i32(max(_cdiv(total_kv_lens, num_clusters), 1))
    if x <= 8:
        return 32
    if x <= 16:
        return 64
    if x <= 32:
        return 128
    if x <= 64:
        return 192
    return _cdiv(x, 256) * 256


def _cluster_size(qo: list, bs: int, num_heads: int) -> tuple[int, int]:
    """Step 0: (average packed query length, cluster size), in MLAPlan's int arithmetic."""
    accum = 0
    for i in range(bs):
        if qo[i + 1] - qo[i] < 0:
            raise PlannerError(f"qo_indptr[{i + 1}]{qo[i + 1]} - qo_indptr[{i}]{qo[i]} "
                               "should be non-negative")
        accum = _i32(accum + _i32((qo[i + 1] - qo[i]) * num_heads))
    avg = _i32((accum & _U32) // bs)  # int / uint32_t: the int is converted to unsigned
    return avg, 2 if avg > 64 else 1


class _Walk:
    """Step 1 of MLAPlan: tiles and KV chunks in its order (which cluster takes a work is the
    cost heap's choice and changes neither the count nor the layout)."""

    def __init__(self, qo, kvl, kvi, num_heads, causal, ctq, cluster_size, limit, want_works, cap):
        self.qo, self.kvl, self.kvi, self.h, self.causal = qo, kvl, kvi, num_heads, causal
        self.ctq, self.cluster_size, self.limit, self.cap = ctq, cluster_size, limit, cap
        self.tiles: list = []
        self.works: list | None = [] if want_works else None
        self.total_works = self.merge = self.partial_rows = 0

    def run(self) -> _Walk:
        for i in range(len(self.kvl)):
            qo_len = self.qo[i + 1] - self.qo[i]
            packed = qo_len * self.h
            n_tiles = _cdiv(packed, self.ctq)
            for t in range(n_tiles - 1, -1, -1):
                rem = _remaining(self.causal, qo_len, self.kvl[i], t, self.ctq, n_tiles, self.h)
                self._tile(i, t, rem, min(self.ctq, packed - t * self.ctq), qo_len)
        return self

    def _tile(self, i: int, t: int, rem: int, row_tile: int, qo_len: int) -> None:
        limit = self.limit
        split = rem > limit
        tile_merge = 0
        if split:
            chunks = max(_i32(rem * self.cluster_size) // limit, 1)
            tile_merge = _cdiv(row_tile, _cdiv(row_tile, chunks))
        n_works = 1 if rem == 0 else (_cdiv(rem, limit) if rem > 0 else 0)
        if self.works is not None and self.total_works + n_works > self.cap:
            self.works = None  # past the stride the arrays overlap: no list of works to give
        if self.works is not None:
            kv_start = 0
            for _ in range(n_works):
                actual = min(rem - kv_start, limit) if rem > 0 else 0
                self.works.append((self.qo[i], self.kvi[i], self.partial_rows if split else -1, qo_len,
                                   self.kvl[i], t * self.ctq, kv_start, kv_start + actual))
                if split:
                    self.partial_rows += row_tile
                kv_start += actual
        elif split:
            self.partial_rows += row_tile * n_works
        self.merge += tile_merge
        self.total_works += n_works
        self.tiles.append(MLATile(i, t, rem, row_tile, n_works, split, tile_merge))


def _remaining(causal: bool, qo_len: int, kv_len: int, t: int, ctq: int, n_tiles: int, h: int) -> int:
    if causal:
        return packed_causal_kv_end(qo_len, kv_len, t, ctq, n_tiles, h)
    return kv_len


def _layout(cap: int, num_sm: int, num_clusters: int, ctq: int, head_dim_o: int) -> tuple:
    """(allocations, int bytes, float bytes) in MLAPlan's allocation order."""
    allocs: list[Allocation] = []
    used = 0
    for name, per_work in INT_ARRAYS:
        size = ID_BYTES * (cap if per_work else num_sm)
        used = _cdiv(used, 16) * 16
        allocs.append(Allocation(name, "int", size, 16, used))
        used += size
    fused = 0
    for name, size in (("mla_partial_o", 2 * num_clusters * ctq * SIZEOF_DTYPE_O * head_dim_o),
                       ("mla_partial_lse", 2 * num_clusters * ctq * 4)):
        fused = _cdiv(fused, 16) * 16
        allocs.append(Allocation(name, "float", size, 16, fused))
        fused += size
    return tuple(allocs), used, fused


def mla_plan(
    version: str,
    qo_indptr: Sequence[int],
    kv_len_arr: Sequence[int],
    *,
    num_heads: int,
    head_dim_o: int,
    causal: bool,
    num_sms: int,
    batch_size: int | None = None,
    kv_indptr: Sequence[int] | None = None,
    want_works: bool = False,
) -> MLAPlanResult:
    """One ``MLAPlan<int32_t>`` call of FlashInfer ``version``.

    ``qo_indptr`` (tokens, host), ``kv_len_arr`` (KV tokens per request), ``num_heads`` (query
    heads), ``head_dim_o`` (the compressed KV / output head dim, 512 for DeepSeek), ``causal``,
    ``num_sms`` (what ``cudaDevAttrMultiProcessorCount`` answers). ``kv_indptr`` (pages) is only
    copied into the works (the page size never enters the plan); it is needed only with
    ``want_works``; the works are listed only while they fit the stride (``works`` is None past
    it, as the conformance harness reports them). Raises PlannerError where FlashInfer raises.
    """
    fam = family(version)
    cap = CAPACITY[fam]
    bs = len(qo_indptr) - 1 if batch_size is None else int(batch_size)
    if bs <= 0:
        raise PlannerError("MLAPlan divides by batch_size; batch_size must be > 0")
    num_heads, num_sm = int(num_heads), int(num_sms)
    qo = [int(x) for x in qo_indptr[:bs + 1]]
    kvl = [int(x) for x in kv_len_arr[:bs]]
    kvi = [int(x) for x in kv_indptr[:bs + 1]] if kv_indptr is not None else [0] * (bs + 1)

    avg, cluster_size = _cluster_size(qo, bs, num_heads)
    num_clusters = num_sm // cluster_size
    if num_clusters <= 0:
        raise PlannerError(f"num_sms {num_sm} gives no cluster of {cluster_size} CTAs")
    ctq = cluster_size * CTA_TILE_Q
    total_kv = 0
    for i in range(bs):
        qo_len = qo[i + 1] - qo[i]
        n_tiles = _cdiv(qo_len * num_heads, ctq)
        for t in range(n_tiles - 1, -1, -1):
            total_kv += _remaining(causal, qo_len, kvl[i], t, ctq, n_tiles, num_heads)
    limit = kv_len_limit_of(total_kv, num_clusters)
    w = _Walk(qo, kvl, kvi, num_heads, causal, ctq, cluster_size, limit, want_works, cap).run()
    if w.merge > num_sm:
        raise PlannerError("Internal Error: merge_cta_counter should be less than or equal to "
                           "num_sm, please report this bug to the developers")
    allocs, int_bytes, float_bytes = _layout(cap, num_sm, num_clusters, ctq, int(head_dim_o))
    return MLAPlanResult(
        version=version, family=fam, capacity=cap, num_sms=num_sm, cluster_size=cluster_size,
        num_clusters=num_clusters, cluster_tile_q=ctq, avg_packed_qo_len=avg,
        total_kv_lens=total_kv, kv_len_limit=limit, total_num_works=w.total_works,
        merge_ctas=w.merge, partial_rows=w.partial_rows, tiles=tuple(w.tiles),
        allocations=allocs, int_bytes=int_bytes, float_bytes=float_bytes,
        works=tuple(w.works) if w.works is not None else None)


def run_mla_planner(version: str, params: dict) -> dict:
    """One MLAPlan call described with the conformance harness's parameter names
    (``tests/conformance/harness.cu``, planner ``"mla"``); the harness's reply shape."""
    p = params
    try:
        plan = mla_plan(
            version, p["qo_indptr"], p["kv_len_arr"], num_heads=int(p.get("num_heads", 128)),
            head_dim_o=int(p.get("head_dim_o", 512)), causal=bool(p.get("causal", True)),
            num_sms=int(p.get("num_sms", 132)), batch_size=p.get("batch_size"),
            kv_indptr=p.get("kv_indptr"), want_works=bool(p.get("want_works", False)))
    except PlannerError as exc:
        return {"ok": False, "error": str(exc)}
    out = plan.as_dict()
    if plan.works is not None:
        out["works"] = [list(w) for w in plan.works]
    return out
