"""The safety net: a FlashInfer plan() that overflows its workspace gets a buffer that fits.

Whatever the planner model might still miss, FlashInfer reports it the same
way, before any kernel runs::

    Buffer overflow when allocating memory for NAME with size S and alignment A,
    but only B bytes available in AlignedAllocator. ...

The net wraps ``plan`` of FlashInfer's wrappers (prefill paged/ragged, decode).
On that error it takes the sizes from the message, makes the wrapper's float
workspace large enough and plans again (up to a few times: an overflow stops
the planner at the first allocation that does not fit, and the ones after it
need room too). One warning names both numbers. Where it cannot help, the
original error propagates unchanged.

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

from .patching import unwrap_attr, when_imported, wrap_attr

OVERFLOW_RE = re.compile(
    r"Buffer overflow when allocating memory for (?P<name>\S+) with size (?P<size>\d+) and alignment "
    r"(?P<align>\d+), but only (?P<avail>\d+) bytes available")
MIB = 1 << 20
MAX_TRIES = 4
TARGETS = {
    "flashinfer.prefill": ("BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper"),
    "flashinfer.decode": ("BatchDecodeWithPagedKVCacheWrapper",),
}

_state = {"captured": 0, "log": None, "installed": False}
_patched: list[tuple[object, str]] = []


def parse_overflow(exc: BaseException) -> dict | None:
    m = OVERFLOW_RE.search(str(exc))
    if not m:
        return None
    return {"name": m.group("name"), "size": int(m.group("size")), "align": int(m.group("align")),
            "available": int(m.group("avail"))}


def install(log) -> None:
    """Arm the net (idempotent): hooks on FlashInfer's wrapper modules and on
    torch's CUDA-graph capture (to know when buffers are held by graphs)."""
    _state["log"] = log
    if _state["installed"]:
        return
    _state["installed"] = True
    for mod in TARGETS:
        when_imported(mod, _patch_module, key="safety_net:" + mod)
    when_imported("torch.cuda.graphs", _track_captures, key="safety_net:torch.cuda.graphs")


def uninstall() -> None:
    from . import patching

    for owner, name in reversed(_patched):
        unwrap_attr(owner, name)
    _patched.clear()
    forget = getattr(patching, "forget_import_hooks", None)
    if callable(forget):
        forget("safety_net:")
    _state["installed"] = False


def graphs_captured() -> int:
    return _state["captured"]


def _track_captures(module) -> None:
    cls = getattr(module, "CUDAGraph", None)
    if cls is None or not callable(getattr(cls, "capture_end", None)):
        return

    def make(orig):
        def capture_end(self, *a, **k):
            _state["captured"] += 1
            return orig(self, *a, **k)
        return capture_end

    try:
        if wrap_attr(cls, "capture_end", make):
            _patched.append((cls, "capture_end"))
    except (TypeError, AttributeError):  # a C type that takes no attributes
        pass


def _patch_module(module) -> None:
    for cls_name in TARGETS.get(module.__name__, ()):
        cls = getattr(module, cls_name, None)
        if cls is None or not callable(getattr(cls, "plan", None)):
            continue
        if wrap_attr(cls, "plan", _make_plan):
            _patched.append((cls, "plan"))


def _capturing() -> bool:
    torch = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())
    except Exception:
        return False


def _nbytes(buf) -> int:
    return int(buf.numel() * buf.element_size())


def _in_graph(wrapper) -> bool:
    for attr in ("_use_cuda_graph", "is_cuda_graph_enabled"):
        v = getattr(wrapper, attr, None)
        if isinstance(v, bool):
            return v
    return True  # unknown: assume a graph may hold it


def _make_plan(orig):
    def plan(self, *args, **kwargs):
        try:
            return orig(self, *args, **kwargs)
        except RuntimeError as first:
            info = parse_overflow(first)
            buf = getattr(self, "_float_workspace_buffer", None)
            if info is None or buf is None:
                raise
            try:
                return _recover(self, orig, args, kwargs, first, info, buf)
            except _CannotHelp:
                raise first from None
    return plan


class _CannotHelp(Exception):
    pass


def _recover(wrapper, orig, args, kwargs, first, info, buf):
    log = _state["log"]
    before = _nbytes(buf)
    in_place = graphs_captured() == 0 and not _capturing()
    if not in_place and _in_graph(wrapper):
        _say(log, f"safety net: {info['name']} needs {info['size']} bytes, only {info['available']} available "
                  f"in {before / MIB:.0f} MiB, but a captured CUDA graph holds this buffer; error left as is")
        raise _CannotHelp
    size = before
    for _ in range(MAX_TRIES):
        used = size - info["available"]
        size = -(-(used + info["size"] + info["align"]) // MIB) * MIB
        try:
            if in_place:
                buf.resize_(size)
            else:
                buf = buf.new_empty(size)
                wrapper._float_workspace_buffer = buf
        except Exception:
            raise _CannotHelp from None
        try:
            out = orig(wrapper, *args, **kwargs)
        except RuntimeError as again:
            nxt = parse_overflow(again)
            if nxt is None:
                raise
            info = nxt
            continue
        how = "grown in place (shared, before any CUDA graph)" if in_place else "a separate buffer for this eager wrapper"
        _say(log, f"safety net: FlashInfer plan() overflowed the workspace ({first_name(first)}: "
                  f"{parse_overflow(first)['size']} bytes, only {parse_overflow(first)['available']} available "
                  f"of {before / MIB:.0f} MiB); {how}: {before / MIB:.0f} MiB -> {size / MIB:.0f} MiB, plan retried")
        return out
    raise _CannotHelp


def first_name(exc) -> str:
    info = parse_overflow(exc)
    return info["name"] if info else "?"


def _say(log, msg: str) -> None:
    if log is not None:
        try:
            log.warning(f"workspace: {msg}", key="safety-net:" + msg)
        except Exception:
            pass
