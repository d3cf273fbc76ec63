"""The FLASHINFER_GUARD_* environment switches, parsed once per process.

Names never start with ``VLLM_``: vLLM warns about every unknown ``VLLM_*``
variable and refuses to start on them with ``--fail-on-environ-validation``.
A bad value never raises: it yields one warning line naming the variable and
the accepted values, and the default applies.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Mapping

from .versions import is_version

MASTER = "FLASHINFER_GUARD"
MOE = "FLASHINFER_GUARD_MOE"
MOE_FIXED_IN = "FLASHINFER_GUARD_MOE_FIXED_IN"
WORKSPACE = "FLASHINFER_GUARD_WORKSPACE"
LOG = "FLASHINFER_GUARD_LOG"
ALL_VARIABLES = (MASTER, MOE, MOE_FIXED_IN, WORKSPACE, LOG)

DEFAULT_MOE_FIXED_IN = "0.6.16"
MIB = 1 << 20
_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1 << 10,
    "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
    "g": 1000**3, "gb": 1000**3, "gib": 1 << 30,
}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


@dataclass(frozen=True)
class Settings:
    enabled: bool = True
    moe: str = "auto"  # auto | on | off
    moe_fixed_in: str = DEFAULT_MOE_FIXED_IN
    workspace: str = "auto"  # auto | off | size
    workspace_bytes: int | None = None
    log_level: str = "info"  # info | debug | warning
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def describe(self) -> dict:
        return {
            MASTER: "1" if self.enabled else "0",
            MOE: self.moe,
            MOE_FIXED_IN: self.moe_fixed_in,
            WORKSPACE: (format_bytes(self.workspace_bytes) if self.workspace == "size" else self.workspace),
            LOG: self.log_level,
        }


def parse_size(text: str) -> int | None:
    """'768MiB', '1GiB', '1073741824' -> bytes; None if not a size."""
    m = _SIZE_RE.match(text or "")
    if not m:
        return None
    unit = m.group(2).lower()
    if unit not in _UNITS:
        return None
    value = float(m.group(1)) * _UNITS[unit]
    if value <= 0 or value != value:
        return None
    return int(value)


def format_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    if n % MIB == 0:
        return f"{n // MIB} MiB"
    return f"{n / MIB:.1f} MiB"


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if environ is None else environ
    warnings: list[str] = []

    def bad(var: str, value: str, accepted: str, default: str) -> None:
        warnings.append(
            f"ignoring {var}={value!r}: accepted values are {accepted}; using the default {default}"
        )

    enabled = True
    raw = env.get(MASTER)
    if raw is not None and raw.strip() != "":
        v = raw.strip().lower()
        if v in _FALSE:
            enabled = False
        elif v not in _TRUE:
            bad(MASTER, raw, "1 or 0", "1")

    moe = "auto"
    raw = env.get(MOE)
    if raw is not None and raw.strip() != "":
        v = raw.strip().lower()
        if v in ("auto", "on", "off"):
            moe = v
        else:
            bad(MOE, raw, "auto, on or off", "auto")

    fixed_in = DEFAULT_MOE_FIXED_IN
    raw = env.get(MOE_FIXED_IN)
    if raw is not None and raw.strip() != "":
        if is_version(raw.strip()):
            fixed_in = raw.strip()
        else:
            bad(MOE_FIXED_IN, raw, "a version such as 0.6.16", DEFAULT_MOE_FIXED_IN)

    workspace, ws_bytes = "auto", None
    raw = env.get(WORKSPACE)
    if raw is not None and raw.strip() != "":
        v = raw.strip().lower()
        if v in ("auto", "off"):
            workspace = v
        else:
            size = parse_size(raw)
            if size is None:
                bad(WORKSPACE, raw, "auto, off or a size such as 768MiB, 1GiB or a byte count", "auto")
            else:
                workspace, ws_bytes = "size", size

    log_level = "info"
    raw = env.get(LOG)
    if raw is not None and raw.strip() != "":
        v = raw.strip().lower()
        if v in ("info", "debug", "warning"):
            log_level = v
        else:
            bad(LOG, raw, "info, debug or warning", "info")

    return Settings(enabled, moe, fixed_in, workspace, ws_bytes, log_level, tuple(warnings))


_cached: Settings | None = None


def get_settings() -> Settings:
    """Settings of this process, parsed once."""
    global _cached
    if _cached is None:
        _cached = load_settings()
    return _cached


def reset_settings_cache() -> None:
    global _cached
    _cached = None
