"""The SGLang adapter's one GuardLog (no import of the plugin or the guards).

SGLang's modules log through the root logger, whose format SGLang sets
(``configure_logger``); the product's logger ``flashinfer_guard`` propagates
there, and every line carries the ``[flashinfer-guard]`` tag.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_log = None


def log():
    """The adapter's GuardLog on ``flashinfer_guard`` (created on first use)."""
    global _log
    if _log is None:
        with _lock:
            if _log is None:
                import logging

                from guard_core.logs import LOGGER_NAME, GuardLog

                try:
                    from guard_core.settings import get_settings

                    level = get_settings().log_level
                except Exception:
                    level = "info"
                _log = GuardLog(logging.getLogger(LOGGER_NAME), level=level)
    return _log


def reset_log() -> None:
    global _log
    _log = None


def announce_line() -> None:
    """Say once, when a patch target is first imported, if this SGLang lies outside
    the checked lines (guard_core.support.CHECKED_LINES)."""
    from guard_core.support import announce

    announce("sglang", log())
