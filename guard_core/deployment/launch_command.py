"""Read a server launch command as the server reads it: the options that change FlashInfer's workspace.

Accepted forms (after ``flashinfer-guard plan [opts] --``):

- ``vllm serve [MODEL] [options]``, ``python[3] [interpreter options] -m vllm.entrypoints.openai.api_server ...``
- ``python[3] -m sglang.launch_server --model-path MODEL [options]`` and ``sglang serve ...``
- any of them behind ``VAR=value`` assignments, ``env [-i] [-u NAME] VAR=value ...``,
  ``uv run [uv options] [--]`` or ``docker run [docker options] IMAGE`` (``-e VAR=value``
  read; the ``vllm/vllm-openai`` image's entry point is ``vllm serve``).

Two readers give the same resolved deployment:

- **the server's own parser** where the command's server is installed at the simulated
  line (``guard_core.deployment.server_parsers``: vLLM's ``FlexibleArgumentParser`` with the serve
  arguments, SGLang's ``ServerArgs.add_cli_args``), imported here only, lazily, on the CLI
  path;
- **the built-in reader** elsewhere: an argparse parser rebuilt from the server's option
  table as dumped from the real parser (``guard_core/deployment/server_options/*.json``,
  ``ci/dump_server_options.py``), so aliases (``-tp``, ``-sc``, ``-cc``), unique prefixes
  (argparse abbreviations), ``nargs="+"`` lists and ``--no-`` flags behave as in the server,
  after the same pre-processing vLLM's ``FlexibleArgumentParser.parse_args`` does
  (``vllm/utils/argparse_utils.py``: ``--model`` moved to the front for ``serve``,
  ``--config`` YAML inserted after the model, ``_`` -> ``-`` in option names, ``-O3`` /
  ``-O 3`` -> ``--optimization-level``, dotted ``--x.key value`` merged into ``--x JSON``)
  and SGLang's ``ConfigArgumentMerger`` (``--config`` YAML first, the command after it).
  ``tests/vllm/test_launch_parser.py`` and ``tests/sglang/test_launch_parser.py`` check the
  two readers agree on generated commands.

Every option the command passes ends in one of three lists: read (a field of ``Launch``),
``ignored`` (known not to change the workspace) or ``not_read`` (anything else: the plan
assumes the server's default for it and says so). A bad value raises ``LaunchError`` with
one line naming the option; every number is bounded as the plan options are.

This module is the one entry (``parse_launch``, ``Launch``, the image helpers); the parts live in
``guard_core.deployment.launch``: ``prefixes`` (shell/env/uv/docker/podman/python -m),
``environment`` (what the server process sees), ``values`` (bounded numbers, JSON),
``yaml_config`` (``--config``), ``tables`` (option tables, the rebuilt parser), ``preprocess``
(vLLM's argv pre-processing, SGLang's ``--config`` merge), ``resolve`` and ``fields`` (a
namespace -> ``Launch``), ``record`` (``Launch`` and the bounds).
"""

from __future__ import annotations

import os
import re

from guard_core.deployment.command_limits import LaunchError
from guard_core.deployment.launch.environment import server_environment
from guard_core.deployment.launch.preprocess import builtin_read
from guard_core.deployment.launch.prefixes import split_command
from guard_core.deployment.launch.record import READ_ENV, Launch
from guard_core.deployment.launch.resolve import apply_model_overrides, resolve
from guard_core.deployment.launch.tables import load_table, table_versions
from guard_core.deployment.server_defaults import framework_label

__all__ = ["READ_ENV", "Launch", "LaunchError", "apply_model_overrides", "attention_backend_note", "image_line",
           "image_tag_note", "load_table", "parse_launch", "server_environment", "split_command", "table_versions"]


# ------------------------------------------------------------------ entry point

def _server_env(ops, environ) -> dict:
    """The environment the server process sees (``server_environment``), for its own parser."""
    try:
        return server_environment(ops, environ)[0]
    except LaunchError:
        return dict(environ)


