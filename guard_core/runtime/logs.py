"""One line per decision per process, through the host framework's logger."""

from __future__ import annotations

import logging
import sys
import threading

from guard_core import TAG

__all__ = ["GuardLog", "LOGGER_NAME", "LazyGuardLog", "logger_name", "tagged"]

LOGGER_NAME = "flashinfer_guard"
"""The product's one logger name. Where the host framework only configures its own
logger tree (vLLM: ``vllm``, propagate off) the adapter logs as ``<host>.flashinfer_guard``
(``logger_name("vllm")``); everywhere else as ``flashinfer_guard``."""


def logger_name(host: str | None = None) -> str:
    return f"{host}.{LOGGER_NAME}" if host else LOGGER_NAME


def tagged(msg: str) -> str:
    return msg if msg.startswith(TAG) else f"{TAG} {msg}"


class GuardLog:
    """Wraps the framework's logger: tags lines, says each keyed line once.

    ``level`` follows FLASHINFER_GUARD_LOG: ``warning`` drops info lines,
    ``debug`` lets debug lines through (at INFO, since the frameworks'
    loggers run at INFO).
    """

    def __init__(self, logger: logging.Logger | None = None, level: str = "info"):
        self.logger = logger or logging.getLogger(LOGGER_NAME)
        self.level = level
        self._said: set[str] = set()
        self._lock = threading.Lock()

    def _first(self, key: str | None) -> bool:
        if key is None:
            return True
        with self._lock:
            if key in self._said:
                return False
            self._said.add(key)
            return True

    def _emit(self, level: int, msg: str) -> None:
        try:
            # point the record's file:line at the adapter that decided, not at this module
            depth, frame = 0, sys._getframe(0)
            while frame is not None and frame.f_code.co_filename == __file__:
                depth, frame = depth + 1, frame.f_back
            self.logger.log(level, tagged(msg), stacklevel=depth + 1)
        except Exception:  # a broken handler must not break the server
            pass

    def info(self, msg: str, key: str | None = None) -> None:
        if self.level != "warning" and self._first(key):
            self._emit(logging.INFO, msg)

    def debug(self, msg: str, key: str | None = None) -> None:
        if self.level == "debug" and self._first(key):
            self._emit(logging.INFO, msg)

    def warning(self, msg: str, key: str | None = None) -> None:
        if self._first(key):
            self._emit(logging.WARNING, msg)

    def missing_target(self, area: str, target: str, where: str, needed: str | None = None) -> None:
        """A patch target this line lacks, said once: a warning naming the target and
        the line where the guard is needed (``needed`` says why), else a debug line."""
        if needed:
            self.warning(f"{area}: {target} not found on {where}, where the guard is needed ({needed}); "
                         f"the {area} guard cannot act on this line", key=f"missing:{area}:{target}")
        else:
            self.debug(f"{area}: {target} not found on {where}: not applicable on this version, nothing patched",
                       key=f"missing:{area}:{target}")

    def info_once(self, key: str, msg: str) -> None:
        self.info(msg, key=key)

    def warning_once(self, key: str, msg: str) -> None:
        self.warning(msg, key=key)

    def decision(self, dec, key: str | None = None) -> None:
        """Log a Decision (see decisions.py) at its level."""
        if dec.level == "warning":
            self.warning(dec.line, key=key)
        else:
            self.info(dec.line, key=key)

    def settings_warnings(self, settings) -> None:
        for w in settings.warnings:
            self.warning(w, key="settings:" + w)


def _settings_level() -> str:
    try:
        from guard_core.runtime.settings import get_settings

        return get_settings().log_level
    except Exception:
        return "info"


class LazyGuardLog:
    """The one logger factory of an adapter: a GuardLog built on first use (under a lock,
    so two threads get the same one), at the FLASHINFER_GUARD_LOG level in effect then.

    ``make_logger`` returns the framework logger to wrap (vLLM: ``init_logger`` on
    ``vllm.flashinfer_guard``; SGLang: ``logging.getLogger("flashinfer_guard")``); if it
    raises, plain ``logging.getLogger(name)`` is used. ``reset()`` forgets the GuardLog
    (tests, and a plugin that reloads its settings)."""

    def __init__(self, name: str, make_logger=None):
        self.name = name
        self._make_logger = make_logger
        self._log: GuardLog | None = None
        self._lock = threading.Lock()

    def get(self) -> GuardLog:
        log = self._log
        if log is None:
            with self._lock:
                log = self._log
                if log is None:
                    logger = None
                    if self._make_logger is not None:
                        try:
                            logger = self._make_logger(self.name)
                        except Exception:  # the framework's logger unavailable: plain logging
                            logger = None
                    log = self._log = GuardLog(logger or logging.getLogger(self.name), level=_settings_level())
        return log

    def reset(self) -> None:
        with self._lock:
            self._log = None
