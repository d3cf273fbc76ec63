"""Entry point: ``vllm.general_plugins`` -> ``vllm_guard.plugin:register``.

``register()`` is called by ``vllm.plugins.load_general_plugins()`` once per
process (API server, engine core, workers), maybe more than once. It must be
cheap, idempotent and must never raise: vLLM does not catch exceptions from
plugins. It reads the FLASHINFER_GUARD_* settings and installs lazy
post-import hooks; the guards act when vLLM imports their targets.
"""

from __future__ import annotations

_registered = False


def register() -> None:
    """Install flashinfer-guard into this vLLM process (idempotent, never raises)."""
    global _registered
    if _registered:
        return
    _registered = True
    try:
        _register()
    except Exception as exc:  # never take vLLM down
        try:
            from ._log import get_log

            get_log().warning_once(
                "register",
                f"not installed after an internal error ({type(exc).__name__}: {exc}); "
                "vLLM continues without flashinfer-guard",
            )
        except Exception:
            pass


def _register() -> None:
    from guard_core.settings import get_settings

    settings = get_settings()
    if settings.warnings:
        from ._log import get_log

        get_log().settings_warnings(settings)
    if not settings.enabled:
        return
    from . import moe, workspace

    moe.install(settings)
    workspace.install(settings)


def unregister() -> None:
    """Undo every patch this process made (tests)."""
    global _registered
    from . import moe, workspace

    moe.uninstall()
    workspace.uninstall()
    _registered = False
