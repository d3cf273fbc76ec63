"""SGLang's own FlashInfer plan() calls through FlashInfer's real wrappers and planner.

Each scenario runs in its own process (realcalls_scenarios.py, forked from a warm interpreter): SGLang's
FlashInferAttnBackend with FlashInfer's real Python wrappers, FlashInfer's own
planner code compiled for the host (tests/realcalls/standin.py), SGLang's CUDA-graph
capture path (largest batch first) and the eager batches the guard's core names as
worst. Only what cannot run on a CPU is replaced (GPU kernels, device memory, device
queries; listed in realcalls_scenarios.py and reported in each result).

Expected to fail where the adapter is wrong: the failures are the findings.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import tempfile

import pytest

from conftest import SGLANG, Run, _key
from tests.common import forkserver  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
SEED = ("Buffer overflow when allocating memory for batch_prefill_tmp_s with size 3141632 and alignment 16, "
        "but only 524288 bytes available")

from realcalls_scenarios import MATRIX as _CASES  # noqa: E402

# each case runs with the guard, then (same process) with the guard's wrapper undone
MATRIX = [(c, dict(o, also_without_guard=True)) for c, o in _CASES]

_runs: dict = {}


def _shared_dir():
    """Runs shared by the pytest-xdist workers of one session (each scenario once)."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not uid:
        return None
    d = os.path.join(tempfile.gettempdir(), f"fig-sglang-realcalls-{uid}")
    os.makedirs(d, exist_ok=True)
    return d


class _Done:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def _spawn(env, opts):
    e = {k: v for k, v in os.environ.items()
         if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))}
    if os.environ.get("FLASHINFER_GUARD_CACHE"):  # where the planner library is cached
        e["FLASHINFER_GUARD_CACHE"] = os.environ["FLASHINFER_GUARD_CACHE"]
    e.update(env or {})
    return forkserver.run([sys.executable, os.path.join(HERE, "realcalls_scenarios.py"), "run", json.dumps(opts)],
                          capture_output=True, text=True, env=e, timeout=900)


