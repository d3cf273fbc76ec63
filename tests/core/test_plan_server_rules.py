"""Issue 42: what `plan`'s server-resolution stage says, per server, in the core environment.

Item 5: the stage deciding whether the installed server can resolve the command applies a server's
rule only to that server. vLLM's resolution needs --trtllm-attention on SM10x (its FlashInfer
backend asks FlashInfer's cubins); SGLang's does not, so with plan's defaults (B300, SM103) SGLang's
own resolution runs. The server is made "installed at the simulated line" here by standing in for
the install checks, and the resolution subprocess (``_ask``) is replaced by one that records that it
was asked: which request reached it is the stage's decision.
"""

from __future__ import annotations

import importlib.util

import pytest

from guard_core.commands.plan import server_resolution as stage
from tests.core.test_plan_defaults import plan_json

QWEN3_8B = "tests/data/model_configs/Qwen3-8B.json"


@pytest.fixture
def installed(monkeypatch):
    """The simulated server installed here at the simulated line; the resolution answers with a
    refusal naming the request it was given (so plan falls back to its rules and says why)."""
    import guard_core.deployment.deployment_record as dr

    real = importlib.util.find_spec
    asked = []

    def find_spec(name, *a, **k):
        if name in ("vllm", "sglang") or name.endswith("_guard.server_resolution"):
            return object()
        return real(name, *a, **k)

    def ask(fw, req, environ):
        asked.append((fw, req))
        return {"ok": False, "refusal": f"asked {fw} on {req['gpu']}"}

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setattr(dr, "installed_line", lambda fw: {"vllm": "0.23.0", "sglang": "0.5.23"}[fw])
    monkeypatch.setattr(stage, "_ask", ask)
    return asked


def test_sglangs_resolution_runs_with_plans_defaults_on_b300(installed):
    # plan's default GPU is B300 (SM103): the TRT-LLM condition is vLLM's, SGLang's resolution is asked
    r = plan_json("--framework-version", "0.5.23", "--", "python", "-m", "sglang.launch_server", "--model-path",
                  QWEN3_8B)
    assert r["simulated"]["gpu"]["cc"].startswith("10.")
    assert [fw for fw, _ in installed] == ["sglang"], r["resolution"]
    assert r["resolution"]["why"] == "asked sglang on b300"
    assert "--trtllm-attention" not in r["resolution"]["why"]


def test_vllm_still_needs_trtllm_attention_settled_on_sm10x(installed):
    base = ["--framework-version", "0.23.0", "--", "vllm", "serve", QWEN3_8B]
    r = plan_json(*base)
    assert installed == [] and "--trtllm-attention on|off settles it" in r["resolution"]["why"]
    r = plan_json("--trtllm-attention", "off", *base)
    assert [(fw, req["trtllm"]) for fw, req in installed] == [("vllm", False)]
    # Hopper: no such condition for either server
    r = plan_json("--gpu", "h200", *base)
    assert [fw for fw, _ in installed][-1] == "vllm" and r["resolution"]["why"] == "asked vllm on h200"


def test_sglangs_deterministic_answer_is_decided_as_the_fixed_split_mode(installed, monkeypatch):
    # issue 42 item 5b, the stage's side: SGLang's answer for --enable-deterministic-inference (its reader's
    # fixed-split limits, 2 GiB) is decided as the rules decide that mode; the stage dropped the fixed-split
    # record (the report raised TypeError on it)
    import guard_core.commands.plan_report as pr
    from vllm_guard.server_resolution import _facts_dict

    GIB2 = 2048 * 1024 * 1024
    cmd = ["--gpu", "h200", "--framework-version", "0.5.23", "--", "python", "-m", "sglang.launch_server",
           "--model-path", QWEN3_8B, "--attention-backend", "flashinfer", "--enable-deterministic-inference"]
    seen = []
    real_build = pr.build_facts
    monkeypatch.setattr(pr, "build_facts", lambda *a: seen.append(real_build(*a)) or seen[-1])
    rules = plan_json("--resolution", "builtin", *cmd)
    fs = seen[-1]
    assert rules["workspace_bytes"] == GIB2 and fs.limits.fixed_split_prefill

    def ask(fw, req, environ):
        return {"ok": True, "label": "SGLang 0.5.23", "resolved": {"deterministic": True},
                "builders": [{"facts": _facts_dict(f), "server_bytes": GIB2, "user_bytes": None, "runner": r,
                              "group": dict(g.as_dict(), window=g.window), "fixed_split": True,
                              "server_source": "--enable-deterministic-inference: 2 GiB"} for g, r, f in fs.groups]}

    monkeypatch.setattr(stage, "_ask", ask)
    r = plan_json(*cmd)
    assert r["resolution"]["server"] is True
    assert (r["workspace_bytes"], r["fixed_split"]["server_bytes"]) == (GIB2, GIB2)
    assert (r["need"], r["verdict"]) == (rules["need"], rules["verdict"])
    assert r["fixed_split"]["prefill_split_tile_size"] == rules["fixed_split"]["prefill_split_tile_size"]
    assert "deterministic" in r["server_default_source"]


def test_a_deterministic_command_without_fixed_splits_in_the_answer_falls_back(installed, monkeypatch):
    cmd = ["--gpu", "h200", "--framework-version", "0.5.23", "--", "python", "-m", "sglang.launch_server",
           "--model-path", QWEN3_8B, "--attention-backend", "flashinfer", "--enable-deterministic-inference"]
    monkeypatch.setattr(stage, "_ask", lambda fw, req, env: {"ok": True, "label": "SGLang 0.5.23", "builders": [
        {"facts": {}, "server_bytes": 1, "user_bytes": None, "group": {}, "fixed_split": False}]})
    r = plan_json(*cmd)
    assert r["resolution"]["server"] is False and "fixed splits" in r["resolution"]["why"]
    assert r["workspace_bytes"] == 2048 * 1024 * 1024 and r["fixed_split"]
