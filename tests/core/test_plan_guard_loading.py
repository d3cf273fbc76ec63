"""Issue 42 item 4: whether the guard loads at all is part of `plan`'s answer.

With ``VLLM_PLUGINS`` / ``SGLANG_PLUGINS`` set to a list without ``flashinfer_guard`` in the environment
the server sees, its plugin loader never registers the guard: `plan` gives the unguarded verdict, says
why in one line, and prints no guard log line and no KV line for a buffer that will not exist (as it
does for ``FLASHINFER_GUARD=0``). The environment is the one the server sees: exported, through
``env``/``docker run -e`` prefixes.
"""

from __future__ import annotations

import pytest

from tests.core.test_plan_defaults import plan, plan_json

VLLM = ["--gpu", "h200", "--framework-version", "0.23.0", "--"]
VLLM_SERVE = ["vllm", "serve", "nvidia/Qwen3.5-397B-A17B-NVFP4"]  # the seed: overflows vLLM 0.23.0's 394 MiB
SGLANG = ["--gpu", "h200", "--framework-version", "0.5.23", "--"]
SGLANG_LAUNCH = ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-VL-32B-Instruct-FP8",
                 "--attention-backend", "flashinfer"]


def _unguarded(r, var):
    g = r["guard"]
    assert g["enabled"] is False and g["allocate_bytes"] is None, g
    assert g["why"].startswith(f"{var}=") and "flashinfer_guard" in g["why"] and "\n" not in g["why"]
    assert r["kv_budget"] is None  # no KV line for a buffer the guard will not allocate
    assert r["moe"]["verdict"].startswith("not applied: ")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    for var in ("VLLM_PLUGINS", "SGLANG_PLUGINS", "FLASHINFER_GUARD"):
        monkeypatch.delenv(var, raising=False)


def test_vllm_plugins_without_the_guard_is_the_unguarded_answer(monkeypatch):
    guarded = plan_json(*VLLM, *VLLM_SERVE)
    assert guarded["guard"]["enabled"] is True and guarded["guard"]["action"] == "raise"
    assert guarded["kv_budget"] is not None
    # the exported environment
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")
    r = plan_json(*VLLM, *VLLM_SERVE)
    _unguarded(r, "VLLM_PLUGINS")
    assert (r["verdict"], r["need"], r["workspace_bytes"]) == (guarded["verdict"], guarded["need"],
                                                               guarded["workspace_bytes"]) == ("overflow",) + (
        guarded["need"], guarded["workspace_bytes"])
    code, out, err = plan(*VLLM, *VLLM_SERVE)
    assert code == 0 and "KV budget" not in out and "it logs:" not in out
    lines = [ln for ln in out.splitlines() if ln.startswith("guard ")]
    assert len(lines) == 1 and "VLLM_PLUGINS='lora_filesystem_resolver' does not list flashinfer_guard" in lines[0]
    assert "unguarded" in lines[0]
    assert "pip install flashinfer-guard" not in out  # it is installed: it does not load
    # listed (exact names, comma-split), it loads; vLLM strips nothing and an empty list loads nothing
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver,flashinfer_guard")
    assert plan_json(*VLLM, *VLLM_SERVE)["guard"]["enabled"] is True
    for value in ("", " flashinfer_guard", "flashinfer-guard"):
        monkeypatch.setenv("VLLM_PLUGINS", value)
        _unguarded(plan_json(*VLLM, *VLLM_SERVE), "VLLM_PLUGINS")


