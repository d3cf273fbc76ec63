"""Workspace sizing inside a real FlashInferAttnBackend of the installed SGLang."""

from conftest import FLASHINFER, SGLANG, _key

MIB = 1 << 20
PLUGIN_SYSTEM = _key(SGLANG) >= (0, 5, 11)
PR5177 = _key(FLASHINFER) >= (0, 7, 1)  # FlashInfer divides scratch rows by the GQA group


def test_loaded_by_sglangs_own_mechanism(scenario):
    r = scenario("qwen3vl").result
    assert r["registered"] and r["init_wrapped"]
    assert r["plugin_system"] == PLUGIN_SYSTEM
    assert r["loaded_by"] == ("entry_point" if PLUGIN_SYSTEM else "pth")


def test_qwen3_vl_32b_gets_at_least_the_need(scenario):
    run = scenario("qwen3vl")
    r = run.result
    # The core's number for 64 q / 8 kv, head_dim 128, decode capture up to 512, H200.
    assert r["need"] == (50_658_816 if PR5177 else 405_270_528)
    assert r["decode_use_tensor_cores"]  # GQA 8 -> decode through the prefill planner
    assert r["workspace_bytes"] >= r["need"]
    assert r["wrappers_share_buffer"]
    (line,) = run.lines("workspace")
    if PR5177:
        assert "ok, need 48.3 MiB" in line and "FlashInfer 0.7" in line
        assert r["workspace_bytes"] == 512 * MIB  # SGLang's own size (Qwen3-VL is on its list), untouched
    elif _key(SGLANG) >= (0, 5, 6):  # Qwen3-VL on SGLang's 512 MiB list: enough here
        assert "ok, need 386.5 MiB <= 512 MiB allocated" in line
        assert r["workspace_bytes"] == 512 * MIB
    else:  # the seed: 384 MiB, overflow at batch_prefill_tmp_s
        assert "needs 386.5 MiB at CUDA-graph batch 512" in line
        assert "64 q / 8 kv heads per rank, head_dim 128, 132 SMs" in line
        assert "raising 384 MiB -> 387 MiB" in line
        assert r["workspace_bytes"] == 387 * MIB


def test_without_guard_the_seed_overflow_reproduces_or_is_fixed_upstream(scenario):
    r = scenario("qwen3vl", env={"FLASHINFER_GUARD": "0"}).result
    assert not r["registered"] and not r["init_wrapped"]
    if _key(SGLANG) < (0, 5, 6):  # no Qwen3-VL in SGLang's 512 MiB list: 384 MiB < need
        assert r["workspace_bytes"] == 384 * MIB < r["need"]
    else:
        assert r["workspace_bytes"] >= 384 * MIB


def test_qwen35_shape_off_the_512_list(scenario):
    run = scenario("qwen35")
    r = run.result
    assert r["need"] == (33_652_608 if PR5177 else 538_441_728)
    assert r["workspace_bytes"] >= r["need"]
    (line,) = run.lines("workspace")
    assert ("raising 384 MiB -> 514 MiB" in line) if not PR5177 else ("ok, need" in line)


def test_qwen35_shape_without_guard_is_too_small_on_old_flashinfer(scenario):
    r = scenario("qwen35", env={"FLASHINFER_GUARD": "0"}).result
    assert r["workspace_bytes"] == 384 * MIB
    assert (r["workspace_bytes"] < r["need"]) == (not PR5177)


def test_user_size_too_small_is_raised_with_both_numbers(scenario):
    run = scenario("qwen35", env={"SGLANG_FLASHINFER_WORKSPACE_SIZE": str(100 * MIB)})
    r = run.result
    (line,) = run.lines("workspace")
    if PR5177:
        assert r["workspace_bytes"] == 100 * MIB and "ok, need" in line
    else:
        assert r["workspace_bytes"] >= r["need"]
        assert "SGLANG_FLASHINFER_WORKSPACE_SIZE=100 MiB is too small" in line and "-> 514 MiB" in line


def test_user_size_big_enough_is_kept(scenario):
    run = scenario("qwen35", env={"SGLANG_FLASHINFER_WORKSPACE_SIZE": str(1024 * MIB)})
    assert run.result["workspace_bytes"] == 1024 * MIB
    (line,) = run.lines("workspace")
    assert "ok, need" in line and "SGLANG_FLASHINFER_WORKSPACE_SIZE=1024 MiB" in line


def test_workspace_off_and_explicit_size(scenario):
    off = scenario("qwen35", env={"FLASHINFER_GUARD_WORKSPACE": "off"})
    assert off.result["workspace_bytes"] == 384 * MIB
    assert "off (FLASHINFER_GUARD_WORKSPACE=off)" in off.lines("workspace")[0]
    sized = scenario("qwen35", env={"FLASHINFER_GUARD_WORKSPACE": "600MiB"})
    assert sized.result["workspace_bytes"] == 600 * MIB


def test_fp8_kv_cache_uses_tensor_core_decode(scenario):
    r = scenario("qwen35", kv_dtype="fp8").result
    assert r["decode_use_tensor_cores"]
    assert r["workspace_bytes"] >= 384 * MIB


def test_size_the_device_cannot_hold_falls_back_to_sglangs_own(scenario):
    """FLASHINFER_GUARD_WORKSPACE=200GiB on a device with 8 GiB free (issue 22 item 13): the
    backend is built with SGLang's own size, as without the guard, and one warning says why."""
    run = scenario("qwen35", env={"FLASHINFER_GUARD_WORKSPACE": "200GiB"}, device_memory=8 << 30)
    own = scenario("qwen35", env={"FLASHINFER_GUARD": "0"}).result["workspace_bytes"]
    assert run.result["workspace_bytes"] == own
    warn = [ln for ln in run.guard_lines if "cannot hold" in ln]
    assert len(warn) == 1 and "204800 MiB" in warn[0], run.guard_lines
