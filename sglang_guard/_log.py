"""The SGLang adapter's one GuardLog (no import of the plugin or the guards).

SGLang's modules log through the root logger, whose format SGLang sets
(``configure_logger``); the product's logger ``flashinfer_guard`` propagates
there, and every line carries the ``[flashinfer-guard]`` tag. The factory is
guard_core.runtime.logs.LazyGuardLog, shared with the vLLM adapter.
"""

from __future__ import annotations

from guard_core.runtime.logs import LOGGER_NAME, LazyGuardLog

_LOG = LazyGuardLog(LOGGER_NAME)


def log():
    """The adapter's GuardLog on ``flashinfer_guard`` (created on first use)."""
    return _LOG.get()


def reset_log() -> None:
    _LOG.reset()


def announce_line() -> None:
    """Say once, when a patch target is first imported, if this SGLang lies outside
    the checked lines (guard_core.flashinfer.releases.CHECKED_LINES)."""
    from guard_core.flashinfer.releases import announce

    announce("sglang", log())
