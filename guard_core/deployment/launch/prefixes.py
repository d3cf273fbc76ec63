"""A launch command's prefixes peeled off as a shell, `env`, `uv run`, `docker run`/`podman run` and
`python -m` would: ``split_command`` gives the server, the form, its arguments and the environment operations."""

from __future__ import annotations

import re

from guard_core.deployment.command_limits import LaunchError
from guard_core.deployment.launch.environment import ENV_NAME_RE
from guard_core.deployment.launch.record import MAX_TOKEN_CHARS, MAX_TOKENS
from guard_core.deployment.launch.values import show

__all__ = ["split_command"]


_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_SGLANG_MODULES = ("sglang.launch_server",)

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
        if ENV_NAME_RE.fullmatch(k):
            container.append(("set", k, v) if eq else ("pass", k))
    elif name == "--env-file":
        container.append(("file", val))



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
                raise LaunchError(f"env -S {show(val)} in the launch command: unbalanced quotes") from None
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
