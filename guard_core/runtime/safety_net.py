"""The safety net: a FlashInfer plan() that overflows its workspace gets a buffer that fits.

Whatever the planner model might still miss, FlashInfer reports it the same
way, before any kernel runs::

    Buffer overflow when allocating memory for NAME with size S and alignment A,
    but only B bytes available in AlignedAllocator. ...

Every planning entry point is wrapped, one row per module of a patch table
(``guard_core.runtime.patch_table``: dotted targets with feature checks, one undo):

- ``plan`` of FlashInfer's wrappers (prefill paged/ragged, decode) and every
  class-body alias of it: FlashInfer writes ``begin_forward = plan`` in each
  class body (flashinfer/prefill.py 0.7.2:3212,5043, decode.py 0.7.2:2639), so
  the alias is a second name for the unwrapped function and needs its own wrap;
  SGLang plans only through ``begin_forward``;
- FlashInfer's ``fast_decode_plan`` (flashinfer/decode.py), which vLLM and
  SGLang call for CUDA graphs (SGLang binds it as ``partial(fast_decode_plan,
  wrapper)``; vLLM 0.33's ``fast_plan_decode`` calls it), rebound in every
  module that imported it by name;
- SGLang's own copy ``fast_prefill_plan`` (flashinfer_backend.py 0.5.23:180),
  which calls the compiled planner itself.

On that error it takes the sizes from the message, makes the overflowing
workspace large enough and plans again (up to a few times: an overflow stops
the planner at the first allocation that does not fit, and the ones after it
need room too). An overflow of a float allocation (``*_tmp_v``, ``*_tmp_s``,
``*partial_o``, ``*partial_lse``) grows the float workspace; any other name is
an int allocation and grows the int workspace and its pinned host mirror
together (FlashInfer copies one into the other, so both must hold the plan).
One warning names both numbers.

Where it cannot help (a graph holds the buffer, the device cannot give the
memory, the error persists, the retry raises anything else), it gives back
exactly what the owner handed in (the same tensor object on the same storage:
a buffer grown in place was pointed at a larger storage with ``Tensor.set_``,
the owner's own storage kept aside) with one warning naming why, and
FlashInfer's original exception propagates unchanged: the same object, its
cause and context as FlashInfer raised them.

Threads: every wrapped plan holds one re-entrant lock per workspace buffer it
uses (float, then int, then the pinned mirror: one order, no deadlock), so two
threads never grow, re-plan or give back the same buffer at once, and no thread
plans into a storage another thread is replacing.

It never replaces a buffer that a captured CUDA graph holds:

- before the first CUDA graph of the process is captured (and while none is
  being captured), the buffer is grown in place (``Tensor.resize_``): every
  wrapper sharing it sees the larger buffer, as the frameworks share one;
- after that, a wrapper that runs outside CUDA graphs gets a buffer of its
  own; a CUDA-graph wrapper is left alone and the error propagates.

guard_core imports neither torch nor flashinfer: the hooks fire when the server
imports them, and the tensors are handled through their own methods.
"""

from __future__ import annotations

import re
import sys
import threading
import weakref

from guard_core.runtime.patch_table import PatchTable, Wrap
from guard_core.runtime.wrapping import PatchSet, is_wrapped
from guard_core.units import MIB, nbytes

__all__ = ["install", "parse_overflow", "patch_module", "patched_entry_points", "refresh_workspace_sizes", "uninstall"]

OVERFLOW_RE = re.compile(
    r"Buffer overflow when allocating memory for (?P<name>\S+) with size (?P<size>\d+) and alignment "
    r"(?P<align>\d+), but only (?P<avail>\d+) bytes available")
# The float-buffer allocations of FlashInfer's planners (scheduler.cuh: float_allocator);
# every other named allocation is carved from the int buffer.
FLOAT_ALLOCATION_RE = re.compile(r"(tmp_v|tmp_s|partial_o|partial_lse)$")
MAX_TRIES = 4