def test_vllm_plugins_through_the_launch_prefixes(monkeypatch):
    r = plan_json(*VLLM, "env", "VLLM_PLUGINS=lora_filesystem_resolver", *VLLM_SERVE)
    _unguarded(r, "VLLM_PLUGINS")
    assert not any("VLLM_PLUGINS" in o for o in r["not_read_options"])  # read: it decides whether the guard loads
    # docker run passes only -e to the container: an exported list does not reach it, a -e one does
    monkeypatch.setenv("VLLM_PLUGINS", "lora_filesystem_resolver")
    image = ["docker", "run", "vllm/vllm-openai:v0.23.0", "--model", "nvidia/Qwen3.5-397B-A17B-NVFP4"]
    assert plan_json("--gpu", "h200", "--", *image)["guard"]["enabled"] is True
    r = plan_json("--gpu", "h200", "--", "docker", "run", "-e", "VLLM_PLUGINS", *image[2:])
    _unguarded(r, "VLLM_PLUGINS")
    monkeypatch.delenv("VLLM_PLUGINS")
    r = plan_json("--gpu", "h200", "--", "docker", "run", "-e", "VLLM_PLUGINS=x", *image[2:])
    _unguarded(r, "VLLM_PLUGINS")


def test_sglang_plugins_without_the_guard_is_the_unguarded_answer(monkeypatch):
    for line in ("0.5.23", "0.5.5"):  # SGLang's own loader (0.5.11+), the guard's .pth bootstrap before
        sg = ["--gpu", "h200", "--framework-version", line, "--"]
        guarded = plan_json(*sg, *SGLANG_LAUNCH)
        assert guarded["guard"]["enabled"] is True and guarded["kv_budget"] is not None
        monkeypatch.setenv("SGLANG_PLUGINS", "some_other_plugin")
        r = plan_json(*sg, *SGLANG_LAUNCH)
        _unguarded(r, "SGLANG_PLUGINS")
        assert (r["verdict"], r["need"], r["workspace_bytes"]) == (guarded["verdict"], guarded["need"],
                                                                   guarded["workspace_bytes"])
        # SGLang strips the names and skips empty ones; an empty value allows every plugin
        for value in (" flashinfer_guard , other", ""):
            monkeypatch.setenv("SGLANG_PLUGINS", value)
            assert plan_json(*sg, *SGLANG_LAUNCH)["guard"]["enabled"] is True, value
        monkeypatch.delenv("SGLANG_PLUGINS")
        r = plan_json(*sg, "env", "SGLANG_PLUGINS=some_other_plugin", *SGLANG_LAUNCH)
        _unguarded(r, "SGLANG_PLUGINS")


def test_the_rule_is_the_bootstraps_own_for_old_sglang(monkeypatch):
    # sglang_guard/_pth.py decides the same for SGLang < 0.5.11 as plan says
    import sys

    from guard_core.deployment.guard_loading import not_loaded

    before = list(sys.meta_path)
    import sglang_guard._pth as pth

    sys.meta_path[:] = before  # its import installs the watcher in this process: not wanted here
    for value in (None, "", "flashinfer_guard", " flashinfer_guard ,x", "x", "x,,", "flashinfer-guard", " , "):
        env = {} if value is None else {"SGLANG_PLUGINS": value}
        if value is None:
            monkeypatch.delenv("SGLANG_PLUGINS", raising=False)
        else:
            monkeypatch.setenv("SGLANG_PLUGINS", value)
        assert (not_loaded("sglang", env) is None) is pth._allowed(), value


def test_the_master_switch_keeps_its_line(monkeypatch):
    monkeypatch.setenv("FLASHINFER_GUARD", "0")
    r = plan_json(*VLLM, *VLLM_SERVE)
    assert r["guard"]["enabled"] is False and r["guard"]["line"] == "FLASHINFER_GUARD=0: the guard stands down"
    assert r["kv_budget"] is None


def test_the_plugin_name_is_the_entry_points_own():
    import tomllib

    from guard_core.deployment.guard_loading import PLUGIN_NAME

    eps = tomllib.load(open("pyproject.toml", "rb"))["project"]["entry-points"]
    assert set(eps["vllm.general_plugins"]) == set(eps["sglang.srt.plugins"]) == {PLUGIN_NAME}
