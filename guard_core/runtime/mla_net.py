"""The MLA net: after every FlashInfer MLA plan, the planner's own works count against its capacity.

FlashInfer's ``MLAPlan`` (``scheduler.cuh``, every release through 0.7.4) packs its per-work
arrays at a fixed stride of 16,384 works and never checks ``total_num_works`` against it
(FlashInfer PR #5170, open): past it the kernel reads neighbouring arrays, which is silently
wrong attention, then an illegal address. This is the one place where the guard fails
closed: a plan whose works pass the release's capacity raises ``MLAWorksOverCapacity``
(one line) before any kernel runs on it.

What is read is what the planner wrote, on the host, with no GPU sync:

- the plan info ``BatchMLAPagedAttentionWrapper.plan`` stores (``self._plan_info``: the 18
  entries of ``MLAPlanInfo::ToVector``, the same in every release read, 0.5.0 to 0.7.2.post1:
  ``num_blks_y`` (the clusters) at 1, ``work_indptr_offset`` (bytes into the int buffer) at 15);
- the page-locked int buffer it filled (``self._pin_memory_int_workspace_buffer``, uint8):
  ``work_indptr[num_clusters]`` is ``total_num_works``. FlashInfer writes work_indptr last, so
  it is intact even when the per-work arrays before it have spilled into each other (the
  conformance harness reads the same entry, tests/conformance/harness.cu ``run_mla``).

Everything else fails open: a plan info that this call did not produce (a backend without
``MLAPlan``: cutlass, trtllm-gen, cute-dsl, xqa), a layout we do not recognise
(``work_indptr[0] != 0``, an offset outside the buffer), or any exception of ours gives the
plan's own result back unchanged, with one warning per kind of surprise.

The capacity comes from the caller (``install(..., mla_capacity=guard_core.flashinfer.mla_planner
.capacity)``): this room may not import the planner model. ``FLASHINFER_GUARD_MLA=off`` disables
the check.
"""

from __future__ import annotations

import ctypes
import sys

from guard_core.runtime.settings import get_settings

__all__ = ["FAST_PLAN_FUNCTIONS", "MLA_CLASSES", "MLA_MODULE", "MLAWorksOverCapacity", "configure", "make_fast_plan",
           "make_plan", "works_of", "works_of_fast_plan"]

# FlashInfer's package re-exports the wrapper in every release (flashinfer/mla.py 0.5.0,
# flashinfer/mla/_core.py 0.6.x, flashinfer/mla/_batch_mla/_wrapper.py 0.7.2): one class object
MLA_MODULE = "flashinfer.mla"
MLA_CLASSES = ("BatchMLAPagedAttentionWrapper",)
# SGLang's sync-free MLA plans for CUDA-graph replay, module functions taking the wrapper first:
# they call the planner module's plan directly and drop the plan info it returns
# (flashinfer_mla_backend.py 0.5.5:1050-1085, 0.5.11:1053-1088, 0.5.23:1361-1446; bound by name
# when a graph is captured, ``partial(fast_mla_decode_plan, decode_wrapper)`` 0.5.5:402, 0.5.11:405,
# 0.5.23:377 and ``partial(fast_mla_prefill_plan, prefill_wrapper)`` 0.5.23:411)
FAST_PLAN_MODULE = "sglang.srt.layers.attention.flashinfer_mla_backend"
FAST_PLAN_FUNCTIONS = ("fast_mla_decode_plan", "fast_mla_prefill_plan")
PLAN_INFO_LEN = 18  # MLAPlanInfo::ToVector
NUM_BLKS_X = 0  # the cluster size (MLAPlan: plan_info.num_blks_x = cluster_size, scheduler.cuh 0.7.2.post1:1653)
NUM_BLKS_Y = 1  # the clusters: work_indptr has num_blks_y + 1 entries
WORK_INDPTR_OFFSET = 15
PLAN_INFO_ATTR = "_plan_info"
PINNED_ATTR = "_pin_memory_int_workspace_buffer"
ID_BYTES = 4  # IdType = int32_t

_state: dict = {"capacity": None, "log": None, "version": None, "said": set(), "capacity_key": None}


