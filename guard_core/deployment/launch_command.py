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
"""

from __future__ import annotations

import argparse
import json
import os
import re
from dataclasses import dataclass, field

from guard_core.deployment.command_limits import MAX_JSON_DEPTH, LaunchError, bounded_config_text, check_json_text
from guard_core.deployment.server_defaults import framework_label
from guard_core.flashinfer.releases import NATIVE_VAR

__all__ = ["Launch", "LaunchError", "attention_backend_note", "image_line", "load_table", "parse_launch",
           "table_versions"]


@dataclass
class Launch:
    framework: str  # vllm | sglang
    form: str  # how it was started
    model: str | None = None
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    dcp: int | None = None
    ep: int | None = None  # SGLang --ep-size
    expert_parallel: bool = False
    all2all_backend: str | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    draft_tokens: int | None = None
    draft_tokens_from_model: bool = False  # vLLM MTP without num_speculative_tokens: the model's MTP depth
    speculative: str | None = None  # method / algorithm
    # --hf-overrides (vLLM) / --json-model-override-args (SGLang): {"option", "values", "nested"}
    model_overrides: dict | None = None
    eagle_topk: int | None = None  # SGLang --speculative-eagle-topk
    spec_steps: int | None = None  # SGLang --speculative-num-steps
    capture_sizes: tuple[int, ...] | None = None
    max_capture: int | None = None
    eager: bool = False
    chunked_prefill: bool | None = None
    attention_backend: str | None = None
    decode_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    quantization: str | None = None
    page_size: int | None = None
    disable_graph_padding: bool = False
    dp_attention: bool = False
    image_line: str | None = None  # the server version a `docker run` image tag names (vllm/vllm-openai:v0.19.1)
    attn_dp: int | None = None  # SGLang attention DP width (--enable-dp-attention: dp; 0.5.23 --attn-dp-size)
    workspace_bytes: int | None = None  # the native workspace variable in the command or the environment
    workspace_source: str | None = None
    reader: str = ""  # which parser read it
    deterministic: bool = False  # SGLang --enable-deterministic-inference
    kv_pool_tokens: int | None = None  # SGLang --max-total-tokens
    env: dict = field(default_factory=dict)  # leading VAR=value assignments the plan reads (READ_ENV)
    # the command's operations on the environment the server inherits (server_environment)
    env_ops: list = field(default_factory=list)
    ignored: list = field(default_factory=list)  # passed, known not to change the workspace
    not_read: list = field(default_factory=list)  # passed, not read: the default is assumed
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        if d["capture_sizes"] is not None:
            d["capture_sizes"] = list(d["capture_sizes"])
        d["ignored"], d["not_read"], d["notes"] = list(self.ignored), list(self.not_read), list(self.notes)
        return d

    def deployment(self) -> dict:
        """What the command resolves to (for comparing readers): every read field."""
        d = self.as_dict()
        for k in ("form", "reader", "ignored", "not_read", "notes", "workspace_source", "env_ops"):
            d.pop(k)
        return d


# SGLang's speculative algorithms with an EAGLE-style draft worker whose steps/topk/draft tokens SGLang
# resolves itself (server_args.py 0.5.5:1523-1604: NEXTN -> EAGLE; EAGLE, EAGLE3, STANDALONE)
SGLANG_EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")

# Leading VAR=value assignments of a launch command that change the plan (read, not skipped):
# SGLang's deterministic split tile sizes (flashinfer_backend.py, get_int_env_var).
READ_ENV = ("SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE", "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE")

# Bounds of every number read from a launch command: those of the plan options
# (guard_core/commands/cli.py _INT_BOUNDS), checked on the text or the parsed value before use.
BOUNDS = {"parallel": 1024, "max_num_seqs": 65536, "max_capture": 16384, "max_batched_tokens": 1 << 24,
          "max_model_len": 1 << 27, "draft_tokens": 128, "page_size": 65536}
MAX_CAPTURE_SIZES = 1024
MAX_TOKENS = 4096
MAX_TOKEN_CHARS = 1 << 20

_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_SGLANG_MODULES = ("sglang.launch_server",)


# ------------------------------------------------------------------ the command's prefixes

_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# uv run options with a value (uv 0.5-0.9 `uv run --help`); the others are flags
_UV_VALUE_OPTS = {"--with", "--with-editable", "--with-requirements", "--python", "-p", "--project", "--directory",
                  "--env-file", "--extra", "--group", "--only-group", "--no-group", "--package", "--index",
                  "--index-url", "--extra-index-url", "--default-index", "-i", "--find-links", "-f", "--cache-dir",
                  "--config-file", "--python-platform", "--resolution", "--prerelease", "--exclude-newer",
                  "--index-strategy", "--keyring-provider", "--link-mode", "--refresh-package", "--reinstall-package",
                  "--upgrade-package", "-P", "--config-setting", "-C", "--color", "--allow-insecure-host",
                  "--no-binary-package", "--only-binary-package", "--no-build-package", "--script", "--gui-script",
                  "--module", "-m"}
# docker run options with a value (`docker run --help`, Docker 27; `podman run --help`, Podman 5):
# every other option is a flag; -e/--env/--env-file are read
_DOCKER_VALUE_OPTS = {
    "--add-host", "--annotation", "-a", "--attach", "--blkio-weight", "--blkio-weight-device", "--cap-add",
    "--cap-drop", "--cgroup-parent", "--cgroupns", "--cidfile", "--cpu-count", "--cpu-percent", "--cpu-period",
    "--cpu-quota", "--cpu-rt-period", "--cpu-rt-runtime", "-c", "--cpu-shares", "--cpus", "--cpuset-cpus",
    "--cpuset-mems", "--detach-keys", "--device", "--device-cgroup-rule", "--device-read-bps", "--device-read-iops",
    "--device-write-bps", "--device-write-iops", "--dns", "--dns-opt", "--dns-option", "--dns-search",
    "--domainname", "--entrypoint", "-e", "--env", "--env-file", "--expose", "--gpus", "--group-add",
    "--health-cmd", "--health-interval", "--health-retries", "--health-start-interval", "--health-start-period",
    "--health-timeout", "-h", "--hostname", "--io-maxbandwidth", "--io-maxiops", "--ip", "--ip6", "--ipc",
    "--isolation", "--kernel-memory", "-l", "--label", "--label-file", "--link", "--link-local-ip",
    "--log-driver", "--log-opt", "--mac-address", "-m", "--memory", "--memory-reservation", "--memory-swap",
    "--memory-swappiness", "--mount", "--name", "--network", "--net", "--network-alias", "--net-alias",
    "--oom-score-adj", "--pid", "--pids-limit", "--platform", "-p", "--publish", "--pull", "--restart", "--runtime",
    "--security-opt", "--shm-size", "--stop-signal", "--stop-timeout", "--storage-opt", "--sysctl", "--tmpfs",
    "--ulimit", "-u", "--user", "--userns", "--uts", "-v", "--volume", "--volume-driver", "--volumes-from", "-w",
    "--workdir",
    # podman run only
    "--arch", "--authfile", "--cert-dir", "--cgroup-conf", "--cgroups", "--chrootdirs", "--conmon-pidfile",
    "--creds", "--decryption-key", "--gidmap", "--group-entry", "--health-log-destination",
    "--health-max-log-count", "--health-max-log-size", "--health-on-failure", "--health-startup-cmd",
    "--health-startup-interval", "--health-startup-retries", "--health-startup-success",
    "--health-startup-timeout", "--hooks-dir", "--hostuser", "--image-volume", "--init-path", "--log-level",
    "--os", "--passwd-entry", "--personality", "--pidfile", "--pod", "--pod-id-file", "--preserve-fd",
    "--preserve-fds", "--rdt-class", "--requires", "--retry", "--retry-delay", "--sdnotify", "--seccomp-policy",
    "--secret", "--shm-size-systemd", "--subgidname", "--subuidname", "--systemd", "--timeout", "--uidmap",
    "--umask", "--unsetenv", "--variant"}


def _is_env(tok: str) -> bool:
    return bool(_ENV_RE.match(tok))


def _take_env(tok: str, env: dict) -> None:
    k, _, v = tok.partition("=")
    env[k] = v


def _short_opts(tok: str, value_chars: str, rest: list[str], i: int):
    """A cluster of short options (``-it``, ``-eVAR=x``, ``-e=VAR=x``, ``-ite VAR=x``, getopt and
    Go's pflag alike): (the value option's letter or None, its value or None, the next index)."""
    for j in range(1, len(tok)):
        if tok[j] in value_chars:
            val = tok[j + 1:]
            if val:
                return tok[j], val[1:] if val.startswith("=") and len(val) > 1 else val, i + 1
            return tok[j], (rest[i + 1] if i + 1 < len(rest) else None), i + 2
    return None, None, i + 1


def _skip_options(rest: list[str], i: int, value_opts, short_values: str = "", container: list | None = None,
                  stop=None) -> int:
    """Skip a tool's options from ``rest[i]`` (``--opt value``, ``--opt=value``, ``-x value``,
    ``-xvalue``, flag clusters) to its command; ``stop(name, value, i)`` may end the walk early
    (returns the index to go on from, or None). ``container``: `docker run`'s environment items,
    in order: ("set", VAR, value) for ``-e VAR=value``, ("pass", VAR) for ``-e VAR`` (the client's
    value), ("file", PATH) for ``--env-file``."""
    while i < len(rest) and rest[i].startswith("-") and rest[i] != "-":
        tok = rest[i]
        if tok == "--":
            return i + 1
        if tok.startswith("--"):
            name, eq, val = tok.partition("=")
            if name in value_opts and not eq:
                val, nxt = (rest[i + 1] if i + 1 < len(rest) else None), i + 2
            else:
                val, nxt = (val if eq else None), i + 1
        else:
            ch, val, nxt = _short_opts(tok, short_values, rest, i)
            name = "-" + ch if ch else tok
        if stop is not None and val is not None:
            end = stop(name, val, nxt)
            if end is not None:
                return end
        if container is not None and val is not None:
            _container_env(name, val, container)
        i = nxt
    return i


def _container_env(name: str, val: str, container: list) -> None:
    if name in ("-e", "--env"):
        k, eq, v = val.partition("=")
        if _ENV_NAME_RE.fullmatch(k):
            container.append(("set", k, v) if eq else ("pass", k))
    elif name == "--env-file":
        container.append(("file", val))


_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


_ENV_VALUE_LONG = {"--unset": "u", "--chdir": "C", "--split-string": "S", "--argv0": "a"}
_ENV_FLAGS_LONG = {"--ignore-environment": "i", "--null": "0", "--debug": "v", "--list-signal-handling": "",
                   "--block-signal": "", "--default-signal": "", "--ignore-signal": ""}


def _env_options(rest: list[str], env: dict, ops: list) -> tuple[int, list[str]]:
    """`env [OPTION]... [VAR=value]... COMMAND` (GNU coreutils 9 env: -i, -0, -v, -u NAME,
    -C DIR, -S STRING, -a ARG, the signal options; clusters such as ``-iu VAR``): (the index of
    its command, words that ``-S`` splits in front of it); each option that changes the
    environment becomes an op on the environment the server inherits."""
    import shlex

    i, front = 1, []

    def act(letter: str, val) -> None:
        if letter == "i":
            ops.append(("clear",))
            env.clear()
        elif letter == "u" and val is not None:
            ops.append(("unset", val))
            env.pop(val, None)
        elif letter == "S" and val is not None:
            try:
                front.extend(shlex.split(val))
            except ValueError:
                raise LaunchError(f"env -S {_show(val)} in the launch command: unbalanced quotes") from None
    while i < len(rest):
        tok = rest[i]
        if _is_env(tok):
            _take_env(tok, env)
            ops.append(("set",) + tuple(tok.split("=", 1)))
            i += 1
            continue
        if tok == "--":
            i += 1
            break
        if tok == "-":
            act("i", None)
            i += 1
            continue
        if not tok.startswith("-"):
            break
        if tok.startswith("--"):
            name, eq, val = tok.partition("=")
            if name in _ENV_VALUE_LONG:
                if not eq:
                    if i + 1 >= len(rest):
                        raise LaunchError(f"env {name} in the launch command needs a value")
                    val, i = rest[i + 1], i + 1
                act(_ENV_VALUE_LONG[name], val)
            elif name in _ENV_FLAGS_LONG:
                act(_ENV_FLAGS_LONG[name], None)
            else:
                raise LaunchError(f"env {name[:40]} in the launch command: not an option of env")
            i += 1
            continue
        for j in range(1, len(tok)):
            ch = tok[j]
            if ch in "uCSa":
                val = tok[j + 1:]
                if not val:
                    if i + 1 >= len(rest):
                        raise LaunchError(f"env -{ch} in the launch command needs a value")
                    val, i = rest[i + 1], i + 1
                act(ch, val)
                break
            if ch not in "i0v":
                raise LaunchError(f"env -{ch} in the launch command: not an option of env")
            act(ch, None)
        i += 1
    return i, front


# uv run's short options with a value (`uv run --help`, uv 0.5-0.9)
_UV_SHORT_VALUES = "pifPCm"
# python's options with a value (`python --help`); -c runs a string, not a server
_PY_SHORT_VALUES = "XWm"


def _uv_module(rest: list[str]):
    """``uv run [options] -m MODULE args`` / ``--module MODULE``: uv runs ``python -m MODULE``."""
    found = []

    def stop(name, val, nxt):
        if name in ("-m", "--module"):
            found.append(["python", "-m", val] + rest[nxt:])
            return len(rest)
        return None
    end = _skip_options(rest, 2, _UV_VALUE_OPTS, _UV_SHORT_VALUES, stop=stop)
    return found[0] if found else rest[end:]


def _python_module(rest: list[str]):
    """(module, its arguments) of ``python [options] -m MODULE args`` (``-Xdev``, ``-X dev``,
    ``-um MODULE``, ``-mMODULE``), or (None, None) (``-c``, a script, no ``-m``)."""
    j = 1
    while j < len(rest) and rest[j].startswith("-") and rest[j] not in ("-", "--"):
        tok = rest[j]
        if tok.startswith("--"):
            j += 2 if tok == "--check-hash-based-pycs" else 1
            continue
        nxt = j + 1
        for k in range(1, len(tok)):
            ch = tok[k]
            if ch == "c":
                return None, None
            if ch in _PY_SHORT_VALUES:
                val = tok[k + 1:]
                if not val:
                    val, nxt = (rest[j + 1] if j + 1 < len(rest) else ""), j + 2
                if ch == "m":
                    return val, rest[nxt:]
                break
        j = nxt
    return None, None


def split_command(argv: list[str]) -> tuple[str, str, list[str], dict, list]:
    """(framework, form, the server's arguments, the command's environment assignments, the
    operations on the environment the server inherits, in order: ``server_environment``)."""
    env: dict = {}
    ops: list = []
    rest = list(argv)
    if len(rest) > MAX_TOKENS or any(not isinstance(t, str) or len(t) > MAX_TOKEN_CHARS for t in rest):
        raise LaunchError(f"launch command too long: at most {MAX_TOKENS} words of at most {MAX_TOKEN_CHARS} "
                          "characters")
    wrappers = []
    for _ in range(16):  # prefixes in any order, each once or a few times
        while rest and _is_env(rest[0]):
            _take_env(rest[0], env)
            ops.append(("set",) + tuple(rest[0].split("=", 1)))
            rest = rest[1:]
        if not rest:
            break
        head = rest[0].rsplit("/", 1)[-1]
        if head == "env":
            i, front = _env_options(rest, env, ops)
            rest = front + rest[i:]
            wrappers.append("env")
            continue
        if head == "uv" and len(rest) > 1 and rest[1] == "run":
            rest = _uv_module(rest)
            wrappers.append("uv run")
            continue
        if head in ("docker", "podman") and len(rest) > 1 and rest[1] == "run":
            container: list = []
            i = _skip_options(rest, 2, _DOCKER_VALUE_OPTS, "acehlmpuvw", container)
            for item in container:  # -e VAR=value also read as the command's own assignment
                if item[0] == "set":
                    env[item[1]] = item[2]
            ops.append(("container", head, tuple(container)))
            if i >= len(rest):
                raise LaunchError(f"{head} run without an image in the launch command")
            image = rest[i]
            rest = rest[i + 1:]
            wrappers.append(f"{head} run {image}")
            if "vllm-openai" in image and not (rest and rest[0].rsplit("/", 1)[-1] in ("vllm", "python", "python3")):
                # the vllm/vllm-openai image's ENTRYPOINT is `vllm serve` (docker/Dockerfile, vLLM >= 0.10)
                rest = ["vllm", "serve"] + rest
            continue
        break
    if not rest:
        raise LaunchError("empty launch command after --: give e.g. `vllm serve MODEL ...`")
    prefix = (" ".join(wrappers) + ": ") if wrappers else ""
    head = rest[0].rsplit("/", 1)[-1]
    if head in ("vllm", "sglang") and len(rest) > 1 and rest[1] == "serve":
        return head, f"{prefix}{head} serve", rest[2:], env, ops
    if re.fullmatch(r"python(\d+(\.\d+)*)?", head):
        mod, args = _python_module(rest)
        if mod is not None:
            if mod in _VLLM_MODULES:
                return "vllm", f"{prefix}python -m {mod}", args, env, ops
            if mod in _SGLANG_MODULES:
                return "sglang", f"{prefix}python -m {mod}", args, env, ops
            if mod == "vllm.entrypoints.cli.main" and args[:1] == ["serve"]:
                return "vllm", f"{prefix}python -m {mod} serve", args[1:], env, ops
            raise LaunchError(f"launch command runs module {mod[:80]!r}: expected vllm.entrypoints.openai.api_server "
                              "or sglang.launch_server")
    raise LaunchError(f"launch command {rest[0][:80]!r} not recognised: expected `vllm serve MODEL ...`, "
                      "`python -m vllm.entrypoints.openai.api_server --model ...` or "
                      "`python -m sglang.launch_server --model-path ...` (after env/uv run/docker run prefixes)")


# ------------------------------------------------------------------ numbers and JSON, bounded

_INT_RE = re.compile(r"[+-]?\d+(?:_\d+)*")


def _show(text) -> str:
    t = text if isinstance(text, str) else repr(text)
    return repr(t[:40]) + ("..." if len(t) > 40 else "")


def _int(opt: str, value, hi: int, lo: int = 1) -> int:
    """A launch-command integer as Python's int() reads it (the servers' type=int), bounded."""
    if type(value) is int:
        v = value
    elif isinstance(value, str) and len(value.strip()) <= len(str(hi)) + 4 and _INT_RE.fullmatch(value.strip()):
        v = int(value.strip())  # any Unicode decimal digits, as int() reads them (fullwidth "６４")
    else:
        raise LaunchError(f"{opt} in the launch command must be an integer ({lo} to {hi}), got {_show(value)}")
    if not lo <= v <= hi:
        raise LaunchError(f"{opt} in the launch command must be from {lo} to {hi}, got {_show(str(value))}")
    return v


_HUMAN_RE = re.compile(r"(\d{1,12}(?:\.\d{1,6})?)([kKmMgGtT])")


def _human_int(opt: str, value, hi: int, auto: bool = False) -> int | None:
    """vLLM's human_readable_int (``16k`` = 16000, ``16K`` = 16384; vllm/utils/argparse_utils.py), bounded;
    with ``auto``: -1 / auto -> None (the model's own)."""
    if type(value) is int:
        if auto and value == -1:
            return None
        return _int(opt, value, hi)
    t = value.strip() if isinstance(value, str) else ""
    if auto and (t == "-1" or t.lower() == "auto"):
        return None
    m = _HUMAN_RE.fullmatch(t)  # \d: Unicode digits, as vLLM's own re.fullmatch and float() read them
    if m:
        number, suffix = m.groups()
        if suffix in "kmgt":  # through a float, as vLLM does: 8.19k is 8189 (argparse_utils.py 0.23.0:58)
            v = int(float(number) * 10 ** (3 * "kmgt".index(suffix) + 3))
        elif "." in number:
            raise LaunchError(f"{opt} in the launch command: no decimals with a binary suffix, got {_show(t)}")
        else:
            v = int(number) * 2 ** (10 * ("KMGT".index(suffix) + 1))
        if not 1 <= v <= hi:
            raise LaunchError(f"{opt} in the launch command must be from 1 to {hi}, got {_show(t)}")
        return v
    return _int(opt, t, hi)


def _json_obj(opt: str, value) -> dict:
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
        raise LaunchError(f"{opt} in the launch command must be a JSON object, got {_show(value)}") from None
    if not isinstance(v, dict):
        raise LaunchError(f"{opt} in the launch command must be a JSON object, got {_show(value)}")
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


def _sizes(opt: str, values) -> tuple[int, ...]:
    if isinstance(values, (str, int)):
        values = [values]
    values = list(values or [])
    if not values or len(values) > MAX_CAPTURE_SIZES:
        raise LaunchError(f"{opt} in the launch command needs 1 to {MAX_CAPTURE_SIZES} batch sizes")
    return tuple(_int(opt, v, BOUNDS["max_capture"]) for v in values)


def _bool(opt: str, value) -> bool:
    if isinstance(value, bool):
        return value
    t = str(value).strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise LaunchError(f"{opt} in the launch command must be true or false, got {_show(value)}")


def _str(opt: str, value) -> str:
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


def native_workspace(framework: str, env: dict, environ, ops=None) -> tuple[int | None, str | None]:
    """The server's own workspace variable (bytes: both servers read it with int()), from the
    environment the server sees (``server_environment``), with which value was used and why."""
    var = NATIVE_VAR[framework]
    seen, why = server_environment(ops if ops is not None else [("set", k, v) for k, v in env.items()],
                                   environ or {})
    if var not in seen:
        if var in (environ or {}):
            raise _Unseen(var, why)
        return None, None
    if var in env or _set_by_command(ops, var):
        where = "in the launch command"
    elif any(op[0] == "container" and ("pass", var) in op[2] for op in ops or ()):
        where = f"exported in this environment and passed with -e {var}"
    else:
        where = "exported in this environment"
    raw = str(seen[var])
    n = read_int(raw)
    if n is None or not 0 < n <= (1 << 40) or len(raw) > 64:
        raise LaunchError(f"{var} {where} must be a byte count such as 538968064 (the server reads it "
                          f"with int()), got {_show(seen[var])}")
    return n, f"{var}={raw.strip()} {where} ({why})"


class _Unseen(Exception):
    """The native variable is exported here but the server does not see it."""

    def __init__(self, var, why):
        super().__init__(var)
        self.var, self.why = var, why


def _set_by_command(ops, var: str) -> bool:
    for op in ops or ():
        if op[0] == "set" and op[1] == var:
            return True
        if op[0] == "container" and any(it[0] == "set" and it[1] == var for it in op[2]):
            return True
    return False


_ENV_FILE_MAX = 1 << 20


def _env_file(path: str) -> dict:
    """A `docker run --env-file` file: VAR=value lines (# comments, blank lines); VAR alone
    passes the client's value (returned as None). Unreadable: LaunchError."""
    try:
        if os.path.getsize(path) > _ENV_FILE_MAX:
            raise LaunchError(f"--env-file {_show(path)} in the launch command: larger than 1 MiB")
        with open(path, encoding="utf-8") as fh:
            text = fh.read(_ENV_FILE_MAX + 1)
    except OSError as exc:
        raise LaunchError(f"--env-file {_show(path)} in the launch command: cannot read it ({exc.strerror})") from None
    except (ValueError, UnicodeError):
        raise LaunchError(f"--env-file {_show(path)} in the launch command: not a UTF-8 text file") from None
    out: dict = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k, eq, v = line.partition("=")
        if _ENV_NAME_RE.fullmatch(k):
            out[k] = v if eq else None
    return out


def server_environment(ops, environ) -> tuple[dict, str]:
    """(the environment the server process sees, why): the exported ``environ`` through the
    command's operations in order: ``VAR=value`` sets; `env -i` clears; `env -u VAR` /
    `--unset=VAR` removes; `docker run`/`podman run` start the container with only its
    ``-e``/``--env``/``--env-file`` variables (``-e VAR`` passes the client's value)."""
    env = dict(environ or {})
    why = ["the exported environment"]
    for op in ops or ():
        kind = op[0]
        if kind == "set":
            env[op[1]] = op[2]
        elif kind == "unset":
            env.pop(op[1], None)
            why.append(f"env -u {op[1]}")
        elif kind == "clear":
            env = {}
            why = ["env -i cleared the exported environment"]
        elif kind == "container":
            client, env = env, {}
            for it in op[2]:
                if it[0] == "set":
                    env[it[1]] = it[2]
                elif it[0] == "pass" and it[1] in client:
                    env[it[1]] = client[it[1]]
                elif it[0] == "file":
                    for k, v in _env_file(it[1]).items():
                        if v is not None:
                            env[k] = v
                        elif k in client:
                            env[k] = client[k]
            why = [f"{op[1]} run passes only -e/--env/--env-file to the container"]
    return env, "; ".join(why)


# ------------------------------------------------------------------ YAML configs (--config)

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
    if _INT_RE.fullmatch(t) and len(t) < 20:
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


# ------------------------------------------------------------------ the server's option tables

_TABLE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "server_options")


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


