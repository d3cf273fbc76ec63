"""The one patching utility both adapters use.

- ``when_imported``: post-import hooks (a ``sys.meta_path`` finder that wraps
  the real loader), so ``register()`` imports nothing heavy.
- ``wrap_attr`` / ``unwrap_attr``: transparent, idempotent wrapping that keeps
  the original reachable as ``__wrapped__`` (and ``cache_clear`` of
  ``functools.cache`` functions). A method a class inherits is wrapped on that
  class (the base stays untouched) and unwrapping deletes it there again.
- ``PatchSet``: what one adapter patched, undone in reverse by ``undo()`` (or
  back to a ``mark()``: one row's part); ``forget_import_hook`` removes a
  post-import hook, so that install -> uninstall -> install patches again
  (``guard_core.runtime.patch_table.PatchTable.undo`` does both).
- ``rebind_everywhere``: replace a function in every module that imported it
  by name.
- ``guarded``: run our code so that any exception is logged once and the
  caller falls back to the server's own behaviour.
"""

from __future__ import annotations

import functools
import sys
import threading
from typing import Any, Callable

from guard_core.runtime.logs import LOGGER_NAME

__all__ = ["PatchSet", "clear_import_hooks", "forget_import_hook", "guarded", "is_wrapped", "rebind_everywhere",
           "unwrap_attr", "when_imported", "wrap_attr"]


MARK = "__flashinfer_guard__"

_lock = threading.RLock()
_hooks: dict[str, dict[str, Callable]] = {}
_finder_installed = False
_searching = threading.local()


class _LoaderProxy:
    """Delegates to the real loader; runs the hooks after exec_module."""

    def __init__(self, loader, fullname: str):
        self._fg_loader = loader
        self._fg_name = fullname

    def __getattr__(self, name):
        return getattr(self._fg_loader, name)

    def create_module(self, spec):
        create = getattr(self._fg_loader, "create_module", None)
        return create(spec) if create else None

    def exec_module(self, module):
        self._fg_loader.exec_module(module)
        try:  # leave the proxy out of the module's identity where possible
            module.__loader__ = self._fg_loader
            if getattr(module, "__spec__", None) is not None:
                module.__spec__.loader = self._fg_loader
        except Exception:
            pass
        _run_hooks(self._fg_name, module)


