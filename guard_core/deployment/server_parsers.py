"""The installed server's own launch-command parser, for ``flashinfer-guard plan -- <command>``.

Only ``guard_core.deployment.launch_command.parse_launch`` imports this module, on the CLI path, and it
imports vLLM or SGLang lazily inside the functions below: never on a server's
start-up path (the plugin runs inside the server, which has parsed its own
command already).

- vLLM: the ``vllm serve`` subparser exactly as ``vllm``'s CLI builds it
  (``vllm.entrypoints.cli.serve.ServeSubcommand.subparser_init`` under a
  ``FlexibleArgumentParser``, whose ``parse_args`` moves ``--model`` to the
  front, pulls ``--config`` YAML, maps ``_`` to ``-``, expands ``-O3`` and
  dotted options; vllm/utils/argparse_utils.py). ``python -m
  vllm.entrypoints.openai.api_server`` takes the same arguments
  (``make_arg_parser``). On a host without a GPU vLLM cannot infer a device for
  its config defaults; the parser is then built with the device type ``cpu``,
  which changes no option.
- SGLang: ``argparse.ArgumentParser`` + ``ServerArgs.add_cli_args`` and, for
  ``--config``, SGLang's own ``ConfigArgumentMerger``, as
  ``sglang.srt.server_args.prepare_server_args`` does (0.5.5 and 0.5.23);
  ``ServerArgs`` itself is not built (its ``__post_init__`` loads the model
  and probes the GPU).

Each returns the parsed namespace as a dict and what the parser read:
(dest, option string, values) per option, recorded by wrapping the parser's
own actions.

Inside ``plan``'s session (``guard_module.session``) with the server not imported in this
process, the parse runs in plan's one server process (``module_host``, the same process as the
model reading and the resolution, with the server's environment): ``plan`` itself never imports
the server (issue 42 item 1: one server import per plan, and none of its import-time writes
here). The answer crosses as JSON (``_plain``): a parsed config object as the dict of its fields,
an enum as its name, what the readers downstream (``launch/fields.py``) read from either.
"""

from __future__ import annotations

import contextlib
import io

__all__ = ["MARK", "ServerParserUnavailable", "main", "server_read"]

MARK = "FLASHINFER_GUARD_PARSED "
PARSE_TIMEOUT_S = 180.0
_PLAIN_NODES = 200_000


class ServerParserUnavailable(Exception):
    """The server's parser cannot be built here (not importable, or it failed)."""


class _Refused(Exception):
    pass


def _raiser(message=None, *a, **k):
    raise _Refused(message if isinstance(message, str) else "exit")


_SEEN: list = []  # what the current parse read; the wrapped actions append here


def _record(parser) -> None:
    """Wrap every action of ``parser`` once so that it notes what it reads (in ``_SEEN``), then
    acts as before."""
    import argparse

    if getattr(parser, "_flashinfer_guard_recording", False):
        return
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            continue
        cls = type(action)

        class Recording(cls):
            def __call__(self, parser, namespace, values, option_string=None, _cls=cls):
                _SEEN.append((self.dest, option_string, values))
                return _cls.__call__(self, parser, namespace, values, option_string)

        Recording.__name__ = cls.__name__
        action.__class__ = Recording
    parser.error = _raiser
    parser.exit = _raiser
    parser._flashinfer_guard_recording = True


_cache: dict = {}


def _vllm_parser():
    if "vllm" in _cache:
        return _cache["vllm"]
    try:
        from vllm.platforms import current_platform
        if not getattr(current_platform, "device_type", None):
            type(current_platform).device_type = "cpu"  # no GPU here: config defaults need a device type
        from vllm.entrypoints.cli.serve import ServeSubcommand
        try:
            from vllm.utils.argparse_utils import FlexibleArgumentParser
        except ImportError:
            from vllm.utils import FlexibleArgumentParser
        top = FlexibleArgumentParser(prog="vllm")
        sub = top.add_subparsers(dest="subparser")
        serve = ServeSubcommand().subparser_init(sub)
    except Exception as exc:
        raise ServerParserUnavailable(f"vLLM's parser could not be built ({type(exc).__name__}: "
                                      f"{str(exc)[:120]})") from None
    _cache["vllm"] = (top, serve)
    return top, serve


