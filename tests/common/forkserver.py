"""Run framework scenarios in forked children of one warm interpreter (issue 31).

Every vLLM/SGLang scenario used to be a fresh interpreter that spent 10-20 s of
CPU importing torch, transformers, triton, cutlass and the rest before the
scenario's first line. Here one *zygote* per pytest process imports those once
and forks a child per scenario. What each child still is:

* its own process: vLLM's per-process caches, its plugins-loaded flag, the
  guard's hooks, a crash or ``os._exit`` touch that scenario only (the zygote
  goes on; a child that dies of a signal is reported as that scenario's
  failure, rc ``-signal``, exactly as ``subprocess.run`` reports it);
* started as the fresh interpreter would be: the request's environment
  (``os.environ`` replaced), working directory, ``sys.argv``, ``sys.path``
  (script directory, then the request's ``PYTHONPATH``, then site-packages),
  and our ``.pth`` files processed again *in the child* under the request's
  environment (SGLang's ``.pth`` bootstrap is decided there, not in the zygote);
* with nothing of the framework, of FlashInfer or of this repository imported:
  the zygote preloads only third-party modules, found by importing the
  framework's entry modules in a throwaway discovery process and keeping every
  module whose top-level package is not excluded (``EXCLUDED``). So every hook
  the guard installs on a framework or FlashInfer module fires on its real
  import, as in a server. The zygote checks that after its preload and refuses
  to serve (every request then runs as a fresh interpreter) if one slipped in.

Requests that cannot be served faithfully by a fork run as a plain
``subprocess.run``: interpreter options (``-S``, ``-X``, ``-I``...), another
executable, ``fresh=True``, or an environment that differs from the zygote's in
a variable a preloaded module may have read at import (anything outside
``ENV_PREFIXES_SERVED``). ``FLASHINFER_GUARD_FORKSERVER=0`` turns the zygote off.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time

__all__ = ["run", "ForkServer", "EXCLUDED"]

# top-level packages never preloaded: the frameworks, FlashInfer and its kernels, our own code
EXCLUDED = frozenset({
    "vllm", "sglang", "flashinfer", "flashinfer_jit_cache", "flashinfer_cubin", "sgl_kernel", "sglang_kernel",
    "guard_core", "vllm_guard", "sglang_guard", "tests", "__main__", "__mp_main__",
})
# variables a scenario may set that no preloaded third-party module reads at import
# (PYTHONUNBUFFERED: the zygote and so every child is unbuffered; PYTHONDONTWRITEBYTECODE: set in the child)
ENV_PREFIXES_SERVED = ("FLASHINFER_GUARD", "VLLM_", "SGLANG_", "FG_", "PYTHONPATH", "PYTEST_", "PYTHONUNBUFFERED",
                       "PYTHONDONTWRITEBYTECODE")
_SAME_AS_SUBPROCESS = object()
# set in the zygote (and the discovery process) only, never in a child: no guard anywhere in the
# zygote; and torch's inductor (torch 2.8, SGLang 0.5.5's pin) must not warm its compile-worker pool
# at import (torch/_inductor/async_compile.py: a subprocess pool and a reader thread, which a fork
# cannot share). A child therefore has no warm inductor pool; no scenario compiles with inductor.
ZYGOTE_ENV = {"FLASHINFER_GUARD": "0", "TORCH_WARM_POOL": "0"}


def _enabled() -> bool:
    return os.environ.get("FLASHINFER_GUARD_FORKSERVER", "1").strip().lower() not in ("0", "off", "false", "no")


class ForkServer:
    """One zygote: start it with the base environment and the framework entry modules."""

    def __init__(self, discover: list[str], env: dict[str, str], cwd: str | None = None):
        self._discover = list(discover)
        self.env = dict(env)
        self._cwd = cwd
        self._proc: subprocess.Popen | None = None
        self._lock = threading.Lock()
        self._waiters: dict[int, dict] = {}
        self._next = 0
        self.broken: str | None = None
        self.preloaded = 0
        self.served = 0
        self.inflight = 0  # requests between their choice of this zygote and their answer (_servers_lock)

    # ---- the zygote process
    def _start(self) -> None:
        if self._proc is not None or self.broken:
            return
        env = dict(self.env, PYTHONUNBUFFERED="1", **ZYGOTE_ENV)
        modules = _discovered(tuple(self._discover), self.env)
        self._listing = tempfile.NamedTemporaryFile("w", prefix="fg-zygote-", suffix=".json", delete=False)
        json.dump(modules, self._listing)
        self._listing.close()
        self._proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--zygote", self._listing.name],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
            cwd=self._cwd, bufsize=1)
        hello = self._proc.stdout.readline()
        try:
            msg = json.loads(hello)
        except ValueError:
            msg = {"error": f"zygote said {hello!r}"}
        if "error" in msg:
            self.broken = msg["error"]
            self._proc.kill()
            return
        self.preloaded = msg.get("preloaded", 0)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._proc.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            with self._lock:
                w = self._waiters.get(msg.get("id"))
            if w is not None:
                w.update(msg)
                w["event"].set() if "rc" in msg else w["started"].set()
        # the zygote is gone: release every waiter
        with self._lock:
            self.broken = self.broken or "zygote exited"
            for w in self._waiters.values():
                w.setdefault("rc", -9)
                w["started"].set()
                w["event"].set()

    def close(self) -> None:
        listing = getattr(self, "_listing", None)
        if listing is not None:
            try:
                os.unlink(listing.name)
            except OSError:
                pass
        if self._proc is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(timeout=10)
            except Exception:
                self._proc.kill()

    # ---- one request
    def servable(self, argv: list[str], env: dict[str, str]) -> bool:
        if not argv or argv[0] != sys.executable or len(argv) < 2:
            return False
        if argv[1].startswith("-") and argv[1] not in ("-m", "-c"):
            return False
        for k in set(env) | set(self.env):
            if env.get(k) != self.env.get(k) and not k.startswith(ENV_PREFIXES_SERVED):
                return False
        return True

    def run(self, argv: list[str], env: dict[str, str], cwd: str | None, timeout: float | None):
        with self._lock:
            self._start_locked()
            if self.broken:
                return _SAME_AS_SUBPROCESS
            self._next += 1
            rid = self._next
            w = {"event": threading.Event(), "started": threading.Event()}
            self._waiters[rid] = w
        with tempfile.TemporaryDirectory(prefix="fg-fork-") as d:
            out, err = os.path.join(d, "out"), os.path.join(d, "err")
            req = {"id": rid, "argv": argv[1:], "env": env, "cwd": cwd or os.getcwd(), "out": out, "err": err}
            with self._lock:
                self._proc.stdin.write(json.dumps(req) + "\n")
                self._proc.stdin.flush()
            timed_out = not w["event"].wait(timeout)
            if timed_out and w.get("pid"):
                try:
                    os.killpg(w["pid"], 9)
                except OSError:
                    pass
                w["event"].wait(30)
            with self._lock:
                self._waiters.pop(rid, None)
                self.served += 1
            stdout = _read_text(out)
            stderr = _read_text(err)
        if timed_out:
            raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
        return subprocess.CompletedProcess(argv, w.get("rc", -9), stdout, stderr)

    def _start_locked(self) -> None:
        if self._proc is None and not self.broken:
            try:
                self._start()
            except Exception as exc:  # no zygote: every request runs as a fresh interpreter
                self.broken = f"zygote could not start: {exc!r}"


def _read_text(path: str) -> str:
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


_servers: dict[tuple, ForkServer] = {}
_servers_lock = threading.Lock()
MAX_ZYGOTES = 3  # at once per pytest process (each holds the framework's third-party closure); LRU beyond


def _fingerprint(env: dict[str, str]) -> tuple:
    """The part of an environment a preloaded module may have read at import."""
    return tuple(sorted((k, v) for k, v in env.items() if not k.startswith(ENV_PREFIXES_SERVED)))


def discover_modules_for_installed() -> list[str]:
    """The framework entry modules of this environment (the zygote preloads their third-party imports)."""
    from importlib import metadata

    out = []
    for dist, mods in (("vllm", ["vllm.engine.arg_utils", "vllm.v1.attention.backends.flashinfer"]),
                       ("sglang", ["sglang.srt.server_args", "sglang.srt.model_executor.model_runner",
                                   "sglang.srt.layers.attention.flashinfer_backend"])):
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        out += mods
    return out


def run(argv: list[str], *, env: dict[str, str] | None = None, discover: list[str] | None = None,
        cwd: str | None = None, timeout: float | None = None, fresh: bool = False, capture_output: bool = True,
        text: bool = True):
    """``subprocess.run(argv, env=env, cwd=cwd, timeout=timeout, capture_output=True, text=True)``, forked.

    ``discover``: the framework modules whose third-party imports the zygote
    preloads (default: this environment's framework). One zygote per distinct
    environment outside ``ENV_PREFIXES_SERVED``. Raises
    ``subprocess.TimeoutExpired`` as ``subprocess.run`` does.
    """
    assert capture_output and text, "forkserver.run always captures text output"
    argv = [str(a) for a in argv]
    env = dict(os.environ if env is None else env)
    cwd = None if cwd is None else str(cwd)
    server = None
    if _enabled() and not fresh:
        discover = discover_modules_for_installed() if discover is None else discover
        key = (sys.executable, tuple(discover), _fingerprint(env))
        evicted = None
        with _servers_lock:
            server = _servers.pop(key, None)
            if server is None and len(_servers) >= MAX_ZYGOTES:
                # the least recently used zygote with no request in flight makes room (a pytest
                # process meets more environments than it keeps zygotes: before this, every request
                # after the third environment ran as a fresh interpreter, ~10 s of CPU each on vLLM)
                idle = next((k for k, s in _servers.items() if not s.inflight), None)
                if idle is not None:
                    evicted = _servers.pop(idle)
            if server is None and len(_servers) < MAX_ZYGOTES:
                server = ForkServer(discover, env, None)
            if server is not None:
                _servers[key] = server  # the most recently used last
                server.inflight += 1
        if evicted is not None:
            evicted.close()
        if server is not None:
            try:
                if server.servable(argv, env):
                    done = server.run(argv, env, cwd, timeout)
                    if done is not _SAME_AS_SUBPROCESS:
                        return done
            finally:
                with _servers_lock:
                    server.inflight -= 1
    return subprocess.run(argv, env=env, cwd=cwd, timeout=timeout, capture_output=True, text=True)


def close_all() -> None:
    with _servers_lock:
        for s in _servers.values():
            s.close()
        _servers.clear()


# ------------------------------------------------------------------ the zygote side
_discovery: dict[tuple, list[str]] = {}


def _discovered(entry: tuple, env: dict[str, str]) -> list[str]:
    """The third-party modules a fresh interpreter has loaded after importing ``entry``, found once
    per environment's installed packages: kept in a file beside the environments (``_discovery_file``)
    and shared by every pytest process (xdist workers, shards, lines' reruns), each of which found it
    anew before, ~13 s of CPU each. Only what the zygote preloads comes from it: a stale list costs
    speed, never a scenario's behaviour (a module it lacks is imported in the child; a framework module
    in it is refused by the zygote's own check)."""
    key = (sys.executable, entry)
    if key not in _discovery:
        path = _discovery_file(entry)
        with _listing_lock(path):  # processes starting together: one discovers, the others read it
            found = _read_listing(path)
            if found is None:
                found = [m for m in _discover_modules(list(entry), env) if m.split(".")[0] not in EXCLUDED]
                if found and path is not None:
                    _write_listing(path, found)
        _discovery[key] = found
    return _discovery[key]


class _listing_lock:
    """An exclusive ``flock`` on ``<path>.lock`` (nothing where there is no path or no lock)."""

    def __init__(self, path: str | None):
        self.path, self.fd = path, None

    def __enter__(self):
        if self.path is not None:
            try:
                import fcntl

                os.makedirs(os.path.dirname(self.path), exist_ok=True)
                self.fd = os.open(self.path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
                fcntl.flock(self.fd, fcntl.LOCK_EX)
            except (OSError, ImportError):
                self.fd = None
        return self

    def __exit__(self, *exc):
        if self.fd is not None:
            os.close(self.fd)  # releases the lock
        return False


def _discovery_file(entry: tuple) -> str | None:
    """``<FLASHINFER_GUARD_HOME>/forkserver/<digest>.json``: the digest of the interpreter, the entry
    modules and the installed distributions (their ``.dist-info`` names: name and version), so an
    install of another version of anything finds the listing again."""
    import hashlib
    import site

    try:
        stamp = [sys.executable, os.path.realpath(sys.executable), *entry]
        for d in site.getsitepackages():
            try:
                stamp += sorted(n for n in os.listdir(d) if n.endswith((".dist-info", ".egg-info")))
            except OSError:
                continue
        home = os.environ.get("FLASHINFER_GUARD_HOME") or os.path.expanduser("~/.cache/flashinfer-guard")
        digest = hashlib.sha256("\0".join(stamp).encode()).hexdigest()[:24]
        return os.path.join(home, "forkserver", f"discovery-{digest}.json")
    except Exception:
        return None


def _read_listing(path: str | None) -> list[str] | None:
    if path is None:
        return None
    try:
        with open(path) as f:
            got = json.load(f)
    except (OSError, ValueError):
        return None
    return got if isinstance(got, list) and got and all(isinstance(m, str) for m in got) else None


def _write_listing(path: str, modules: list[str]) -> None:
    try:  # written whole, then renamed: a reader sees the old file or the new one
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".discovery-", dir=os.path.dirname(path))
        with os.fdopen(fd, "w") as f:
            json.dump(modules, f)
        os.replace(tmp, path)
    except OSError:
        pass


def _discover_modules(entry: list[str], env: dict[str, str]) -> list[str]:
    """The modules a fresh interpreter has loaded after importing ``entry`` (a throwaway process)."""
    code = ("import importlib, json, sys\n"
            "for m in json.loads(sys.argv[1]):\n"
            "    try:\n        importlib.import_module(m)\n    except BaseException:\n        pass\n"
            "print('MODULES ' + json.dumps(list(sys.modules)))\n")
    env = dict(env, **ZYGOTE_ENV)
    p = subprocess.run([sys.executable, "-c", code, json.dumps(entry)], capture_output=True, text=True, env=env,
                       timeout=600)
    for line in p.stdout.splitlines():
        if line.startswith("MODULES "):
            return json.loads(line[len("MODULES "):])
    return []


def _preload(listing: str) -> int:
    import importlib
    import warnings

    with open(listing) as f:
        names = [m for m in json.load(f) if m.split(".")[0] not in EXCLUDED and m not in sys.modules]
    n = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in names:
            try:
                importlib.import_module(m)
                n += 1
            except BaseException:  # a module that cannot be imported on its own: the child imports it
                pass
    return n


def _guard_pth_files() -> list[tuple[str, str]]:
    import site

    out = []
    for d in list(site.getsitepackages()) + [site.getusersitepackages()]:
        try:
            names = sorted(os.listdir(d))
        except OSError:
            continue
        for n in names:
            if n.endswith(".pth") and "flashinfer_guard" in n:
                out.append((d, n))
    return out


def _child(req: dict, base_path: list[str], zygote_pp: list[str]) -> None:
    """In the forked child: become the fresh interpreter the request asked for, run it, exit."""
    code = 1
    try:
        os.setsid()
        fd_in = os.open(os.devnull, os.O_RDONLY)
        fd_out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        fd_err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd_in, 0)
        os.dup2(fd_out, 1)
        os.dup2(fd_err, 2)
        for fd in (fd_in, fd_out, fd_err):
            os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.dont_write_bytecode = bool(req["env"].get("PYTHONDONTWRITEBYTECODE"))
        argv = req["argv"]
        pp = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        tail = [p for p in base_path if p not in zygote_pp]
        if argv[0] == "-c":
            first, run_kind = "", "code"
            sys.argv = ["-c", *argv[2:]]
        elif argv[0] == "-m":
            first, run_kind = os.getcwd(), "module"
            sys.argv = [argv[1], *argv[2:]]
        else:
            script = os.path.abspath(argv[0])
            first, run_kind = os.path.dirname(script), "script"
            sys.argv = [argv[0], *argv[1:]]
        sys.path[:] = [first, *[os.path.abspath(p) for p in pp], *tail]
        import importlib

        importlib.invalidate_caches()
        import site

        known = set(sys.path)
        for d, n in _guard_pth_files():  # as site does at start-up, under this request's environment
            site.addpackage(d, n, known)
        import runpy

        try:
            if run_kind == "code":
                import types

                main = types.ModuleType("__main__")
                main.__dict__["__builtins__"] = __builtins__
                sys.modules["__main__"] = main
                exec(compile(argv[1], "<string>", "exec"), main.__dict__)
            elif run_kind == "module":
                runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exc:
            c = exc.code
            if c is None:
                code = 0
            elif isinstance(c, int):
                code = c
            else:
                print(c, file=sys.stderr)
                code = 1
        except BaseException:
            import traceback

            traceback.print_exc()
            code = 1
        try:
            import atexit

            atexit._run_exitfuncs()
        except BaseException:
            pass
        try:
            import logging

            logging.shutdown()
        except BaseException:
            pass
    finally:
        for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                s.flush()
            except BaseException:
                pass
        os._exit(code & 0xFF if code >= 0 else 1)


def _zygote(listing: str) -> None:
    import select

    proto = os.fdopen(os.dup(1), "w", buffering=1)
    zygote_pp = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base_path = list(sys.path[1:])  # what site made of this environment, without our script's directory
    try:
        n = _preload(listing)
    except BaseException as exc:
        proto.write(json.dumps({"error": f"preload failed: {exc!r}"}) + "\n")
        return
    # our .pth bootstrap loaded sglang_guard._pth at site time (FLASHINFER_GUARD=0 here: it installed
    # nothing); every child processes our .pth files again under its own environment
    ours = ("guard_core", "vllm_guard", "sglang_guard")
    for name in [k for k in sys.modules if k.split(".")[0] in ours]:
        del sys.modules[name]
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "_SglangWatcher"]
    leaked = sorted({m.split(".")[0] for m in sys.modules} & (EXCLUDED - {"__main__", "__mp_main__"}))
    if leaked:
        proto.write(json.dumps({"error": f"preload imported {leaked}"}) + "\n")
        return
    if threading.active_count() != 1:
        proto.write(json.dumps({"error": f"preload left {threading.active_count()} threads"}) + "\n")
        return
    proto.write(json.dumps({"preloaded": n}) + "\n")
    children: dict[int, int] = {}
    stdin_open = True
    buf = ""
    while stdin_open or children:
        ready, _, _ = select.select([0], [], [], 0.05) if stdin_open else ([], [], time.sleep(0.05))
        if ready:
            chunk = os.read(0, 1 << 16).decode()
            if not chunk:
                stdin_open = False
            buf += chunk
            while "\n" in buf:
                line, buf = buf.split("\n", 1)
                req = json.loads(line)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    proto.close()
                    _child(req, base_path, zygote_pp)
                children[pid] = req["id"]
                proto.write(json.dumps({"id": req["id"], "pid": pid}) + "\n")
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            rid = children.pop(pid, None)
            if rid is None:
                continue
            rc = os.waitstatus_to_exitcode(status)
            proto.write(json.dumps({"id": rid, "rc": rc}) + "\n")


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "--zygote":
    _zygote(sys.argv[2])
