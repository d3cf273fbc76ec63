"""`plan` on MLA deployments (issue 38 item 4): the MLA path per batch kind, the largest works
against the 16,384 capacity, the verdict and the limit to change; "not applicable", with why,
where the server does not plan through FlashInfer's MLA planner.

Expected numbers are computed by hand from MLAPlan's arithmetic (docs/mla-guard.md: tiles_i =
ceil(q_i * H / ct), ct = 64 x cluster size, C = SMs / cluster size) and checked on the mirror
(``mla_planner.mla_plan``, itself checked against the compiled planner), never taken from
guard_core.decide. Server rules are cited in guard_core/deployment/mla_routes.py.
"""

from guard_core.flashinfer.mla_planner import mla_plan
from tests.core.test_plan_defaults import plan, plan_json

CAP = 16384
V3 = ["python", "-m", "sglang.launch_server", "--model-path", "deepseek-ai/DeepSeek-V3"]


def _works(q, kv, heads, sms=132, version="0.7.2", causal=True):
    ind = [0]
    for x in q:
        ind.append(ind[-1] + x)
    return mla_plan(version, ind, kv, num_heads=heads, head_dim_o=512, causal=causal, num_sms=sms).total_num_works


def _path(r, kind):
    return next(p for p in r["mla"]["paths"] if p["kind"] == kind)


def test_flashinfer_decode_over_names_the_request_limit():
    # H200 (132 SMs), TP 8: 16 heads per rank; one decode token each is 16 packed rows (cluster 1,
    # C = 132), one tile per request: 20,000 requests are 20,000 tiles + 132
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8",
                  "--attention-backend", "flashinfer", "--max-running-requests", "20000")
    assert r["verdict"] == "overflow" and r["area"] == "mla"
    assert r["mla"]["capacity"] == CAP and r["mla"]["backend"] == "flashinfer"
    d = _path(r, "decode")
    assert d["heads"] == 16 and d["largest_works"] == 20000 + 132 and d["over"]
    # 16,384 - 132 = 16,252 requests: the bound fits; the mirror agrees there with a long KV, and
    # one tile per request puts 16,385 requests over on tiles alone
    assert d["remedy"] == "--max-running-requests <= 16,252"
    assert _works([1] * 16252, [1] * 16251 + [10_000_000], 16, causal=False) <= CAP
    assert _works([1] * 16385, [1] * 16385, 16, causal=False) > CAP
    # the mirror reaches past the capacity on a batch of 20,000 at this limit
    assert _works([1] * 20000, [1] * 20000, 16, causal=False) > CAP
    assert "decode: --max-running-requests <= 16,252" in r["mla"]["remedies"]


def test_flashinfer_that_fits_says_ok():
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8",
                  "--attention-backend", "flashinfer", "--max-running-requests", "1024")
    assert r["verdict"] == "ok" and not any(p["over"] for p in r["mla"]["paths"])
    assert _path(r, "decode")["largest_works"] == 1024 + 132
    ext = _path(r, "extend")
    # never under the mirror on extend chunks the limits allow (8,192 tokens, H200 TP 8 default)
    for q in ([8] * 1024, [8192], [5] * 1024 + [3072], [2] * 1024):
        assert _works(q, q, 16) <= ext["largest_works"]
        assert _works(q, [x + 100_000 for x in q], 16) <= ext["largest_works"]


def test_dp_attention_extend_over_gives_the_command_value():
    # DP attention 8 at TP 8: 128 heads per rank, the chunk per rank 131,072 // 8 = 16,384 tokens;
    # one token is 128 packed rows: cluster 2 (C = 66), one tile per token: 16,384 + 66 works
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8", "--dp", "8",
                  "--enable-dp-attention", "--attention-backend", "flashinfer", "--chunked-prefill-size", "131072",
                  "--max-running-requests", "512")
    e = _path(r, "extend")
    assert e["heads"] == 128 and e["largest_works"] == 16384 + 66 and e["over"]
    # 16,384 - 66 = 16,318 tokens per rank; the command's value is divided by 8: <= 16,318 x 8 + 7
    assert e["remedy"] == "--chunked-prefill-size <= 130,551 (16,318 per rank)"
    assert _works([16318], [16318 + 163840], 128) <= CAP
    assert _works([16385], [16385], 128) > CAP  # docs/mla-guard.md: one 16,385-token prefill spills
    # decode: the request pool is 512 // 8 = 64 per rank (no graph above it); 128 rows a token:
    # cluster 2, C = 66
    assert _path(r, "decode")["largest_works"] == 64 + 66 and not _path(r, "decode")["over"]


def test_verify_with_draft_tokens():
    # EAGLE with 4 draft tokens per request (1 + 3), DP attention: 128 heads, 4 x 128 rows per
    # request: cluster 2, 4 tiles per request; 4,200 requests per rank = 16,800 tiles + 66
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8", "--dp", "8",
                  "--enable-dp-attention", "--attention-backend", "flashinfer", "--speculative-algorithm", "EAGLE",
                  "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                  "--max-running-requests", str(4200 * 8), "--cuda-graph-max-bs-decode", "64")
    v = _path(r, "verify")
    assert v["q_len"] == [1, 4] and v["largest_works"] == 16800 + 66 and v["over"]
    assert _works([4] * 4200, [4] * 4200, 128) == 16800  # the mirror (docs/mla-guard.md grid example)
    # (16,384 - 66) // 4 = 4,079 requests per rank fit; x 8 + 7 in the command
    assert v["remedy"] == "--max-running-requests <= 32,639 (4,079 per rank)"
    assert _works([4] * 4079, [4] * 4078 + [10_000_000], 128) <= CAP


