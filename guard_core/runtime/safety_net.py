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

This module is the net's entry (the patch table, the wrapped plan and its locks); the
recovery (read the message, grow, retry, give back) is ``safety_net_recovery``.
"""

from __future__ import annotations

import threading
import weakref

from guard_core.runtime import mla_net
from guard_core.runtime.patch_table import PatchTable, Wrap
from guard_core.runtime.safety_net_recovery import (BUFFERS, STATE, graphs_captured, parse_overflow, recover,
                                                    refresh_workspace_sizes)
from guard_core.runtime.wrapping import PatchSet, is_wrapped

__all__ = ["graphs_captured", "install", "parse_overflow", "patch_module", "patched_entry_points",
           "refresh_workspace_sizes", "uninstall"]

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

_state = STATE  # the net's one state, shared with its recovery: the logger, graphs captured, installed or not
_patches = PatchSet()  # every wrap of the net, undone by uninstall() (the table's PatchSet)
_local = threading.local()
_locks_lock = threading.Lock()
_buffer_locks: dict[int, threading.RLock] = {}  # id(buffer) -> its lock, dropped with the buffer


def install(log, mla_capacity=None) -> None:
    """Arm the net (idempotent): hooks on FlashInfer's wrapper modules, the frameworks'
    own planning helpers, and torch's CUDA-graph capture (to know when buffers are held
    by graphs). ``mla_capacity(version) -> works`` (guard_core.flashinfer.mla_planner.capacity)
    arms the MLA works check after each MLA plan (``mla_net``); without it that check stands aside."""
    _state["log"] = log
    mla_net.configure(log, mla_capacity)
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
    # the MLA wrapper: no overflow recovery (a different planner), the works check after each plan
    wraps = []
    for cls in mla_net.MLA_CLASSES:
        wraps.append(Wrap(f"{cls}.plan", mla_net.make_plan, feature=_has_plan, required=False))
        wraps += [Wrap(f"{cls}.{a}", mla_net.make_plan, feature=_alias_of_plan(a), required=False)
                  for a in PLAN_ALIASES]
    table.row(mla_net.MLA_MODULE, HOOK_KEY + mla_net.MLA_MODULE, "safety net", wraps=tuple(wraps),
              error_key="safety-net")
    # SGLang's sync-free MLA plans (CUDA-graph replays): the same check, read after them
    table.row(mla_net.FAST_PLAN_MODULE, HOOK_KEY + mla_net.FAST_PLAN_MODULE, "safety net", error_key="safety-net",
              wraps=tuple(Wrap(fn, mla_net.make_fast_plan, feature=lambda owner, m, fn=fn: callable(getattr(owner, fn, None)),
                               required=False) for fn in mla_net.FAST_PLAN_FUNCTIONS))
    table.row("torch.cuda.graphs", HOOK_KEY + "torch.cuda.graphs", "safety net", error_key="safety-net",
              wraps=(Wrap("CUDAGraph.capture_end", _count_captures, feature=_takes_attributes, required=False),))
    return table


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
                    done, out = recover(self, orig, args, kwargs, first, info)
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


_LOCK_ORDER = tuple(a for attrs in BUFFERS.values() for a in attrs)  # float, int, pinned: one order

_TABLE = _rows(PatchTable(lambda: _state["log"], _patches))