class _Refused(Exception):
    pass


class _RebuiltParser(argparse.ArgumentParser):
    def error(self, message):
        raise _Refused(message)

    def exit(self, status=0, message=None):
        raise _Refused(message or "exit")


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


# ------------------------------------------------------------------ vLLM's pre-processing (built-in)

def _vllm_config_args(path: str, table: dict) -> list[str]:
    """vLLM's FlexibleArgumentParser.load_config_file: YAML -> ``--key value`` (bools as flags,
    lists as several values, mappings as JSON)."""
    # vLLM refuses a --config whose name does not end in .yaml/.yml (load_config_file, 0.23.0:553-557)
    bounded_config_text(path)  # the bounds first, as the server reader checks them before vLLM's parser
    if path.split(".")[-1] not in ("yaml", "yml"):
        raise LaunchError(f"--config {_show(path)} in the launch command: vLLM reads only .yaml/.yml files")
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
                    value = _human_int(name, value_str, 1 << 62)
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


def _sglang_config_args(args: list[str], table: dict) -> list[str]:
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
        argv = _sglang_config_args(list(tokens), table)
    try:
        ns, unknown = p.parse_known_args(argv)
    except _Refused as exc:
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


# ------------------------------------------------------------------ resolution: namespace -> Launch

# Options known not to change FlashInfer's workspace need (network, API, logging, loading,
# memory fraction, caching policy, tool/chat parsing): listed under "ignored".
HARMLESS_VLLM = {
    "host", "port", "uds", "api_key", "served_model_name", "trust_remote_code", "gpu_memory_utilization",
    "enable_prefix_caching", "disable_log_requests", "enable_log_requests", "disable_log_stats",
    "uvicorn_log_level", "disable_uvicorn_access_log", "tokenizer", "tokenizer_mode", "download_dir",
    "load_format", "seed", "revision", "code_revision", "tokenizer_revision", "swap_space", "cpu_offload_gb",
    "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "chat_template", "response_role",
    "language_model_only", "async_scheduling", "disable_custom_all_reduce", "max_logprobs", "allowed_origins",
    "allowed_methods", "allowed_headers", "allow_credentials", "ssl_keyfile", "ssl_certfile", "root_path",
    "middleware", "disable_fastapi_docs", "enable_request_id_headers", "max_log_len", "config_format",
    "kv_cache_memory_bytes", "num_gpu_blocks_override", "distributed_executor_backend", "worker_cls",
    "lora_modules", "prompt_adapters", "return_tokens_as_token_ids", "enable_server_load_tracking",
    "generation_config", "override_generation_config", "tool_parser_plugin", "log_config_file",
    "data_parallel_address", "data_parallel_rpc_port", "data_parallel_size_local", "data_parallel_start_rank",
    "headless", "api_server_count", "hf_token", "otlp_traces_endpoint", "collect_detailed_traces",
    "disable_frontend_multiprocessing", "enable_sleep_mode", "model_loader_extra_config", "ignore_patterns",
    "use_tqdm_on_load", "pt_load_map_location", "safetensors_load_strategy", "chat_template_content_format",
    "enable_prompt_tokens_details", "enable_force_include_usage", "h11_max_incomplete_event_size",
    "h11_max_header_count", "log_error_stack", "structured_outputs_config", "guided_decoding_backend",
    "scheduling_policy", "preemption_mode", "mm_processor_cache_gb", "limit_mm_per_prompt",
    "enable_tokenizer_info_endpoint", "tokens_only", "exclude_tools_when_tool_choice_none", "dtype",
}
HARMLESS_SGLANG = {
    "host", "port", "api_key", "served_model_name", "trust_remote_code", "mem_fraction_static", "tokenizer_path",
    "tokenizer_mode", "skip_tokenizer_init", "load_format", "download_dir", "random_seed", "revision", "log_level",
    "log_level_http", "log_requests", "log_requests_level", "show_time_cost", "enable_metrics", "chat_template",
    "completion_template", "tool_call_parser", "reasoning_parser", "disable_radix_cache", "schedule_policy",
    "schedule_conservativeness", "file_storage_path", "watchdog_timeout", "dist_init_addr", "nnodes", "node_rank",
    "enable_cache_report", "decode_log_interval", "stream_interval", "stream_output", "allow_auto_truncate",
    "max_total_tokens", "max_prefill_tokens", "enable_mixed_chunk", "dtype", "tool_server", "sampling_backend",
    "grammar_backend", "constrained_json_whitespace_pattern", "disable_custom_all_reduce", "base_gpu_id",
    "gpu_id_step", "sleep_on_idle", "enable_p2p_check", "model_impl", "device", "weight_loader_disable_mmap",
    "enable_request_time_stats_logging", "crash_dump_folder", "tokenizer_worker_num", "json_model_override_args",
}
HARMLESS = {"vllm": HARMLESS_VLLM, "sglang": HARMLESS_SGLANG}
# environment variables of the command that do not change the workspace (device choice, downloads,
# communication, threads); any other (VLLM_BATCH_INVARIANT, SGLANG_*, ...) is "not read"
HARMLESS_ENV = {"CUDA_VISIBLE_DEVICES", "HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER",
                "HUGGING_FACE_HUB_TOKEN", "PYTHONPATH", "PYTHONUNBUFFERED", "PATH", "HOME", "TOKENIZERS_PARALLELISM",
                "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_HOST_IP", "VLLM_PORT", "VLLM_API_KEY",
                "VLLM_USE_MODELSCOPE", "VLLM_CACHE_ROOT", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "SGLANG_LOG_LEVEL"}
