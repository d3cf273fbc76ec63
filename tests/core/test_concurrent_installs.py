"""Issue 40: the test command's shared installs, started side by side on an empty machine.

The suites of ``ci/test.sh`` start together (core beside vLLM), and each asks ``ci/lib.sh``'s
``fg_uv`` for the uv tool and ``ci/install_env.sh`` for its environment. On an empty
``FLASHINFER_GUARD_HOME`` that used to race: two shells ran ``rm -rf`` and ``python3 -m venv``
on the same folder (2 of 15 got no working uv in the issue's five rounds, and the core suite's
~900 tests never ran). These tests run the real ``ci/`` scripts, several at the same moment,
from an empty home, several times, and check that every one succeeds and leaves one working
tool and one proven environment.

Only the network is held still: uv's wheel is downloaded once into a folder that pip reads
instead of the index (``PIP_FIND_LINKS`` + ``PIP_NO_INDEX``), and uv's own download cache is
the run's (``UV_CACHE_DIR``), so a round costs seconds, not downloads.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UV_VERSION = re.search(r'^FG_UV_VERSION="([^"]+)"', (REPO / "ci/lib.sh").read_text(), re.M).group(1)
ROUNDS = 3
SHELLS = 3


def _default_uv_cache() -> str:
    home = os.environ.get("FLASHINFER_GUARD_HOME") or os.path.expanduser("~/.cache/flashinfer-guard")
    return os.environ.get("UV_CACHE_DIR") or os.path.join(home, "uv-cache")


@pytest.fixture(scope="module")
def uv_wheels(tmp_path_factory):
    d = tmp_path_factory.mktemp("uv-wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
                           "--no-deps", "--only-binary=:all:", "-d", str(d), f"uv=={UV_VERSION}"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and list(d.glob("uv-*.whl")), proc.stdout + proc.stderr
    return d


def _env(home: Path, wheels: Path) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "FG_", "PIP_", "UV", "VIRTUAL_ENV"))}
    env.update(FLASHINFER_GUARD_HOME=str(home), UV_CACHE_DIR=_default_uv_cache(),
               PIP_FIND_LINKS=str(wheels), PIP_NO_INDEX="1")
    return env


def _start_together(cmds: list[str], env: dict, cwd: Path, tmp: Path) -> list[subprocess.CompletedProcess]:
    """Start every command, each waiting on one file; create it; wait for all."""
    go = tmp / "go"
    procs = [subprocess.Popen(["bash", "-c", f'while [ ! -e "{go}" ]; do sleep 0.005; done; {c}'],
                              cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    time.sleep(0.3)
    go.touch()
    out = []
    for p in procs:
        so, se = p.communicate(timeout=900)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, so, se))
    return out


def _one_working_uv(home: Path) -> Path:
    tools = home / "tools"
    uv = tools / f"uv-{UV_VERSION}" / "bin" / "uv"
    ver = subprocess.run([str(uv), "--version"], capture_output=True, text=True, timeout=60)
    assert ver.returncode == 0 and ver.stdout.split()[1] == UV_VERSION, ver
    left = sorted(p.name for p in tools.iterdir() if not p.name.startswith("."))
    assert left == [f"uv-{UV_VERSION}"], f"half-made tool folders left behind: {left}"
    return uv


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_uv_asked_by_several_shells_at_once_on_an_empty_home(tmp_path, uv_wheels, round_):
    home = tmp_path / "home"
    res = _start_together([f'source "{REPO}/ci/lib.sh" && fg_uv'] * (SHELLS + 1),
                          _env(home, uv_wheels), REPO, tmp_path)
    uv = _one_working_uv(home)
    for r in res:
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip().splitlines()[-1] == str(uv), r.stdout
    installs = sum(r.stderr.count("installing uv") for r in res)
    assert installs == 1, f"uv installed {installs} times, want once:\n" + "\n".join(r.stderr for r in res)


@pytest.mark.parametrize("round_", range(ROUNDS))
def test_the_real_installers_start_together_on_an_empty_home(tmp_path, uv_wheels, round_):
    """The core environment asked for by several ``ci/install_env.sh`` at once (core beside the
    vLLM suite on a fresh machine is two of them, plus ci/lock.sh's own fg_uv): all succeed, one
    uv, one environment with the lock's marker, whose python runs this repository's CLI."""
    home = tmp_path / "home"
    res = _start_together([f'bash "{REPO}/ci/install_env.sh" core'] * SHELLS + [f'source "{REPO}/ci/lib.sh" && fg_uv'],
                          _env(home, uv_wheels), REPO, tmp_path)
    for r in res:
        assert r.returncode == 0, r.stderr[-4000:]
    _one_working_uv(home)
    env = home / "envs" / "core"
    py = env / "bin" / "python"
    for r in res[:SHELLS]:
        assert r.stdout.strip().splitlines()[-1] == str(py), r.stdout
    created = sum(r.stderr.count("creating ") for r in res)
    assert created == 1, "\n".join(r.stderr for r in res)
    want = hashlib.sha256((REPO / "ci/locks/core.txt").read_bytes()).hexdigest()
    assert (env / ".flashinfer-guard-lock").read_text().strip() == want
    run = subprocess.run([str(py), "-m", "guard_core.commands.cli", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=str(tmp_path))
    assert run.returncode == 0 and "plan" in run.stdout, run.stdout + run.stderr
