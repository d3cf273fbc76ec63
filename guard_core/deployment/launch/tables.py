"""The servers' option tables (``guard_core/deployment/server_options/*.json``, dumped from the real parsers by
``ci/dump_server_options.py``) and the argparse parser rebuilt from one, recording what it reads."""

from __future__ import annotations

import argparse
import json
import os
import re

from guard_core.deployment.command_limits import LaunchError

__all__ = ["Refused", "load_table", "rebuilt_parser", "table_versions"]


_TABLE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "server_options")


def table_versions(framework: str) -> list[str]:
    from guard_core.versions import parse_version
    try:
        names = os.listdir(_TABLE_DIR)
    except OSError:
        return []
    vs = [n[len(framework) + 1:-5] for n in names if n.startswith(framework + "-") and n.endswith(".json")]
    return sorted(vs, key=parse_version)


def load_table(framework: str, line: str | None) -> dict:
    """The dumped option table of ``line`` (the newest one not above it, else the oldest)."""
    from guard_core.versions import parse_version
    vs = table_versions(framework)
    if not vs:
        raise LaunchError(f"no {framework} option table in {_TABLE_DIR}: reinstall flashinfer-guard")
    pick = vs[0]
    for v in vs:
        try:
            if line and parse_version(v) <= parse_version(line):
                pick = v
        except Exception:
            pass
    with open(os.path.join(_TABLE_DIR, f"{framework}-{pick}.json"), encoding="utf-8") as fh:
        return json.load(fh)


class Refused(Exception):
    pass


class _RebuiltParser(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)

    def exit(self, status=0, message=None):
        raise Refused(message or "exit")


def _recording(cls, seen: list):
    """An argparse action class that notes (dest, option string, values) before acting."""
    class Recording(cls):
        def __call__(self, parser, namespace, values, option_string=None):
            seen.append((self.dest, option_string, values))
            super().__call__(parser, namespace, values, option_string)
    Recording.__name__ = cls.__name__
    return Recording


class _Flag(argparse.Action):
    """store_true / store_false / store_const / --x / --no-x from the table."""

    def __init__(self, option_strings, dest, kind="store_true", const=None, negative=None, **kw):
        self.kind = kind
        self.negative = set(negative) if negative is not None else None
        super().__init__(option_strings, dest, nargs=0, const=const, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        if self.kind == "boolean_optional":
            # the table names the negative spellings (vLLM 0.33: --disable-x and --no-enable-x)
            neg = self.negative if self.negative is not None else {o for o in self.option_strings
                                                                  if o.startswith("--no-")}
            v = option_string not in neg
        elif self.kind == "store_false":
            v = False
        elif self.kind == "store_const":
            v = self.const
        else:
            v = True
        setattr(namespace, self.dest, v)


def _human_readable_int(value: str) -> int:
    """vLLM's ``human_readable_int`` (vllm/utils/argparse_utils.py 0.23.0:29-72, 0.33.0:30-74), as
    its parser applies it: ``16k`` = 16000 through a float, ``16K`` = 16384, else ``int()``."""
    value = value.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if m:
        number, suffix = m.groups()
        try:
            if suffix in "kmgt":
                return int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
            return int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"invalid value {value[:40]!r}") from None
    return int(value)


def _human_readable_int_or_auto(value: str) -> int:
    value = value.strip()
    return -1 if value == "-1" or value.lower() == "auto" else _human_readable_int(value)


def _optional(base):
    """vLLM's ``optional_type`` (vllm/engine/arg_utils.py 0.23.0:153-159): "" and "None" are None."""
    def _optional_type(val: str):
        if val == "" or val == "None":
            return None
        try:
            return base(val)
        except ValueError:
            raise argparse.ArgumentTypeError(f"Value {val[:40]} cannot be converted to {base}.") from None
    _optional_type.__name__ = f"optional {base.__name__}"
    return _optional_type


# the value types an option table names (ci/dump_server_options.py _type_name); a table without
# them (a line read from an uninstalled release's source) keeps every value a string
_TYPES = {"int": int, "float": float, "human_readable_int": _human_readable_int,
          "human_readable_int_or_auto": _human_readable_int_or_auto, "optional_int": _optional(int),
          "optional_float": _optional(float)}


def rebuilt_parser(table: dict, seen: list) -> argparse.ArgumentParser:
    """An argparse parser with the server's options (every value a string), recording what it reads."""
    p = _RebuiltParser(prog="server", add_help=False, allow_abbrev=table.get("allow_abbrev", True))
    for a in table["actions"]:
        kind, opts = a["kind"], a["options"]
        if kind in ("help", "version"):
            if opts:
                p.add_argument(*opts, dest=a["dest"], action=_recording(_Flag, seen), kind="store_true",
                               default=argparse.SUPPRESS)
            continue
        if not opts:
            p.add_argument(a["dest"], nargs=a["nargs"] if a["nargs"] is not None else None,
                           default=None, action=_recording(argparse._StoreAction, seen))
            continue
        if kind in ("store_true", "store_false", "store_const", "boolean_optional", "count"):
            p.add_argument(*opts, dest=a["dest"], action=_recording(_Flag, seen),
                           kind="store_true" if kind == "count" else kind, const=a.get("const"),
                           negative=a.get("negative"), default=argparse.SUPPRESS)
        else:
            nargs = a["nargs"]
            action = argparse._AppendAction if kind == "append" else argparse._StoreAction
            kw = {"const": a.get("const")} if nargs == "?" else {}
            if a.get("type") in _TYPES:
                kw["type"] = _TYPES[a["type"]]
            if a.get("choices"):
                kw["choices"] = a["choices"]
            p.add_argument(*opts, dest=a["dest"], nargs=nargs, action=_recording(action, seen),
                           default=argparse.SUPPRESS, **kw)
    return p
