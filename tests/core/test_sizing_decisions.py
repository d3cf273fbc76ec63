from guard_core.flashinfer import planner as fm
from guard_core.decide.records import decide_moe, decide_workspace
from guard_core.gpus import lookup_gpu
from guard_core.runtime.settings import load_settings
from guard_core.flashinfer.sizing import (AttentionLayout, Planners, ServingLimits, compute_requirement,
                               largest_fitting_capture)

MIB = 1 << 20
QWEN35 = AttentionLayout(32, 2, 256, page_size=16)
QWEN3VL = AttentionLayout(64, 8, 128, page_size=1)
DECODE512 = ServingLimits(capture_sizes=(1, 2, 4, 8, 16, 256, 512), max_num_seqs=512, max_num_batched_tokens=8192)


def test_vllm_seed_numbers():
    for v in ("0.6.6", "0.6.12", "0.7.0", "0.7.0.post1"):
        req = compute_requirement(QWEN35, DECODE512, lookup_gpu("b300"), v)
        dom = req.dominant
        assert dom.name == "cuda_graph_decode" and dom.batch == 512
        tmp_v = [a for a in dom.plan.allocations if a.name == "batch_prefill_tmp_v"][0]
        assert tmp_v.bytes == 536346624 and tmp_v.offset == 0
        assert req.float_bytes == 538441728 > 394 * MIB
    fixed = compute_requirement(QWEN35, DECODE512, lookup_gpu("b300"), "0.7.2.post1")
    assert fixed.float_bytes == 33652608


def test_sglang_seed_numbers():
    req = compute_requirement(QWEN3VL, DECODE512, lookup_gpu("h200"), "0.5.0", caller="sglang")
    plan = req.dominant.plan
    floats = [a for a in plan.allocations if a.buffer == "float"]
    assert [(a.name, a.bytes) for a in floats] == [("batch_prefill_tmp_v", 402128896), ("batch_prefill_tmp_s", 3141632)]
    assert 384 * MIB - floats[1].offset == 524288
    assert req.float_bytes == 405270528
    assert compute_requirement(QWEN3VL, DECODE512, lookup_gpu("h200"), "0.7.2", caller="sglang").float_bytes == 50658816


def test_074_fixed_uniform_decode_plans_no_float_for_either_server():
    """Both servers plan graph decode through FlashInfer's fast_decode_plan (vLLM 0.33.0
    v1/attention/backends/flashinfer.py:2934), which passes uniform_q_len=1 from 0.7.4."""
    for caller in ("sglang", "vllm"):
        req = compute_requirement(QWEN35, ServingLimits(capture_sizes=(512,), eager=False), lookup_gpu("b200"),
                                  "0.7.4", caller=caller)
        assert req.float_bytes == 0 and not req.dominant.plan.split_kv, caller
    # before 0.7.4 the one-token decode passes uniform_q_len 0: scratch is planned
    req = compute_requirement(QWEN35, ServingLimits(capture_sizes=(512,), eager=False), lookup_gpu("b200"),
                              "0.7.2.post1")
    assert req.float_bytes == 33652608


def test_trtllm_decode_plans_nothing_in_buffer():
    req = compute_requirement(QWEN35, DECODE512, lookup_gpu("b200"), "0.6.12", Planners(prefill="none", decode="trtllm"))
    assert req.float_bytes == 0 and req.scenarios == () and req.notes


def test_eager_prefill_is_reached_by_a_real_batch():
    gpu = lookup_gpu("h100")
    req = compute_requirement(QWEN3VL, ServingLimits(max_num_seqs=256, max_num_batched_tokens=8192), gpu, "0.6.12")
    s = [s for s in req.scenarios if s.name == "eager_prefill"][0]
    # the split batch reaches the planner's cap: 2 * SMs / kv heads
    assert s.plan.split_kv and s.plan.padded_batch_size == 2 * 132 // 8
    assert s.plan.cta_tile_q == 128  # short query, packed rows 65..128
    assert s.float_bytes == 64 * 33 * 128 * (128 + 1) * 4


