"""register(): the single entry of the SGLang adapter; uninstall() undoes it.

Cheap and idempotent: reads the FLASHINFER_GUARD_* settings and installs lazy
post-import hooks (guard_core.runtime.wrapping.when_imported). Nothing heavy is
imported here; the hooks wrap their targets when SGLang itself imports them,
and each wrapper logs its decision when it takes effect (in scheduler
processes SGLang configures logging only after plugins load).

Targets (found by feature, not by version string):

* ``sglang.srt.layers.attention.flashinfer_backend``: ``FlashInferAttnBackend.__init__``
  (workspace sizing, see workspace.py);
* the MoE runner backend where SGLang resolves it: ``ServerArgs`` (<= 0.5.15), the
  argument-resolution pipeline and its resolution hooks (0.5.20+), and
  ``initialize_moe_config`` in every scheduler (see moe.py).

The guards import ``._log`` for their logger, never this module.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

try:
    from ._log import log  # noqa: F401  (the adapter's logger, kept reachable here)
except Exception as _exc:  # a broken or shadowed guard_core: register() says so, once
    _import_error: BaseException | None = _exc
    log = None
else:
    _import_error = None

_lock = threading.RLock()
_registered = False
_said_broken = False
_source: str | None = None

HOOK_PREFIX = "sglang_guard."  # every post-import hook key of this adapter starts so


def say_broken(exc: BaseException) -> None:
    """One warning through the standard library only (guard_core may be what is broken)."""
    global _said_broken
    if _said_broken:
        return
    _said_broken = True
    try:
        cause = " ".join(f"{type(exc).__name__}: {exc}".split())
        logging.getLogger("flashinfer_guard").warning(
            "[flashinfer-guard] not loaded: its install is broken or shadowed (%s); "
            "SGLang runs without the guard", cause)
    except Exception:
        pass


def _say_failed(exc: BaseException) -> None:
    try:
        log().warning(f"not loaded after an internal error ({type(exc).__name__}: {exc}); "
                      "SGLang runs without the guard", key="register")
    except Exception:  # our own logger is broken too: say it without it
        say_broken(exc)


def register(source: str = "entry_point") -> bool:
    """Install the SGLang hooks once per process. Returns True when active
    (the contract of guard_core.runtime.lifecycle; SGLang's loader ignores it). Never raises:
    a half-installed or shadowed guard_core costs one warning naming the cause."""
    try:
        if _import_error is not None:
            raise _import_error
        from guard_core.runtime import lifecycle

        return lifecycle.register(sys.modules[__name__], lambda: _register(source), _say_failed)
    except Exception as exc:  # the install itself is broken: nothing of ours can be trusted
        say_broken(exc)
        return False


def _register(source: str) -> bool:
    global _source
    from guard_core.runtime.settings import get_settings

    settings = get_settings()
    if not settings.enabled:
        return False
    from . import kv_reserve, moe, workspace

    log().settings_warnings(settings)
    workspace.remember_user_size(os.environ)
    # FlashInferAttnBackend.__init__; ModelRunner.load_model (deterministic inference: the
    # fixed-split need said before the weights load)
    workspace.install()
    # the KV pool budget where SGLang sizes it (issue 28): moved by the guard's change to the buffer
    kv_reserve.install()
    moe.install()
    _source = source
    return True


def uninstall() -> None:
    """Undo every patch and post-import hook of this process; ``register()`` installs
    again afterwards (tests; never raises)."""
    global _source
    from guard_core.runtime import lifecycle

    lifecycle.uninstall(sys.modules[__name__], _teardown)
    _source = None


def _teardown() -> None:
    """Each guard's patch table undoes its patches and forgets its post-import hooks."""
    from . import _log, kv_reserve, moe, workspace

    kv_reserve.uninstall()
    moe.uninstall()
    workspace.uninstall()
    _log.reset_log()


def is_registered() -> bool:
    return _registered


def loaded_by() -> str | None:
    """'entry_point' or 'pth' once registered in this process."""
    return _source
