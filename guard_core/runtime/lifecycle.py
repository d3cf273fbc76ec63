"""The one register()/uninstall() contract of both adapters.

The frameworks' loaders call ``register()`` with no arguments, perhaps several
times per process, and ignore its return value (vLLM's
``load_general_plugins`` calls every plugin bare and catches nothing; SGLang's
``load_plugins`` catches and logs; the ``.pth`` bootstrap of older SGLang
calls it inside its own ``try``). So:

- ``register`` is idempotent: once active, later calls return True at once;
- the adapter's ``_registered`` flag is set only after its install succeeded
  and said it is active (the master switch off: False, nothing installed);
- it returns a bool (True: active in this process) on every adapter;
- any exception is caught and handed to ``on_error`` (the adapter's one
  warning, logged once); the server goes on without the guard;
- ``uninstall`` runs the adapter's teardown (never raising) and clears the
  flag, after which ``register`` installs again.

The adapter's plugin module holds the state (``_lock``, ``_registered``), so
that it stays readable where it always was. Each guard module keeps what it
remembers in one process in one small ``AdapterState`` dataclass, which its
``uninstall`` resets.
"""

from __future__ import annotations

from typing import Callable

__all__ = ["AdapterState", "register", "uninstall"]


class AdapterState:
    """Base of a guard module's per-process memory (a dataclass): ``reset()`` gives every
    field its default again, except those named in ``KEEP`` (facts read once per process)."""

    KEEP: tuple = ()

    def reset(self) -> None:
        import dataclasses

        for f in dataclasses.fields(self):
            if f.name in self.KEEP:
                continue
            setattr(self, f.name, f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default)


def register(plugin, install: Callable[[], bool], on_error: Callable[[BaseException], None]) -> bool:
    """Run ``install`` once for ``plugin`` (a module with ``_lock`` and ``_registered``)."""
    with plugin._lock:
        if plugin._registered:
            return True
        try:
            active = bool(install())
        except Exception as exc:  # never take the server down
            try:
                on_error(exc)
            except Exception:
                pass
            return False
        plugin._registered = active
        return active


def uninstall(plugin, teardown: Callable[[], None]) -> None:
    """Undo ``register`` for ``plugin`` (never raises); ``register`` installs again afterwards."""
    with plugin._lock:
        try:
            teardown()
        except Exception:
            pass
        plugin._registered = False
