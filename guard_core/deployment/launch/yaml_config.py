"""A server's ``--config`` YAML file: PyYAML where installed, else the flat/one-level subset both servers document."""

from __future__ import annotations

import json
import re

from guard_core.deployment.command_limits import LaunchError, bounded_config_text
from guard_core.deployment.launch.values import INT_RE

__all__ = ["load_yaml"]


def load_yaml(path: str) -> dict:
    """A server --config file: PyYAML where installed, else the flat/one-level subset both servers document."""
    text = bounded_config_text(path)  # file, size, nesting, aliases: the same line as the server reader
    try:
        import yaml  # noqa: F401
    except ImportError:
        data = _mini_yaml(path, text)
    else:
        try:
            data = yaml.safe_load(text)
        except Exception as exc:
            raise LaunchError(f"--config {path!r} in the launch command is not valid YAML "
                              f"({type(exc).__name__})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise LaunchError(f"--config {path!r} in the launch command must hold a mapping of options")
    return data


def _scalar(text: str):
    t = text.strip()
    if not t:
        return None
    if t[0] in "[{\"'":
        if t[0] == "'" and t.endswith("'"):
            return t[1:-1]
        try:
            return json.loads(t)
        except ValueError:
            if t[0] == "[" and t.endswith("]"):
                return [_scalar(p) for p in t[1:-1].split(",") if p.strip()]
            return t
    low = t.lower()
    if low in ("true", "yes", "on"):
        return True
    if low in ("false", "no", "off"):
        return False
    if low in ("null", "~"):
        return None
    if INT_RE.fullmatch(t) and len(t) < 20:
        return int(t)
    try:
        return float(t) if re.fullmatch(r"[+-]?\d+\.\d*([eE][+-]?\d+)?", t) else t
    except ValueError:
        return t


def _mini_yaml(path: str, text: str) -> dict:
    """``key: value``, ``key:`` + indented ``- item`` lists or ``sub: value`` maps, comments."""
    out: dict = {}
    cur = None
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip() or line.strip() == "---":
            continue
        indent = len(line) - len(line.lstrip())
        s = line.strip()
        if indent == 0:
            key, sep, val = s.partition(":")
            if not sep:
                raise LaunchError(f"--config {path!r}: cannot read {s[:60]!r} without PyYAML (pip install pyyaml)")
            key = key.strip().strip("'\"")
            if val.strip():
                out[key] = _scalar(val)
                cur = None
            else:
                out[key] = None
                cur = key
        elif cur is not None:
            if s.startswith("- "):
                if not isinstance(out[cur], list):
                    out[cur] = []
                out[cur].append(_scalar(s[2:]))
            else:
                k, sep, v = s.partition(":")
                if not sep:
                    raise LaunchError(f"--config {path!r}: cannot read {s[:60]!r} without PyYAML")
                if not isinstance(out[cur], dict):
                    out[cur] = {}
                out[cur][k.strip().strip("'\"")] = _scalar(v)
        else:
            raise LaunchError(f"--config {path!r}: cannot read {s[:60]!r} without PyYAML (pip install pyyaml)")
    return out