def _sglang_parser():
    import argparse
    if "sglang" in _cache:
        return _cache["sglang"]
    try:
        from sglang.srt.server_args import ServerArgs
        p = argparse.ArgumentParser(prog="sglang serve")
        ServerArgs.add_cli_args(p)
    except Exception as exc:
        raise ServerParserUnavailable(f"SGLang's parser could not be built ({type(exc).__name__}: "
                                      f"{str(exc)[:120]})") from None
    _cache["sglang"] = p
    return p


def _sglang_merge_config(parser, argv: list[str]) -> list[str]:
    if "--config" not in argv:
        return argv
    try:
        from sglang.srt.utils.server_args_config_parser import ConfigArgumentMerger
        merger = ConfigArgumentMerger(parser)
    except ImportError:
        from sglang.srt.server_args_config_parser import ConfigArgumentMerger
        merger = ConfigArgumentMerger(boolean_actions=[])  # 0.5.5's prepare_server_args finds none
    return merger.merge_config_with_args(argv)


def _check_config_files(tokens: list[str]) -> None:
    """Every ``--config`` file passes the built-in reader's bounds (a regular file, at most
    1 MiB, few YAML aliases, bounded depth) before the server's parser opens it: a FIFO would
    hang it, /dev/zero or an alias bomb exhaust memory. Same refusal line as the built-in reader."""
    from guard_core.deployment.command_limits import bounded_config_text

    for path in _config_paths(tokens):
        bounded_config_text(path)


def _config_paths(tokens: list[str]) -> list[str]:
    """The token after each "--config", wherever it stands: what both servers open (vLLM
    FlexibleArgumentParser._pull_args_from_config, vllm/utils/argparse_utils.py 0.23.0:298,477-489;
    SGLang ConfigArgumentMerger._extract_config_file_path, srt/server_args_config_parser.py 0.5.11:84-98)."""
    return [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == "--config"]


def _refusal(label: str, tokens: list[str], exc: BaseException):
    """The server parser's refusal as one line: the --config file it read, if any, and the
    parser's own message with its line breaks folded (PyYAML's messages span several lines)."""
    from guard_core.deployment.command_limits import LaunchError

    configs = _config_paths(tokens)
    where = f" (--config {configs[0]!r})" if configs else ""
    msg = " ".join(str(exc).split())
    if not isinstance(exc, (_Refused, ValueError, AssertionError, OSError)):
        msg = f"{type(exc).__name__}: {msg}" if msg else type(exc).__name__
    if len(msg) > 300:
        msg = msg[:297] + "..."
    return LaunchError(f"{label}'s own parser refuses the launch command{where}: {msg}")


def server_read(framework: str, form: str, tokens: list[str], environ=None) -> tuple[dict, list]:
    """(namespace dict, [(dest, option string, values), ...]) from the installed server's parser.
    Raises ``ServerParserUnavailable`` when it cannot be built, ``LaunchError`` when it refuses
    the command (as the server would). ``environ``: the environment the server sees (plan's
    server process runs with it)."""
    import sys

    from guard_core.deployment import guard_module

    _check_config_files(tokens)
    _check_tokens(tokens)
    if guard_module.in_session() and ("vllm" if framework == "vllm" else "sglang") not in sys.modules:
        return _hosted_read(framework, form, tokens, environ)
    return _read(framework, form, tokens)


def _check_tokens(tokens: list[str]) -> None:
    """The parsers json.loads option values and nest dotted keys: bound the nesting first."""
    from guard_core.deployment.command_limits import MAX_JSON_DEPTH, LaunchError, check_json_text

    for t in tokens:
        if t[:1] in "[{" or (t.startswith("-") and "{" in t):
            check_json_text("a JSON option", t.split("=", 1)[-1] if t.startswith("-") else t)
        if t.startswith("-") and t.split("=", 1)[0].count(".") > MAX_JSON_DEPTH:
            raise LaunchError(f"{t[:40]}... in the launch command: nested deeper than {MAX_JSON_DEPTH} levels")


def _hosted_read(framework: str, form: str, tokens: list[str], environ) -> tuple[dict, list]:
    """``_read`` in plan's server process; its refusals and failures raised here as there."""
    import json

    from guard_core.deployment.command_limits import LaunchError
    from guard_core.deployment.guard_module import run_guard_module, server_process_env

    label = "vLLM" if framework == "vllm" else "SGLang"
    ans = run_guard_module("guard_core.deployment.server_parsers", [], server_process_env(environ), MARK,
                           PARSE_TIMEOUT_S, f"{label}'s parser",
                           stdin=json.dumps({"framework": framework, "form": form, "tokens": list(tokens)}))
    if ans.get("ok") is True and isinstance(ans.get("ns"), dict) and isinstance(ans.get("seen"), list):
        ns = dict(ans["ns"])
        ns["_passed"] = set(ns.get("_passed") or ())
        return ns, [tuple(x) for x in ans["seen"] if isinstance(x, list) and len(x) == 3]
    if ans.get("refused"):
        raise LaunchError(str(ans.get("message") or "")[:400])
    raise ServerParserUnavailable(str(ans.get("message") or ans.get("refusal") or "no answer")[:200])


