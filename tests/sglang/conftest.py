"""Run each SGLang scenario in its own process of the current env (a forked child of one warm
interpreter, tests/common/forkserver.py; a fresh interpreter where start-up itself is tested).

These tests need a real SGLang installed in the interpreter running pytest
(``ci/sglang/install.sh VERSION`` makes one; ``ci/sglang/run_tests.sh`` runs all
lines). Without SGLang they fail at collection: there is nothing to test.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata

import pytest
from tests.common import forkserver  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
SGLANG = metadata.version("sglang")  # PackageNotFoundError: run inside a ci/sglang env
FLASHINFER = metadata.version("flashinfer-python")


def _key(v):
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


class Run:
    def __init__(self, proc):
        self.proc = proc
        self.stderr = proc.stderr
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, (
            f"scenario failed (rc={proc.returncode})\nstdout:\n{proc.stdout[-4000:]}\nstderr:\n{proc.stderr[-8000:]}")
        self.result = json.loads(lines[-1][len("RESULT "):])

    @property
    def guard_lines(self):
        return [l for l in (self.stderr + self.proc.stdout).splitlines() if "[flashinfer-guard]" in l]

    def lines(self, area):
        return [l for l in self.guard_lines if f"[flashinfer-guard] {area}:" in l]


_runs: dict = {}
# scenarios about what a plain interpreter of this environment has loaded at start-up (nothing heavy):
# a forked child of the warm scenario interpreter (tests/common/forkserver.py) has torch loaded, so
# these run as fresh interpreters
FRESH = {"no_sglang"}


@pytest.fixture
def scenario():
    """Run a scenario in its own process; identical requests share one run."""

    def run(name, env=None, **opts):
        key = (name, json.dumps(env or {}, sort_keys=True), json.dumps(opts, sort_keys=True))
        if key not in _runs:
            _runs[key] = _run(name, env, opts)
        return _runs[key]

    return run


def _run(name, env, opts):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))}
    e.update(env or {})
    proc = forkserver.run([sys.executable, os.path.join(HERE, "scenarios.py"), name, json.dumps(opts)],
                          capture_output=True, text=True, env=e, timeout=900,
                          fresh=name in FRESH)
    return Run(proc)

