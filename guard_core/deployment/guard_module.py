"""Run one of our adapter modules (``<framework>_guard.<module>``) in a subprocess of this interpreter
and read its one JSON answer line: the server's own code answers offline (its imports and log
lines stay out of ``plan``), and whatever happens there is an answer, never a traceback here.
Used by the server's model reader (``server_reader``) and plan's server-resolution stage. Inside
``session()`` (``plan``) the calls with the same interpreter and environment go to one process
started once (``module_host``): the server's code is imported once per plan, not once per call."""

from __future__ import annotations

import contextlib
import json
import os

__all__ = ["PROGRESS_PREFIX", "config_copy", "in_session", "run_guard_module", "server_process_env", "session"]

# the module hosts of the open session, by (interpreter, environment); None outside a session
_hosts: dict | None = None
PROGRESS_AFTER_S, PROGRESS_EVERY_S = 5.0, 15.0
# how every progress line begins: a caller (or a script reading stderr) tells them from the verdict line
PROGRESS_PREFIX = "[flashinfer-guard] plan: waiting for "


def server_process_env(environ) -> dict:
    """The environment of a process that runs the server's code for ``plan`` and ``doctor``: this
    process's environment without the servers' and FlashInfer's variables, then those of the
    environment the server sees (``environ``: the launch command's, commands/plan/command.
    server_environ), offline, no device (it only reads) and the guard off (it only reads).
    Inside a ``session()`` every place the server's code writes at import or while it reads goes
    to the session's scratch directory (``_NO_TRACE``), removed when the session ends."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "SGLANG_", "FLASHINFER", "SGL_"))}
    env.update(os.environ if environ is None else environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", FLASHINFER_GUARD="0")
    if _scratch is not None:
        user_cache = _vllm_cache_root(env)
        for var, sub in _NO_TRACE:
            env[var] = os.path.join(_scratch, sub)
        _seed_vllm_cache(user_cache, env["VLLM_CACHE_ROOT"])
    return env


# What the servers' code writes while plan asks it (measured 2026-12-04 with HOME, XDG_CACHE_HOME,
# VLLM_CACHE_ROOT and TMPDIR pointed at empty directories, vLLM 0.33.0: vLLM's model inspection
# cache VLLM_CACHE_ROOT/modelinfos (model_executor/models/registry.py _ModelInfo cache), FlashInfer's
# ~/.cache/flashinfer/<version>/flashinfer_jit.log (flashinfer/jit/env.py FLASHINFER_WORKSPACE_BASE,
# jit/core.py), cutlass's and torch inductor's TMPDIR/... folders), each pointed into the scratch
# directory; Triton's cache as well (nothing compiles here, but an import may make the folder).
_NO_TRACE = (("TMPDIR", "tmp"), ("FLASHINFER_WORKSPACE_BASE", "flashinfer"), ("VLLM_CACHE_ROOT", "vllm-cache"),
             ("TRITON_CACHE_DIR", "triton"), ("TORCHINDUCTOR_CACHE_DIR", "inductor"))
_scratch: str | None = None
# the user's model-inspection answers copied in (read, never written): at most this many files of this size
_SEED_FILES, _SEED_BYTES = 2000, 1 << 20


def _vllm_cache_root(env: dict) -> str:
    """VLLM_CACHE_ROOT as vLLM resolves it for ``env`` (vllm/envs.py 0.33.0:713-720: the variable,
    else $XDG_CACHE_HOME/vllm, else ~/.cache/vllm)."""
    if env.get("VLLM_CACHE_ROOT"):
        return os.path.expanduser(env["VLLM_CACHE_ROOT"])
    home = env.get("HOME") or os.path.expanduser("~")
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(home, ".cache"), "vllm")


def _seed_vllm_cache(user_root: str, root: str) -> None:
    """The user's vLLM model-inspection answers (``modelinfos/*.json``) copied into the scratch
    cache once per session: vLLM finds what it found before (a miss costs it a subprocess that
    imports vLLM again) and writes nothing into the user's cache."""
    import shutil

    dst = os.path.join(root, "modelinfos")
    if os.path.isdir(dst):
        return
    for _var, sub in _NO_TRACE:
        os.makedirs(os.path.join(_scratch, sub), exist_ok=True)
    os.makedirs(dst, exist_ok=True)
    src = os.path.join(user_root, "modelinfos")
    try:
        names = sorted(os.listdir(src))[:_SEED_FILES]
    except OSError:
        return
    for n in names:
        p = os.path.join(src, n)
        try:
            if n.endswith(".json") and not os.path.islink(p) and os.path.isfile(p) and os.path.getsize(p) <= _SEED_BYTES:
                shutil.copyfile(p, os.path.join(dst, n))
        except OSError:
            continue


def in_session() -> bool:
    """Whether a ``session()`` is open (``plan``): calls then go to its server process."""
    return _hosts is not None


@contextlib.contextmanager
def session():
    """Within it, ``run_guard_module`` keeps one process per (interpreter, environment) and sends
    each call to it; every such process is ended when the block ends."""
    global _hosts, _scratch
    if _hosts is not None:  # nested: the outer session owns the hosts
        yield
        return
    import shutil
    import tempfile

    _hosts = {}
    try:
        _scratch = tempfile.mkdtemp(prefix="flashinfer-guard-plan-")
    except OSError:
        _scratch = None  # no temporary directory: the server's code writes where it would
    try:
        yield
    finally:
        hosts, _hosts = _hosts, None
        for h in hosts.values():
            h.close()
        scratch, _scratch = _scratch, None
        if scratch:
            shutil.rmtree(scratch, True)