HARMLESS_ENV_PREFIXES = ("NCCL_", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "UCX_", "GLOO_", "TORCH_NCCL_", "NVIDIA_")
# heads / head dim keys of a model override: they change the workspace, and the plan does not apply them
_HEAD_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "num_heads", "kv_lora_rank",
              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "layer_types", "sliding_window")
# vLLM's MTP methods (vllm/config/speculative.py MTPModelTypes, 0.23-0.33): without
# num_speculative_tokens vLLM runs the draft model's n_predict (its MTP depth)
_MTP_SUFFIX = "mtp"


_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def printable(text) -> str:
    """``text`` on one line: control characters (a newline in an option value) escaped as repr does."""
    t = str(text)
    return _CONTROL_RE.sub(lambda m: repr(m.group(0))[1:-1], t)


def _display(opt, values) -> str:
    if values is None or values == [] or isinstance(values, bool):
        return printable(opt)
    if isinstance(values, (list, tuple)):
        return printable(f"{opt} {' '.join(str(v) for v in values)}")
    return printable(f"{opt} {values}")


def apply_model_overrides(cfg: dict, overrides: dict) -> dict:
    """A model config with the command's overrides, as the server applies them: SGLang
    ``config.update(json_model_override_args)`` (a shallow update, hf_transformers_utils.py
    0.5.5:267-268); vLLM ``hf_overrides`` key by key, a nested config updated recursively and
    any other value set as is (``ModelConfig._apply_dict_overrides``, config/model.py 0.23.0:449-464)."""
    def deep(base: dict, over: dict, depth: int = 0) -> dict:
        out = dict(base)
        for k, v in over.items():
            if depth < 8 and isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = deep(out[k], v, depth + 1)
            else:
                out[k] = v
        return out

    vals = overrides.get("values") or {}
    return deep(cfg, vals) if overrides.get("nested") else {**cfg, **vals}