class MLAWorksOverCapacity(RuntimeError):
    """A FlashInfer MLA plan holds more works than its fixed stride: its kernel would compute
    wrong attention. Raised after the plan, before any kernel runs on it."""

    def __init__(self, works: int, capacity: int, version: str | None):
        self.works, self.capacity, self.version = works, capacity, version
        release = f"FlashInfer {version}" if version else "FlashInfer"
        super().__init__(
            f"[flashinfer-guard] mla: {release} MLA plan holds {works:,} works, over its capacity of "
            f"{capacity:,} (MLAPlan packs its per-work arrays at that fixed stride and never checks it, "
            f"FlashInfer PR #5170): its kernel would read neighbouring arrays and compute wrong attention, "
            f"so this batch is stopped before it runs; lower the batch the server plans on the MLA path "
            f"(running requests: --max-num-seqs / --max-running-requests; tokens per batch: "
            f"--max-num-batched-tokens / --chunked-prefill-size), or set FLASHINFER_GUARD_MLA=off to run "
            f"unchecked")


def configure(log, capacity) -> None:
    """The logger and ``capacity(version) -> works`` (guard_core.flashinfer.mla_planner.capacity);
    without a capacity the net stands aside."""
    _state["log"] = log
    if capacity is not None:
        _state["capacity"] = capacity


def make_plan(orig, module=None):
    """``plan`` of an MLA wrapper, checked after it runs (the patch table's ``make``)."""
    def plan(self, *args, **kwargs):
        before = getattr(self, PLAN_INFO_ATTR, None)
        out = orig(self, *args, **kwargs)
        finding = _finding(self, before)
        if finding is not None:
            raise finding
        return out
    return plan


