"""Byte-for-byte conformance of guard_core's planner model with FlashInfer's real planner code.

For each FlashInfer release in ``oracle.RELEASES`` (or, in ci/matrix.sh, the one line's installed
FlashInfer named by $FLASHINFER_GUARD_CONFORMANCE_RELEASES) the oracle (``oracle.py``) downloads the
``flashinfer-python`` wheel, extracts its headers and compiles FlashInfer's own host planners
(``PrefillPlan``, ``DecodePlan`` with the real ``BatchDecodeWithPagedKVCacheWorkEstimationDispatched``,
``PrefillSM90Plan`` from ``include/flashinfer/attention/scheduler.cuh``) into a host program with
the CUDA runtime stubbed (SM count, compute capability, shared-memory limits and the decode
kernel's occupancy come from each request). The grid (``grid.py``, > 1,000 requests per release)
then runs through the oracle and through ``guard_core.flashinfer.planner.run_planner``; ok/error,
``float_bytes``, ``int_bytes`` and the whole allocation list (name, buffer, bytes, alignment,
offset, in call order) must be equal for every request.

Every oracle request also runs in "verify" mode: each allocation is re-planned with its buffer one
byte too small and FlashInfer's own overflow message must name that allocation with the same
size and alignment, so the oracle itself is checked against FlashInfer's allocator on every
request. The two production seeds are asserted against the oracle directly.

Nothing here skips: a missing nvcc, a failed download or a missing model module is a failure.
"""

from __future__ import annotations

import copy
import importlib

import pytest

from guard_core.flashinfer import releases

from . import grid, oracle

RELEASES = oracle.selected_releases()


def _old_formula(version: str) -> bool:
    """Before PR #5177 (FlashInfer 0.7.1): split-KV scratch sized by packed rows."""
    return not releases.has(version, "rows_by_query")


_replies: dict[str, list[dict]] = {}
_grids: dict[str, list[dict]] = {}


@pytest.fixture(scope="session")
def harness_binaries():
    # One nvcc process per release, in parallel (cached by version + harness hash); then the
    # grid through every release's harness, also in parallel (one process per release).
    bins = oracle.build_many(RELEASES)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(RELEASES)) as ex:
        list(ex.map(_oracle_replies, RELEASES))
    return bins


def _oracle_replies(version: str) -> tuple[list[dict], list[dict]]:
    if version not in _replies:
        reqs = grid.make_grid(version)
        _grids[version] = reqs
        _replies[version] = oracle.run_oracle(version, reqs, verify=True)
    return _grids[version], _replies[version]


def _load_model():
    try:
        return importlib.import_module("guard_core.flashinfer.planner")
    except Exception as e:  # noqa: BLE001 - any import failure is a failure of the product
        pytest.fail(f"guard_core.flashinfer.planner cannot be imported ({type(e).__name__}: {e}); "
                    "the conformance suite needs run_planner(version, planner, params)")


def test_grid_is_large_and_deterministic():
    a = grid.make_grid("0.7.4")
    b = grid.make_grid("0.7.4")
    assert a == b
    assert len(a) >= 1000
    planners = {r["planner"] for r in a}
    assert planners == {"prefill", "decode", "sm90"}


@pytest.mark.parametrize("version", RELEASES)
def test_oracle_seeds(version, harness_binaries):
    """The two production crashes, straight from FlashInfer's own planner (checks the oracle)."""
    reqs, reps = _oracle_replies(version)
    by_id = {r["id"]: r for r in reps}
    for sid in grid.SEED_EXPECT_OLD:
        rep = by_id[sid]
        assert rep["ok"], rep
        allocs = [(a["name"], a["bytes"]) for a in rep["allocations"] if a["buffer"] == "float"]
        if _old_formula(version):
            want = list(grid.SEED_EXPECT_OLD[sid].items())
            assert allocs[: len(want)] == want, (sid, allocs)
        else:
            assert rep["float_bytes"] == grid.SEED_EXPECT_NEW_FLOAT_TOTAL[sid], (sid, rep)
    if _old_formula(version):
        # vLLM Qwen3.5: tmp_v alone overflows vLLM's 394 MiB (413138944-byte) default buffer.
        assert grid.SEED_EXPECT_OLD["seed_vllm_qwen35"]["batch_prefill_tmp_v"] > 413138944
        # SGLang Qwen3-VL-32B: tmp_v fits the 384 MiB buffer with 524288 bytes left, tmp_s not.
        sg = {a["name"]: a for a in by_id["seed_sglang_qwen3vl"]["allocations"]}
        assert 402653184 - (sg["batch_prefill_tmp_v"]["offset"] +
                            sg["batch_prefill_tmp_v"]["bytes"]) == 524288
        assert sg["batch_prefill_tmp_s"]["bytes"] > 524288


