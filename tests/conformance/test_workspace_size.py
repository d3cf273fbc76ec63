"""FlashInfer's own size-only planner against guard_core's mirror, on the conformance grid (issue 27
item 5).

From 0.6.15 (FlashInfer PR #3741) ``scheduler.cuh`` has ``PrefillPlanWorkspaceSize``: the float and
int workspace a ``PrefillPlan`` with the same inputs needs, without a buffer. It is what the paged
prefill wrapper's ``workspace_size(...)`` (and the tensor-core decode wrapper's) returns, through
``csrc/batch_prefill.cu`` ``BatchPrefillWithKVCacheWorkspaceSize``. The oracle compiles it from each
release's headers (harness.cu, planner ``prefill_workspace_size``); every FA2 prefill request of
the grid is asked again that way and the answer must equal guard_core's mirror
(``guard_core.flashinfer.planner.run_planner``) byte for byte, float and int. Releases without it
must say so (the header does not have it, and the harness answers that it is absent).
"""

from __future__ import annotations

import copy

import pytest

from . import grid, oracle

RELEASES = oracle.selected_releases()


@pytest.mark.parametrize("version", RELEASES)
def test_size_only_planner_equals_the_mirror(version):
    from guard_core.flashinfer.planner import run_planner

    has = oracle.signature_features(version)["workspace_size"]
    reqs = [r for r in grid.make_grid(version) if r["planner"] == "prefill"]
    assert len(reqs) > 200
    asks = [dict(r, planner="prefill_workspace_size", id=r["id"] + ":ws") for r in reqs]
    replies = oracle.run_binary(oracle.build(version), asks)
    if not has:
        # 0.5.0 - 0.6.14: no size-only planner in this release's scheduler.cuh
        assert all(not r["ok"] and "no PrefillPlanWorkspaceSize" in r["error"] for r in replies)
        return
    diffs, equal, sized = [], 0, 0
    for req, rep in zip(reqs, replies):
        got = run_planner(version, "prefill", copy.deepcopy(req["params"]))
        if not rep["ok"]:
            # FlashInfer's size-only planner refuses what its planner refuses (an invalid batch)
            if got.get("ok"):
                diffs.append((req["id"], f"FlashInfer: {rep['error']}", f"mirror: {got['float_bytes']} B"))
            continue
        sized += 1
        want = (rep["float_workspace_size"], rep["int_workspace_size"])
        mine = (got.get("float_bytes"), got.get("int_bytes")) if got.get("ok") else (None, None)
        if want == mine:
            equal += 1
        else:
            diffs.append((req["id"], f"FlashInfer workspace_size {want}", f"mirror {mine}",
                          oracle.describe_request(req)))
    assert sized > 200
    assert not diffs, f"FlashInfer {version}: {equal}/{sized} equal; first differences: {diffs[:5]}"
