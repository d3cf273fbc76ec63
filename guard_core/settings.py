"""The FLASHINFER_GUARD_* environment switches, parsed once per process.

Names never start with ``VLLM_``: vLLM warns about every unknown ``VLLM_*``
variable and refuses to start on them with ``--fail-on-environ-validation``.
A bad value never raises: it yields one warning line naming the variable and
the accepted values, and the default applies.
"""

from __future__ import annotations

import os


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
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class Settings:
    """The parsed switches. A plain class: this module is on every server's start-up path."""

    __slots__ = ("enabled", "moe", "moe_fixed_in", "workspace", "workspace_bytes", "log_level", "warnings")
    _KEY = ("enabled", "moe", "moe_fixed_in", "workspace", "workspace_bytes", "log_level")

    def __init__(self, enabled=True, moe="auto", moe_fixed_in=DEFAULT_MOE_FIXED_IN, workspace="auto",
                 workspace_bytes=None, log_level="info", warnings=()):
        self.enabled = enabled  # master switch
        self.moe = moe  # auto | on | off
        self.moe_fixed_in = moe_fixed_in
        self.workspace = workspace  # auto | off | size
        self.workspace_bytes = workspace_bytes
        self.log_level = log_level  # info | debug | warning
        self.warnings = tuple(warnings)  # one line per bad value

    def _key(self):
        return tuple(getattr(self, k) for k in self._KEY)

    def __eq__(self, other):  # warnings are not part of the value
        return isinstance(other, Settings) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def __repr__(self):
        return "Settings(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self._KEY) + ")"

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
    t = (text or "").strip()
    i = 0
    while i < len(t) and (t[i].isdigit() or t[i] == "."):
        i += 1
    number, unit = t[:i], t[i:].strip().lower()
    if not number or number.count(".") > 1 or not number.replace(".", "").isdigit() or unit not in _UNITS:
        return None
    value = float(number) * _UNITS[unit]
    if value <= 0:
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
        from .versions import is_version

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
