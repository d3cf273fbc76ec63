"""The FLASHINFER_GUARD_* environment switches, parsed once per process.

Names never start with ``VLLM_``: vLLM warns about every unknown ``VLLM_*``
variable and refuses to start on them with ``--fail-on-environ-validation``.

Promises (hostile values included):

* ``load_settings`` never raises and never half-accepts a value: each variable
  is either valid, or yields exactly one warning line (naming the variable, its
  value truncated to 40 characters and escaped with ``ascii()``, and the
  accepted values) and its default applies. Each variable is parsed on its own,
  so a bad value of one never changes another, and never turns a guard off.
* Sizes (``FLASHINFER_GUARD_WORKSPACE``, and ``--workspace`` of the CLI): ASCII
  digits with at most one decimal point, optional spaces, then a unit: none or
  ``B`` (bytes), ``K``/``KB``/``M``/``MB``/``G``/``GB``/``T``/``TB`` (powers of
  1000) or ``KiB``/``MiB``/``GiB``/``TiB`` (powers of 1024), any case. The
  arithmetic is integer only (a fraction is rounded up to a whole byte), the
  number is at most 24 characters, and the result must lie between 1 MiB and
  288 GiB (just above the largest GPU memory in the table,
  ``gpus.GPU_MEMORY``: B300/GB300, 268.6 GiB); anything else is refused,
  never truncated to a smaller size.
* ``FLASHINFER_GUARD_WORKSPACE_MAX``: the most a fixed-split mode (SGLang's
  deterministic inference) may make the workspace, where the need grows with the
  prompt: a size as above, or a share of the GPU's memory from 0.01% to 50%
  (``5%``, ``2.5%``; at most two decimals, integer arithmetic). Default 5%: SGLang
  keeps ``1 - mem_fraction_static`` of the GPU outside its KV pool for activations,
  CUDA graphs and this buffer (10-15% on the large GPUs this mode runs on), and
  already takes 2 GiB of it here; 5% (7.0 GiB on an H200, 6.0 GiB on a GB10) leaves
  at least half of that headroom. Where the GPU's memory is unknown: 4 GiB (5% of
  80 GiB).
* Versions (``FLASHINFER_GUARD_MOE_FIXED_IN``, and the CLI's version options):
  ASCII, at most 64 characters and at most 18 digits per number, checked before
  any regular expression or ``int()`` runs, then PEP 440.
"""

from __future__ import annotations

import os
import re

from guard_core.units import GIB, MIB, fmt_mib

__all__ = ["ALL_VARIABLES", "DEFAULT_MOE_FIXED_IN", "DEFAULT_WORKSPACE_MAX", "GIB", "LOG", "MASTER",
           "MAX_SIZE_BYTES", "MIN_SIZE_BYTES", "MLA", "MOE", "MOE_FIXED_IN", "RESERVE", "SIZE_ACCEPTED", "Settings", "WORKSPACE",
           "WORKSPACE_MAX", "WORKSPACE_MAX_UNKNOWN_GPU", "bounded_version", "get_settings", "load_settings",
           "parse_size", "reset_settings_cache", "show_value"]


MASTER = "FLASHINFER_GUARD"
MOE = "FLASHINFER_GUARD_MOE"
MOE_FIXED_IN = "FLASHINFER_GUARD_MOE_FIXED_IN"
WORKSPACE = "FLASHINFER_GUARD_WORKSPACE"
LOG = "FLASHINFER_GUARD_LOG"
WORKSPACE_MAX = "FLASHINFER_GUARD_WORKSPACE_MAX"
RESERVE = "FLASHINFER_GUARD_RESERVE"
MLA = "FLASHINFER_GUARD_MLA"
ALL_VARIABLES = (MASTER, MOE, MOE_FIXED_IN, WORKSPACE, LOG, WORKSPACE_MAX, RESERVE, MLA)

DEFAULT_MOE_FIXED_IN = "0.6.16"
MIN_SIZE_BYTES = MIB
MAX_SIZE_BYTES = 288 * GIB  # just above the largest GPU memory we plan for (B300/GB300: 268.6 GiB)
SIZE_ACCEPTED = "a size from 1 MiB to 288 GiB such as 768MiB, 1GiB, 1.5GB or a byte count"
DEFAULT_WORKSPACE_MAX = ("percent", 500)  # basis points of the GPU's memory: 5%
WORKSPACE_MAX_UNKNOWN_GPU = 4 * GIB  # 5% of an 80 GiB GPU, where the memory is unknown
WORKSPACE_MAX_ACCEPTED = ("a share of the GPU's memory from 0.01% to 50% such as 5% or 2.5%, or "
                          "a size from 1 MiB to 288 GiB such as 8GiB")