def _heads_override(obj) -> list[str]:
    keys: list[str] = []

    def walk(d, prefix=""):
        if isinstance(d, dict):
            for k, v in d.items():
                if k in _HEAD_KEYS:
                    keys.append(prefix + str(k))
                elif isinstance(v, dict) and len(prefix) < 200:
                    walk(v, prefix + str(k) + ".")
    walk(obj)
    return keys


def resolve(framework: str, form: str, ns: dict, seen: list, env: dict, environ, reader: str,
            ops=None) -> Launch:
    out = Launch(framework, form, reader=reader)
    out.env_ops = list(ops) if ops is not None else [("set", k, v) for k, v in env.items()]
    aliases = ns.get("_aliases") or {}
    if "_passed" in ns:  # the server's namespace holds every default: read what the command passed
        ns = {k: v for k, v in ns.items() if k in ns["_passed"]}
    try:
        read = _resolve_vllm(out, ns) if framework == "vllm" else _resolve_sglang(out, ns)
    except LaunchError as exc:  # name the option as the command spells it (-tp, not --tensor-parallel-size)
        msg = str(exc)
        for dest, opt, _v in seen:
            for name in sorted(aliases.get(dest, ()), key=len, reverse=True):
                if opt and name != opt and msg.startswith(name + " "):
                    msg = opt + msg[len(name):]
        raise LaunchError(msg) from None
    harmless = HARMLESS[framework]
    listed = set()
    for dest, opt, values in seen:
        text = _display(opt, values)
        if dest is None:
            out.not_read.append(f"{text} (not an option of {reader.split(chr(39) + 's')[0]})")
            continue
        if dest in ("help", "version") or dest in read:
            continue
        if text in listed:
            continue
        listed.add(text)
        if dest == "hf_overrides" or dest == "json_model_override_args":
            obj = _json_obj(opt, values) if isinstance(values, str) else _json_obj(opt, ns.get(dest))
            if obj:  # applied to the model's config as the server applies it (issue 26)
                out.model_overrides = {"option": opt, "values": obj, "nested": framework == "vllm"}
                keys = _heads_override(obj)
                if keys:
                    out.notes.append(f"{opt} overrides {', '.join(keys)}: applied to the model's config as "
                                     f"{framework_label(framework)} applies it")
                continue
        (out.ignored if dest in harmless else out.not_read).append(text)
    try:
        ws, src = native_workspace(framework, env, environ, out.env_ops)
    except _Unseen as u:
        ws, src = None, None
        out.notes.append(f"{u.var} is exported here but the server does not see it ({u.why}): it allocates its "
                         "own default")
    out.workspace_bytes, out.workspace_source = ws, src
    for k in sorted(env):
        if k == NATIVE_VAR[framework] or k.startswith("FLASHINFER_GUARD"):
            continue  # read by the plan from the environment the server sees
        if framework == "sglang" and k in READ_ENV:
            out.env[k] = str(env[k])[:64]
            continue
        harmless = k in HARMLESS_ENV or k.startswith(HARMLESS_ENV_PREFIXES)
        (out.ignored if harmless else out.not_read).append(printable(f"{k}={env[k][:40]}"))
    return out


