"""plan's server process (issue 42 item 1): inside ``guard_module.session()`` every call of
``run_guard_module`` with the same interpreter and environment goes to one process, started once
(``module_host``), so the server's code is imported once per plan; outside it, one process per
call as before. The module here is a probe written for the test (no server is needed to hold the
mechanism; tests/vllm/test_plan_one_process.py and tests/sglang/... count the real plan's processes)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from guard_core.deployment import guard_module

MARK = "PROBE "
PROBE = '''
import json, os, sys, time
req = json.loads(sys.stdin.read() or "{}")
if req.get("junk"):
    os.write(1, b"junk on the descriptor, no newline")
    print("junk on sys.__stdout__", file=sys.__stdout__, flush=True)
if req.get("sleep"):
    time.sleep(req["sleep"])
if req.get("raise"):
    raise RuntimeError("the probe raises")
if req.get("exit") is not None:
    sys.exit(req["exit"])
print("log line before the answer")
print("PROBE " + json.dumps({"ok": True, "pid": os.getpid(), "argv": sys.argv[1:], "echo": req.get("echo"),
                             "var": os.environ.get("FG_PROBE_VAR"), "main": __name__}))
'''


@pytest.fixture()
def probe(tmp_path, monkeypatch):
    (tmp_path / "fg_probe_module.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), FG_PROBE_VAR="one")

    def call(env=env, timeout=60.0, args=(), **req):
        return guard_module.run_guard_module("fg_probe_module", list(args), env, MARK, timeout, "the probe",
                                             stdin=json.dumps(req))
    return call, env


def test_one_process_per_session_and_environment(probe):
    call, env = probe
    with guard_module.session():
        a = call(args=["--x", "1"], echo="first")
        b = call(args=["--y"], echo="second")
        c = call(env=dict(env, FG_PROBE_VAR="two"), echo="third")
        hosts = list(guard_module._hosts.values())
    assert a["ok"] and b["ok"] and c["ok"], (a, b, c)
    assert a["pid"] == b["pid"] != c["pid"]  # same environment: one process; another: another
    assert (a["argv"], a["echo"], a["var"], a["main"]) == (["--x", "1"], "first", "one", "__main__")
    assert (b["argv"], b["echo"]) == (["--y"], "second")
    assert c["var"] == "two"
    assert guard_module._hosts is None and all(h.proc.poll() is not None for h in hosts)  # ended with the block


def test_outside_a_session_each_call_is_its_own_process(probe):
    call, _ = probe
    a, b = call(echo=1), call(echo=2)
    assert a["ok"] and b["ok"] and a["pid"] != b["pid"]


def test_what_the_module_does_wrong_is_its_answer_and_the_host_goes_on(probe):
    call, _ = probe
    with guard_module.session():
        first = call()
        junk = call(junk=True, echo="after junk")  # writes on descriptor 1: the answer is intact
        raised = call(**{"raise": True})
        exited = call(exit=3)
        after = call(echo="after")
    assert junk["ok"] and junk["echo"] == "after junk", junk
    assert raised == {"ok": False, "refusal": "the probe gave no answer (exit 1: RuntimeError: the probe raises)"}
    assert exited["ok"] is False and "exit 3" in exited["refusal"]
    assert after["ok"] and after["pid"] == first["pid"] == junk["pid"]


def test_a_call_over_its_limit_ends_the_host_and_the_next_starts_another(probe):
    call, _ = probe
    with guard_module.session():
        first = call()
        slow = call(timeout=1.0, sleep=30)
        again = call(echo="again")
    assert slow == {"ok": False, "refusal": "the probe did not answer within 1 s"}
    assert again["ok"] and again["pid"] != first["pid"]


def test_a_progress_line_while_it_waits(probe, monkeypatch, capsys):
    call, _ = probe
    monkeypatch.setattr(guard_module, "PROGRESS_AFTER_S", 0.3)
    monkeypatch.setattr(guard_module, "PROGRESS_EVERY_S", 100.0)
    monkeypatch.setattr(guard_module, "_stderr_is_terminal", lambda: True)  # a person at a terminal
    with guard_module.session():
        call()  # started, imports done
        capsys.readouterr()
        assert call(sleep=1.5)["ok"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("[flashinfer-guard] plan: waiting for the probe ... ")
    assert err[0].endswith("(limit 60 s)"), err


def test_the_host_answers_malformed_requests_and_goes_on(tmp_path):
    """Straight to the host's protocol: a line that is not JSON, a module that does not exist, a
    good request; one answer each, in order."""
    import subprocess

    (tmp_path / "fg_probe_module.py").write_text(PROBE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), os.getcwd()]))
    good = {"module": "fg_probe_module", "args": [], "stdin": "{}", "env": dict(env, FG_PROBE_VAR="v")}
    lines = "not json\n" + json.dumps({"module": "no_such_module_fg"}) + "\n" + json.dumps(good) + "\n"
    p = subprocess.run([sys.executable, "-m", "guard_core.deployment.module_host"], input=lines, text=True,
                       capture_output=True, env=env, timeout=60)
    answers = [json.loads(x) for x in p.stdout.splitlines()]
    assert p.returncode == 0 and len(answers) == 3, (p.stdout, p.stderr)
    assert answers[0]["rc"] == 1 and "JSONDecodeError" in answers[0]["stderr"]
    assert answers[1]["rc"] == 1 and "No module named no_such_module_fg" in answers[1]["stderr"]
    assert answers[2]["rc"] == 0 and '"var": "v"' in answers[2]["stdout"]


def test_no_progress_line_where_stderr_is_not_a_terminal(probe, monkeypatch, capsys):
    """A script or a CI log reading plan's stderr gets the verdict's one line only."""
    call, _ = probe
    monkeypatch.setattr(guard_module, "PROGRESS_AFTER_S", 0.3)
    with guard_module.session():
        call()
        capsys.readouterr()
        assert call(sleep=1.5)["ok"]
    assert capsys.readouterr().err == ""
