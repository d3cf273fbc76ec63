"""The adapter's one logger: vLLM's own format, one line per decision (guard_core.runtime.logs.LazyGuardLog)."""

from __future__ import annotations

from guard_core.runtime.logs import LazyGuardLog

from . import LOGGER_NAME


def _vllm_logger(name: str):
    from vllm.logger import init_logger

    return init_logger(name)


_LOG = LazyGuardLog(LOGGER_NAME, _vllm_logger)


def get_log():
    """A GuardLog on ``vllm.flashinfer_guard`` (vLLM's handlers and format)."""
    return _LOG.get()


def reset_log() -> None:
    _LOG.reset()


def announce_line() -> None:
    """Say once, when a patch target is first imported (vLLM's logging is set up by
    then), if this vLLM lies outside the checked lines (guard_core.flashinfer.releases)."""
    from guard_core.flashinfer.releases import announce

    announce("vllm", get_log())