class _Presence:
    """``has(dest)``: the parsed option is set; every option asked about and set is in ``read``."""

    def __init__(self, ns: dict):
        self.ns, self.read = ns, set()

    def __call__(self, dest: str) -> bool:
        if self.ns.get(dest) is None:
            return False
        self.read.add(dest)
        return True


def _resolve_vllm(out: Launch, ns: dict) -> set:
    has = _Presence(ns)
    read = has.read

    model = ns.get("model_tag") or ns.get("model")
    if model is not None:
        out.model = _str("--model", model)
    read.update({"model_tag", "model"})
    for dest, name, opt in (("tensor_parallel_size", "tp", "--tensor-parallel-size"),
                            ("data_parallel_size", "dp", "--data-parallel-size"),
                            ("pipeline_parallel_size", "pp", "--pipeline-parallel-size"),
                            ("decode_context_parallel_size", "dcp", "--decode-context-parallel-size")):
        if has(dest):
            setattr(out, name, _int(opt, ns[dest], BOUNDS["parallel"]))
    if has("enable_expert_parallel"):
        out.expert_parallel = _bool("--enable-expert-parallel", ns["enable_expert_parallel"])
    if has("all2all_backend"):
        out.all2all_backend = _str("--all2all-backend", ns["all2all_backend"])
    if has("max_num_seqs"):
        out.max_num_seqs = _int("--max-num-seqs", ns["max_num_seqs"], BOUNDS["max_num_seqs"])
    if has("max_num_batched_tokens"):
        out.max_batched_tokens = _human_int("--max-num-batched-tokens", ns["max_num_batched_tokens"],
                                            BOUNDS["max_batched_tokens"])
    if has("max_model_len"):
        out.max_model_len = _human_int("--max-model-len", ns["max_model_len"], BOUNDS["max_model_len"], auto=True)
    for dest, name, opt in (("kv_cache_dtype", "kv_cache_dtype", "--kv-cache-dtype"),
                            ("attention_backend", "attention_backend", "--attention-backend"),
                            ("quantization", "quantization", "--quantization")):
        if has(dest):
            setattr(out, name, _str(opt, ns[dest]))
    if has("block_size"):
        out.page_size = _int("--block-size", ns["block_size"], BOUNDS["page_size"])
    if has("enforce_eager"):
        out.eager = _bool("--enforce-eager", ns["enforce_eager"])
    if has("enable_chunked_prefill"):
        out.chunked_prefill = _bool("--enable-chunked-prefill", ns["enable_chunked_prefill"])
    _vllm_attention_config(out, ns, has)
    _vllm_speculative(out, ns, has)
    _vllm_graph_options(out, ns, has, read)
    return read