def test_verify_scenarios_use_q_len():
    lim = ServingLimits(capture_sizes=(64,), draft_tokens=3, eager=False)
    req = compute_requirement(QWEN35, lim, lookup_gpu("b200"), "0.6.12")
    kinds = {(s.name, s.q_len) for s in req.scenarios}
    assert kinds == {("cuda_graph_decode", 1), ("cuda_graph_verify", 4)}


def test_cuda_core_decode_planner():
    lim = ServingLimits(capture_sizes=(8,), eager=False)
    layout = AttentionLayout(32, 8, 128)
    req = compute_requirement(layout, lim, lookup_gpu("h100"), "0.6.12", Planners(decode="decode", decode_blocks_per_sm=4))
    plan = req.dominant.plan
    assert plan.split_kv and plan.padded_batch_size == 4 * 132 // 8
    assert plan.float_bytes == 32 * 66 * 128 * 4 + 32 * 66 * 4


def test_largest_fitting_capture():
    b = largest_fitting_capture(QWEN35, DECODE512, lookup_gpu("b300"), "0.7.0", Planners(), "vllm", 394 * MIB)
    ok = compute_requirement(QWEN35, ServingLimits(capture_sizes=(b,), eager=False), lookup_gpu("b300"), "0.7.0")
    over = compute_requirement(QWEN35, ServingLimits(capture_sizes=(b + 1,), eager=False), lookup_gpu("b300"), "0.7.0")
    assert ok.float_bytes <= 394 * MIB < over.float_bytes


def _req():
    return compute_requirement(QWEN35, DECODE512, lookup_gpu("b300"), "0.7.0")


def test_workspace_raise_line():
    d = decide_workspace(_req(), framework="vllm", server_bytes=394 * MIB, settings=load_settings({}))
    assert d.action == "raise" and d.allocate_bytes == 514 * MIB and d.level == "info"
    assert d.line == ("[flashinfer-guard] workspace: FlashInfer 0.7.0 prefill planner needs 513.5 MiB at CUDA-graph "
                      "batch 512 (32 q / 2 kv heads per rank, head_dim 256, 160 SMs), where batch_prefill_tmp_v "
                      "(511.5 MiB) would overflow 394 MiB; raising 394 MiB -> 514 MiB")


def test_workspace_line_names_the_allocation_that_overflows():
    req = compute_requirement(QWEN3VL, DECODE512, lookup_gpu("h200"), "0.5.0", caller="sglang")
    d = decide_workspace(req, framework="SGLang", server_bytes=384 * MIB, settings=load_settings({}))
    assert "where batch_prefill_tmp_s (3.0 MiB) would overflow 384 MiB; raising 384 MiB -> 387 MiB" in d.line


def test_workspace_ok_user_small_size_off():
    s = load_settings({})
    fixed = compute_requirement(QWEN35, DECODE512, lookup_gpu("b300"), "0.7.2.post1")
    ok = decide_workspace(fixed, framework="vllm", server_bytes=394 * MIB, settings=s)
    assert ok.action == "ok" and ok.allocate_bytes == 394 * MIB and "32.1 MiB <= 394 MiB" in ok.line
    user = decide_workspace(_req(), framework="vllm", server_bytes=400 * MIB, user_bytes=400 * MIB,
                            user_var="VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", settings=s)
    assert user.level == "warning" and user.allocate_bytes == 514 * MIB
    assert "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=400 MiB is too small" in user.line and "514 MiB" in user.line
    big = decide_workspace(_req(), framework="vllm", server_bytes=1024 * MIB, user_bytes=1024 * MIB,
                           user_var="VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", settings=s)
    assert big.action == "ok" and big.allocate_bytes == 1024 * MIB
    off = decide_workspace(_req(), framework="vllm", server_bytes=394 * MIB, settings=load_settings({"FLASHINFER_GUARD_WORKSPACE": "off"}))
    assert off.action == "off" and off.allocate_bytes == 394 * MIB
    size = decide_workspace(_req(), framework="vllm", server_bytes=394 * MIB, settings=load_settings({"FLASHINFER_GUARD_WORKSPACE": "600MiB"}))
    assert size.action == "size" and size.allocate_bytes == 600 * MIB and size.level == "info"
    small = decide_workspace(_req(), framework="vllm", server_bytes=394 * MIB, settings=load_settings({"FLASHINFER_GUARD_WORKSPACE": "100MiB"}))
    assert small.allocate_bytes == 394 * MIB and small.level == "warning"  # never shrink the server's own


