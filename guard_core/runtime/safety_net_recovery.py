"""The safety net's recovery (``guard_core.runtime.safety_net`` wraps the planners and calls it):
read FlashInfer's overflow message, grow the overflowing workspace (in place before any CUDA
graph, else a buffer of this eager wrapper's own), plan again up to ``MAX_TRIES`` times, and on
any failure give back exactly what the owner handed in, with one warning naming why.
"""

from __future__ import annotations

import re
import sys

from guard_core.units import MIB, nbytes

__all__ = ["BUFFERS", "MAX_TRIES", "STATE", "buffer_kind", "first_name", "graphs_captured", "parse_overflow",
           "recover", "refresh_workspace_sizes"]

OVERFLOW_RE = re.compile(
    r"Buffer overflow when allocating memory for (?P<name>\S+) with size (?P<size>\d+) and alignment "
    r"(?P<align>\d+), but only (?P<avail>\d+) bytes available")
# The float-buffer allocations of FlashInfer's planners (scheduler.cuh: float_allocator);
# every other named allocation is carved from the int buffer.
FLOAT_ALLOCATION_RE = re.compile(r"(tmp_v|tmp_s|partial_o|partial_lse)$")
MAX_TRIES = 4

# the net's state: the server's logger, the CUDA graphs captured so far, installed or not
STATE = {"captured": 0, "log": None, "installed": False}


def parse_overflow(exc: BaseException) -> dict | None:
    m = OVERFLOW_RE.search(str(exc))
    if not m:
        return None
    return {"name": m.group("name"), "size": int(m.group("size")), "align": int(m.group("align")),
            "available": int(m.group("avail"))}


def buffer_kind(allocation_name: str) -> str:
    """'float' or 'int': which workspace FlashInfer carved ``allocation_name`` from."""
    return "float" if FLOAT_ALLOCATION_RE.search(allocation_name or "") else "int"


def graphs_captured() -> int:
    return STATE["captured"]


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


class _Grown:
    """The workspaces grown for one recovery, and how to give them back."""

    def __init__(self, wrapper, in_place: bool):
        self.wrapper, self.in_place = wrapper, in_place
        # attr -> (tensor, bytes before, the owner's storage as handed in or None)
        self.saved: dict[str, tuple] = {}
        # the attrs whose buffer this recovery really changed: only these are given back, so a
        # buffer that could not grow (a storage torch will not resize: torch.from_numpy,
        # torch.frombuffer, shared memory) comes back exactly as handed in (issue 41 item 5)
        self.changed: set[str] = set()

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
        self.changed.add(attr)  # reached only when the line above did not raise
        self._refresh(attr)

    def give_back(self) -> None:
        for attr, (buf, before, storage) in self.saved.items():
            if attr not in self.changed:
                continue  # never changed: nothing to give back, the owner's tensor untouched
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


BUFFERS = {"float": ("_float_workspace_buffer",),
           "int": ("_int_workspace_buffer", "_pin_memory_int_workspace_buffer")}


def recover(wrapper, orig, args, kwargs, first, info):
    """(True, result) once a retried plan fits, else (False, None) with everything grown
    given back."""
    log = STATE["log"]
    kind = buffer_kind(info["name"])
    main = BUFFERS[kind][0]
    if getattr(wrapper, main, None) is None:
        return False, None
    before = {k: nbytes(getattr(wrapper, BUFFERS[k][0])) for k in BUFFERS
              if getattr(wrapper, BUFFERS[k][0], None) is not None}
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
    log, in_place, failed = STATE["log"], grown.in_place, None
    for _ in range(MAX_TRIES):
        kind = buffer_kind(info["name"])
        attrs = [a for a in BUFFERS[kind] if getattr(wrapper, a, None) is not None]
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
        sizes = ", ".join(f"{k} {before.get(k, 0) / MIB:.0f} MiB -> {grown.after(BUFFERS[k][0]) / MIB:.0f} MiB"
                          for k in BUFFERS if BUFFERS[k][0] in grown.saved)
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