def test_text_report():
    code, out, _ = plan("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8",
                        "--attention-backend", "flashinfer", "--max-running-requests", "20000")
    assert code == 0
    assert "verdict    OVER" in out and "PR #5170" in out and "remedy     decode: --max-running-requests <= 16,252" in out
    assert "capacity   16,384 works" in out and "flashinfer_mla_backend.py 0.5.23:" in out


def test_other_backends_are_not_applicable_with_why():
    # H200 default for MLA: fa3 (arg_groups/model_override_base.py 0.5.23:336-338)
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8")
    assert r["verdict"] == "not_applicable" and r["mla"]["backend"] == "fa3"
    assert "fa3 attention backend" in r["reason"] and "--attention-backend flashinfer would" in r["reason"]
    # B200: DeepseekV3ForCausalLM takes trtllm_mla (model_overrides/deepseek_v2.py 0.5.23:178-185)
    r = plan_json("--gpu", "b200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8")
    assert r["verdict"] == "not_applicable" and r["mla"]["backend"] == "trtllm_mla"
    assert "--disable-chunked-prefix-cache" in r["reason"]
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.11", "--", *V3, "--tp", "8", "--attention-backend",
                  "triton")
    assert r["verdict"] == "not_applicable" and "triton" in r["reason"]
    # vLLM: the dense MLA backends do not plan through MLAPlan
    r = plan_json("--model", "DeepSeek-V3")
    assert r["verdict"] == "not_applicable" and "FLASHINFER_MLA_SPARSE_SM90" in r["reason"]


def test_sm100_default_is_flashinfer_for_other_mla_architectures():
    # DeepseekV2ForCausalLM on B200 with no backend named: flashinfer (server_args.py 0.5.5:1163-1164)
    lite = ["python", "-m", "sglang.launch_server", "--model-path", "tests/data/model_configs/DeepSeek-V2-Lite.json"]
    r = plan_json("--gpu", "b200", "--framework-version", "0.5.5", "--", *lite)
    assert r["mla"]["backend"] == "flashinfer" and r["verdict"] in ("ok", "overflow")
    assert {p["kind"] for p in r["mla"]["paths"]} == {"decode", "extend"}


def test_hybrid_backends_take_each_side():
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8",
                  "--prefill-attention-backend", "flashinfer", "--decode-attention-backend", "fa3")
    assert [p["kind"] for p in r["mla"]["paths"]] == ["extend"]
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *V3, "--tp", "8",
                  "--prefill-attention-backend", "fa3", "--decode-attention-backend", "flashinfer")
    assert [p["kind"] for p in r["mla"]["paths"]] == ["decode"]


def test_eagle_topk_draft_decode_rows():
    # EAGLE topk 4: the draft steps decode 4 rows per request (FlashInferMLAMultiStepDraftBackend,
    # max_bs = pool x topk); TP 8 (16 heads, cluster 1, C = 132): 5,000 requests are 20,000 rows
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.11", "--", *V3, "--tp", "8",
                  "--attention-backend", "flashinfer", "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                  "--speculative-eagle-topk", "4", "--speculative-num-draft-tokens", "8",
                  "--max-running-requests", "5000")
    dd = _path(r, "draft decode")
    assert dd["max_requests"] == 20000 and dd["largest_works"] == 20000 + 132 and dd["over"]
    # 16,252 rows fit: 4,063 requests of 4 rows
    assert dd["remedy"] == "--max-running-requests <= 4,063"
    assert _works([1] * (4063 * 4), [1] * (4063 * 4 - 1) + [10_000_000], 16, causal=False) <= CAP
    assert not _path(r, "decode")["over"]


def test_the_servers_own_reader_finding_mla_routes_to_the_mla_answer(monkeypatch):
    """Where the built-in reader sees no MLA but the server's own config code does (model.py), the
    plan answers through the MLA stages instead of sizing the workspace."""
    from guard_core.commands.plan import model as stage

    monkeypatch.setattr(stage, "_server_reading", lambda *a, **k: {"ok": True, "label": "SGLang 0.5.23's ModelConfig",
                                                                   "groups": [], "use_mla": True})
    llama = ["python", "-m", "sglang.launch_server", "--model-path", "tests/data/model_configs/Meta-Llama-3.1-8B.json"]
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *llama, "--attention-backend", "flashinfer")
    assert r["area"] == "mla" and r["mla"]["backend"] == "flashinfer"
    # 32 heads at TP 1: one decode token is 32 rows (cluster 1, C = 132), one tile a request
    d = _path(r, "decode")
    assert d["heads"] == 32 and d["largest_works"] == d["max_requests"] + 132
