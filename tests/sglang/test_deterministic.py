"""SGLang --enable-deterministic-inference through SGLang's own backend code and FlashInfer's
real planner (tests/realcalls), without the guard and with it.

Published numbers (the expected values; never guard_core's):
- GB10 (DGX Spark), 24 q / 4 kv heads, head_dim 256, --chunked-prefill-size 8192, FlashInfer before
  0.7.1: "Buffer overflow when allocating memory for batch_prefill_tmp_v with size 2415919104 ...
  only 2147483648 bytes available"; on FlashInfer 0.7.1+ the same deployment overflows 2 GiB for
  prompts over about 41k tokens (11 KV chunks of 4096 x 768 query tiles).
- H200, Qwen3-Next-80B-A3B (full-attention layers 16 q / 2 kv heads, head_dim 256), ~8k-token
  prompt: "batch_prefill_tmp_s with size 8388608 ... 0 bytes available".
- SGLang's forced size: ``envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.set(2048 * 1024 * 1024)``
  (flashinfer_backend.py 0.5.5:183, 0.5.23:451), read back from the buffer SGLang allocates.
What the guard states (the longest prompt that fits, its buffer) is checked against FlashInfer's
planner under SGLang's calls: the stated prompt plans, one token more does not.
"""

from __future__ import annotations


from conftest import FLASHINFER, _key
from test_realcalls import realcalls

GIB = 1 << 30
FORCED = 2 * GIB
NEW_FORMULA = _key(FLASHINFER) >= (0, 7, 1)  # FlashInfer PR #5177
DET = {"enable_deterministic_inference": True, "attention_backend": "flashinfer"}
GB10_REPORT_ERROR = ("Buffer overflow when allocating memory for batch_prefill_tmp_v with size 2415919104 and "
                     "alignment 16, but only 2147483648 bytes available")
H200_REPORT_ERROR = ("Buffer overflow when allocating memory for batch_prefill_tmp_s with size 8388608 and "
                     "alignment 16, but only 0 bytes available")
OFF = {"FLASHINFER_GUARD": "0"}
N = 32  # max running requests of the runs (the decode batch)


def gb10(context, prompts, **kw):
    sa = dict(DET, context_length=context, max_running_requests=N)
    return dict(model="gb10_report", gpu="gb10", chunk=8192, phases=["capture", "det"], det_prompts=list(prompts),
                det_decode=[context - 1] + [1] * (N - 1), server_args=sa, pool_size=N, kv_width=context + 8, **kw)


def _prefill(r):
    return {c["prompt"]: c for c in r["calls"] if c["phase"] == "fixed_split_prefill"}


def _errors(r):
    return {e.get("prompt"): e["error"] for e in r["errors"] if e["phase"] == "fixed_split_prefill"}


# SGLang alone: the report's deployment (FlashInfer < 0.7.1: an 8k context; 0.7.1+: 128k)
BARE = gb10(8192, [4096, 8192]) if not NEW_FORMULA else gb10(131072, [4096, 40960, 40961])


def test_sglang_runs_the_mode_with_its_split_sizes_and_forced_2gib():
    r = realcalls(env=OFF, **BARE).result
    assert not r["registered"]
    assert r["deterministic"] == {"enable_deterministic": True, "prefill_split_tile_size": 4096,
                                  "decode_split_tile_size": 2048, "disable_cuda_graph_kv_split": True}
    assert r["workspace_bytes"] == FORCED
    call = _prefill(r)[4096]
    assert call["wrapper"] == "BatchPrefillWithPagedKVCacheWrapper"  # no ragged wrapper in this mode
    assert (call["backend"], call["planner"]) == ("fa2", "prefill")
    # CUDA-graph decode plans with disable_split_kv: no split scratch at any capture size
    caps = [c for c in r["calls"] if c["phase"] == "cuda_graph_decode"]
    assert caps and all(c["float_bytes"] == 0 and c["ok"] for c in caps)
    # eager decode with the decode split: a long request splits every request's scratch rows
    dec = [c for c in r["calls"] if c["phase"] == "fixed_split_decode"]
    assert len(dec) == 1 and dec[0]["split_kv"] and dec[0]["float_bytes"] > 0


def test_gb10_report_without_guard():
    """FlashInfer < 0.7.1 (SGLang 0.5.5, 0.5.11 here): the report's error, verbatim, at an 8192-token
    prompt. FlashInfer >= 0.7.1 (0.5.23): the ~41k limit, 40,960 tokens plan and 40,961 do not."""
    r = realcalls(env=OFF, **BARE).result
    assert r["workspace_bytes"] == FORCED
    errs = _errors(r)
    if not NEW_FORMULA:
        assert GB10_REPORT_ERROR in errs[8192], errs
        return
    assert 40960 not in errs and _prefill(r)[40960]["ok"]
    # 11 KV chunks of 4096 x 768 query tiles of 64 rows, / GQA 6, x 24 heads x 256 x 4 bytes
    assert "batch_prefill_tmp_v with size 2214592512" in errs[40961] and "only 2147483648 bytes" in errs[40961]


