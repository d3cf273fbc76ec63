"""The built-in reader: vLLM's argv pre-processing (``FlexibleArgumentParser.parse_args``) and SGLang's
``--config`` merge, then the rebuilt parser (``builtin_read``)."""

from __future__ import annotations

import json
import re

from guard_core.deployment.command_limits import MAX_JSON_DEPTH, LaunchError, bounded_config_text, check_json_text
from guard_core.deployment.launch.tables import Refused, rebuilt_parser
from guard_core.deployment.launch.values import human_int_option, printable, show
from guard_core.deployment.launch.yaml_config import load_yaml
from guard_core.deployment.server_defaults import framework_label

__all__ = ["builtin_read", "sglang_config_args", "vllm_preprocess"]


def _vllm_config_args(path: str, table: dict) -> list[str]:
    """vLLM's FlexibleArgumentParser.load_config_file: YAML -> ``--key value`` (bools as flags,
    lists as several values, mappings as JSON)."""
    # vLLM refuses a --config whose name does not end in .yaml/.yml (load_config_file, 0.23.0:553-557)
    bounded_config_text(path)  # the bounds first, as the server reader checks them before vLLM's parser
    if path.split(".")[-1] not in ("yaml", "yml"):
        raise LaunchError(f"--config {show(path)} in the launch command: vLLM reads only .yaml/.yml files")
    out: list[str] = []
    for key, value in load_yaml(path).items():
        key = str(key)
        if isinstance(value, bool):
            if value:
                out.append("--" + key)
            # `key: false` is dropped: vLLM 0.23 drops it (argparse_utils.py 0.23.0:573-575); 0.32+
            # add --no-key only where the parser reading the YAML has it (0.33.0:654-658), and for
            # `vllm serve` that is the top-level `vllm` parser, which has none of serve's options
        elif isinstance(value, list):
            if value:
                out += ["--" + key] + [str(v) for v in value]
        elif isinstance(value, dict):
            out += ["--" + key, json.dumps(value)]
        else:
            out += ["--" + key, str(value)]
    return out


def vllm_preprocess(args: list[str], serve: bool, table: dict) -> list[str]:
    """What vLLM's FlexibleArgumentParser.parse_args does to argv before argparse
    (vllm/utils/argparse_utils.py, 0.23 and 0.33)."""
    args = list(args)
    if serve:
        args = _vllm_model_first(["serve"] + args)
    if "--config" in args:
        args = _vllm_config_inline(args, serve, table)
    return _vllm_dotted_options(_vllm_normalise_flags(args, table))


def _vllm_model_first(args: list[str]) -> list[str]:
    """``serve ... --model M ...`` -> ``serve M ...`` (vLLM moves --model to the positional)."""
    idx = next((i for i, a in enumerate(args) if re.match(r"^--model(=.+|$)", a)), None)
    if idx is None:
        return args
    if args[idx] == "--model":
        if idx + 1 >= len(args):
            raise LaunchError("--model in the launch command needs a value")
        tag, rest_start = args[idx + 1], idx + 2
    else:
        tag, rest_start = args[idx][len("--model="):], idx + 1
    return ["serve", tag] + args[1:idx] + args[rest_start:]


def _vllm_config_inline(args: list[str], serve: bool, table: dict) -> list[str]:
    """``--config serve.yaml``: its options spliced in where vLLM splices them."""
    if args.count("--config") > 1:
        raise LaunchError("more than one --config in the launch command (vLLM refuses it)")
    i = args.index("--config")
    if i == len(args) - 1:
        raise LaunchError("--config in the launch command needs a YAML file")
    cfg = _vllm_config_args(args[i + 1], table)
    if serve:
        model_in_cli = len(args) > 1 and not args[1].startswith("-")
        if not model_in_cli and "--model" not in cfg:
            raise LaunchError("no model in the launch command or its --config (vLLM refuses it)")
        if model_in_cli:
            args = args[:2] + cfg + args[2:i] + args[i + 2:]
        else:
            mi = cfg.index("--model")
            model = cfg[mi + 1] if mi + 1 < len(cfg) else ""
            cfg = cfg[:mi] + cfg[mi + 2:]
            args = args[:1] + [model] + cfg + args[1:i] + args[i + 2:]
    else:
        args = cfg + args[:i] + args[i + 2:]
    return args


def _vllm_normalise_flags(args: list[str], table: dict) -> list[str]:
    """``_`` for ``-`` in option names (up to the first dot); ``-O3`` -> ``--optimization-level 3``."""
    pattern = re.compile(r"(?<=--)[^\.]*")
    out: list[str] = []
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            if "=" in arg:
                key, value = arg.split("=", 1)
                out.append(pattern.sub(lambda m: m.group(0).replace("_", "-"), key, count=1) + "=" + value)
            else:
                out.append(pattern.sub(lambda m: m.group(0).replace("_", "-"), arg, count=1))
        elif arg.startswith("-O") and arg != "-O" and "--optimization-level" in _options(table):
            out += ["--optimization-level", arg[3:] if arg[2:3] == "=" else arg[2:]]
        elif arg == "-O" and i + 1 < len(args) and args[i + 1] in {"0", "1", "2", "3"} \
                and "--optimization-level" in _options(table):
            out.append("--optimization-level")
        else:
            out.append(arg)
    return out


