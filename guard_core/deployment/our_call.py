"""Our error or the server's refusal (issues 39 item 2, 42 item 3): where the server's own resolution
of a command fails in ``plan``'s subprocess (``vllm_guard.server_resolution``,
``sglang_guard.plan_resolve``), the failure is ours when it is raised at OUR call into the server: a
``TypeError`` from a changed signature, an ``AttributeError`` / ``ImportError`` of a moved or renamed
function, raised in a frame of this package's own code (the innermost frame of the traceback is
ours: Python binds a call's arguments, looks an attribute up and imports a name in the caller's
frame). Raised inside the server's code, it is the server's.
"""

from __future__ import annotations

import os
import sys
import traceback

__all__ = ["OUR_PACKAGES", "our_call_error"]

OUR_PACKAGES = ("guard_core", "vllm_guard", "sglang_guard")
_OUR_KINDS = (TypeError, AttributeError, ImportError, NameError)
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _package_dirs() -> list[tuple[str, str]]:
    """(package directory, its name) of our packages: where they were imported from (an install
    and this checkout may differ) and beside this module."""
    out = []
    for name in OUR_PACKAGES:
        mod = sys.modules.get(name)
        for d in list(getattr(mod, "__path__", None) or ()) + [os.path.join(_ROOT, name)]:
            out.append((os.path.abspath(d), name))
    return out


def _ours(filename: str) -> str | None:
    """The path of ``filename`` inside our packages (``vllm_guard/server_resolution.py``), or None
    (the server's code, or Python's)."""
    path = os.path.abspath(filename)
    for d, name in _package_dirs():
        if path.startswith(d + os.sep):
            return name + "/" + os.path.relpath(path, d).replace(os.sep, "/")
    return None


def our_call_error(exc: BaseException | None, _depth: int = 0) -> str | None:
    """One line naming our failed call (the exception, the source line, the file and line of ours
    that made it), or None: the failure is not ours (raised inside the server, or not one of the
    kinds a changed server API raises at the call). An exception our code raised while handling one
    (``server_parsers.ServerParserUnavailable`` wraps the error of building the server's parser) is
    judged by the one it handled."""
    if exc is None or _depth > 3:
        return None
    if not isinstance(exc, _OUR_KINDS):
        inner = exc.__cause__ or exc.__context__
        return our_call_error(inner, _depth + 1) if inner is not None and _ours_raised(exc) else None
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return None
    last = frames[-1]
    where = _ours(last.filename)
    if where is None:
        return None
    msg = " ".join(str(exc).split())
    call = " ".join((last.line or "").split())
    return f"{type(exc).__name__}: {msg} at `{call}` ({where}:{last.lineno})"[:400]


def _ours_raised(exc: BaseException) -> bool:
    """``exc`` was raised in a frame of ours (a wrapper of the error it handled)."""
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and _ours(frames[-1].filename) is not None