def test_moe_policy():
    auto = load_settings({})
    assert decide_moe(auto, machine="aarch64", flashinfer_version="0.6.12").block
    d = decide_moe(auto, machine="aarch64", flashinfer_version="0.6.12")
    # the line names the host, the release, the GPU family and the evidence row (issue 20)
    assert d.line("x") == ("[flashinfer-guard] moe: aarch64 with FlashInfer 0.6.12 < 0.6.16 on GPU unknown "
                           "(assumed SM10x), every MoE op [evidence route-map-oob-grace: vLLM #46861, #45285, FlashInfer #3530; "
                           "cause FlashInfer #4237, fixed in 0.6.16]: x")
    assert not decide_moe(auto, machine="aarch64", flashinfer_version="0.6.16").block
    assert not decide_moe(auto, machine="x86_64", flashinfer_version="0.6.12").block
    assert not decide_moe(auto, machine="aarch64", flashinfer_version=None).block
    assert decide_moe(load_settings({"FLASHINFER_GUARD_MOE": "on"}), machine="x86_64", flashinfer_version="0.7.2").block
    assert not decide_moe(load_settings({"FLASHINFER_GUARD_MOE": "off"}), machine="aarch64", flashinfer_version="0.6.1").block
    later = load_settings({"FLASHINFER_GUARD_MOE_FIXED_IN": "0.7.1"})
    assert decide_moe(later, machine="arm64", flashinfer_version="0.7.0.post1").block


def test_family_names():
    assert fm.family("0.6.12") == "<=0.6.13" and fm.family("0.6.15") == "0.6.14-0.6.15"
    assert fm.family("0.7.0.post1") == "0.6.18-0.7.0.post1" and fm.family("0.7.2.post1") == "0.7.1-0.7.2.post1"
    assert fm.family("0.7.4") == ">=0.7.4"


def test_planner_errors_are_reported():
    r = fm.run_planner("0.7.2", "prefill", dict(qo_indptr=[0, 1], kv_indptr=[0, 1], total_num_rows=1, batch_size=1,
                                                 num_qo_heads=3, num_kv_heads=2, head_dim_vo=128, page_size=1,
                                                 enable_cuda_graph=False, num_sms=132))
    assert r["ok"] is False and "divisible" in r["error"]


def test_unsupported_decode_group_is_a_note_not_a_crash():
    req = compute_requirement(AttentionLayout(40, 8, 128), ServingLimits(capture_sizes=(8,)), lookup_gpu("h100"),
                              "0.6.12", Planners(decode="decode"))
    # the rejected decode plans are notes; the other kinds keep their need (eager prefill here)
    assert any(n.startswith("CUDA-graph decode:") and "Unsupported group_size: 5" in n for n in req.notes)
    assert any(n.startswith("eager decode:") for n in req.notes)
    assert req.float_bytes > 0 and req.dominant.name == "eager_prefill"
    alone = compute_requirement(AttentionLayout(40, 8, 128), ServingLimits(capture_sizes=(8,)), lookup_gpu("h100"),
                                "0.6.12", Planners(decode="none"))
    assert req.float_bytes == alone.float_bytes
    assert fm.decode_group_sizes("0.6.17") == {1, 2, 3, 4, 8}
    assert fm.decode_group_sizes("0.6.18") == {1, 2, 3, 4, 6, 8}
    assert 16 in fm.decode_group_sizes("0.7.1")
