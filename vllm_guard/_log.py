"""The adapter's one logger: vLLM's own format, one line per decision."""

from __future__ import annotations

_log = None


def get_log():
    """A GuardLog on ``vllm.flashinfer_guard`` (vLLM's handlers and format)."""
    global _log
    if _log is None:
        import logging

        from guard_core.logs import GuardLog
        from guard_core.settings import get_settings

        from . import LOGGER_NAME

        try:
            from vllm.logger import init_logger

            logger = init_logger(LOGGER_NAME)
        except Exception:  # vLLM's logger unavailable: plain logging
            logger = logging.getLogger(LOGGER_NAME)
        try:
            level = get_settings().log_level
        except Exception:
            level = "info"
        _log = GuardLog(logger, level=level)
    return _log


def reset_log() -> None:
    global _log
    _log = None


def announce_line() -> None:
    """Say once, when a patch target is first imported (vLLM's logging is set up by
    then), if this vLLM lies outside the checked lines (guard_core.support)."""
    from guard_core.support import announce

    announce("vllm", get_log())
