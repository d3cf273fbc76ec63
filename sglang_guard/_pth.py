"""Interpreter-start bootstrap for SGLang lines without a plugin system (< 0.5.11).

``flashinfer_guard_sglang.pth`` imports this module in every Python process of
the environment, so it must cost next to nothing: it imports only ``os`` and
``sys`` (already loaded by ``site``) and installs one tiny ``sys.meta_path``
watcher. The watcher reacts only to the first ``import sglang``; every other
import pays one string comparison. When SGLang is imported:

* SGLang with ``sglang/srt/plugins`` (>= 0.5.11): do nothing, SGLang's own
  ``load_plugins()`` loads our entry point (and honours ``SGLANG_PLUGINS``);
* older SGLang: honour ``FLASHINFER_GUARD=0`` and the ``SGLANG_PLUGINS``
  allowlist, then ``sglang_guard.plugin.register()``, which only installs lazy
  post-import hooks.

SGLang starts schedulers with ``spawn``: each child is a fresh interpreter, runs
``site`` and therefore this bootstrap again.
"""

import os
import sys

_OFF = ("0", "false", "no", "off")


def _sglang_dir(path):
    for entry in path if path is not None else sys.path:
        candidate = os.path.join(entry or os.getcwd(), "sglang")
        if os.path.isfile(os.path.join(candidate, "__init__.py")):
            return candidate
    return None


def _allowed():
    if os.environ.get("FLASHINFER_GUARD", "1").strip().lower() in _OFF:
        return False
    allow = os.environ.get("SGLANG_PLUGINS")
    if not allow:  # unset or empty: SGLang's loader allows every plugin too
        return True
    return "flashinfer_guard" in [n.strip() for n in allow.split(",")]


class _SglangWatcher:
    """Meta-path watcher: never finds a module itself."""

    fired = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "sglang" or _SglangWatcher.fired:
            return None
        _SglangWatcher.fired = True
        try:
            root = _sglang_dir(path)
            if root is None or os.path.isdir(os.path.join(root, "srt", "plugins")):
                return None  # not SGLang, or SGLang loads our entry point itself
            if not _allowed():
                return None
            from sglang_guard.plugin import register

            register(source="pth")
        except Exception:  # never break an import for our sake
            pass
        return None

    def invalidate_caches(self):
        pass


def install():
    if any(type(f).__name__ == "_SglangWatcher" for f in sys.meta_path):
        return
    if "sglang" in sys.modules:  # imported before site ran us: nothing to wait for
        return
    sys.meta_path.insert(0, _SglangWatcher())


if os.environ.get("FLASHINFER_GUARD", "1").strip().lower() not in _OFF:
    install()
