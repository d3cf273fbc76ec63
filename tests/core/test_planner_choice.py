"""guard_core.flashinfer.planner_choice: which FlashInfer planner serves each phase, and the
sizing fixes from issue 8 (FP8 KV on SM90, DCP on SM100, verify units,
missing facts, per-kind errors). The rules themselves are checked against the
frameworks' real plan() calls in tests/vllm and tests/sglang (real calls)."""

from guard_core.flashinfer.planner_choice import PlannerFacts, choose_planners, dtype_kind, size_choice, vllm_query_dtypes
from guard_core.gpus import lookup_gpu
from guard_core.flashinfer.sizing import AttentionLayout, ServingLimits, compute_requirement, Planners

MIB = 1 << 20
QWEN35 = AttentionLayout(32, 2, 256, page_size=16)
SEED_NEED = 538_441_728  # 513.5 MiB: FlashInfer 0.6.12, CUDA-graph batch 512


def planners(**kw):
    return choose_planners(PlannerFacts(**kw)).candidates


def test_dtype_kinds():
    assert dtype_kind("auto") == "16bit" and dtype_kind("torch.bfloat16") == "16bit"
    assert dtype_kind("fp8_e4m3") == "fp8" and dtype_kind("torch.float8_e4m3fn") == "fp8"
    assert dtype_kind("nvfp4") == "fp4" and dtype_kind("mystery") is None and dtype_kind(None) is None


def test_vllm_sm90_fp8_kv_runs_fa2_in_both_phases():
    # the query stays BF16 (no TRT-LLM on SM90): FA3 refuses FP8 KV with a 16-bit query
    assert planners(framework="vllm", cc=(9, 0), kv_dtype="fp8", trtllm_attention=False) == (
        Planners(prefill="fa2", decode="fa2"),)
    # BF16 KV on SM90: prefill auto -> FA3, tensor-core decode -> FA2 (no FP8 involved)
    assert planners(framework="vllm", cc=(9, 0), kv_dtype="auto", trtllm_attention=False) == (
        Planners(prefill="fa3", decode="fa2"),)


def test_vllm_026_query_dtype_per_phase_from_the_builder():
    """vLLM 0.26+ (seen through the real calls on 0.29, h200_fp8kv): the builder's
    q_data_type_prefill is FP8 with an FP8 KV cache on SM90, so prefill plans FA3
    (int buffer only), while decode keeps BF16 for XQA and plans FA2."""
    got = planners(framework="vllm", cc=(9, 0), kv_dtype="fp8_e4m3", trtllm_attention=False,
                   q_prefill="torch.float8_e4m3fn", q_decode="torch.bfloat16")
    assert got == (Planners(prefill="fa3", decode="fa2"),)
    # TRT-LLM forced off: decode takes the FP8 query as well
    got = planners(framework="vllm", cc=(9, 0), kv_dtype="fp8", trtllm_attention=False,
                   q_prefill="torch.float8_e4m3fn", q_decode="torch.float8_e4m3fn")
    assert got == (Planners(prefill="fa3", decode="fa3"),)


def test_vllm_query_dtype_unknown_sizes_both_and_says_so():
    c = choose_planners(PlannerFacts("vllm", (9, 0), kv_dtype="fp8", trtllm_attention=False,
                                     q_prefill=None, q_decode="what"))
    assert "prefill query dtype" in c.missing and any(m.startswith("decode query dtype") for m in c.missing)
    assert {p.prefill for p in c.candidates} == {"fa2", "fa3"} and {p.decode for p in c.candidates} == {"fa2", "fa3"}
    gpu = lookup_gpu("h200")
    limits = ServingLimits(capture_sizes=(512,), max_num_seqs=512, capture_unit="tokens")
    req = size_choice(QWEN35, limits, gpu, "0.6.18", c, "vllm", (1,))
    fa2 = compute_requirement(QWEN35._replace(kv_dtype_bytes=1) if hasattr(QWEN35, "_replace") else QWEN35,
                              limits, gpu, "0.6.18", Planners("fa2", "fa2"))
    assert req.float_bytes >= fa2.float_bytes  # the larger need wins


def test_vllm_query_dtypes_rule_for_the_cli():
    assert vllm_query_dtypes((9, 0), "fp8") == ("fp8", "16bit")  # XQA decode keeps BF16
    assert vllm_query_dtypes((9, 0), "fp8", trtllm_forced_off=True) == ("fp8", "fp8")
    assert vllm_query_dtypes((10, 0), "fp8") == ("fp8", "fp8")
    assert vllm_query_dtypes((12, 0), "fp8") == ("16bit", "16bit")  # FA2 only: no FP8 query
    assert vllm_query_dtypes((8, 9), "fp8") == ("16bit", "16bit")
    assert vllm_query_dtypes((9, 0), "16bit") == ("16bit", "16bit")