def make_fast_plan(orig, module=None):
    """SGLang's ``fast_mla_decode_plan`` / ``fast_mla_prefill_plan`` (the patch table's ``make``),
    checked after they run: the same works count, read where the plan put it (``works_of_fast_plan``)."""
    where = _argument_places(orig)

    def fast_plan(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        finding = _finding(self, None, lambda: works_of_fast_plan(self, _arguments(where, args, kwargs)))
        if finding is not None:
            raise finding
        return out
    return fast_plan


_FAST_ARGUMENTS = ("qo_indptr_cpu", "num_heads")


def _argument_places(fn) -> dict | None:
    """{name: its position after the wrapper} of the arguments the check reads (read once, at the wrap)."""
    import inspect

    try:
        names = [p.name for p in inspect.signature(fn).parameters.values()
                 if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][1:]
    except (TypeError, ValueError):
        return None
    return {n: names.index(n) for n in _FAST_ARGUMENTS if n in names} if set(_FAST_ARGUMENTS) <= set(names) else None


def _arguments(where, args, kwargs) -> dict:
    if where is None:
        raise ValueError("the fast plan's signature has no qo_indptr_cpu / num_heads")
    return {n: args[i] if i < len(args) else kwargs[n] for n, i in where.items()}


def works_of_fast_plan(wrapper, arguments: dict) -> int | None:
    """``total_num_works`` of a sync-free SGLang MLA plan. It drops the plan info MLAPlan returned,
    so the wrapper keeps the one of its first (full) plan; the int layout in it depends only on the
    SM count (scheduler.cuh: 9 per-work arrays at the fixed stride, 5 of ``num_sm``), so the offset
    of ``work_indptr`` still holds, and the clusters of this plan are MLAPlan's own step 0 on this
    plan's arguments: ``cluster_size = 2 if sum(q_i * num_heads) / batch_size > 64 else 1`` over
    ``num_sm = num_blks_x * num_blks_y`` of the first plan. None where the wrapper was never planned."""
    info = getattr(wrapper, PLAN_INFO_ATTR, None)
    if info is None:
        return None
    if len(info) != PLAN_INFO_LEN:
        raise ValueError(f"plan info of {len(info)} entries")
    heads = int(arguments["num_heads"])
    batch, first_q, last_q = _ends(arguments["qo_indptr_cpu"])
    if batch <= 0 or heads <= 0:
        raise ValueError(f"batch {batch}, {heads} heads")
    num_sm = int(info[NUM_BLKS_X]) * int(info[NUM_BLKS_Y])
    avg = (((last_q - first_q) * heads) & 0xFFFFFFFF) // batch  # MLAPlan: int / uint32_t
    avg = avg - (1 << 32) if avg >= 1 << 31 else avg
    clusters = num_sm // (2 if avg > 64 else 1)
    offset = int(info[WORK_INDPTR_OFFSET])
    if clusters <= 0:
        raise ValueError(f"{clusters} clusters")
    first, works = _read_i32s(getattr(wrapper, PINNED_ATTR), offset, offset + ID_BYTES * clusters)
    if first != 0 or works < 0:
        raise ValueError(f"work_indptr [{first}, ..., {works}]")
    return works


def _ends(qo) -> tuple[int, int, int]:
    """(batch size, first and last entry) of a host ``qo_indptr``: a contiguous int32 CPU tensor is
    read at its address (about 1 us; indexing a tensor takes 1-2 us an entry), anything else by index."""
    if callable(getattr(qo, "data_ptr", None)):
        n = qo.numel()
        if qo.device.type == "cpu" and qo.element_size() == ID_BYTES and qo.is_contiguous() and n > 0 \
                and getattr(qo, "is_floating_point", lambda: True)() is False:
            base = qo.data_ptr()
            return n - 1, ctypes.c_int32.from_address(base).value, \
                ctypes.c_int32.from_address(base + ID_BYTES * (n - 1)).value
        return n - 1, int(qo[0]), int(qo[n - 1])
    n = len(qo)
    return n - 1, int(qo[0]), int(qo[n - 1])


def _finding(wrapper, before, read=None) -> MLAWorksOverCapacity | None:
    """The over-capacity error for this plan, or None (also for every failure of ours)."""
    try:
        capacity_of = _state["capacity"]
        if capacity_of is None or not _armed():
            return None
        works = works_of(wrapper, before) if read is None else read()
        if works is None:
            return None
        version = _version()
        capacity = _capacity(capacity_of, version)
        if capacity is None:
            _say("FlashInfer's version is unknown: the MLA works limit is not checked")
            return None
        return MLAWorksOverCapacity(works, capacity, version) if works > capacity else None
    except Exception as exc:  # our bug: the plan's own result, unchanged
        _say(f"the MLA works check failed ({type(exc).__name__}); plans run unchecked")
        return None


def works_of(wrapper, before=None) -> int | None:
    """``total_num_works`` of the plan ``wrapper`` just made, read from the planner's own output;
    None where this call made no ``MLAPlan`` plan (the plan info is the one from before).
    Raises ``ValueError`` on a layout it does not recognise."""
    info = getattr(wrapper, PLAN_INFO_ATTR, None)
    if info is None or info is before:
        return None
    if len(info) != PLAN_INFO_LEN:
        raise ValueError(f"plan info of {len(info)} entries")
    clusters, offset = int(info[NUM_BLKS_Y]), int(info[WORK_INDPTR_OFFSET])
    if clusters <= 0:
        raise ValueError(f"{clusters} clusters")
    first, works = _read_i32s(getattr(wrapper, PINNED_ATTR), offset, offset + ID_BYTES * clusters)
    if first != 0 or works < 0:
        raise ValueError(f"work_indptr [{first}, ..., {works}]")
    return works


def _read_i32s(buf, *offsets: int) -> list[int]:
    """int32s of a host byte buffer: a pinned uint8 tensor (read at its address, after the
    checks that make those reads safe: about 1 us, where slicing a tensor takes 10+), or
    anything sliceable into bytes."""
    tensor = callable(getattr(buf, "data_ptr", None))
    if tensor and (buf.device.type != "cpu" or buf.element_size() != 1 or not buf.is_contiguous()):
        raise ValueError("the int buffer is not a contiguous host byte tensor")
    size = buf.numel() if tensor else len(buf)
    for off in offsets:
        if off < 0 or off % ID_BYTES or off + ID_BYTES > size:
            raise ValueError(f"offset {off} not an int32 inside the {size}-byte int buffer")
    if tensor:
        base = buf.data_ptr()
        return [ctypes.c_int32.from_address(base + off).value for off in offsets]
    return [int.from_bytes(bytes(buf[off:off + ID_BYTES]), sys.byteorder, signed=True) for off in offsets]


def _capacity(capacity_of, version: str | None) -> int | None:
    """``capacity_of(version)``, asked once per (function, version)."""
    key = (capacity_of, version)
    if _state.get("capacity_key") != key:
        _state["capacity_value"] = int(capacity_of(version)) if version else None
        _state["capacity_key"] = key
    return _state["capacity_value"]


def _armed() -> bool:
    s = get_settings()
    return s.enabled and s.mla != "off"


def _version() -> str | None:
    if _state["version"] is None:
        from guard_core.versions import flashinfer_version

        _state["version"] = flashinfer_version() or ""
    return _state["version"] or None


def _say(msg: str) -> None:
    if msg in _state["said"]:
        return
    _state["said"].add(msg)
    log = _state["log"]
    if log is not None:
        try:
            log.warning(f"mla: {msg}", key="mla-net:" + msg)
        except Exception:
            pass


def reset() -> None:
    """Forget the version read and the warnings said (tests)."""
    _state["version"] = None
    _state["said"] = set()
    _state["capacity_key"] = None
