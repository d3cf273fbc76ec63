"""Compile the planner programs the tests run, once, before the tests: a build step of its own,
timed apart from the tests (issue 40), so a cold run's log says what compiling cost.

    python ci/prebuild.py conformance   # the core env: the oracle harness of every selected release
    python ci/prebuild.py standin       # a framework env: the stand-in library of its FlashInfer

Both are cached under $FLASHINFER_GUARD_CACHE and built under a lock into a temporary name that
is renamed into place (tests/conformance/oracle.py build, tests/realcalls/standin.py
build_library), so this step and a test asking for the same program at the same moment build it
once. Prints one line and appends one row to $FG_TIMINGS (ci/lib.sh fg_time).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _record(name: str, secs: float, state: str) -> None:
    path = os.environ.get("FG_TIMINGS")
    if path:
        with open(path, "a") as f:
            f.write(f"build\t{name}\t{secs:.0f}\t{state}\n")


def main(kind: str) -> int:
    t0, wall0 = time.monotonic(), time.time() - 1
    if kind == "conformance":
        from tests.conformance import oracle

        versions = oracle.selected_releases()
        outs = list(oracle.build_many(versions).values())
        name = "planners " + ",".join(versions)
    elif kind == "standin":
        from tests.realcalls import standin

        version, _ = standin.installed_flashinfer()
        outs = [standin.build_library()]
        name = f"stand-in flashinfer-{version}"
    else:
        print(f"usage: prebuild.py conformance|standin (got {kind!r})", file=sys.stderr)
        return 2
    secs = time.monotonic() - t0
    built = sum(p.stat().st_mtime >= wall0 for p in outs)  # made by this call, not found in the cache
    state = f"built={built}" if built else "cached"
    _record(name, secs, state)
    print(f"[ci] build {name}: {state} in {secs:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else ""))
