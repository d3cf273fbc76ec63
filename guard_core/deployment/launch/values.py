"""Values of a launch command read as the servers read them, bounded: integers, vLLM's human-readable
integers, JSON objects, capture-size lists, booleans, strings; and one-line display of what was passed."""

from __future__ import annotations

import json
import re

from guard_core.deployment.command_limits import LaunchError, check_json_text
from guard_core.deployment.launch.record import BOUNDS, MAX_CAPTURE_SIZES

__all__ = ["INT_RE", "bool_option", "human_int_option", "int_option", "json_option", "printable", "read_int", "show",
           "sizes_option", "str_option"]


INT_RE = re.compile(r"[+-]?\d+(?:_\d+)*")


def show(text) -> str:
    t = text if isinstance(text, str) else repr(text)
    return repr(t[:40]) + ("..." if len(t) > 40 else "")


def int_option(opt: str, value, hi: int, lo: int = 1) -> int:
    """A launch-command integer as Python's int() reads it (the servers' type=int), bounded."""
    if type(value) is int:
        v = value
    elif isinstance(value, str) and len(value.strip()) <= len(str(hi)) + 4 and INT_RE.fullmatch(value.strip()):
        v = int(value.strip())  # any Unicode decimal digits, as int() reads them (fullwidth "６４")
    else:
        raise LaunchError(f"{opt} in the launch command must be an integer ({lo} to {hi}), got {show(value)}")
    if not lo <= v <= hi:
        raise LaunchError(f"{opt} in the launch command must be from {lo} to {hi}, got {show(str(value))}")
    return v


_HUMAN_RE = re.compile(r"(\d{1,12}(?:\.\d{1,6})?)([kKmMgGtT])")


def human_int_option(opt: str, value, hi: int, auto: bool = False) -> int | None:
    """vLLM's human_readable_int (``16k`` = 16000, ``16K`` = 16384; vllm/utils/argparse_utils.py), bounded;
    with ``auto``: -1 / auto -> None (the model's own)."""
    if type(value) is int:
        if auto and value == -1:
            return None
        return int_option(opt, value, hi)
    t = value.strip() if isinstance(value, str) else ""
    if auto and (t == "-1" or t.lower() == "auto"):
        return None
    m = _HUMAN_RE.fullmatch(t)  # \d: Unicode digits, as vLLM's own re.fullmatch and float() read them
    if m:
        number, suffix = m.groups()
        if suffix in "kmgt":  # through a float, as vLLM does: 8.19k is 8189 (argparse_utils.py 0.23.0:58)
            v = int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        elif "." in number:
            raise LaunchError(f"{opt} in the launch command: no decimals with a binary suffix, got {show(t)}")
        else:
            v = int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
        if not 1 <= v <= hi:
            raise LaunchError(f"{opt} in the launch command must be from 1 to {hi}, got {show(t)}")
        return v
    return int_option(opt, t, hi)


def json_option(opt: str, value) -> dict:
    if value is None:
        return {}
    if isinstance(value, dict):
        return value
    if not isinstance(value, str):  # a parsed config object (the server's own parser)
        return _as_dict(value)
    check_json_text(opt, value)
    try:
        v = json.loads(value)
    except (ValueError, RecursionError):
        raise LaunchError(f"{opt} in the launch command must be a JSON object, got {show(value)}") from None
    if not isinstance(v, dict):
        raise LaunchError(f"{opt} in the launch command must be a JSON object, got {show(value)}")
    return v


def _as_dict(obj) -> dict:
    """A vLLM config object (pydantic dataclass) or dict as a dict of its fields."""
    if obj is None:
        return {}
    if isinstance(obj, dict):
        return obj
    import dataclasses
    if dataclasses.is_dataclass(obj):
        return {f.name: getattr(obj, f.name, None) for f in dataclasses.fields(obj)}
    return dict(getattr(obj, "__dict__", {}))


def sizes_option(opt: str, values) -> tuple[int, ...]:
    if isinstance(values, (str, int)):
        values = [values]
    values = list(values or [])
    if not values or len(values) > MAX_CAPTURE_SIZES:
        raise LaunchError(f"{opt} in the launch command needs 1 to {MAX_CAPTURE_SIZES} batch sizes")
    return tuple(int_option(opt, v, BOUNDS["max_capture"]) for v in values)


def bool_option(opt: str, value) -> bool:
    if isinstance(value, bool):
        return value
    t = str(value).strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise LaunchError(f"{opt} in the launch command must be true or false, got {show(value)}")


def str_option(opt: str, value) -> str:
    t = str(value).strip() if value is not None else ""
    if not t:
        raise LaunchError(f"{opt} in the launch command needs a value")
    return t[:200]


def read_int(text) -> int | None:
    """A number as the servers read their environment variables, Python's ``int()``
    (surrounding spaces, underscores between digits, any Unicode decimal digits such as
    fullwidth ones); None where ``int()`` raises."""
    try:
        return int(str(text))
    except (TypeError, ValueError):
        return None


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text) -> str:
    """``text`` on one line: control characters (a newline in an option value) escaped as repr does."""
    t = str(text)
    return _CONTROL_RE.sub(lambda m: repr(m.group(0))[1:-1], t)