class _Host:
    def __init__(self, python: str, env: dict):
        import subprocess

        self.proc = subprocess.Popen([python, "-m", "guard_core.deployment.module_host"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True,
                                     bufsize=1)
        self.buf = ""
        self.timed_out = False

    def ask(self, req: dict, timeout: float, progress) -> dict | None:
        """The answer, or None when the process died or did not answer in ``timeout`` s (then it is
        ended: the next call starts another)."""
        import selectors
        import time

        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
        except OSError:
            self.close()
            return None
        fd = self.proc.stdout.fileno()
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        t0 = time.monotonic()
        try:
            while "\n" not in self.buf:
                left = timeout - (time.monotonic() - t0)
                if left <= 0:
                    self.timed_out = True
                    self.proc.kill()
                    self.proc.wait()
                    return None
                if sel.select(min(left, 1.0)):
                    chunk = os.read(fd, 1 << 20)
                    if not chunk:
                        self.close()
                        return None
                    self.buf += chunk.decode("utf-8", "replace")
                progress(time.monotonic() - t0)
        finally:
            sel.close()
        line, self.buf = self.buf.split("\n", 1)
        try:
            ans = json.loads(line)
        except ValueError:
            self.close()
            return None
        return ans if isinstance(ans, dict) else None

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()


def _stderr_is_terminal() -> bool:
    """Progress lines go to a person at a terminal only: a script reading plan's stderr (or a CI
    log) gets the verdict's one line and nothing else (the "one line" contract of every refusal)."""
    import sys

    try:
        return bool(sys.stderr.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _progress_line(who: str, timeout: float):
    """A line on stderr from 5 s on, then every 15 s (PROGRESS_AFTER_S, PROGRESS_EVERY_S), while the server's code runs: a slow plan is
    told from a hung one. Only where stderr is a terminal (``_stderr_is_terminal``)."""
    import sys

    shown = [0.0]
    if not _stderr_is_terminal():
        return lambda elapsed: None

    def progress(elapsed: float) -> None:
        if elapsed >= PROGRESS_AFTER_S and (shown[0] == 0 or elapsed - shown[0] >= PROGRESS_EVERY_S):
            shown[0] = elapsed
            try:
                print(f"{PROGRESS_PREFIX}{who} ... {elapsed:.0f} s (limit {timeout:g} s)",
                      file=sys.stderr, flush=True)
            except (OSError, ValueError):
                pass
    return progress


@contextlib.contextmanager
def config_copy(path: str, always: bool = False):
    """``path``, or a private directory holding a copy of it named ``config.json`` (the servers' config
    code reads a directory's ``config.json``): for a file under another name, or for any file where
    ``always``. Yields (path to read, directory or None); the copy is removed afterwards; OSError
    when the file cannot be copied."""
    import shutil
    import tempfile

    if not os.path.isfile(path) or (not always and os.path.basename(path) == "config.json"):
        yield path, None
        return
    tmp = tempfile.mkdtemp(prefix="flashinfer-guard-model-")
    try:
        shutil.copyfile(path, os.path.join(tmp, "config.json"))
        yield os.path.join(tmp, "config.json"), tmp
    finally:
        shutil.rmtree(tmp, True)


def run_guard_module(module: str, args: list[str], env: dict, mark: str, timeout: float, who: str,
                     stdin: str | None = None, python: str | None = None) -> dict:
    """``python -m module *args`` with ``env`` (the directory holding guard_core put first on
    PYTHONPATH: never guard_core/ itself, whose flashinfer/ room would shadow the real FlashInfer);
    the JSON after ``mark`` on its last such line, or ``{"ok": False, "refusal": "<who> ..."}``."""
    import subprocess
    import sys

    import guard_core

    env = dict(env)
    here = os.path.dirname(os.path.dirname(os.path.abspath(guard_core.__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if _hosts is not None:
        return _hosted(module, args, env, mark, timeout, who, stdin, python or sys.executable)
    try:
        p = subprocess.run([python or sys.executable, "-m", module, *args], input=stdin, capture_output=True,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "refusal": f"{who} did not answer within {timeout:g} s"}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "refusal": f"{who} did not run ({type(exc).__name__})"}
    return _answer(p.stdout, p.stderr, p.returncode, mark, who)


def _hosted(module: str, args: list[str], env: dict, mark: str, timeout: float, who: str, stdin, python: str) -> dict:
    key = (python, tuple(sorted(env.items())))
    host = _hosts.get(key)
    if host is None or host.proc.poll() is not None:
        try:
            host = _hosts[key] = _Host(python, env)
        except OSError as exc:
            return {"ok": False, "refusal": f"{who} did not run ({type(exc).__name__})"}
    ans = host.ask({"module": module, "args": list(args), "stdin": stdin, "env": env}, timeout,
                   _progress_line(who, timeout))
    if ans is None:
        _hosts.pop(key, None)
        return {"ok": False, "refusal": f"{who} did not answer within {timeout:g} s" if host.timed_out
                else f"{who} ended without an answer (exit {host.proc.returncode})"}
    return _answer(str(ans.get("stdout", "")), str(ans.get("stderr", "")), ans.get("rc"), mark, who)


def _answer(stdout: str, stderr: str, rc, mark: str, who: str) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith(mark):
            try:
                return json.loads(line[len(mark):])
            except ValueError:
                break
    tail = " ".join((stderr or "").strip().splitlines()[-1:])[:200]
    return {"ok": False, "refusal": f"{who} gave no answer (exit {rc}: {tail})"}
