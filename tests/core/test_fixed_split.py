"""Fixed-split modes (SGLang --enable-deterministic-inference): the need grows with the prompt.

Expected values are the public reports' numbers, not guard_core's:
- GB10 (DGX Spark), 24 q / 4 kv heads, head_dim 256, chunk 8192, FlashInfer before 0.7.1:
  "Buffer overflow when allocating memory for batch_prefill_tmp_v with size 2415919104 ... only
  2147483648 bytes available"; "any prompt over ~7.3k tokens kills the whole server".
- the same deployment on FlashInfer 0.7.1+ (SGLang 0.5.22/0.5.23): overflows 2 GiB for prompts over
  about 41k tokens (11 KV chunks x 768 q-tiles).
- H200, Qwen3-Next-80B-A3B (16 q / 2 kv heads, head_dim 256), SGLang 0.5.6 (FlashInfer 0.5.3),
  ~8k-token prompt: batch_prefill_tmp_s 8,388,608 with 0 bytes available.
The planner model itself is checked byte for byte against FlashInfer's compiled planner on these
requests in tests/conformance (test_oracle_deterministic_reports, det_* requests).
"""

from dataclasses import replace

import pytest

from guard_core.decide.records import decide_fixed_split_workspace
from guard_core.decide.fixed_split import assess, gpu_memory_bytes, split_sizes_from_env
from guard_core.gpus import lookup_gpu
from guard_core.runtime.settings import Settings, load_settings
from guard_core.flashinfer.sizing import AttentionLayout, Planners, ServingLimits, compute_requirement

GIB = 1 << 30
FORCED = 2 * GIB  # SGLang: envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.set(2048 * 1024 * 1024)
GB10 = lookup_gpu("gb10")
H200 = lookup_gpu("h200")
GB10_LAYOUT = AttentionLayout(24, 4, 256, 256, 1, 2)
FA2 = Planners(prefill="fa2", decode="fa2")  # deterministic mode: tensor-core decode


def _det(ctx, chunk=8192, **kw):
    return ServingLimits(capture_sizes=(1, 2, 4, 8, 256), max_num_seqs=256, max_num_batched_tokens=chunk,
                         max_model_len=ctx, fixed_split_prefill=4096, fixed_split_decode=2048,
                         disable_graph_kv_split=True, **kw)


def _prefill(req):
    return next(s for s in req.scenarios if s.name == "fixed_split_prefill")


def test_gb10_report_before_0_7_1_is_the_published_allocation():
    req = compute_requirement(GB10_LAYOUT, _det(8192), GB10, "0.6.18", FA2, "sglang")
    over = _prefill(req).plan.first_overflow(FORCED)
    assert over == {"allocation": "batch_prefill_tmp_v", "bytes": 2415919104, "alignment": 16,
                    "available": 2147483648}
    # a smaller chunk or context "did not move" the failing prompt size: an 8192-token prompt
    # planned as one 8192 chunk overflows the same way whatever the context limit above it
    for ctx in (8192, 16384):
        r = compute_requirement(GB10_LAYOUT, _det(ctx), GB10, "0.6.18", FA2, "sglang")
        assert r.float_bytes > FORCED


def test_gb10_longest_prompt_is_the_reported_7_3k_and_41k():
    old = assess(GB10_LAYOUT, _det(131072), GB10, "0.6.18", FA2, "sglang", server_bytes=FORCED,
                 settings=load_settings({"FLASHINFER_GUARD_WORKSPACE_MAX": "2GiB"}), gpu_memory=None)
    assert not old.affordable and old.allocate_bytes == FORCED
    assert 7000 < old.longest_prompt < 7400  # "any prompt over ~7.3k tokens"
    new = assess(GB10_LAYOUT, _det(131072), GB10, "0.7.2", FA2, "sglang", server_bytes=FORCED,
                 settings=load_settings({"FLASHINFER_GUARD_WORKSPACE_MAX": "2GiB"}), gpu_memory=None)
    assert 40000 < new.longest_prompt < 42000  # "prompts over about 41k tokens (11 KV chunks)"
    assert new.longest_prompt % 4096 == 0  # the limit is a whole number of 4096-token KV chunks
    assert "prompts up to 40,960 tokens fit" in new.text


def test_h200_qwen3_next_report_tmp_s_with_zero_bytes_left():
    lay = AttentionLayout(16, 2, 256, 256, 1, 2)
    req = compute_requirement(lay, _det(8192), H200, "0.5.3", FA2, "sglang")
    assert _prefill(req).plan.first_overflow(FORCED) == {
        "allocation": "batch_prefill_tmp_s", "bytes": 8388608, "alignment": 16, "available": 0}


def test_graph_decode_plans_no_scratch_with_disable_split():
    req = compute_requirement(GB10_LAYOUT, _det(8192), GB10, "0.6.18", FA2, "sglang")
    graphs = [s for s in req.scenarios if s.name == "cuda_graph_decode"]
    assert graphs and all(s.float_bytes == 0 for s in graphs)
    # without the deterministic flag the same capture sizes do plan split-KV scratch
    plain = compute_requirement(GB10_LAYOUT, replace(_det(8192), disable_graph_kv_split=False), GB10, "0.6.18",
                                FA2, "sglang")
    assert max(s.float_bytes for s in plain.scenarios if s.name == "cuda_graph_decode") > 0


def test_need_grows_with_the_context_without_an_sm_cap():
    needs = [compute_requirement(GB10_LAYOUT, _det(c), GB10, "0.7.2", FA2, "sglang").float_bytes
             for c in (8192, 32768, 131072)]
    assert needs[0] < needs[1] < needs[2]
    assert needs[2] > 3 * needs[1]  # 32 chunks vs 8: roughly linear, not capped at 2 x SMs