class _PostImportFinder:
    """A meta-path finder (duck-typed: importlib.abc costs milliseconds to import)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: D102
        if fullname not in _hooks:
            return None
        busy = getattr(_searching, "names", None)
        if busy is None:
            busy = _searching.names = set()
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in list(sys.meta_path):
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            busy.discard(fullname)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _LoaderProxy(spec.loader, fullname)
        return spec


def _run_hooks(fullname: str, module) -> None:
    with _lock:
        callbacks = list(_hooks.get(fullname, {}).values())
    for cb in callbacks:
        try:
            cb(module)
        except Exception as exc:  # fail open: the import itself must succeed
            _report_hook_error(fullname, cb, exc)


_reported: set = set()


def _report_hook_error(fullname: str, cb, exc: Exception) -> None:
    """Adapters catch their own errors; this is the last net: one warning per hook."""
    key = (fullname, getattr(cb, "__qualname__", repr(cb)))
    if key in _reported:
        return
    _reported.add(key)
    try:
        import logging

        logging.getLogger(LOGGER_NAME).warning(
            "[flashinfer-guard] post-import hook %s for %s failed (%s: %s); continuing without it",
            key[1], fullname, type(exc).__name__, exc)
    except Exception:
        pass


def when_imported(module_name: str, callback: Callable[[Any], None], key: str | None = None) -> None:
    """Run ``callback(module)`` right after ``module_name`` is imported.

    If it is already imported, run it now. Registering the same key twice is
    a no-op, so adapters may call this from every ``register()``.
    """
    global _finder_installed
    key = key or f"{getattr(callback, '__module__', '')}.{getattr(callback, '__qualname__', repr(callback))}"
    with _lock:
        per_module = _hooks.setdefault(module_name, {})
        if key in per_module:
            return
        per_module[key] = callback
        if not _finder_installed:
            sys.meta_path.insert(0, _PostImportFinder())
            _finder_installed = True
    module = sys.modules.get(module_name)
    if module is not None:
        try:
            callback(module)
        except Exception as exc:
            _report_hook_error(module_name, callback, exc)


def clear_import_hooks() -> None:
    """Forget every registered post-import hook (tests)."""
    with _lock:
        _hooks.clear()


def forget_import_hook(module_name: str, key: str) -> bool:
    """Forget the post-import hook ``key`` on ``module_name`` (a patch table's undo); a
    later ``when_imported`` with the same key registers and, for an imported module,
    runs again. Returns whether it was registered."""
    with _lock:
        per_module = _hooks.get(module_name)
        if not per_module or key not in per_module:
            return False
        del per_module[key]
        if not per_module:
            del _hooks[module_name]
    return True


def is_wrapped(obj) -> bool:
    return bool(getattr(obj, MARK, False))


INHERITED = "__flashinfer_guard_inherited__"


def _lookup(owner, name: str):
    """(raw attribute, inherited?) as stored: on a class, its own ``__dict__`` first,
    then the first base along the MRO that defines it (staticmethod/classmethod
    objects kept as such); on anything else, the attribute itself."""
    if isinstance(owner, type):
        if name in owner.__dict__:
            return owner.__dict__[name], False
        for klass in owner.__mro__[1:]:
            if name in klass.__dict__:
                return klass.__dict__[name], True
        return None, False
    return getattr(owner, name, None), False


def wrap_attr(owner, name: str, make_wrapper: Callable[[Callable], Callable]) -> bool:
    """Replace ``owner.name`` by ``make_wrapper(original)``; idempotent.

    On a class, a method inherited from a base is wrapped on ``owner`` itself
    (siblings and the base keep the original). Returns False when the
    attribute is missing or already ours.
    """
    with _lock:
        raw, inherited = _lookup(owner, name)
        if raw is None:
            return False
        is_static = isinstance(raw, staticmethod)
        is_class = isinstance(raw, classmethod)
        original = raw.__func__ if (is_static or is_class) else raw
        if is_wrapped(original):
            return False
        wrapper = make_wrapper(original)
        try:
            functools.update_wrapper(wrapper, original)
        except Exception:
            pass
        for extra in ("cache_clear", "cache_info", "cache_parameters"):
            if hasattr(original, extra) and not hasattr(wrapper, extra):
                try:
                    setattr(wrapper, extra, getattr(original, extra))
                except Exception:
                    pass
        wrapper.__wrapped__ = original
        setattr(wrapper, MARK, True)
        setattr(wrapper, INHERITED, inherited)
        if is_static:
            wrapper = staticmethod(wrapper)
        elif is_class:
            wrapper = classmethod(wrapper)
        setattr(owner, name, wrapper)
        return True


def unwrap_attr(owner, name: str) -> bool:
    """Undo ``wrap_attr(owner, name, ...)``: the original back in place, or, for a
    method that was inherited, ``owner``'s own entry deleted. False when
    ``owner.name`` is not our wrapper."""
    with _lock:
        raw = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if raw is None:
            return False
        func = raw.__func__ if isinstance(raw, (staticmethod, classmethod)) else raw
        if not is_wrapped(func):
            return False
        if isinstance(owner, type) and getattr(func, INHERITED, False):
            delattr(owner, name)
            return True
        original = func.__wrapped__
        if isinstance(raw, staticmethod):
            original = staticmethod(original)
        elif isinstance(raw, classmethod):
            original = classmethod(original)
        setattr(owner, name, original)
        return True


class PatchSet:
    """What one adapter patched, so that one call undoes all of it (in reverse)."""

    def __init__(self):
        self._undo: list[Callable[[], Any]] = []
        self._targets: list[tuple[object, str]] = []
        self._lock = threading.Lock()

    def wrap(self, owner, name: str, make_wrapper: Callable[[Callable], Callable]) -> bool:
        """``wrap_attr``, remembered for ``undo``."""
        if wrap_attr(owner, name, make_wrapper):
            with self._lock:
                self._targets.append((owner, name))
            self.on_undo(lambda: unwrap_attr(owner, name))
            return True
        return False

    def targets(self) -> list[tuple[object, str]]:
        """(owner, name) of every attribute wrapped and not yet undone, oldest first."""
        with self._lock:
            return list(self._targets)

    def on_undo(self, fn: Callable[[], Any]) -> None:
        with self._lock:
            self._undo.append(fn)

    def mark(self) -> tuple[int, int]:
        """Where the undo steps stand now (for ``undo_since``)."""
        with self._lock:
            return len(self._undo), len(self._targets)

    def undo_since(self, mark: tuple[int, int]) -> int:
        """Undo only the steps registered after ``mark``, newest first (a row that failed
        halfway); the earlier ones stay."""
        steps_at, targets_at = mark
        with self._lock:
            steps = self._undo[steps_at:][::-1]
            del self._undo[steps_at:]
            del self._targets[targets_at:]
        return self._run(steps)

    def undo(self) -> int:
        """Run every undo step, newest first; one failing step does not stop the rest."""
        with self._lock:
            steps, self._undo = self._undo[::-1], []
            self._targets = []
        return self._run(steps)

    @staticmethod
    def _run(steps) -> int:
        done = 0
        for step in steps:
            try:
                step()
                done += 1
            except Exception:
                pass
        return done

    def __len__(self) -> int:
        return len(self._undo)


def rebind_everywhere(old, new, prefix: str = "") -> list[str]:
    """Point every module global bound to ``old`` at ``new``.

    Only modules whose name starts with ``prefix`` are scanned. Returns the
    ``module.name`` places rebound.
    """
    places = []
    for mod_name, module in list(sys.modules.items()):
        if module is None or (prefix and not mod_name.startswith(prefix)):
            continue
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for attr, value in list(namespace.items()):
            if value is old:
                try:
                    setattr(module, attr, new)
                    places.append(f"{mod_name}.{attr}")
                except Exception:
                    pass
    return places


def guarded(log, key: str, what: str, fn: Callable, *args, default=None, **kwargs):
    """Call our ``fn``; on any exception log one warning and return ``default``."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # fail open: the server goes on as if we were absent
        try:
            log.warning_once(
                "error:" + key,
                f"{what} skipped after an internal error ({type(exc).__name__}: {exc}); "
                "the server continues with its own behaviour",
            )
        except Exception:
            pass
        return default