def _vllm_attention_config(out: Launch, ns: dict, has) -> None:
    """--attention-config's backend (a JSON object or vLLM's config object)."""
    if has("attention_config"):
        ac = _json_obj("--attention-config", ns["attention_config"])
        be = ac.get("backend")
        if be is not None and not isinstance(be, str):
            be = getattr(be, "name", str(be))
        if be:
            out.attention_backend = str(be)


def _vllm_speculative(out: Launch, ns: dict, has) -> None:
    """Speculative decoding (-sc, --speculative-config, dotted -sc.key)."""
    if has("speculative_config"):
        sc = _json_obj("--speculative-config", ns["speculative_config"])
        n = sc.get("num_speculative_tokens")
        method = sc.get("method")
        if n is not None:
            out.draft_tokens = _int("--speculative-config num_speculative_tokens", n, BOUNDS["draft_tokens"], lo=0)
        if sc:
            out.speculative = str(method or "speculative")
            if n is None and method and str(method).endswith(_MTP_SUFFIX):
                out.draft_tokens_from_model = True


def _vllm_graph_options(out: Launch, ns: dict, has, read: set) -> None:
    """CUDA graphs: the top-level options and the compilation config (-cc, -O JSON, dotted)."""
    cc = {}
    if has("compilation_config"):
        cc = _json_obj("--compilation-config", ns["compilation_config"])
    sizes = None
    for dest, opt in (("cudagraph_capture_sizes", "--cudagraph-capture-sizes"),
                      ("cuda_graph_sizes", "--cuda-graph-sizes")):
        if has(dest):
            sizes = _sizes(opt, ns[dest])
    if sizes is None and cc.get("cudagraph_capture_sizes") is not None:
        sizes = _sizes("--compilation-config cudagraph_capture_sizes", cc["cudagraph_capture_sizes"])
    out.capture_sizes = sizes
    m = ns.get("max_cudagraph_capture_size")
    if m is not None:
        read.add("max_cudagraph_capture_size")
    elif cc.get("max_cudagraph_capture_size") is not None:
        m = cc["max_cudagraph_capture_size"]
    if m is not None:
        out.max_capture = _int("--max-cudagraph-capture-size", m, BOUNDS["max_capture"])
    mode = cc.get("cudagraph_mode")
    if mode is not None:  # null: vLLM's default mode (CUDA graphs unless -O0)
        name = getattr(mode, "name", mode)
        if (isinstance(name, str) and name.strip().upper() == "NONE") or (type(name) is int and name == 0):
            out.eager = True
    elif has("optimization_level"):
        lvl = ns["optimization_level"]
        lvl = getattr(lvl, "value", lvl)
        if str(lvl).strip() in ("0", "O0"):
            # OPTIMIZATION_LEVEL_00 sets cudagraph_mode NONE where the user set no mode
            # (vllm/config/vllm.py, 0.19.1-0.33)
            out.eager = True