def test_decode_batch_is_bounded_by_the_pool():
    small = compute_requirement(GB10_LAYOUT, _det(131072, kv_pool_tokens=200000), GB10, "0.6.18", FA2, "sglang")
    big = compute_requirement(GB10_LAYOUT, _det(131072, kv_pool_tokens=4000000), GB10, "0.6.18", FA2, "sglang")
    d_small = next(s for s in small.scenarios if s.name == "fixed_split_decode")
    d_big = next(s for s in big.scenarios if s.name == "fixed_split_decode")
    assert d_small.float_bytes < d_big.float_bytes
    # a pool of 200,000 tokens over 256 requests holds at most 256 + 199,744 // 2048 = 353 chunks
    assert d_small.plan.padded_batch_size <= 256 + (200000 - 256) // 2048


def test_affordable_need_raises_over_the_forced_2gib():
    s = load_settings({"FLASHINFER_GUARD_WORKSPACE_MAX": "5%"})
    req = compute_requirement(GB10_LAYOUT, _det(8192), GB10, "0.6.18", FA2, "sglang")
    a = assess(GB10_LAYOUT, _det(8192), GB10, "0.6.18", FA2, "sglang", server_bytes=FORCED, settings=s,
               gpu_memory=gpu_memory_bytes(GB10), requirement=req)
    assert a.affordable and a.allocate_bytes >= req.float_bytes > FORCED
    dec = decide_fixed_split_workspace(req, a, framework="sglang", server_bytes=FORCED, settings=s)
    assert dec.action == "raise" and dec.allocate_bytes == a.allocate_bytes and dec.level == "info"


def test_unaffordable_need_is_one_warning_with_the_limit_and_computed_fixes():
    s = load_settings({})  # 5% of a GB10's 119.7 GiB = 5.98 GiB
    lim = _det(131072)
    req = compute_requirement(GB10_LAYOUT, lim, GB10, "0.7.2", FA2, "sglang")
    a = assess(GB10_LAYOUT, lim, GB10, "0.7.2", FA2, "sglang", server_bytes=FORCED, settings=s,
               gpu_memory=gpu_memory_bytes(GB10), requirement=req)
    assert not a.affordable and FORCED <= a.allocate_bytes <= a.max_bytes
    dec = decide_fixed_split_workspace(req, a, framework="sglang", server_bytes=FORCED, settings=s)
    assert dec.action == "limit" and dec.level == "warning" and "\n" not in dec.line
    for part in (f"prompts up to {a.longest_prompt:,} tokens fit", "--chunked-prefill-size",
                 "SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE=", "FLASHINFER_GUARD_WORKSPACE_MAX="):
        assert part in dec.line, (part, dec.line)
    # the computed fixes do fit the buffer the guard may give, and one step further does not
    budget = max(FORCED, a.max_bytes)
    c = a.fixes["chunked_prefill_size"]
    fit = compute_requirement(GB10_LAYOUT, replace(lim, max_num_batched_tokens=c), GB10, "0.7.2", FA2, "sglang")
    over = compute_requirement(GB10_LAYOUT, replace(lim, max_num_batched_tokens=c + 1), GB10, "0.7.2", FA2,
                               "sglang")
    assert _prefill(fit).float_bytes <= budget < _prefill(over).float_bytes
    p = a.fixes["prefill_split_tile_size"]
    fit = compute_requirement(GB10_LAYOUT, replace(lim, fixed_split_prefill=p), GB10, "0.7.2", FA2, "sglang")
    over = compute_requirement(GB10_LAYOUT, replace(lim, fixed_split_prefill=p - 1), GB10, "0.7.2", FA2, "sglang")
    assert _prefill(fit).float_bytes <= budget < _prefill(over).float_bytes
    # the longest prompt fits the buffer allocated; one token more does not
    at = compute_requirement(GB10_LAYOUT, replace(lim, max_model_len=a.longest_prompt), GB10, "0.7.2", FA2, "sglang")
    past = compute_requirement(GB10_LAYOUT, replace(lim, max_model_len=a.longest_prompt + 1), GB10, "0.7.2", FA2,
                               "sglang")
    assert at.float_bytes <= a.allocate_bytes
    assert past.float_bytes > a.max_bytes or past.float_bytes > a.allocate_bytes


@pytest.mark.parametrize("setting", ["exact", "auto"])
def test_never_below_the_servers_size_in_this_mode(setting):
    s = Settings(workspace=setting)
    lim = _det(8192)
    req = compute_requirement(GB10_LAYOUT, lim, GB10, "0.7.2", FA2, "sglang")
    assert req.float_bytes < FORCED
    a = assess(GB10_LAYOUT, lim, GB10, "0.7.2", FA2, "sglang", server_bytes=FORCED, settings=s, gpu_memory=None,
               requirement=req)
    dec = decide_fixed_split_workspace(req, a, framework="sglang", server_bytes=FORCED, settings=s)
    assert dec.allocate_bytes == FORCED and dec.action == "ok"


def test_split_sizes_read_as_sglang_reads_them():
    assert split_sizes_from_env({}) == (4096, 2048, [])
    assert split_sizes_from_env({"SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE": "8192",
                                 "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE": " "})[:2] == (8192, 2048)
    p, d, notes = split_sizes_from_env({"SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE": "0",
                                        "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE": "4k\n"})
    assert (p, d) == (None, 2048) and len(notes) == 2 and all("\n" not in n for n in notes)
