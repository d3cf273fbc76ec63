"""The scenario runner (tests/common/forkserver.py) fails only the scenario that broke.

Every framework suite runs its scenarios as forked children of one warm
interpreter. What the suites rely on, checked here with the core environment's
own interpreter (the zygote preloads a stdlib module instead of a framework):
a scenario that raises, exits non-zero, is killed by a signal or runs past its
time is reported as that scenario's result, the zygote goes on, and the next
scenario sees a fresh process (its own environment, argv, sys.path, no state
left by the one before).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.common import forkserver

DISCOVER = ["email.mime.text"]  # something to preload: the zygote imports its closure once


@pytest.fixture()
def script(tmp_path):
    p = tmp_path / "scenario.py"
    p.write_text(textwrap.dedent("""
        import json, os, sys
        mode = sys.argv[1]
        state = {"argv": sys.argv, "path0": sys.path[0], "env": os.environ.get("FG_MODE"),
                 "left_over": os.environ.get("FG_LEFT_OVER"), "preloaded": "email.mime.text" in sys.modules,
                 "pid": os.getpid(), "marker": "fg_marker_module" in sys.modules}
        os.environ["FG_LEFT_OVER"] = "yes"      # must not reach the next scenario
        sys.modules["fg_marker_module"] = sys  # nor this
        print("RESULT " + json.dumps(state), flush=True)
        if mode == "segv":
            import ctypes
            ctypes.string_at(0)
        if mode == "kill":
            os.kill(os.getpid(), 9)
        if mode == "raise":
            raise ValueError("boom in the scenario")
        if mode == "exit3":
            sys.exit(3)
        if mode == "hang":
            import time
            time.sleep(600)
        print("done", file=sys.stderr)
    """))
    return p


def _run(script, mode, timeout=120, **env):
    e = dict(os.environ, FG_MODE=mode, **env)
    e.pop("FG_LEFT_OVER", None)
    return forkserver.run([sys.executable, str(script), mode], env=e, discover=DISCOVER, timeout=timeout,
                          cwd=str(script.parent))


def _state(proc):
    import json

    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert lines, (proc.returncode, proc.stdout, proc.stderr)
    return json.loads(lines[-1][len("RESULT "):])


def test_a_crashing_scenario_fails_alone_and_the_next_runs(script):
    forkserver.close_all()
    first = _run(script, "ok")
    assert first.returncode == 0 and "done" in first.stderr
    s0 = _state(first)
    assert s0["preloaded"], "the zygote's preload reached the child"
    assert s0["path0"] == str(script.parent) and s0["argv"] == [str(script), "ok"]
    servers = list(forkserver._servers.values())
    assert len(servers) == 1 and servers[0].broken is None, servers and servers[0].broken

    crashed = _run(script, "segv")
    assert crashed.returncode == -11, (crashed.returncode, crashed.stderr[-2000:])
    killed = _run(script, "kill")
    assert killed.returncode == -9
    raised = _run(script, "raise")
    assert raised.returncode == 1 and "ValueError: boom in the scenario" in raised.stderr
    exited = _run(script, "exit3")
    assert exited.returncode == 3
    with pytest.raises(subprocess.TimeoutExpired):
        _run(script, "hang", timeout=3)

    after = _run(script, "ok")
    assert after.returncode == 0
    s1 = _state(after)
    assert s1["left_over"] is None and not s1["marker"], "a scenario saw state left by the one before"
    assert s1["pid"] != s0["pid"]
    assert servers[0].served >= 7 and servers[0].broken is None
    forkserver.close_all()


def test_interpreter_options_and_foreign_environment_run_as_a_fresh_interpreter(script):
    forkserver.close_all()
    _run(script, "ok")
    # a variable outside the served prefixes may have been read by a preloaded module at import:
    # such a request gets a zygote started with that environment, never one started without it
    foreign = _run(script, "ok", LANG_FG_TEST="x")
    assert foreign.returncode == 0 and _state(foreign)["preloaded"]
    assert sorted(str(s.env.get("LANG_FG_TEST")) for s in forkserver._servers.values()) == ["None", "x"]
    fresh = forkserver.run([sys.executable, str(script), "ok"], env=dict(os.environ, FG_MODE="ok"), discover=DISCOVER,
                           fresh=True)
    assert fresh.returncode == 0 and not _state(fresh)["preloaded"]
    isolated = forkserver.run([sys.executable, "-I", "-c", "import sys; print(sys.flags.isolated)"],
                              env=dict(os.environ), discover=DISCOVER)
    assert isolated.stdout.strip() == "1"
    forkserver.close_all()


def test_c_and_m_forms_get_the_argv_and_path_python_gives_them(tmp_path):
    forkserver.close_all()
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    (tmp_path / "fg_mod_probe.py").write_text("import sys\nprint(sys.argv, __name__, sys.path[0] == __import__('os').getcwd())\n")
    c = forkserver.run([sys.executable, "-c", "import sys; print(sys.argv, __name__, repr(sys.path[0]))", "a", "b"],
                       env=env, discover=DISCOVER, cwd=str(tmp_path))
    assert c.returncode == 0 and c.stdout.strip() == "['-c', 'a', 'b'] __main__ ''"
    m = forkserver.run([sys.executable, "-m", "fg_mod_probe", "x"], env=env, discover=DISCOVER, cwd=str(tmp_path))
    assert m.returncode == 0, m.stderr
    assert m.stdout.split()[-2:] == ["__main__", "True"] and "'x'" in m.stdout
    forkserver.close_all()


def test_more_environments_than_zygotes_are_still_forked(script):
    """A pytest process meets more environments than it keeps zygotes (MAX_ZYGOTES): the least
    recently used idle zygote makes room, so the fourth and later environments are forked too (before:
    a fresh interpreter each, ~10 s of CPU per vLLM scenario), and a zygote in use is never closed."""
    forkserver.close_all()
    n = forkserver.MAX_ZYGOTES + 3
    for i in range(n):
        got = _run(script, "ok", LANG_FG_TEST=str(i))
        assert got.returncode == 0 and _state(got)["preloaded"], f"environment {i} was not forked"
        assert len(forkserver._servers) <= forkserver.MAX_ZYGOTES
    assert [s.env.get("LANG_FG_TEST") for s in forkserver._servers.values()] == [
        str(i) for i in range(n - forkserver.MAX_ZYGOTES, n)]
    again = _run(script, "ok", LANG_FG_TEST=str(n - 1))  # the most recent one is kept
    assert _state(again)["preloaded"] and forkserver._servers[next(reversed(forkserver._servers))].served == 2
    # every zygote busy: a new environment runs as a fresh interpreter, nothing is closed under a request
    for s in forkserver._servers.values():
        s.inflight += 1
    try:
        busy = _run(script, "ok", LANG_FG_TEST="busy")
        assert busy.returncode == 0 and not _state(busy)["preloaded"]
        assert "busy" not in [s.env.get("LANG_FG_TEST") for s in forkserver._servers.values()]
    finally:
        for s in forkserver._servers.values():
            s.inflight -= 1
    forkserver.close_all()


def test_the_preload_listing_is_found_once_for_every_process(tmp_path, monkeypatch):
    """Every pytest process (xdist workers, shards) used to start its own discovery interpreter (~13 s
    of CPU on a framework): the listing is kept beside the environments and read back; a broken file
    is found again."""
    monkeypatch.setenv("FLASHINFER_GUARD_HOME", str(tmp_path))
    entry = tuple(DISCOVER)
    calls = []
    real = forkserver._discover_modules
    monkeypatch.setattr(forkserver, "_discover_modules", lambda e, env: calls.append(e) or real(e, env))
    monkeypatch.setattr(forkserver, "_discovery", {})
    first = forkserver._discovered(entry, dict(os.environ))
    assert "email.mime.text" in first and len(calls) == 1
    path = forkserver._discovery_file(entry)
    assert path.startswith(str(tmp_path)) and os.path.exists(path)
    monkeypatch.setattr(forkserver, "_discovery", {})  # another process
    assert forkserver._discovered(entry, dict(os.environ)) == first and len(calls) == 1
    with open(path, "w") as f:
        f.write('{"not": "a list"}')
    monkeypatch.setattr(forkserver, "_discovery", {})
    assert forkserver._discovered(entry, dict(os.environ)) == first and len(calls) == 2
    assert forkserver._discovery_file(("another.entry",)) != path