_PERCENT_RE = re.compile(r"([0-9]{1,2})(?:\.([0-9]{1,2}))? *%")
VERSION_ACCEPTED = "a version such as 0.6.16 or 0.7.2.post1 (at most 64 characters)"
MAX_VERSION_CHARS = 64
_MAX_NUMBER_CHARS = 24
_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "kib": 1 << 10,
    "m": 1000**2, "mb": 1000**2, "mib": 1 << 20,
    "g": 1000**3, "gb": 1000**3, "gib": 1 << 30,
    "t": 1000**4, "tb": 1000**4, "tib": 1 << 40,
}
_SIZE_RE = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+) *([A-Za-z]{0,3})")
_LONG_DIGITS_RE = re.compile(r"[0-9]{19}")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_SHOW_CHARS = 40


class Settings:
    """The parsed switches. A plain class: this module is on every server's start-up path."""

    __slots__ = ("enabled", "moe", "moe_fixed_in", "workspace", "workspace_bytes", "log_level", "warnings",
                 "workspace_max", "reserve", "mla")
    _KEY = ("enabled", "moe", "moe_fixed_in", "workspace", "workspace_bytes", "log_level", "workspace_max",
            "reserve", "mla")

    def __init__(self, enabled=True, moe="auto", moe_fixed_in=DEFAULT_MOE_FIXED_IN, workspace="auto",
                 workspace_bytes=None, log_level="info", warnings=(), workspace_max=DEFAULT_WORKSPACE_MAX,
                 reserve="auto", mla="auto"):
        self.enabled = enabled  # master switch
        self.moe = moe  # auto | strict | on | off (guard_core.flashinfer.moe_evidence: what auto and strict do)
        self.moe_fixed_in = moe_fixed_in
        self.workspace = workspace  # auto | exact | off | size
        self.workspace_bytes = workspace_bytes
        self.log_level = log_level  # info | debug | warning
        self.warnings = tuple(warnings)  # one line per bad value
        # ("percent", basis points of the GPU's memory) | ("bytes", n): the most a
        # fixed-split mode may make the workspace (workspace_max_bytes)
        self.workspace_max = workspace_max
        # auto | full | off: how the buffer is counted in the server's KV budget (guard_core.decide.kv_budget)
        self.reserve = reserve
        # auto | strict | off: the MLA planner's works limit (off: the net after each MLA plan
        # stands aside, guard_core.runtime.mla_net)
        self.mla = mla

    def workspace_max_bytes(self, gpu_memory_bytes: int | None) -> int:
        """The affordable workspace in a fixed-split mode, for a GPU of this much memory."""
        kind, value = self.workspace_max
        if kind == "bytes":
            return int(value)
        if not gpu_memory_bytes or gpu_memory_bytes <= 0:
            return WORKSPACE_MAX_UNKNOWN_GPU
        return int(gpu_memory_bytes) * int(value) // 10000

    def describe_workspace_max(self) -> str:
        kind, value = self.workspace_max
        if kind == "bytes":
            return fmt_mib(value)
        whole, frac = divmod(int(value), 100)
        return f"{whole}%" if not frac else f"{whole}.{frac:02d}".rstrip("0") + "%"

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
            WORKSPACE: (fmt_mib(self.workspace_bytes) if self.workspace == "size" else self.workspace),
            LOG: self.log_level,
            WORKSPACE_MAX: self.describe_workspace_max(),
            RESERVE: self.reserve,
            MLA: self.mla,
        }


def show_value(value, limit: int = _SHOW_CHARS) -> str:
    """A value for a one-line message: at most ``limit`` characters, escaped with ascii()."""
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:
        return "<unprintable>"
    if len(text) <= limit:
        return ascii(text)
    return f"{ascii(text[:limit])}... ({len(text)} characters)"