@pytest.mark.parametrize("version", RELEASES)
def test_oracle_deterministic_reports(version, harness_binaries):
    """SGLang deterministic inference's two public reports, straight from FlashInfer's own
    planner (the numbers are the reports', not the model's): before PR #5177 the GB10 prompt
    of 8192 tokens asks 2,415,919,104 bytes of tmp_v and the H200 Qwen3-Next one fills the
    2 GiB exactly with tmp_v, leaving 0 bytes for the 8,388,608-byte tmp_s; from 0.7.1 the
    GB10 deployment fits 2 GiB up to 10 KV chunks of 4096 (40,960 tokens) and not at 11."""
    reqs, reps = _oracle_replies(version)
    by_id = {r["id"]: r for r in reps}

    def floats(rid):
        rep = by_id[rid]
        assert rep["ok"], rep
        return {a["name"]: a for a in rep["allocations"] if a["buffer"] == "float"}

    gb10, h200 = floats("det_gb10_report"), floats("det_h200_qwen3next_report")
    if _old_formula(version):
        assert gb10["batch_prefill_tmp_v"]["bytes"] == grid.DET_GB10_TMP_V
        v, s = h200["batch_prefill_tmp_v"], h200["batch_prefill_tmp_s"]
        assert v["offset"] + v["bytes"] == grid.DET_FORCED  # 0 bytes left for tmp_s
        assert s["bytes"] == grid.DET_H200_TMP_S
    else:
        assert by_id["det_gb10_q8192_kv40960"]["float_bytes"] <= grid.DET_FORCED
        assert by_id["det_gb10_q8192_kv40961"]["float_bytes"] > grid.DET_FORCED
        assert gb10["batch_prefill_tmp_v"]["bytes"] < grid.DET_FORCED
    # CUDA-graph decode with disable_split_kv plans no float scratch at any batch
    for bs in (1, 64, 256, 512):
        assert by_id[f"det_gb10_graph_decode_b{bs}"]["float_bytes"] == 0


@pytest.mark.parametrize("version", RELEASES)
def test_planner_conformance(version, harness_binaries, record_testsuite_property):
    reqs, reps = _oracle_replies(version)
    record_testsuite_property(f"requests {version}", len(reqs))  # ci/matrix_report.py prints it
    model = _load_model()
    run_planner = getattr(model, "run_planner", None)
    assert callable(run_planner), "guard_core.flashinfer.planner.run_planner is missing"
    diffs = []
    equal = 0
    for req, ref in zip(reqs, reps):
        try:
            got = run_planner(version, req["planner"], copy.deepcopy(req["params"]))
        except Exception as e:  # noqa: BLE001 - report like an error reply
            got = {"ok": False, "error": f"model raised {type(e).__name__}: {e}"}
        problems = oracle.compare_reply(ref, got)
        if problems:
            diffs.append((req, problems))
        else:
            equal += 1
    if diffs:
        lines = [f"FlashInfer {version}: {len(reqs)} requests, {equal} equal, "
                 f"{len(diffs)} differ. First differences:"]
        for req, problems in diffs[:6]:
            lines.append(f"- {req['id']}: {oracle.describe_request(req)}")
            lines.extend(f"    {p}" for p in problems)
        pytest.fail("\n".join(lines), pytrace=False)