def test_h200_qwen3_next_report_without_guard():
    """FlashInfer < 0.7.1: tmp_v fills the 2 GiB exactly and tmp_s (8,388,608 B) finds 0 bytes;
    from 0.7.1 the same ~8k prompt plans in SGLang's 2 GiB."""
    r = realcalls(env=OFF, model="qwen3next_full", gpu="h200", chunk=8192, phases=["det"], det_prompts=[8192],
                  server_args=dict(DET, context_length=8192), pool_size=N, kv_width=8200).result
    assert r["workspace_bytes"] == FORCED
    if not NEW_FORMULA:
        err = _errors(r)[8192]
        assert H200_REPORT_ERROR in err, err
    else:
        assert _errors(r) == {} and _prefill(r)[8192]["ok"] and _prefill(r)[8192]["float_bytes"] < FORCED


AFFORDABLE = gb10(8192, [4096, 7253, 7254, 8192], also_without_guard=True, early=True)


def test_with_guard_an_affordable_need_runs_and_matches_the_core():
    """Context 8192, chunk 8192: every prompt up to the context plans with the guard; the guard's
    fixed-split scenarios are the real calls' needs byte for byte."""
    run = realcalls(**AFFORDABLE)
    r = run.result
    assert r["registered"]
    assert r["errors"] == [], r["errors"][:2]
    need = max(c["float_bytes"] for c in r["calls"])
    assert r["workspace_bytes"] >= need
    pred = r["prediction"]
    assert pred["decision"]["action"] in ("raise", "ok")
    core = {}
    for s in pred["scenarios"]:
        core[s["name"]] = max(core.get(s["name"], 0), s["float_bytes"])
    assert core["fixed_split_prefill"] == _prefill(r)[8192]["float_bytes"]
    dec = [c for c in r["calls"] if c["phase"] == "fixed_split_decode"]
    assert core["fixed_split_decode"] == dec[0]["float_bytes"]
    assert pred["float_bytes"] == need  # the envelope is the largest real call
    assert r["early"] is None or r["early"]["affordable"]
    assert not [x for x in run.guard_lines if "prompts up to" in x]
    # without the guard SGLang's own 2 GiB overflows exactly where a call needs more
    w = r["without_guard"]
    short = sorted(c["prompt"] for c in w["calls"]
                   if c["phase"] == "fixed_split_prefill" and c["float_bytes"] > FORCED)
    assert sorted(_errors(w)) == short
    if not NEW_FORMULA:
        assert short == [7254, 8192] and GB10_REPORT_ERROR in _errors(w)[8192]  # "over ~7.3k tokens"


def test_with_guard_unaffordable_states_the_limit_and_it_holds():
    """Context 131072: the need is over 5% of a GB10 on every line; the guard's one warning (before
    the weights load) names the longest prompt that fits its buffer, and FlashInfer's planner under
    SGLang's calls agrees to the token."""
    import re

    first = realcalls(**gb10(131072, [1024], early=True))
    r = first.result
    dec = r["prediction"]["decision"]
    assert dec["action"] == "limit", dec
    warn = [x for x in first.guard_lines if "prompts up to" in x]
    assert len(warn) == 1 and "before loading weights" in warn[0], first.guard_lines
    assert r["early"] is not None and not r["early"]["affordable"]
    longest = int(re.search(r"prompts up to ([0-9,]+) tokens fit", dec["text"]).group(1).replace(",", ""))
    assert r["workspace_bytes"] == dec["allocate_bytes"] >= FORCED
    assert r["errors"] == []  # a 1024-token prompt and the decode batch fit
    probe = realcalls(**gb10(131072, [longest, longest + 1]))
    pr = probe.result
    assert pr["workspace_bytes"] == r["workspace_bytes"]
    at, past = _prefill(pr)[longest], _prefill(pr)[longest + 1]
    assert longest not in _errors(pr) and at["ok"] and at["float_bytes"] <= r["workspace_bytes"]
    # one token more needs more than the guard's buffer: FlashInfer's planner overflows it, and the
    # safety net grows the buffer for that call (or FlashInfer's error propagates)
    assert past["float_bytes"] > r["workspace_bytes"]
    grew = [x for x in probe.guard_lines if "safety net" in x and "batch_prefill_tmp_v" in x]
    assert grew or "Buffer overflow" in _errors(pr).get(longest + 1, ""), probe.guard_lines
