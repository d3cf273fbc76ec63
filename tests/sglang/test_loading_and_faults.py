"""Loading paths, processes without SGLang, and fault injection."""

import subprocess
import sys

from conftest import FLASHINFER, SGLANG, _key

MIB = 1 << 20
PLUGIN_SYSTEM = _key(SGLANG) >= (0, 5, 11)


def test_guard_active_in_spawned_child(scenario):
    r = scenario("spawn_child").result
    child = r["child"]
    assert child["registered"] and child["init_wrapped"]
    assert child["loaded_by"] == ("entry_point" if PLUGIN_SYSTEM else "pth")
    assert not r["parent_has_sglang"]


def test_master_switch_off(scenario):
    r = scenario("spawn_child", env={"FLASHINFER_GUARD": "0"}).result["child"]
    assert not r["registered"] and not r["init_wrapped"]


def own_size(scenario):
    """What this SGLang allocates on its own for the Qwen3-VL-shaped model (guard off)."""
    return scenario("qwen3vl", env={"FLASHINFER_GUARD": "0"}).result["workspace_bytes"]


def test_sglang_plugins_allowlist_is_honoured(scenario):
    out = scenario("qwen3vl", env={"SGLANG_PLUGINS": "someone_else"})
    assert not out.result["registered"] and out.result["workspace_bytes"] == own_size(scenario)
    assert out.guard_lines == []
    ok = scenario("qwen3vl", env={"SGLANG_PLUGINS": "someone_else,flashinfer_guard"})
    assert ok.result["registered"]


def test_python_without_sglang_is_untouched(scenario):
    r = scenario("no_sglang").result
    assert r["sglang_imported"] is False
    assert r["heavy"] == []
    assert r["guard_modules"] in ([], ["sglang_guard", "sglang_guard._pth"])
    assert r["watchers"] == ["_SglangWatcher"]  # the .pth bootstrap: one idle watcher, nothing else
    # and nothing is printed by a plain interpreter of this environment
    p = subprocess.run([sys.executable, "-c", "import json, os"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout == "" and p.stderr == ""


def test_loading_twice_wraps_once_and_logs_once(scenario):
    run = scenario("twice")
    r = run.result
    assert r["register_again"] is True
    assert r["init_wrapped"] and not r["init_wrapped_twice"]
    assert len(run.lines("workspace")) == 1  # two backends, one decision line


def test_hook_raising_leaves_sglang_behaviour(scenario):
    run = scenario("hook_raises")
    r = run.result
    assert r["workspace_bytes"] == own_size(scenario)  # SGLang's own allocation
    warn = [l for l in run.guard_lines if "internal error" in l]
    assert len(warn) == 1 and "injected fault" in warn[0]


def test_bad_settings_warn_and_defaults_apply(scenario):
    run = scenario("qwen35", env={"FLASHINFER_GUARD_WORKSPACE": "banana", "FLASHINFER_GUARD_MOE": "maybe"})
    assert any("FLASHINFER_GUARD_WORKSPACE='banana'" in l for l in run.guard_lines)
    assert any("FLASHINFER_GUARD_MOE='maybe'" in l for l in run.guard_lines)
    assert run.result["workspace_bytes"] >= run.result["need"]


def test_missing_targets_are_not_applicable(scenario):
    run = scenario("missing_targets")
    assert run.result["patched_broken"] is False
    assert not any("internal error" in l for l in run.guard_lines)
    # x86 with auto: the MoE guard is not needed here, so its missing targets are debug lines
    assert [l for l in run.lines("moe") if "not found" in l] == []
    # the workspace guard is needed wherever FlashInfer < 0.7.1: a missing target is one warning naming it
    ws = [l for l in run.lines("workspace") if "not found on SGLang" in l]
    if _key(FLASHINFER) < (0, 7, 1):
        assert ws and all("where the guard is needed" in l for l in ws), ws
        assert f"SGLang {SGLANG}" in ws[0] and "FlashInferAttnBackend" in ws[0]
        # at warning level: FLASHINFER_GUARD_LOG=warning drops info lines, and this one stays
        quiet = scenario("missing_targets", env={"FLASHINFER_GUARD_LOG": "warning"})
        assert [l for l in quiet.lines("workspace") if "not found on SGLang" in l]
    else:
        assert ws == []
    debug = scenario("missing_targets", env={"FLASHINFER_GUARD_LOG": "debug"})
    assert any("moe: sglang.srt.layers.moe.utils.initialize_moe_config not found on SGLang" in l
               and "not applicable" in l for l in debug.guard_lines)


def test_missing_targets_where_the_guard_is_needed_warn(scenario):
    run = scenario("missing_targets", env={"FLASHINFER_GUARD_MOE": "on"})
    assert run.result["patched_broken"] is False
    warn = [l for l in run.lines("moe") if "where the guard is needed (FLASHINFER_GUARD_MOE=on)" in l]
    assert any(f"sglang.srt.layers.moe.utils.initialize_moe_config not found on SGLang {SGLANG}" in l
               for l in warn)
    assert any(f"sglang.srt.server_args.ServerArgs._handle_moe_kernel_config not found on SGLang {SGLANG}" in l
               for l in warn)
