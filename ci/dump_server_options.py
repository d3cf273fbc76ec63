"""Dump the installed server's launch-command parser as data for the built-in reader.

Run with a framework environment's python (it imports vLLM or SGLang):

    ~/.cache/flashinfer-guard/envs/vllm-0.33.0/bin/python ci/dump_server_options.py vllm
    ~/.cache/flashinfer-guard/envs/sglang-0.5.23/bin/python ci/dump_server_options.py sglang

    PYTHONPATH=/tmp/sglang-0.5.5-unzipped .../envs/sglang-0.5.23/bin/python ci/dump_server_options.py sglang 0.5.5

(the second form reads an uninstalled pure-Python release's own source). It writes
guard_core/deployment/server_options/<framework>-<version>.json: every option of
``vllm serve`` (vLLM's ServeSubcommand parser) or of ``python -m
sglang.launch_server`` (``ServerArgs.add_cli_args``) with its option strings,
destination, nargs and action kind, so that ``guard_core.deployment.launch_command`` can rebuild
the same argparse parser (aliases, abbreviations, lists, flags) where the
server is not installed. tests/vllm/test_launch_parser.py and
tests/sglang/test_launch_parser.py check that the committed file equals what the
installed parser says.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "guard_core", "deployment", "server_options")


def _kind(action) -> str:
    name = type(action).__name__
    if isinstance(action, argparse._StoreTrueAction):
        return "store_true"
    if isinstance(action, argparse._StoreFalseAction):
        return "store_false"
    if isinstance(action, argparse._StoreConstAction):
        return "store_const"
    if isinstance(action, argparse._AppendAction):
        return "append"
    if isinstance(action, argparse._CountAction):
        return "count"
    if isinstance(action, argparse._HelpAction):
        return "help"
    if isinstance(action, argparse._VersionAction):
        return "version"
    if isinstance(action, argparse.BooleanOptionalAction) or "BooleanOptional" in name or "EnableDisable" in name:
        return "boolean_optional"
    if isinstance(action, argparse._StoreAction):
        return "store"
    # a custom action: a value unless it takes none
    return "store" if action.nargs != 0 else "store_true"


def _type_name(action) -> str | None:
    """The value type the built-in reader applies as the parser does (issue 29: a value the server's
    parser refuses is refused by both): int, float, vLLM's human-readable ints and optional_type."""
    t = action.type
    if t is int or t is float:
        return t.__name__
    name = getattr(t, "__name__", "")
    if name in ("human_readable_int", "human_readable_int_or_auto"):
        return name
    if name == "_optional_type":  # vllm/engine/arg_utils.py optional_type(return_type)
        inner = [c.cell_contents for c in (getattr(t, "__closure__", None) or ())]
        for base in (int, float):
            if base in inner:
                return "optional_" + base.__name__
    return None


def _choices(action) -> list | None:
    if action.choices and action.type in (None, str) and all(isinstance(c, str) for c in action.choices):
        return sorted(action.choices)  # some are built from sets: their order varies between runs
    return None


def table(parser) -> dict:
    # every string the parser matches (and abbreviates) for an action: its option_strings plus the
    # hidden ones it registers, e.g. vLLM 0.33's EnableDisableAction keeps --no-enable-x out of
    # option_strings (vllm/utils/argparse_utils.py _register_action)
    registered: dict = {}
    for s, act in parser._option_string_actions.items():
        registered.setdefault(id(act), []).append(s)
    actions = []
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            continue
        nargs = a.nargs
        options = list(a.option_strings) + sorted(o for o in registered.get(id(a), []) if o not in a.option_strings)
        entry = {"options": options, "dest": a.dest, "nargs": nargs, "kind": _kind(a),
                 "const": a.const if isinstance(a.const, (bool, int, str, type(None))) else None}
        if entry["kind"] in ("store", "append") and _type_name(a):
            entry["type"] = _type_name(a)
        if entry["kind"] in ("store", "append") and _choices(a):
            entry["choices"] = _choices(a)
        if entry["kind"] == "boolean_optional":
            neg = getattr(a, "negative_option_strings", None)
            entry["negative"] = sorted(neg) if neg else sorted(o for o in options if o.startswith("--no-"))
        actions.append(entry)
    return {"allow_abbrev": parser.allow_abbrev, "prefix_chars": parser.prefix_chars, "actions": actions}


def vllm_parser():
    """The `vllm serve` subparser, built as guard_core.deployment.server_parsers builds it for `plan`."""
    sys.path.insert(0, os.path.dirname(HERE))
    from guard_core.deployment.server_parsers import _vllm_parser
    return _vllm_parser()[1]


def sglang_parser():
    from sglang.srt.server_args import ServerArgs
    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    return p


def main() -> int:
    fw = sys.argv[1]
    parser = vllm_parser() if fw == "vllm" else sglang_parser()
    version = metadata.version(fw)
    data = {"framework": fw, "version": version, **table(parser)}
    if len(sys.argv) > 2:
        # the package's own source imported first on PYTHONPATH from an unpacked wheel of another
        # release (pure-Python SGLang wheels: `pip download sglang==0.5.5 --no-deps`, unzip), where
        # that release's environment is not installed: name the release read
        data["version"] = version = sys.argv[2]
        data["read_from"] = (f"{fw} {version}'s own source imported with the python of "
                             f"{os.path.basename(sys.prefix)} (the {version} environment not installed)")
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"{fw}-{version}.json")
    with open(path, "w", encoding="utf-8") as fh:  # one action per line: reviewable diffs
        head = {k: v for k, v in data.items() if k != "actions"}
        fh.write(json.dumps(head, sort_keys=True)[:-1] + ', "actions": [\n')
        fh.write(",\n".join(json.dumps(a, sort_keys=True) for a in data["actions"]) + "\n]}\n")
    print(path, len(data["actions"]), "actions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