def parse_launch(argv: list[str], *, line: str | None = None, environ=None, reader: str = "auto") -> Launch:
    """Read ``argv`` (the command after ``--``) for the server ``line`` (default: the installed
    line, else the checked table nearest the seed's line). ``reader``: ``auto`` (the server's own
    parser when its installed version is ``line``, else built-in), ``server`` or ``builtin``."""
    framework, form, tokens, env, ops = split_command(list(argv))
    if environ is None:
        environ = os.environ
    from guard_core.deployment.server_defaults import installed_line
    image = image_line(framework, form)
    installed = installed_line(framework)
    target = line or image or installed
    use_server = reader == "server" or (reader == "auto" and installed is not None and target == installed)
    if use_server:
        from guard_core.deployment.server_parsers import ServerParserUnavailable, server_read
        try:
            ns, seen = server_read(framework, form, tokens, _server_env(ops, environ))
        except ServerParserUnavailable as exc:
            if reader == "server":
                raise LaunchError(f"the server's own parser is unavailable here: {exc}") from None
            use_server = False
            fallback = f"{exc}; "
        else:
            out = resolve(framework, form, ns, seen, env, environ,
                          f"{framework_label(framework)} {installed}'s own parser", ops)
            out.image_line = image
            return out
    else:
        fallback = ""
    from guard_core.deployment.server_defaults import DEFAULT_LINE
    table = load_table(framework, target or DEFAULT_LINE[framework])
    ns, seen = builtin_read(framework, form, tokens, table, strict=table["version"] == (target or DEFAULT_LINE[framework]))
    out = resolve(framework, form, ns, seen, env, environ,
                  f"{framework_label(framework)} {table['version']}'s options: built-in reader", ops)
    if fallback:
        out.notes.append(f"{fallback}read with the built-in reader")
    out.image_line = image
    return out


_IMAGE_RE = re.compile(r"(?:docker|podman) run (\S+)")
_TAG_RE = re.compile(r"v?(\d+\.\d+(?:\.\d+)?(?:\.post\d+)?)(?:$|[-_+])")


def image_line(framework: str, form: str) -> str | None:
    """The server version a `docker run` image of that server is tagged with (vllm/vllm-openai:v0.19.1,
    lmsysorg/sglang:v0.5.5-cu126), else None (latest, nightly, a digest, another image)."""
    m = _IMAGE_RE.search(form)
    if not m:
        return None
    repo, _, tag = m.group(1).rstrip(":").partition("@")[0].rpartition(":")
    if not repo or framework not in repo.rsplit("/", 1)[-1]:
        return None
    t = _TAG_RE.match(tag)
    return t.group(1) if t else None


def image_tag_note(framework: str, form: str) -> tuple[str | None, str | None]:
    """(the line to simulate, None) where the image tag names a release of a line read here
    (``releases.CHECKED_LINES``); else (None, why the tag is not mapped) for an image of that
    server with a tag (a pre-release, a line not read, latest/nightly), (None, None) otherwise."""
    from guard_core.flashinfer.releases import CHECKED_LINES, LINE_PARTS

    m = _IMAGE_RE.search(form)
    repo, _, tag = m.group(1).rstrip(":").partition("@")[0].rpartition(":") if m else ("", "", "")
    if not repo or framework not in repo.rsplit("/", 1)[-1]:
        return None, None
    version = image_line(framework, form)
    parts = LINE_PARTS[framework]
    if version is not None:
        if any(v.split(".")[:parts] == version.split(".")[:parts] for v in CHECKED_LINES[framework]):
            return version, None
        return None, (f"it names {framework_label(framework)} {version}, a line not read here (read: "
                      f"{', '.join(CHECKED_LINES[framework])})")
    if re.match(r"v?\d+\.\d+", tag):
        return None, "it names a pre-release or build, not a released line"
    return None, "it names no release"


def attention_backend_note(launch: Launch) -> str | None:
    """A line when the command selects an attention backend other than FlashInfer."""
    be = [b for b in (launch.attention_backend, launch.decode_attention_backend, launch.prefill_attention_backend) if b]
    others = [b for b in be if "flashinfer" not in b.lower()]
    if not others:
        return None
    if launch.framework == "vllm" and any(b.upper().startswith("FLASHINFER") for b in be):
        return None
    return (f"the command selects attention backend {', '.join(others)}: FlashInfer's planners do not serve "
            "attention there; the figures below hold only where FlashInfer does")
