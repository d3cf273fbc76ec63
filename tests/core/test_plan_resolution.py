"""Issue 26 item 2, the core environment's side: where the simulated server is not installed, `plan`
says it resolved with the built-in rules and why, and `--resolution server` is a one-line refusal.

(vLLM's own resolution itself is tested inside the real vLLM lines: tests/vllm/test_server_resolution.py
and the parity search, tests/vllm/test_plan_parity.py.)
"""

import importlib.metadata

import pytest

from tests.core.test_plan_defaults import plan, plan_json

QWEN3_8B = "tests/data/model_configs/Qwen3-8B.json"


def test_without_the_server_plan_names_the_builtin_rules_and_why():
    with pytest.raises(importlib.metadata.PackageNotFoundError):  # the core environment
        importlib.metadata.version("vllm")
    r = plan_json("--gpu", "h200", "--framework-version", "0.23.0", "--model", QWEN3_8B)
    assert r["resolution"] == {"used": "built-in rules for vLLM 0.23.0", "server": False,
                               "why": "not installed here: vLLM"}
    code, out, err = plan("--gpu", "h200", "--framework-version", "0.23.0", "--model", QWEN3_8B)
    assert code == 0 and "resolved   by built-in rules for vLLM 0.23.0 (not installed here: vLLM)" in out


def test_resolution_server_without_the_server_is_one_line_exit_2():
    code, out, err = plan("--gpu", "h200", "--framework-version", "0.23.0", "--model", QWEN3_8B, "--resolution",
                          "server")
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "--resolution server: not installed here: vLLM" in err