# where a by-name import of a wrapped function can live
REBIND_PREFIXES = ("flashinfer", "vllm", "sglang")
# FlashInfer's wrapper classes whose plan (and its class-body aliases) the net wraps, per module
WRAPPER_CLASSES = {
    "flashinfer.prefill": ("BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper"),
    "flashinfer.decode": ("BatchDecodeWithPagedKVCacheWrapper",),
}
# class-body aliases of plan (``begin_forward = plan``: flashinfer/prefill.py 0.7.2:3212,5043,
# decode.py 0.7.2:2639)
PLAN_ALIASES = ("begin_forward",)
# module-level planning functions taking the wrapper as first argument, per module
PLAN_FUNCTIONS = {
    "flashinfer.decode": ("fast_decode_plan",),
    # SGLang's own sync-free copy (0.5.2x) and its by-name import of FlashInfer's function
    "sglang.srt.layers.attention.flashinfer_backend": ("fast_prefill_plan", "fast_decode_plan"),
    # vLLM imports FlashInfer's fast_decode_plan by name (flashinfer.py 0.33.0:20)
    "vllm.v1.attention.backends.flashinfer": ("fast_decode_plan",),
}
HOOK_KEY = "safety_net:"

_state = {"captured": 0, "log": None, "installed": False}
_patches = PatchSet()  # every wrap of the net, undone by uninstall() (the table's PatchSet)
_local = threading.local()
_locks_lock = threading.Lock()
_buffer_locks: dict[int, threading.RLock] = {}  # id(buffer) -> its lock, dropped with the buffer


def parse_overflow(exc: BaseException) -> dict | None:
    m = OVERFLOW_RE.search(str(exc))
    if not m:
        return None
    return {"name": m.group("name"), "size": int(m.group("size")), "align": int(m.group("align")),
            "available": int(m.group("avail"))}


def buffer_kind(allocation_name: str) -> str:
    """'float' or 'int': which workspace FlashInfer carved ``allocation_name`` from."""
    return "float" if FLOAT_ALLOCATION_RE.search(allocation_name or "") else "int"


def install(log) -> None:
    """Arm the net (idempotent): hooks on FlashInfer's wrapper modules, the frameworks'
    own planning helpers, and torch's CUDA-graph capture (to know when buffers are held
    by graphs)."""
    _state["log"] = log
    if _state["installed"]:
        return
    _state["installed"] = True
    _TABLE.install()


def uninstall() -> None:
    """Every wrap and post-import hook of the net undone (the table's one undo)."""
    _TABLE.undo()
    _state["installed"] = False


def patch_module(module) -> None:
    """Apply the net's row for ``module`` (by its name) now: what the post-import hook does
    when the server imports it."""
    for r in _TABLE.rows:
        if r.module == getattr(module, "__name__", None):
            _TABLE.fire(r, module)


def graphs_captured() -> int:
    return _state["captured"]


def patched_entry_points() -> list[str]:
    """``owner.name`` of every planning entry point the net wraps now (for tests and doctor)."""
    out = []
    for owner, name in _patches.targets():
        label = getattr(owner, "__qualname__", None) or getattr(owner, "__name__", "?")
        if not isinstance(owner, type):
            label = owner.__name__
        out.append(f"{label}.{name}")
    return out


def _count_captures(orig, module):
    def capture_end(self, *a, **k):
        _state["captured"] += 1
        return orig(self, *a, **k)
    return capture_end


def _takes_attributes(owner, module) -> bool:
    """A Python class (a heap type): a C type takes no attributes."""
    return isinstance(owner, type) and bool(owner.__flags__ & _HEAPTYPE)


_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE


def _plan_of(cls):
    """``plan`` as FlashInfer defined it (found along the MRO, our wrapper unwrapped), or None."""
    for klass in cls.__mro__:
        if "plan" in klass.__dict__:
            raw = klass.__dict__["plan"]
            return getattr(raw, "__wrapped__", raw) if is_wrapped(raw) else raw
    return None


def _has_plan(owner, module) -> bool:
    return isinstance(owner, type) and callable(_plan_of(owner))