def _vllm_dotted_options(out: list[str]) -> list[str]:
    """Dotted options: ``--x.key value`` / ``-cc.key=value`` / ``--x.key+ a,b`` -> ``--x JSON``."""
    dicts: dict = {}
    keep: list[str] = []
    skip = set()
    for i, a in enumerate(out):
        if i in skip:
            continue
        if a.startswith("-") and "." in a and not (a.startswith("--") and "=" not in a and "." not in a):
            name = a
            if "=" in a:
                name, value_str = a.split("=", 1)
                if "." not in name:
                    keep.append(a)
                    continue
            else:
                if i + 1 >= len(out):
                    raise LaunchError(f"{a} in the launch command needs a value")
                value_str = out[i + 1]
                skip.add(i + 1)
            if name.endswith("+"):
                name = name[:-1]
                value_str = json.dumps(value_str.split(","))
            key, *keys = name.split(".")
            if len(keys) > MAX_JSON_DEPTH:
                raise LaunchError(f"{key}.{keys[0]}... in the launch command: nested deeper than {MAX_JSON_DEPTH} "
                                  "levels")
            check_json_text(name, value_str)
            try:
                value = json.loads(value_str)
            except (ValueError, RecursionError):
                try:
                    value = human_int_option(name, value_str, 1 << 62)
                except LaunchError:
                    value = value_str
            nested = value
            for k in reversed(keys):
                nested = {k: nested}
            _merge(dicts.setdefault(key, {}), nested)
            continue
        keep.append(a)
    for key, value in dicts.items():
        keep += [key, json.dumps(value)]
    return keep


def _merge(original: dict, update: dict) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _merge(original[k], v)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] += v
        else:
            original[k] = v


def _options(table: dict) -> set:
    cached = table.get("_options")
    if cached is None:
        cached = table["_options"] = {o for a in table["actions"] for o in a["options"]}
    return cached


def sglang_config_args(args: list[str], table: dict) -> list[str]:
    """SGLang's ConfigArgumentMerger (sglang/srt/server_args_config_parser.py, 0.5.5;
    srt/utils/server_args_config_parser.py, 0.5.23): the YAML's options first, then the command."""
    if "--config" not in args:
        return args
    if args.count("--config") > 1:
        raise LaunchError("more than one --config in the launch command (SGLang refuses it)")
    i = args.index("--config")
    if i == len(args) - 1:
        raise LaunchError("--config in the launch command needs a YAML file")
    flags = {a["dest"] for a in table["actions"] if a["kind"] == "store_true"}
    flags |= {o[2:].replace("-", "_") for a in table["actions"] if a["kind"] == "store_true" for o in a["options"]
              if o.startswith("--")}
    out: list[str] = []
    for key, value in load_yaml(args[i + 1]).items():
        key = str(key)
        if isinstance(value, bool):
            if key.replace("-", "_") in flags:
                if value:
                    out.append(f"--{key}")
            else:
                out += [f"--{key}", str(value).lower()]
        elif isinstance(value, list):
            if value:
                out += [f"--{key}"] + [str(v) for v in value]
        elif isinstance(value, dict):
            out += [f"--{key}", json.dumps(value)]
        else:
            out += [f"--{key}", str(value)]
    return out + args[:i] + args[i + 2:]


def builtin_read(framework: str, form: str, tokens: list[str], table: dict, strict: bool = False) -> tuple[dict, list]:
    """(namespace as a dict of raw strings, what was read) through the rebuilt parser. ``strict``
    (the table is the simulated line's own): words the parser does not know are refused, as the
    servers' ``parse_args`` refuses them ("unrecognized arguments": vLLM's FlexibleArgumentParser
    and SGLang's argparse parser both call ``parse_args``); else they are listed as not read."""
    seen: list = []
    p = rebuilt_parser(table, seen)
    # every vLLM form is read as `vllm serve` reads it, as the server reader does (server_parsers:
    # the api_server module's make_arg_parser takes the same arguments, --model moved to the front)
    serve = framework == "vllm"
    if framework == "vllm":
        argv = vllm_preprocess(tokens, serve, table)
        if serve:
            argv = argv[1:]  # the "serve" word: the table is the serve subparser's
    else:
        argv = sglang_config_args(list(tokens), table)
    try:
        ns, unknown = p.parse_known_args(argv)
    except Refused as exc:
        raise LaunchError(f"the launch command is refused by {framework_label(framework)} "
                          f"{table.get('version')}'s options: {exc}") from None
    if unknown and strict:
        raise LaunchError(f"the launch command is refused by {framework_label(framework)} {table.get('version')}'s "
                          f"options: unrecognized arguments: {printable(' '.join(unknown))[:200]}")
    d = vars(ns)
    d["_aliases"] = {a["dest"]: a["options"] for a in table["actions"]}
    for u in unknown:
        seen.append((None, u, None))
    return d, seen
