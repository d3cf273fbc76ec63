"""The environment the server process sees: the exported one through the command's operations (``VAR=value``,
`env -i`/`-u`, `docker run -e`/`--env-file`), and the server's own workspace variable read from it."""

from __future__ import annotations

import os
import re

from guard_core.deployment.command_limits import LaunchError
from guard_core.deployment.launch.values import read_int, show
from guard_core.flashinfer.releases import NATIVE_VAR

__all__ = ["ENV_NAME_RE", "Unseen", "native_workspace", "server_environment"]


ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def native_workspace(framework: str, env: dict, environ, ops=None) -> tuple[int | None, str | None]:
    """The server's own workspace variable (bytes: both servers read it with int()), from the
    environment the server sees (``server_environment``), with which value was used and why."""
    var = NATIVE_VAR[framework]
    seen, why = server_environment(ops if ops is not None else [("set", k, v) for k, v in env.items()],
                                   environ or {})
    if var not in seen:
        if var in (environ or {}):
            raise Unseen(var, why)
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
                          f"with int()), got {show(seen[var])}")
    return n, f"{var}={raw.strip()} {where} ({why})"


class Unseen(Exception):
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
            raise LaunchError(f"--env-file {show(path)} in the launch command: larger than 1 MiB")
        with open(path, encoding="utf-8") as fh:
            text = fh.read(_ENV_FILE_MAX + 1)
    except OSError as exc:
        raise LaunchError(f"--env-file {show(path)} in the launch command: cannot read it ({exc.strerror})") from None
    except (ValueError, UnicodeError):
        raise LaunchError(f"--env-file {show(path)} in the launch command: not a UTF-8 text file") from None
    out: dict = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        k, eq, v = line.partition("=")
        if ENV_NAME_RE.fullmatch(k):
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