def _alias_of_plan(alias: str):
    """Feature check of ``Class.<alias>``: the class body binds ``alias`` to plan itself."""
    def check(owner, module) -> bool:
        if not _has_plan(owner, module):
            return False
        plan = _plan_of(owner)
        return any(vars(klass).get(alias) is plan for klass in owner.__mro__)
    return check


def _wrap_plan(orig, module):
    return _make_plan(orig)


def _rows(table: PatchTable) -> PatchTable:
    """One row per module: each wrapper class's plan and its aliases, each module-level
    planning function (rebound where other modules imported it by name), and torch's
    CUDA-graph capture (to know when buffers are held by graphs). Every target is optional:
    the net covers what a release has, silently."""
    for mod in dict.fromkeys([*WRAPPER_CLASSES, *PLAN_FUNCTIONS]):
        wraps = []
        for cls in WRAPPER_CLASSES.get(mod, ()):
            wraps.append(Wrap(f"{cls}.plan", _wrap_plan, feature=_has_plan, required=False))
            wraps += [Wrap(f"{cls}.{a}", _wrap_plan, feature=_alias_of_plan(a), required=False)
                      for a in PLAN_ALIASES]
        wraps += [Wrap(fn, _wrap_plan, feature=lambda owner, m, fn=fn: callable(getattr(owner, fn, None)),
                       required=False, rebind=REBIND_PREFIXES) for fn in PLAN_FUNCTIONS.get(mod, ())]
        table.row(mod, HOOK_KEY + mod, "safety net", wraps=tuple(wraps), error_key="safety-net")
    table.row("torch.cuda.graphs", HOOK_KEY + "torch.cuda.graphs", "safety net", error_key="safety-net",
              wraps=(Wrap("CUDAGraph.capture_end", _count_captures, feature=_takes_attributes, required=False),))
    return table


def _capturing() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:
        return False




def _in_graph(wrapper) -> bool:
    for attr in ("_use_cuda_graph", "is_cuda_graph_enabled"):
        v = getattr(wrapper, attr, None)
        if isinstance(v, bool):
            return v
    return True  # unknown: assume a graph may hold it


def _buffer_lock(buf) -> threading.RLock:
    key = id(buf)
    with _locks_lock:
        lock = _buffer_locks.get(key)
        if lock is None:
            lock = _buffer_locks[key] = threading.RLock()
            try:
                weakref.finalize(buf, _buffer_locks.pop, key, None)
            except TypeError:  # not weak-referenceable: the lock stays
                pass
    return lock


def _locks_of(wrapper) -> list:
    """The lock of every workspace buffer of ``wrapper``, in one order (float, int, pinned).
    On the path of every plan() call: a dict look-up per buffer, the global lock only the
    first time a buffer is seen."""
    locks: list = []
    try:
        for attr in _LOCK_ORDER:
            buf = getattr(wrapper, attr, None)
            if buf is not None:
                lock = _buffer_locks.get(id(buf)) or _buffer_lock(buf)
                if lock not in locks:
                    locks.append(lock)
    except Exception:  # a wrapper we cannot read: plan as without us
        return []
    return locks


def _make_plan(orig):
    def plan(self, *args, **kwargs):
        if getattr(_local, "depth", 0):  # an outer entry point of ours handles the overflow
            return orig(self, *args, **kwargs)
        _local.depth = 1
        try:
            locks = _locks_of(self)
            for lock in locks:
                lock.acquire()
            try:
                try:
                    return orig(self, *args, **kwargs)
                except RuntimeError as exc:
                    info = parse_overflow(exc)
                    if info is None:
                        raise
                    first = exc
                # outside the except block: nothing of ours gets chained to FlashInfer's error
                try:
                    done, out = _recover(self, orig, args, kwargs, first, info)
                except Exception:
                    done, out = False, None
                if done:
                    return out
                raise first
            finally:
                for lock in reversed(locks):
                    lock.release()
        finally:
            _local.depth = 0
    return plan


