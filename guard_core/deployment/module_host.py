"""One interpreter that runs our adapter modules one request after another (``plan``'s server
process: issue 42 item 1).

``plan`` asks the installed server twice, for the model's reading (``<fw>_guard.model_reader``) and
for the deployment's resolution (``<fw>_guard.server_resolution``); each used to be a subprocess of
its own, each importing the server (vLLM: ~20 s on 2 cores). Inside ``guard_module.session()`` both
go to this process, started once: the server is imported once per ``plan``.

Protocol: one JSON request per line on stdin, ``{"module", "args", "stdin", "env"}``; one JSON
answer per line, ``{"stdout", "stderr", "rc"}``, on the process's original stdout, which is moved to
a private descriptor before anything runs (file descriptor 1 then points at 2: a C extension
writing to its stdout cannot corrupt an answer). Each request runs the module as ``python -m``
would (``runpy``, ``__main__``), with ``os.environ`` set to the request's environment, ``sys.argv``
its arguments and ``sys.stdin`` its text; its Python-level output is captured. Nothing raised by
a module leaves this loop: it is the answer's stderr and rc.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import traceback

__all__ = ["main", "serve_one"]


def _answers():
    fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    return io.TextIOWrapper(io.FileIO(fd, "w"), line_buffering=True)


def serve_one(req: dict) -> dict:
    out, err = io.StringIO(), io.StringIO()
    rc = 0
    module = str(req["module"])
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in (req.get("env") or {}).items()})
    saved = sys.argv, sys.stdin
    sys.argv = [module, *[str(a) for a in req.get("args") or ()]]
    sys.stdin = io.StringIO(req.get("stdin") or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                runpy.run_module(module, run_name="__main__", alter_sys=True)
            except SystemExit as exc:
                code = exc.code
                rc = code if isinstance(code, int) else (0 if code is None else 1)
                if code is not None and not isinstance(code, int):
                    print(code, file=sys.stderr)
            except BaseException:  # noqa: BLE001 - whatever the module raises is its answer
                rc = 1
                traceback.print_exc()
    finally:
        sys.argv, sys.stdin = saved
    return {"stdout": out.getvalue(), "stderr": err.getvalue(), "rc": rc}


def main() -> int:
    answers = _answers()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            ans = serve_one(json.loads(line))
        except Exception as exc:  # a malformed request: an answer all the same
            ans = {"stdout": "", "stderr": f"module host: {type(exc).__name__}: {exc}", "rc": 1}
        answers.write(json.dumps(ans) + "\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
