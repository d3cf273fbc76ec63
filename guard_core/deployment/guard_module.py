"""Run one of our adapter modules (``<framework>_guard.<module>``) in a subprocess of this interpreter
and read its one JSON answer line: the server's own code answers offline (its imports and log
lines stay out of ``plan``), and whatever happens there is an answer, never a traceback here.
Used by the server's model reader (``server_reader``) and plan's server-resolution stage."""

from __future__ import annotations

import contextlib
import json
import os

__all__ = ["config_copy", "run_guard_module"]


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
    try:
        p = subprocess.run([python or sys.executable, "-m", module, *args], input=stdin, capture_output=True,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "refusal": f"{who} did not answer within {timeout} s"}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "refusal": f"{who} did not run ({type(exc).__name__})"}
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(mark):
            try:
                return json.loads(line[len(mark):])
            except ValueError:
                break
    tail = " ".join((p.stderr or "").strip().splitlines()[-1:])[:200]
    return {"ok": False, "refusal": f"{who} gave no answer (exit {p.returncode}: {tail})"}