def parse_size(text) -> int | None:
    """'768MiB', '1GiB', '1.5GB', '1073741824' -> bytes; None unless a size from 1 MiB to 288 GiB.

    Never raises. ASCII only, integer arithmetic, the length bounded before any
    conversion; a fraction of a byte is rounded up.
    """
    if not isinstance(text, str):
        return None
    t = text.strip(" \t")
    if not t or len(t) > _MAX_NUMBER_CHARS + 8 or not t.isascii():
        return None
    m = _SIZE_RE.fullmatch(t)
    if m is None:
        return None
    number, unit = m.group(1), m.group(2).lower()
    if len(number) > _MAX_NUMBER_CHARS or unit not in _UNITS:
        return None
    whole, _, frac = number.partition(".")
    scale = 10 ** len(frac)
    numerator = int(whole or "0") * scale + int(frac or "0")
    value = -(-numerator * _UNITS[unit] // scale)  # ceil, integers only
    if value < MIN_SIZE_BYTES or value > MAX_SIZE_BYTES:
        return None
    return value


def bounded_version(text) -> str | None:
    """``text`` stripped when it is a sane PEP 440 version, else None. Never raises.

    Bounded before any regular expression or ``int()`` runs: ASCII, at most 64
    characters, at most 18 digits in a row.
    """
    if not isinstance(text, str):
        return None
    t = text.strip()
    if not t or len(t) > MAX_VERSION_CHARS or not t.isascii() or not t.isprintable():
        return None
    if _LONG_DIGITS_RE.search(t):
        return None
    try:
        from guard_core.versions import parse_version

        parse_version(t)
    except Exception:
        return None
    return t


def _text(raw) -> str | None:
    """The value as text, or None for unset/empty (both mean: the default)."""
    if raw is None:
        return None
    if not isinstance(raw, str):
        raw = str(raw)
    return raw if raw.strip() != "" else None


def _parse_master(raw: str):
    v = raw.strip().lower()
    if v in _FALSE:
        return False
    if v in _TRUE:
        return True
    return None


def _parse_choice(choices):
    def parse(raw: str):
        v = raw.strip().lower()
        return v if v in choices else None
    return parse


def _parse_workspace(raw: str):
    v = raw.strip().lower()
    if v in ("auto", "off", "exact"):
        return (v, None)
    size = parse_size(raw)
    return None if size is None else ("size", size)


def _parse_workspace_max(raw: str):
    """'5%' / '2.5%' (0.01% to 50%) -> ("percent", basis points); a size -> ("bytes", n)."""
    t = raw.strip(" \t")
    if t.endswith("%"):
        if len(t) > 8 or not t.isascii():
            return None
        m = _PERCENT_RE.fullmatch(t)
        if m is None:
            return None
        bp = int(m.group(1)) * 100 + int((m.group(2) or "0").ljust(2, "0"))
        return ("percent", bp) if 1 <= bp <= 5000 else None
    size = parse_size(raw)
    return None if size is None else ("bytes", size)


# variable, parser (returns None for a bad value), accepted values, default value, the default as said
_TABLE = (
    (MASTER, _parse_master, "1 or 0 (also true/false, yes/no, on/off)", True, "1"),
    (MOE, _parse_choice(("auto", "strict", "on", "off")), "auto, strict, on or off", "auto", "auto"),
    (MOE_FIXED_IN, bounded_version, VERSION_ACCEPTED, DEFAULT_MOE_FIXED_IN, DEFAULT_MOE_FIXED_IN),
    (WORKSPACE, _parse_workspace, "auto, exact, off or " + SIZE_ACCEPTED, ("auto", None), "auto"),
    (LOG, _parse_choice(("info", "debug", "warning")), "info, debug or warning", "info", "info"),
    (WORKSPACE_MAX, _parse_workspace_max, WORKSPACE_MAX_ACCEPTED, DEFAULT_WORKSPACE_MAX, "5%"),
    (RESERVE, _parse_choice(("auto", "full", "off")), "auto, full or off", "auto", "auto"),
    (MLA, _parse_choice(("auto", "strict", "off")), "auto, strict or off", "auto", "auto"),
)


def load_settings(environ=None) -> Settings:
    """Parse the switches of ``environ`` (default ``os.environ``). Never raises.

    Every variable is parsed on its own: a bad value gives one warning and that
    variable's default, and changes nothing else.
    """
    warnings: list[str] = []
    values = {}
    try:
        env = os.environ if environ is None else environ
    except Exception:
        env = {}
    for var, parse, accepted, default, said in _TABLE:
        value = default
        raw = None
        try:
            raw = _text(env.get(var))
            if raw is not None:
                parsed = parse(raw)
                if parsed is None:
                    warnings.append(f"ignoring {var}={show_value(raw)}: accepted values are {accepted}; "
                                    f"using the default {said}")
                else:
                    value = parsed
        except Exception as exc:  # a value that cannot even be read: still one line, still the default
            warnings.append(f"ignoring {var}={show_value(raw)}: unreadable ({type(exc).__name__}); "
                            f"accepted values are {accepted}; using the default {said}")
            value = default
        values[var] = value
    workspace, ws_bytes = values[WORKSPACE]
    return Settings(values[MASTER], values[MOE], values[MOE_FIXED_IN], workspace, ws_bytes, values[LOG],
                    tuple(warnings), workspace_max=values[WORKSPACE_MAX], reserve=values[RESERVE],
                    mla=values[MLA])


_cached: Settings | None = None


def get_settings() -> Settings:
    """Settings of this process, parsed once. Never raises."""
    global _cached
    if _cached is None:
        try:
            _cached = load_settings()
        except Exception:  # load_settings does not raise; this is the last line of defence
            _cached = Settings(warnings=("could not read the FLASHINFER_GUARD_* settings; using the defaults",))
    return _cached


def reset_settings_cache() -> None:
    global _cached
    _cached = None
