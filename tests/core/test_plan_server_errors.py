"""Issues 39 item 2 and 42 item 3: our error or the server's refusal, in `plan`'s server-resolution stage.

- a failure raised at OUR call into the server (a changed signature: TypeError; a moved function:
  AttributeError / ImportError) is ours: the resolution's one line says so, names the call, and plan
  falls back to its built-in rules (guard_core/deployment/our_call.py); raised inside the server's
  code, it is not ours;
- the server's own resolution refusing the deployment (vLLM's FlashInfer builder and gpt-oss's sinks
  off TRT-LLM, where the command chose FlashInfer) is "vLLM <version> would refuse to start: <its
  message>", exit 2, whatever the resolution mode.

The real servers' side (their resolution answering ``refuses`` / ``ours``) is tested in their lines:
tests/vllm/test_server_resolution.py, tests/sglang/test_plan_server_resolution.py.
"""

from __future__ import annotations

import json

import pytest

from guard_core.deployment.guard_module import PROGRESS_PREFIX
from guard_core.deployment.our_call import our_call_error
from tests.core.test_plan_defaults import plan, plan_json
from tests.core.test_plan_server_rules import installed  # noqa: F401 (the fixture)

QWEN3_8B = "tests/data/model_configs/Qwen3-8B.json"
VLLM_CMD = ["--gpu", "h200", "--framework-version", "0.23.0", "--", "vllm", "serve", QWEN3_8B]
SINKS = ("FlashInfer backend currently does not support attention sinks, please use trtllm on blackwell or flash "
         "attention on earlier GPUs.")


def _raised(fn, *a):
    try:
        fn(*a)
    except BaseException as exc:  # noqa: BLE001
        return exc
    raise AssertionError("did not raise")


def test_an_error_at_our_call_is_ours_and_names_it():
    # vllm_guard.server_resolution imports vLLM's module at its call (vLLM is not installed here): the
    # ImportError is raised in our frame, at our line
    import vllm_guard.server_resolution as vsr

    exc = _raised(vsr._resolve_graphs, None, [])
    line = our_call_error(exc)
    assert line.startswith("ModuleNotFoundError: No module named 'vllm") and "vllm_guard/server_resolution.py:" in line
    assert "from vllm.v1.attention.backends.flashinfer import" in line
    # an AttributeError at our attribute look-up (a moved function, an object without the field)
    from sglang_guard import plan_resolve

    line = our_call_error(_raised(plan_resolve._facts_json, None, "", 1))
    assert line.startswith("AttributeError:") and "sglang_guard/plan_resolve.py:" in line


def test_an_error_inside_the_servers_code_is_not_ours():
    def servers_code(x):  # a frame outside our packages (here: the test's), as vLLM's own would be
        raise TypeError("the server's own TypeError")

    import vllm_guard.server_resolution as vsr

    assert our_call_error(_raised(servers_code, 1)) is None
    # raised inside a library's frame (dataclasses.fields of a non-dataclass), not at our call
    assert our_call_error(_raised(vsr._facts_dict, None)) is None
    # raised in our frame but not a kind a changed API raises at the call
    from guard_core.deployment.server_reader import rank_groups_from

    assert our_call_error(_raised(rank_groups_from, [{}])) is None  # KeyError


_ANSWER = """
import sys
from sglang_guard import plan_resolve

def sglang_refuses():
    raise SystemExit("error: unrecognized arguments: --no-such-option")

plan_resolve.answer_line(sglang_refuses)
plan_resolve.answer_line(lambda: plan_resolve._facts_json(None, "", 1))
"""