def test_vllm_sm90_fp8_kv_need_is_the_seed_not_zero():
    gpu = lookup_gpu("h200")
    choice = choose_planners(PlannerFacts("vllm", (9, 0), kv_dtype="fp8_e4m3", trtllm_attention=False))
    req = size_choice(QWEN35, ServingLimits(capture_sizes=(512,), max_num_seqs=512, capture_unit="tokens"),
                      gpu, "0.6.12", choice, "vllm", (1,))
    assert req.float_bytes > 394 * MIB and req.dominant.name == "cuda_graph_decode"


def test_vllm_sm100_trtllm_decode_only_without_dcp():
    assert planners(framework="vllm", cc=(10, 0), trtllm_attention=True) == (
        Planners(prefill="trtllm", decode="trtllm"),)
    c = choose_planners(PlannerFacts("vllm", (10, 0), trtllm_attention=True, dcp_size=2))
    # DCP > 1: no TRT-LLM decode, and vLLM's use_trtllm_attention refuses prefill too
    assert c.candidates == (Planners(prefill="fa2", decode="fa2"),) and c.decode_qo_heads_factor == 2


def test_vllm_dcp_decode_plans_all_ranks_heads():
    gpu = lookup_gpu("b200")
    per_rank = AttentionLayout(16, 2, 256, page_size=16)
    limits = ServingLimits(capture_sizes=(512,), max_num_seqs=512, capture_unit="tokens", eager=False)
    c = choose_planners(PlannerFacts("vllm", (10, 0), trtllm_attention=True, dcp_size=2))
    req = size_choice(per_rank, limits, gpu, "0.6.12", c, "vllm")
    alone = compute_requirement(QWEN35, limits, gpu, "0.6.12", Planners("fa2", "fa2"))
    assert req.float_bytes == alone.float_bytes > 394 * MIB
    eager = size_choice(per_rank, ServingLimits(capture_sizes=(), max_num_seqs=512), gpu, "0.6.12", c, "vllm")
    assert eager.layout.num_qo_heads == 32 and eager.dominant.name.startswith("eager")
    assert any("decode context parallel 2" in n for n in req.notes)


def test_unknown_facts_take_the_larger_need_and_are_named():
    c = choose_planners(PlannerFacts("vllm", (10, 0), kv_dtype=None, trtllm_attention=None))
    assert "TRT-LLM attention availability" in c.missing and any("KV-cache dtype" in m for m in c.missing)
    assert Planners(prefill="fa2", decode="fa2") in c.candidates
    gpu = lookup_gpu("b200")
    req = size_choice(QWEN35, ServingLimits(capture_sizes=(512,), max_num_seqs=512, capture_unit="tokens"),
                      gpu, "0.6.12", c, "vllm", (2, 1))
    assert req.float_bytes >= SEED_NEED * 0.9 and req.notes[0].startswith("unknown:")


def test_sglang_tensor_core_decode_choice():
    assert planners(framework="sglang", cc=(9, 0), tensor_core_decode=False)[0].decode == "decode"
    assert planners(framework="sglang", cc=(8, 9), tensor_core_decode=True)[0].decode == "fa2"
    both = planners(framework="sglang", cc=(8, 9), tensor_core_decode=None)
    assert {p.decode for p in both} == {"fa2", "decode"}


def test_vllm_verify_counts_tokens_and_clamps_by_max_seqs():
    """--draft-tokens 3 --max-num-seqs 128: a 512-token verify graph is 128 requests of 4 tokens."""
    gpu = lookup_gpu("b300")
    limits = ServingLimits(capture_sizes=(512,), max_num_seqs=128, draft_tokens=3, capture_unit="tokens")
    req = compute_requirement(QWEN35, limits, gpu, "0.6.12", Planners("fa2", "fa2"))
    verify = [s for s in req.scenarios if s.name == "cuda_graph_verify"]
    assert [(s.batch, s.q_len) for s in verify] == [(128, 4)]
    assert req.float_bytes < 600 * MIB  # was 2054 MiB when sized as 512 requests of 4 tokens


def test_sglang_draft_tokens_already_count_the_bonus_token():
    gpu = lookup_gpu("h200")
    limits = ServingLimits(capture_sizes=(64,), verify_q_len=4, draft_tokens=3)
    req = compute_requirement(AttentionLayout(64, 8, 128), limits, gpu, "0.5.0", Planners("fa2", "fa2"), "sglang")
    assert {(s.batch, s.q_len) for s in req.scenarios if s.name == "cuda_graph_verify"} == {(64, 4)}


def test_fa3_decode_plans_int_only():
    req = compute_requirement(QWEN35, ServingLimits(capture_sizes=(512,), eager=False), lookup_gpu("h200"),
                              "0.6.12", Planners("fa3", "fa3"))
    assert req.float_bytes == 0 and req.int_bytes > 0