def realcalls(env=None, **opts):
    key = json.dumps([env or {}, opts], sort_keys=True)
    if key in _runs:
        return _runs[key]
    shared = _shared_dir()
    if shared is None:
        proc = _spawn(env, opts)
    else:
        path = os.path.join(shared, hashlib.sha256(key.encode()).hexdigest()[:20])
        with open(path + ".lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if os.path.exists(path + ".json"):
                    with open(path + ".json") as f:
                        proc = _Done(**json.load(f))
                else:
                    p = _spawn(env, opts)
                    proc = _Done(p.returncode, p.stdout, p.stderr)
                    with open(path + ".json", "w") as f:
                        json.dump(vars(proc), f)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    _runs[key] = Run(proc)
    return _runs[key]


def _round_mib(n):
    return -(-n // MIB) * MIB


# ---------------------------------------------------------------- the seed (SGLang 0.5.5)

SEED_LINE = _key(SGLANG) < (0, 5, 6)  # no Qwen3-VL in SGLang's 512 MiB list before 0.5.6


def test_seed_without_guard_through_sglangs_capture_path():
    """0.5.5: the seed crash, verbatim. Later lines give Qwen3-VL 512 MiB (0.5.6+) and,
    from FlashInfer 0.7.1, a GQA-group smaller scratch: no call overflows there."""
    r = realcalls(env={"FLASHINFER_GUARD": "0"}, model="qwen3vl", phases=["capture"]).result
    assert not r["registered"]
    first = r["calls"][0]
    assert first["batch_size"] == max(r["capture_bs"]) == 512  # largest capture size first
    assert first["wrapper"] == "BatchDecodeWithPagedKVCacheWrapper" and first["backend"] == "fa2"
    if SEED_LINE:
        assert r["workspace_bytes"] == 384 * MIB
        assert r["first_error"] is not None and SEED in r["first_error"], r["first_error"]
        assert r["errors"][0]["batch"] == 512
    else:
        assert r["workspace_bytes"] == 512 * MIB
        assert r["errors"] == [], r["errors"][:1]


def test_seed_with_guard_loaded_by_sglangs_route_no_call_overflows():
    r = realcalls(**dict(MATRIX)["qwen3vl"]).result
    assert r["registered"] and r["loaded_by"] == ("pth" if _key(SGLANG) < (0, 5, 11) else "entry_point")
    assert r["errors"] == [], r["errors"][:2]
    assert all(c["ok"] for c in r["calls"])
    assert r["workspace_bytes"] == (387 * MIB if SEED_LINE else 512 * MIB)
    # the in-process "without guard" pass of the matrix agrees with a process without the guard
    r0 = realcalls(env={"FLASHINFER_GUARD": "0"}, model="qwen3vl", phases=["capture"]).result
    assert r["without_guard"]["workspace_bytes"] == r0["workspace_bytes"]
    assert r["without_guard"]["first_error"] == r0["first_error"]
    assert r["net_after_undo"] == [], "the safety net's undo left entry points wrapped"


# ---------------------------------------------------------------- the matrix (every line)

def _expected_backend(call, planners):
    """The planner the adapter predicted for the SGLang wrapper that made this call."""
    w = call["wrapper"]
    if w == "BatchDecodeWithPagedKVCacheWrapper":
        return {"fa2": ("fa2", "prefill"), "decode": ("decode", "decode")}[planners["decode"]]
    if w == "BatchPrefillWithPagedKVCacheWrapper":  # paged prefill, and verify during capture
        return {"fa2": ("fa2", "prefill"), "fa3": ("fa3", "sm90")}[planners["prefill"]]
    return None  # the ragged wrapper: see test_matrix_ragged_prefill_needs_no_more_than_the_guard


@pytest.mark.parametrize("case,opts", MATRIX, ids=[c for c, _ in MATRIX])
def test_matrix_with_guard(case, opts):
    run = realcalls(**opts)
    r = run.result
    assert r["registered"], "the guard was not loaded through SGLang's own route"
    assert r["loaded_by"] == ("entry_point" if _key(SGLANG) >= (0, 5, 11) else "pth")
    calls = r["calls"]
    assert calls, "SGLang made no plan() call"
    # 1. with the guard no call overflows
    assert r["errors"] == [], r["errors"][:2]
    # 2. the buffer: at most the largest real need rounded up to 1 MiB, or SGLang's own size where larger
    largest = max(c["float_bytes"] for c in calls)
    own = r["sglang_server_bytes"]
    assert own is not None, "the guard did not size this backend"
    assert r["workspace_bytes"] >= largest
    assert r["workspace_bytes"] <= max(_round_mib(largest), own), (
        f"guard buffer {r['workspace_bytes']} > max(largest real need {largest} rounded, SGLang's {own})")
    # 3. the planner of each call is the one the adapter predicted
    pred = r["prediction"]
    wrong = []
    for c in calls:
        exp = _expected_backend(c, pred["planners"])
        if exp is not None and (c["backend"], c["planner"]) != exp:
            wrong.append((c["wrapper"], c["batch_size"], c["cuda_graph"], (c["backend"], c["planner"]), exp))
    assert not wrong, f"predicted {pred['planners']}, seen {wrong[:3]}"
    # and the adapter read SGLang's own tensor-core decode decision
    assert pred["decode_tc"] == r["decode_use_tensor_cores"]


@pytest.mark.parametrize("case,opts", MATRIX, ids=[c for c, _ in MATRIX])
def test_matrix_core_need_matches_the_real_calls(case, opts):
    """The core's per-scenario figures against FlashInfer's planner under SGLang's calls: the
    dominant real need is what the guard computed (never more, so the guard never under-sizes;
    equal, so it does not over-size)."""
    r = realcalls(**opts).result
    calls = r["calls"]
    largest = max(c["float_bytes"] for c in calls)
    pred = r["prediction"]
    assert pred["float_bytes"] >= largest, f"guard's need {pred['float_bytes']} < real {largest}"
    assert pred["float_bytes"] == largest, f"guard's need {pred['float_bytes']} != largest real {largest}"


@pytest.mark.parametrize("case,opts", MATRIX, ids=[c for c, _ in MATRIX])
def test_matrix_without_guard_overflows_exactly_where_sglangs_buffer_is_short(case, opts):
    g = realcalls(**opts).result
    assert g["unpatched"]
    r = g["without_guard"]
    # SGLang's own size is what the guard saw as "what SGLang would allocate"
    assert r["workspace_bytes"] == g["sglang_server_bytes"]
    short = [(c["batch_size"], c["float_bytes"]) for c in r["calls"] if c["float_bytes"] > r["workspace_bytes"]]
    over = [(c["batch_size"], c["float_bytes"]) for c in r["calls"] if not c["ok"]]
    assert over == short
    assert bool(r["errors"]) == bool(short)


@pytest.mark.parametrize("case,opts", MATRIX, ids=[c for c, _ in MATRIX])
def test_matrix_ragged_prefill_needs_no_more_than_the_guard(case, opts):
    """SGLang's ragged wrapper (non-multimodal extend) keeps FlashInfer's backend choice
    ('auto': FA3 on SM90 with 16-bit q/kv, int buffer only); whatever it picks must fit."""
    r = realcalls(**opts).result
    ragged = [c for c in r["calls"] if c["wrapper"] == "BatchPrefillWithRaggedKVCacheWrapper"]
    if r["is_multimodal"]:
        assert not ragged  # SGLang plans multimodal extends on the paged wrapper only
        return
    assert ragged, "SGLang planned no ragged extend"
    assert all(c["float_bytes"] <= r["workspace_bytes"] and c["ok"] for c in ragged)


@pytest.mark.parametrize("case,opts", MATRIX, ids=[c for c, _ in MATRIX])
def test_matrix_each_scenario_matches_the_core_call_for_call(case, opts):
    """Per CUDA-graph batch size and per eager kind: FlashInfer's need under SGLang's call
    equals the core's figure for that scenario (observed vs predicted, in bytes)."""
    r = realcalls(**opts).result
    pred = r["prediction"]
    core = {}
    for s in pred["scenarios"]:
        k = (s["name"], s["batch"]) if s["name"].startswith("cuda_graph") else (s["name"], None)
        core[k] = max(core.get(k, 0), s["float_bytes"])
    seen = {}
    for c in r["calls"]:
        if c["wrapper"] == "BatchPrefillWithRaggedKVCacheWrapper":
            continue  # not a float planner here (test_matrix_ragged_...)
        k = (c["phase"], c["batch"]) if c["phase"].startswith("cuda_graph") else (c["phase"], None)
        seen[k] = max(seen.get(k, 0), c["float_bytes"])
    diff = {f"{k[0]}{'' if k[1] is None else ' bs ' + str(k[1])}": (seen[k], core.get(k)) for k in seen
            if seen[k] != core.get(k)}
    assert not diff, f"(observed, predicted) where they differ: {dict(list(diff.items())[:6])}"


# ---------------------------------------------------------------- the safety net in SGLang (issue 17)

def test_safety_net_wraps_every_sglang_planning_entry_point():
    """SGLang plans only through begin_forward (FlashInfer's class-body alias of plan) and,
    for CUDA graphs, fast_decode_plan / its own fast_prefill_plan: the net wraps them all."""
    r = realcalls(model="qwen35", phases=["capture"]).result
    eps = set(r["safety_net"]["entry_points"])
    for cls in ("BatchPrefillWithPagedKVCacheWrapper", "BatchPrefillWithRaggedKVCacheWrapper",
                "BatchDecodeWithPagedKVCacheWrapper"):
        assert f"{cls}.plan" in eps and f"{cls}.begin_forward" in eps, sorted(eps)
    assert "flashinfer.decode.fast_decode_plan" in eps, sorted(eps)


def test_safety_net_recovers_inside_sglangs_own_capture():
    """The core's need under-stated by one allocation and SGLang's buffer set small by the
    user (8 MiB, raised by the guard to the short need): FlashInfer's real planner overflows
    in SGLang's begin_forward at the largest capture batch (before any graph), the net grows
    the shared buffer in place and re-plans. No error reaches SGLang; one warning."""
    run = realcalls(env={"SGLANG_FLASHINFER_WORKSPACE_SIZE": str(8 * MIB)}, model="qwen35", understate=True,
                    phases=["capture"])
    r = run.result
    failed = [c for c in r["calls"] if not c["ok"]]
    assert failed, "the understated model did not make FlashInfer overflow (nothing tested)"
    assert "Buffer overflow" in (failed[0].get("error") or "")
    assert r["errors"] == [], r["errors"][:2]
    net = run.lines("workspace")
    net = [ln for ln in net if "safety net" in ln]
    assert len(net) == 1 and "plan retried" in net[0], run.guard_lines
    largest = max(c["float_bytes"] for c in r["calls"] if c["ok"])
    assert r["workspace_bytes"] < largest <= r["workspace_bytes_after"]  # grown in place, same tensor
    assert r["calls"][-1]["ok"]


# ---------------------------------------------------------------- EAGLE topk > 1 (issue 17)

def test_eagle_topk_draft_decode_through_sglangs_own_draft_backend():
    """Llama-3.1-8B's attention (32/8/128), --cuda-graph-max-bs 64 --speculative-eagle-topk 8
    --speculative-num-draft-tokens 8, under FLASHINFER_GUARD_WORKSPACE=exact: SGLang's own
    FlashInferMultiStepDraftBackend plans topk x bs = 512 decode requests per draft step at
    capture. The guard sizes the draft runner's backends for them (it sized 39.8 MiB, the
    target's need, where the draft steps plan 40.2 MiB on FlashInfer 0.7.2): no draft plan
    overflows, and the draft need is the largest real draft plan within 1 MiB."""
    run = realcalls(env={"FLASHINFER_GUARD_WORKSPACE": "exact"}, model="llama8b", draft_tokens=8, topk=8,
                    draft_steps=3, max_bs=64, phases=["capture"])
    r = run.result
    d = r["draft"]
    assert r["errors"] == [] and d["errors"] == [], (r["errors"][:1], d["errors"][:1])
    calls = d["calls"]
    assert calls and all(c["batch_size"] == 8 * c["batch"] for c in calls), calls[:1]
    real = max(c["float_bytes"] for c in calls)
    pred = d["prediction"]
    assert pred is not None and real <= pred["float_bytes"] <= real + MIB, (pred["float_bytes"], real)
    assert d["workspace_bytes"] >= real
    assert all(c["ok"] for c in calls)
    if r["prediction"]["fi_version"] == "0.7.2":  # the report's numbers, FlashInfer 0.7.2
        assert real == 42204672  # 40.2 MiB