def test_sglangs_answer_line_says_whose_error_it_is():
    # in a process importing this checkout's sglang_guard (an install's .pth may import another one first)
    import os
    import subprocess
    import sys

    from sglang_guard.plan_resolve import MARK

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = subprocess.run([sys.executable, "-c", _ANSWER], capture_output=True, text=True, timeout=120, cwd=root,
                       env=dict(os.environ, PYTHONPATH=root))
    a, b = [json.loads(ln[len(MARK):]) for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    assert a["refusal"].startswith("SGLang refused the command: SystemExit") and "ours" not in a
    assert b["ours"] is True and b["refusal"].startswith("flashinfer-guard's own call into SGLang")
    assert "(our error, not SGLang" in b["refusal"] and "refused" not in b["refusal"].split("(")[0]
    assert "sglang_guard/plan_resolve.py:" in b["refusal"] and "\n" not in b["refusal"]


def test_the_servers_refusal_is_exit_2_with_its_message(installed, monkeypatch):  # noqa: F811
    from guard_core.commands.plan import server_resolution as stage

    monkeypatch.setattr(stage, "_ask", lambda fw, req, env: {
        "ok": False, "refuses": True, "label": "vLLM 0.23.0", "message": SINKS,
        "refusal": f"vLLM 0.23.0's FlashInfer builder refuses: NotImplementedError: {SINKS}"})
    for mode in ("auto", "server"):
        code, out, err = plan("--resolution", mode, *VLLM_CMD)
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(PROGRESS_PREFIX)]
        assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, err
        assert lines[0].endswith(f"vLLM 0.23.0 would refuse to start: {SINKS}")
    # --resolution builtin does not ask the server: the rules' answer
    assert plan_json("--resolution", "builtin", *VLLM_CMD)["resolution"]["server"] is False


def test_our_error_falls_back_to_the_rules_in_one_line(installed, monkeypatch):  # noqa: F811
    from guard_core.commands.plan import server_resolution as stage

    ours = ("flashinfer-guard's own call into vLLM 0.33.0 failed (our error, not vLLM 0.33.0's refusal): TypeError: "
            "resolve_cudagraph_mode_and_sizes() takes 4 positional arguments but 5 were given at `mode = "
            "cc.resolve_cudagraph_mode_and_sizes(...)` (vllm_guard/server_resolution.py:190)")
    monkeypatch.setattr(stage, "_ask", lambda fw, req, env: {"ok": False, "ours": True, "refusal": ours})
    rules = plan_json("--resolution", "builtin", *VLLM_CMD)
    r = plan_json(*VLLM_CMD)
    assert r["resolution"] == {"used": "built-in rules for vLLM 0.23.0", "server": False, "why": ours}
    assert (r["need"], r["verdict"]) == (rules["need"], rules["verdict"])
    code, out, err = plan(*VLLM_CMD)
    assert code == 0 and "our error, not vLLM 0.33.0's refusal" in out and "refuse to start" not in out
    code, out, err = plan("--resolution", "server", *VLLM_CMD)
    assert code == 2 and "--resolution server: flashinfer-guard's own call" in err


@pytest.mark.parametrize("kind", [TypeError, AttributeError, ImportError])
def test_the_kinds_of_a_changed_api(kind):
    from guard_core.deployment import our_call

    assert issubclass(kind, our_call._OUR_KINDS)


def test_a_wrapped_error_of_our_call_is_still_ours(monkeypatch):
    # server_parsers wraps the error of building the server's parser (raise ... from None): an
    # AttributeError at our call into the parser's module is ours still
    import types

    from guard_core.deployment import server_parsers

    fake = types.ModuleType("vllm.entrypoints.cli.serve")  # ServeSubcommand moved away
    monkeypatch.setitem(__import__("sys").modules, "vllm.entrypoints.cli.serve", fake)
    monkeypatch.setitem(__import__("sys").modules, "vllm.platforms", types.SimpleNamespace(
        current_platform=types.SimpleNamespace(device_type="cuda")))
    monkeypatch.setattr(server_parsers, "_cache", {})
    exc = _raised(server_parsers._vllm_parser)
    assert isinstance(exc, server_parsers.ServerParserUnavailable)
    line = our_call_error(exc)
    assert line.startswith("ImportError: cannot import name 'ServeSubcommand'"), line
    assert "guard_core/deployment/server_parsers.py:" in line
