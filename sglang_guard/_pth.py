"""Interpreter-start bootstrap for SGLang lines without a plugin system (< 0.5.11).

``flashinfer_guard_sglang.pth`` imports this module in every Python process of
the environment, so it must cost next to nothing: it imports only ``os`` and
``sys`` (already loaded by ``site``) and installs one tiny ``sys.meta_path``
watcher. Every import other than ``sglang`` pays one string comparison.

The guard acts only when SGLang is actually imported, i.e. when the module
``sglang`` is *executed*, never when a library merely looks it up
(``importlib.util.find_spec("sglang")``, ``pkgutil.find_loader``): for
``sglang`` the watcher asks the other finders for the spec, and hands back that
same spec with its loader wrapped. The wrapper puts the original loader back
on the spec and the module, and only inside ``exec_module`` (the import
proper, before SGLang's ``__init__`` runs, so the lazy hooks are in place for
everything it imports) does it decide:

* SGLang with ``sglang/srt/plugins`` (>= 0.5.11): do nothing, SGLang's own
  ``load_plugins()`` loads our entry point (and honours ``SGLANG_PLUGINS``);
* older SGLang: honour ``FLASHINFER_GUARD=0`` and the ``SGLANG_PLUGINS``
  allowlist, then ``sglang_guard.plugin.register()``, which only installs lazy
  post-import hooks.

Nothing here ever raises into the import: any problem leaves SGLang's import
exactly as without us. SGLang starts schedulers with ``spawn``: each child is a
fresh interpreter, runs ``site`` and therefore this bootstrap again.
"""

import os
import sys

_OFF = ("0", "false", "no", "off")


def _is_off(value):
    return value is not None and value.strip().lower() in _OFF


def _allowed():
    if _is_off(os.environ.get("FLASHINFER_GUARD")):
        return False
    allow = os.environ.get("SGLANG_PLUGINS")
    if not allow:  # unset or empty: SGLang's loader allows every plugin too
        return True
    return "flashinfer_guard" in [n.strip() for n in allow.split(",")]


def _has_plugin_system(spec):
    for entry in spec.submodule_search_locations or ():
        if os.path.isdir(os.path.join(entry, "srt", "plugins")):
            return True
    return False


def _on_sglang_executed(spec):
    """SGLang is being imported (its module is about to run): register the guard if it is ours to do."""
    try:
        _SglangWatcher.fired = True
        _uninstall()
        if _has_plugin_system(spec) or not _allowed():
            return
        from sglang_guard.plugin import register

        register(source="pth")
    except Exception as exc:  # never break an import for our sake: one warning, SGLang goes on
        _say_broken(exc)


def _say_broken(exc):
    """sglang_guard.plugin itself is missing or broken: one warning, standard library only."""
    try:
        import logging

        cause = " ".join(("%s: %s" % (type(exc).__name__, exc)).split())
        logging.getLogger("flashinfer_guard").warning(
            "[flashinfer-guard] not loaded: its install is broken or shadowed (%s); "
            "SGLang runs without the guard", cause)
    except Exception:
        pass


class _ExecWatchingLoader:
    """The real loader of ``sglang``, seen through: acts in ``exec_module`` only."""

    def __init__(self, loader, spec):
        self._loader = loader
        self._spec = spec

    def __getattr__(self, name):  # get_resource_reader, is_package, get_source, ...
        return getattr(self._loader, name)

    def create_module(self, spec):  # the import machinery calls exec_module on spec.loader next: keep ours
        return self._loader.create_module(spec)

    def exec_module(self, module):
        loader = self._restore(getattr(module, "__spec__", None) or self._spec)
        try:
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = loader
        except Exception:
            pass
        _on_sglang_executed(self._spec)
        return loader.exec_module(module)

    def _restore(self, spec):
        """Put the original loader back wherever the import machinery copied ours."""
        try:
            if spec is not None and spec.loader is self:
                spec.loader = self._loader
        except Exception:
            pass
        return self._loader


class _SglangWatcher:
    """Meta-path watcher: never finds a module of its own."""

    fired = False
    _busy = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "sglang" or _SglangWatcher.fired or _SglangWatcher._busy:
            return None
        _SglangWatcher._busy = True
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self or isinstance(finder, _SglangWatcher):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(fullname, path, target)
                if spec is not None:
                    break
            loader = getattr(spec, "loader", None)
            if loader is None or not hasattr(loader, "exec_module") or spec.submodule_search_locations is None:
                return None  # not a package we understand: the normal import goes on without us
            spec.loader = _ExecWatchingLoader(loader, spec)
            return spec
        except Exception:  # never break a lookup for our sake: the import system tries the others
            return None
        finally:
            _SglangWatcher._busy = False

    def invalidate_caches(self):
        pass


def _uninstall():
    try:
        sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_SglangWatcher"]
    except Exception:
        pass


def install():
    if any(type(f).__name__ == "_SglangWatcher" for f in sys.meta_path):
        return
    if "sglang" in sys.modules:  # imported before site ran us: nothing to wait for
        return
    sys.meta_path.insert(0, _SglangWatcher())


if not _is_off(os.environ.get("FLASHINFER_GUARD")):
    install()