def test_sliding_window_clips_prefill_not_decode():
    """Decode plans size by the full KV length; prefill plans clip it by the window."""
    from dataclasses import replace
    gpu = lookup_gpu("l40s")
    limits = ServingLimits(capture_sizes=(), max_num_seqs=512, max_model_len=32768)
    full = compute_requirement(QWEN35, limits, gpu, "0.6.12", Planners("fa2", "fa2"))
    swa = compute_requirement(replace(QWEN35, window_left=4095), limits, gpu, "0.6.12", Planners("fa2", "fa2"))
    kinds = lambda r: {x.name: x.float_bytes for x in r.scenarios}  # noqa: E731
    assert kinds(swa)["eager_decode"] == kinds(full)["eager_decode"]
    assert kinds(swa)["eager_prefill"] <= kinds(full)["eager_prefill"]


# --- issue 17: vLLM's per-batch TRT-LLM prefill rule, XQA decode, FA3's head-dim gate ----------
# Expected planners are vLLM's and FlashInfer's own rules as read from their code (cited in
# guard_core/flashinfer/planner_choice.py); the same deployments run through the real builders in
# tests/vllm/realcalls_scenarios.py (groups h100_issue17, b300_issue17, the differential search).

def _vllm_b300(**kw):
    base = dict(framework="vllm", cc=(10, 3), trtllm_attention=True, trtllm_decode=True)
    base.update(kw)
    return choose_planners(PlannerFacts(**base)).candidates


def test_vllm_sm10x_prefill_follows_use_trtllm_attention():
    # 16-bit KV, auto: TRT-LLM prefill (kv_cache_dtype == "auto")
    assert [p.prefill for p in _vllm_b300(kv_dtype="auto", q_prefill="bfloat16")] == ["trtllm"]
    # FP8 (e4m3) KV with an FP8 query: "query is quantized" -> TRT-LLM
    assert [p.prefill for p in _vllm_b300(kv_dtype="fp8", q_prefill="torch.float8_e4m3fn")] == ["trtllm"]
    # FP8 KV with a BF16 query (disable_flashinfer_q_quantization): FA2
    assert [p.prefill for p in _vllm_b300(kv_dtype="fp8", q_prefill="torch.bfloat16")] == ["fa2"]
    # vLLM <= 0.25 derives the query from the KV dtype unless quantization is disabled
    assert [p.prefill for p in _vllm_b300(kv_dtype="fp8", q_quant_disabled=True)] == ["fa2"]
    # an e5m2 query is not current_platform.fp8_dtype(): FA2 (the differential search's B300 case)
    assert [p.prefill for p in _vllm_b300(kv_dtype="fp8_e5m2")] == ["fa2"]
    # forced off, and non-causal layers (DFlash): FA2
    assert [p.prefill for p in _vllm_b300(trtllm_force=False)] == ["fa2"]
    assert [p.prefill for p in _vllm_b300(noncausal=True)] == ["fa2"]
    # attention sinks force TRT-LLM even with a 16-bit query on an FP8 cache
    assert [p.prefill for p in _vllm_b300(kv_dtype="fp8", q_prefill="torch.bfloat16", has_sinks=True)] == ["trtllm"]


def test_vllm_builder_decode_flag_counts_on_every_gpu():
    """vLLM >= 0.32 decodes with XQA on SM90/SM12x under use_trtllm_decode_attention."""
    for cc in ((9, 0), (12, 0)):
        c = choose_planners(PlannerFacts("vllm", cc, kv_dtype="fp8", trtllm_attention=True, trtllm_decode=True,
                                         q_prefill="torch.float8_e4m3fn", q_decode="torch.bfloat16")).candidates
        assert [p.decode for p in c] == ["trtllm"], cc
    c = choose_planners(PlannerFacts("vllm", (9, 0), trtllm_attention=True, trtllm_decode=False)).candidates
    assert [p.decode for p in c] == ["fa2"]


def test_fa3_head_dim_gate_by_release():
    from guard_core.flashinfer.planner_choice import fa3_head_dim_gate
    from guard_core.flashinfer.sizing import AttentionLayout

    choice = choose_planners(PlannerFacts("vllm", (9, 0), trtllm_attention=False, q_prefill="bfloat16",
                                          q_decode="bfloat16"))
    assert choice.planners.prefill == "fa3"
    for hd, fa3_ok in ((64, True), (128, True), (256, True), (80, False), (96, False), (512, False)):
        lay = AttentionLayout(16, 2, hd, hd)
        gated = fa3_head_dim_gate(choice, lay, "0.7.2.post1").planners.prefill
        assert gated == ("fa3" if fa3_ok else "fa2"), hd
        # FlashInfer 0.6.14 has no gate (its determine_attention_backend takes no head dims)
        assert fa3_head_dim_gate(choice, lay, "0.6.14").planners.prefill == "fa3"
    assert fa3_head_dim_gate(choice, AttentionLayout(16, 2, 192, 128), "0.7.2.post1").planners.prefill == "fa3"
