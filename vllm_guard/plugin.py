"""Entry point: ``vllm.general_plugins`` -> ``vllm_guard.plugin:register``.

``register()`` is called by ``vllm.plugins.load_general_plugins()`` once per
process (API server, engine core, workers), maybe more than once. It must be
cheap, idempotent and must never raise: vLLM does not catch exceptions from
plugins. It reads the FLASHINFER_GUARD_* settings and installs lazy
post-import hooks; the guards act when vLLM imports their targets.
``uninstall()`` undoes every patch and hook, after which ``register()``
installs again.
"""

from __future__ import annotations

import logging
import sys
import threading

HOOK_PREFIX = "vllm_guard."  # every post-import hook key of this adapter starts so
_lock = threading.RLock()
_registered = False
_said_broken = False


def _say_broken(exc: BaseException) -> None:
    """One warning through the standard library only (guard_core may be what is broken)."""
    global _said_broken
    if _said_broken:
        return
    _said_broken = True
    try:
        cause = " ".join(f"{type(exc).__name__}: {exc}".split())
        logging.getLogger("vllm.flashinfer_guard").warning(
            "[flashinfer-guard] not installed: its install is broken or shadowed (%s); "
            "vLLM continues without flashinfer-guard", cause)
    except Exception:
        pass


def _say_failed(exc: BaseException) -> None:
    try:
        from ._log import get_log

        get_log().warning_once(
            "register",
            f"not installed after an internal error ({type(exc).__name__}: {exc}); "
            "vLLM continues without flashinfer-guard",
        )
    except Exception:  # our own logger is broken too: say it without it
        _say_broken(exc)


def register() -> bool:
    """Install flashinfer-guard into this vLLM process (idempotent, never raises).
    Returns True when active (the contract of guard_core.runtime.lifecycle; vLLM ignores it).

    vLLM calls this outside any ``try``: even a half-installed or shadowed
    guard_core (a module missing, empty, truncated; an unrelated package of the
    same name earlier on sys.path) only costs one warning naming the cause."""
    try:
        from guard_core.runtime import lifecycle

        return lifecycle.register(sys.modules[__name__], _register, _say_failed)
    except Exception as exc:  # the install itself is broken: nothing of ours can be trusted
        _say_broken(exc)
        return False


def _register() -> bool:
    from guard_core.runtime.settings import get_settings

    settings = get_settings()
    if settings.warnings:
        from ._log import get_log

        get_log().settings_warnings(settings)
    if not settings.enabled:
        return False
    from . import moe, workspace

    moe.install(settings)
    workspace.install(settings)
    return True


def is_registered() -> bool:
    return _registered


def uninstall() -> None:
    """Undo every patch and post-import hook of this process; ``register()`` installs
    again afterwards (tests; never raises)."""
    from guard_core.runtime import lifecycle

    lifecycle.uninstall(sys.modules[__name__], _teardown)


def _teardown() -> None:
    """Each guard's patch table undoes its patches and forgets its post-import hooks."""
    from . import _log, moe, workspace

    moe.uninstall()
    workspace.uninstall()
    _log.reset_log()