class _Grown:
    """The workspaces grown for one recovery, and how to give them back."""

    def __init__(self, wrapper, in_place: bool):
        self.wrapper, self.in_place = wrapper, in_place
        # attr -> (tensor, bytes before, the owner's storage as handed in or None)
        self.saved: dict[str, tuple] = {}

    def grow(self, attr: str, size: int) -> None:
        buf = getattr(self.wrapper, attr, None)
        if buf is None:
            raise LookupError(attr)
        if attr not in self.saved:
            self.saved[attr] = (buf, nbytes(buf), _storage_of(buf) if self.in_place else None)
        if nbytes(buf) >= size:
            return
        per = max(1, int(buf.element_size()))
        n = -(-size // per)
        if not self.in_place:
            setattr(self.wrapper, attr, self.saved[attr][0].new_empty(n))
        elif self.saved[attr][2] is not None:
            buf.set_(buf.new_empty(n))  # the owner's storage stays untouched, kept for give_back
        else:
            buf.resize_(n)
        self._refresh(attr)

    def give_back(self) -> None:
        for attr, (buf, before, storage) in self.saved.items():
            try:
                if not self.in_place:
                    setattr(self.wrapper, attr, buf)
                elif storage is not None:
                    buf.set_(*storage)  # exactly what the owner handed in: same storage, same view
                else:
                    per = max(1, int(buf.element_size()))
                    # a fresh storage of the old size: resize_ alone would keep the grown capacity
                    buf.set_(buf.new_empty(before // per))
            except Exception:
                pass
            self._refresh(attr)

    def _refresh(self, attr: str) -> None:
        """No wrapper keeps a stale ``_workspace_size`` for a buffer grown, swapped or given back."""
        if attr != "_float_workspace_buffer":
            return
        try:
            _refresh_one(self.wrapper.__dict__)
            refresh_workspace_sizes(getattr(self.wrapper, attr))
        except Exception:
            pass

    def after(self, attr: str) -> int:
        buf = getattr(self.wrapper, attr, None)
        return nbytes(buf) if buf is not None else 0


def _refresh_one(d: dict) -> bool:
    buf = d.get("_float_workspace_buffer")
    if buf is None or "_workspace_size" not in d:
        return False
    d["_workspace_size"] = nbytes(buf)
    return True


def refresh_workspace_sizes(buf) -> int:
    """FlashInfer's paged prefill wrapper records ``_workspace_size`` in ``__init__``
    (0.6.12 ``prefill.py:1619``, 0.7.0.post1 ``:1930``, 0.7.2.post1 ``:2818``; decode
    0.6.12 ``decode.py:935``) and ``reset_workspace_buffer()`` does not refresh it
    (0.7.2.post1 ``prefill.py:2924``); the TRT-LLM-gen paged run receives it (0.7.2.post1
    ``:4599``). After a buffer is grown or swapped in place, every wrapper holding
    that tensor gets the size it has now. Only runs when a buffer changes (rare): a
    scan of the tensor's referrers. Returns the wrappers refreshed."""
    import gc

    n = 0
    for ref in gc.get_referrers(buf):
        # the holder's __dict__, or (Python 3.11+: managed instance dicts) the holder itself
        d = ref if isinstance(ref, dict) else getattr(ref, "__dict__", None)
        if isinstance(d, dict) and d.get("_float_workspace_buffer") is buf and _refresh_one(d):
            n += 1
    return n


def _storage_of(buf):
    """(storage, offset, size, stride) of a torch tensor, to point it back there; None elsewhere."""
    try:
        return (buf.untyped_storage(), buf.storage_offset(), tuple(buf.size()), tuple(buf.stride()))
    except Exception:
        return None


_BUFFERS = {"float": ("_float_workspace_buffer",),
            "int": ("_int_workspace_buffer", "_pin_memory_int_workspace_buffer")}
_LOCK_ORDER = tuple(a for attrs in _BUFFERS.values() for a in attrs)  # float, int, pinned: one order


def _recover(wrapper, orig, args, kwargs, first, info):
    """(True, result) once a retried plan fits, else (False, None) with everything grown
    given back."""
    log = _state["log"]
    kind = buffer_kind(info["name"])
    main = _BUFFERS[kind][0]
    if getattr(wrapper, main, None) is None:
        return False, None
    before = {k: nbytes(getattr(wrapper, _BUFFERS[k][0])) for k in _BUFFERS
              if getattr(wrapper, _BUFFERS[k][0], None) is not None}
    in_place = graphs_captured() == 0 and not _capturing()
    if not in_place and _in_graph(wrapper):
        _say(log, f"safety net: {info['name']} needs {info['size']} bytes, only {info['available']} available "
                  f"in the {before[kind] / MIB:.0f} MiB {kind} workspace, but a captured CUDA graph holds this "
                  f"buffer; FlashInfer's error left as is")
        return False, None
    grown = _Grown(wrapper, in_place)
    try:
        return _grow_and_retry(wrapper, orig, args, kwargs, first, info, grown, before)
    except BaseException as exc:  # ours or an interrupt: the owner's storage back, then up
        grown.give_back()
        _say(log, f"safety net: gave up on {first_name(first)} ({_one_line(exc)}); grown memory given back")
        raise


def _grow_and_retry(wrapper, orig, args, kwargs, first, info, grown, before):
    """Grow and plan again, up to MAX_TRIES; on any failure everything grown is given back
    and one warning says why."""
    log, in_place, failed = _state["log"], grown.in_place, None
    for _ in range(MAX_TRIES):
        kind = buffer_kind(info["name"])
        attrs = [a for a in _BUFFERS[kind] if getattr(wrapper, a, None) is not None]
        have = nbytes(getattr(wrapper, attrs[0]))
        used = have - info["available"]
        size = -(-(used + info["size"] + info["align"]) // MIB) * MIB
        try:
            for attr in attrs:
                grown.grow(attr, size)
        except Exception as exc:  # the device cannot give the memory, a tensor that cannot grow
            grown.give_back()
            _say(log, f"safety net: could not grow the {kind} workspace to {size / MIB:.0f} MiB for "
                      f"{info['name']} ({type(exc).__name__}); FlashInfer's error propagates")
            return False, None
        try:
            out = orig(wrapper, *args, **kwargs)
        except Exception as again:  # any type: ValueError, MemoryError, FlashInfer's own
            nxt = parse_overflow(again) if isinstance(again, RuntimeError) else None
            if nxt is None:
                failed = again
                break
            info = nxt
            continue
        how = "grown in place (shared, before any CUDA graph)" if in_place else "a separate buffer for this eager wrapper"
        sizes = ", ".join(f"{k} {before.get(k, 0) / MIB:.0f} MiB -> {grown.after(_BUFFERS[k][0]) / MIB:.0f} MiB"
                          for k in _BUFFERS if _BUFFERS[k][0] in grown.saved)
        _say(log, f"safety net: FlashInfer plan() overflowed the workspace ({first_name(first)}: "
                  f"{parse_overflow(first)['size']} bytes, only {parse_overflow(first)['available']} available "
                  f"of {before.get(buffer_kind(first_name(first)), 0) / MIB:.0f} MiB); {how}: {sizes}, plan retried")
        return True, out
    grown.give_back()
    why = f"failed differently when retried ({_one_line(failed)})" if failed is not None else \
        "still overflows after growing the workspace"
    _say(log, f"safety net: FlashInfer plan() {why} ({first_name(first)}); "
              f"grown memory given back, FlashInfer's error propagates")
    return False, None


def _one_line(exc: BaseException) -> str:
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= 300 else text[:297] + "..."


def first_name(exc) -> str:
    info = parse_overflow(exc)
    return info["name"] if info else "?"


def _say(log, msg: str) -> None:
    if log is not None:
        try:
            log.warning(f"workspace: {msg}", key="safety-net:" + msg)
        except Exception:
            pass


_TABLE = _rows(PatchTable(lambda: _state["log"], _patches))