def _plain(v, depth: int = 0, objects_as_text: bool = False, budget: list | None = None):
    """``v`` as JSON: a config object (a dataclass, an object's attributes) as a dict of its fields
    (or its text where ``objects_as_text``: what the command showed), an enum as its name, a set
    or tuple as a list. At most 24 levels and ``_PLAIN_NODES`` values in all (an object graph with
    cycles or a very wide one ends as text)."""
    import dataclasses
    import enum

    if budget is None:
        budget = [_PLAIN_NODES]
    budget[0] -= 1
    if isinstance(v, enum.Enum):
        return v.name
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if depth > 24 or budget[0] <= 0:
        return str(v)[:200]
    if isinstance(v, dict):
        return {str(k): _plain(x, depth + 1, objects_as_text, budget) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x, depth + 1, objects_as_text, budget) for x in v]
    if isinstance(v, (set, frozenset)):
        return sorted((_plain(x, depth + 1, objects_as_text, budget) for x in v), key=repr)
    if objects_as_text or isinstance(v, type):
        return str(v)
    if dataclasses.is_dataclass(v):
        return {f.name: _plain(getattr(v, f.name, None), depth + 1, False, budget) for f in dataclasses.fields(v)}
    if hasattr(v, "__dict__"):
        return {str(k): _plain(x, depth + 1, False, budget) for k, x in vars(v).items()}
    return str(v)


def main() -> int:
    """Plan's server process: one JSON request on stdin (framework, form, tokens), one answer
    line after ``MARK``: the namespace and what was read, or why not."""
    import json
    import sys

    from guard_core.deployment.command_limits import LaunchError

    try:
        req = json.loads(sys.stdin.read())
        ns, seen = _read(str(req["framework"]), str(req["form"]), [str(t) for t in req["tokens"]])
        ans = {"ok": True, "ns": _plain(ns), "seen": [[d, o, _plain(v, objects_as_text=True)] for d, o, v in seen]}
    except LaunchError as exc:
        ans = {"ok": False, "refused": True, "message": str(exc)}
    except ServerParserUnavailable as exc:
        ans = {"ok": False, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - an answer all the same
        ans = {"ok": False, "message": f"{type(exc).__name__}: {str(exc)[:160]}"}
    sys.stdout.write(MARK + json.dumps(ans, default=str) + "\n")
    return 0


def _read(framework: str, form: str, tokens: list[str]) -> tuple[dict, list]:
    from guard_core.deployment.command_limits import LaunchError
    from guard_core.deployment.server_defaults import framework_label

    _check_tokens(tokens)
    del _SEEN[:]
    seen = _SEEN
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        if framework == "vllm":
            top, serve = _vllm_parser()
            _record(serve)
            top.error = top.exit = _raiser
            # `python -m vllm.entrypoints.openai.api_server` takes the same arguments (make_arg_parser)
            # with the model as --model, which the serve parser moves to its positional model_tag
            argv = ["serve"] + list(tokens)
            try:
                ns = top.parse_args(argv)
            except RecursionError:
                raise LaunchError("a JSON option in the launch command is nested too deeply") from None
            except Exception as exc:  # anything the parser raises (a YAML error, a list at the top): one line
                raise _refusal(framework_label(framework), tokens, exc) from None
        else:
            p = _sglang_parser()
            _record(p)
            try:
                argv = _sglang_merge_config(p, list(tokens))
                ns = p.parse_args(argv)
            except Exception as exc:  # anything the parser or its config merger raises: one line
                raise _refusal(framework_label(framework), tokens, exc) from None
    seen = list(seen)
    d = dict(vars(ns))
    d["_passed"] = {dest for dest, _o, _v in seen}
    actions = (serve if framework == "vllm" else p)._actions
    d["_aliases"] = {a.dest: list(a.option_strings) for a in actions}
    return d, seen


if __name__ == "__main__":
    import sys as _sys

    _sys.exit(main())