def _resolve_sglang(out: Launch, ns: dict) -> set:
    has = _Presence(ns)
    read = has.read

    if has("model_path"):
        out.model = _str("--model-path", ns["model_path"])
    # 0.5.5 stores --tp-size as tensor_parallel_size (ServerArgs.from_cli_args copies it to tp_size)
    for dest, name, opt in (("tp_size", "tp", "--tp-size"), ("tensor_parallel_size", "tp", "--tp-size"),
                            ("dp_size", "dp", "--dp-size"), ("data_parallel_size", "dp", "--dp-size"),
                            ("pp_size", "pp", "--pp-size"), ("pipeline_parallel_size", "pp", "--pp-size"),
                            ("ep_size", "ep", "--ep-size"), ("expert_parallel_size", "ep", "--ep-size"),
                            ("attn_dp_size", "attn_dp", "--attn-dp-size")):
        if has(dest):
            setattr(out, name, _int(opt, ns[dest], BOUNDS["parallel"]))
    if has("enable_dp_attention"):
        out.dp_attention = _bool("--enable-dp-attention", ns["enable_dp_attention"])
    if has("enable_deterministic_inference"):  # fixed-split plans, SGLang's forced 2 GiB (issue 19)
        out.deterministic = _bool("--enable-deterministic-inference", ns["enable_deterministic_inference"])
    if has("max_total_tokens"):  # the KV pool: bounds one deterministic decode batch
        out.kv_pool_tokens = _int("--max-total-tokens", ns["max_total_tokens"], BOUNDS["max_model_len"])
    if has("max_running_requests"):
        out.max_num_seqs = _int("--max-running-requests", ns["max_running_requests"], BOUNDS["max_num_seqs"])
    if has("chunked_prefill_size"):
        v = _int("--chunked-prefill-size", ns["chunked_prefill_size"], BOUNDS["max_batched_tokens"], lo=-(1 << 24))
        if v <= 0:
            out.chunked_prefill = False
            out.notes.append(f"--chunked-prefill-size {v}: chunked prefill off; prefill batches are whole prompts")
        else:
            out.max_batched_tokens = v
    if has("context_length"):
        out.max_model_len = _int("--context-length", ns["context_length"], BOUNDS["max_model_len"])
    for dest, name, opt in (("kv_cache_dtype", "kv_cache_dtype", "--kv-cache-dtype"),
                            ("attention_backend", "attention_backend", "--attention-backend"),
                            ("decode_attention_backend", "decode_attention_backend", "--decode-attention-backend"),
                            ("prefill_attention_backend", "prefill_attention_backend", "--prefill-attention-backend"),
                            ("quantization", "quantization", "--quantization"),
                            ("speculative_algorithm", "speculative", "--speculative-algorithm")):
        if has(dest):
            setattr(out, name, _str(opt, ns[dest]))
    if has("speculative_num_draft_tokens"):
        n = _int("--speculative-num-draft-tokens", ns["speculative_num_draft_tokens"], BOUNDS["draft_tokens"] + 1)
        out.draft_tokens = n - 1  # SGLang counts the verified token in
    if has("speculative_eagle_topk"):  # the draft decodes topk x bs requests (issue 26)
        out.eagle_topk = _int("--speculative-eagle-topk", ns["speculative_eagle_topk"], BOUNDS["draft_tokens"])
    if has("speculative_num_steps"):
        out.spec_steps = _int("--speculative-num-steps", ns["speculative_num_steps"], BOUNDS["draft_tokens"])
    if has("page_size"):
        out.page_size = _int("--page-size", ns["page_size"], BOUNDS["page_size"])
    for dest, opt in (("cuda_graph_max_bs", "--cuda-graph-max-bs"),
                      ("cuda_graph_max_bs_decode", "--cuda-graph-max-bs-decode")):
        if has(dest):
            out.max_capture = _int(opt, ns[dest], BOUNDS["max_capture"])
    for dest, opt in (("cuda_graph_bs", "--cuda-graph-bs"), ("cuda_graph_bs_decode", "--cuda-graph-bs-decode")):
        if has(dest):
            out.capture_sizes = _sizes(opt, ns[dest])
    for dest, opt in (("disable_cuda_graph", "--disable-cuda-graph"),
                      ("disable_decode_cuda_graph", "--disable-decode-cuda-graph")):
        if has(dest) and _bool(opt, ns[dest]):
            out.eager = True
    if has("disable_cuda_graph_padding"):
        out.disable_graph_padding = _bool("--disable-cuda-graph-padding", ns["disable_cuda_graph_padding"])
    # DP attention: attention TP = tp / attention DP, and the chunk is divided by it
    # (0.5.5 ServerArgs._handle_data_parallelism; 0.5.23 arg_groups/parallel_hook.py
    # handle_deprecated_dp_attention: --dp N --enable-dp-attention -> --attn-dp-size N)
    if out.dp_attention and (out.dp or 1) > 1 and not (out.attn_dp and out.attn_dp > 1):
        out.attn_dp = out.dp
    elif not out.dp_attention and (out.attn_dp or 1) <= 1:
        out.attn_dp = None
    if out.attn_dp is not None and out.attn_dp <= 1:
        out.attn_dp = None
    if out.attn_dp:
        tp = out.tp or 1
        if tp % out.attn_dp:
            raise LaunchError(f"attention DP {out.attn_dp} in the launch command must divide the TP size {tp} "
                              "(SGLang asserts tp_size % dp_size == 0)")
    if out.speculative and out.draft_tokens is None and str(out.speculative).upper() not in SGLANG_EAGLE_FAMILY:
        out.notes.append(f"--speculative-algorithm {out.speculative} without --speculative-num-draft-tokens: "
                         "SGLang picks the draft tokens; give it in the command to size verify batches")
    return read


# ------------------------------------------------------------------ entry point

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
            ns, seen = server_read(framework, form, tokens)
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
