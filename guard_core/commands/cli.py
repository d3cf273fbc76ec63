"""The ``flashinfer-guard`` command: plan, doctor, presets.

``plan`` answers "will this deployment crash, and what fixes it?" without a
GPU. A bare ``flashinfer-guard plan`` runs the vLLM seed: Qwen3.5-397B-A17B on
a B300, vLLM's 394 MiB default, tensor-core (FA2) decode, CUDA-graph batch 512,
FlashInfer 0.7.0 (where vLLM is installed, its installed line and FlashInfer
are simulated instead; ``--framework-version`` picks another).

This module is the entry (``main``); the parser and its converters live in ``options``,
``doctor`` and ``presets`` in ``doctor``, and ``plan``'s stages in ``plan_report``.
"""

from __future__ import annotations

import json
import sys

from guard_core.commands.doctor import doctor_model_usable, run_doctor, run_presets
from guard_core.commands.options import UsageError, build_parser, check_args, resolve_gpu

__all__ = ["SIGPIPE_EXIT", "build_parser", "main", "run_doctor"]


def run_plan(a) -> dict:
    """The plan for parsed options (``a.launch``: the command after ``--``); logic in plan_report."""
    from guard_core.commands.plan_report import PlanUsageError, build
    if not hasattr(a, "launch"):
        a.launch = None
    try:
        return build(a, resolve_gpu)
    except PlanUsageError as exc:
        raise UsageError(str(exc)) from None


def print_plan(r: dict, show_all: bool, out=sys.stdout) -> None:
    from guard_core.commands.plan_report import print_report
    print_report(r, show_all, out=out)


def _strict_json(obj) -> str:
    try:
        return json.dumps(obj, indent=2, allow_nan=False)
    except ValueError:
        raise _InternalError("the result holds a number JSON cannot represent (NaN or infinity); "
                             "not printing invalid JSON") from None


class _InternalError(Exception):
    pass


def _one_line(text, limit: int = 600) -> str:
    """A message as one printable line: non-printable characters escaped, the length bounded."""
    t = str(text)
    if len(t) > limit:
        t = t[:limit] + "..."
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in t)


def _error(message, code: int = 2) -> int:
    try:
        sys.stderr.write(f"flashinfer-guard: error: {_one_line(message)}\n")
        sys.stderr.flush()
    except Exception:  # no stderr either: the exit status still says it
        pass
    return code


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so that the interpreter's final flush cannot fail again."""
    import os
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, sys.stdout.fileno())
        finally:
            os.close(fd)
    except Exception:
        pass


SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


def _emit(text: str) -> int:
    """Write the whole report at once; a closed pipe ends quietly (141), other write errors in one line (1)."""
    out = sys.stdout
    if out is None:  # started with stdout closed (>&-)
        return _error("cannot write to standard output: it is closed", 1)
    try:
        # a path or name that the terminal's encoding cannot show (undecodable bytes in a file name,
        # PYTHONIOENCODING=ascii) is escaped, not an error
        enc = getattr(out, "encoding", None) or "utf-8"
        text = text.encode(enc, "backslashreplace").decode(enc, "replace")
    except (LookupError, TypeError, ValueError):
        pass
    try:
        if text:
            out.write(text)
        out.flush()
    except BrokenPipeError:
        _silence_stdout()
        return SIGPIPE_EXIT
    except OSError as exc:
        _silence_stdout()
        return _error(f"cannot write to standard output: {exc.strerror or type(exc).__name__}", 1)
    except ValueError:  # I/O operation on a closed file
        return _error("cannot write to standard output: it is closed", 1)
    return 0


def main(argv=None) -> int:
    """The command. Exit 0 with the report on stdout, or 2 with one error line on stderr (1 for an
    internal error or a failed write, 141 when the reader of a pipe went away); never a traceback."""
    import io

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    from guard_core.commands.plan_report import split_launch
    argv, launch_cmd = split_launch(argv)  # plan [opts] -- <the server's launch command>
    out = io.StringIO()
    code = 0
    try:
        try:
            args = parser.parse_args(argv or ["plan"])
        except SystemExit as exc:  # --help / --version printed their text
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            return _emit("") or status
        if args.cmd in (None, "plan"):
            if args.cmd is None:
                args = parser.parse_args(["plan"])
            check_args(args)
            args.launch = launch_cmd
            result = run_plan(args)
            if args.json:
                out.write(_strict_json(result) + "\n")
            else:
                print_plan(result, args.all, out=out)
        elif launch_cmd is not None:  # doctor/presets read no launch command: refuse it, never ignore it
            raise UsageError(f"{args.cmd} takes no launch command after --: it inspects this environment; "
                             f"for `{' '.join(launch_cmd)[:60]}` run `flashinfer-guard plan -- <command>`")
        elif args.cmd == "doctor":
            if args.model is not None:
                doctor_model_usable(args.model, args.tp)
            code = run_doctor(out=out, model=args.model, tp=args.tp)
        elif args.cmd == "presets":
            code = run_presets(args.json, out=out)
    except UsageError as exc:
        return _error(exc)
    except ValueError as exc:  # layouts and limits validate themselves
        return _error(exc)
    except Exception as exc:  # a bug of ours: one line, not a traceback
        return _error(f"internal error ({type(exc).__name__}: {exc}); please report it", 1)
    return _emit(out.getvalue()) or code


if __name__ == "__main__":
    sys.exit(main())
