"""The differential search on this vLLM line (issue 17): generated deployments run through
vLLM's own config resolution, builders and capture path with FlashInfer's real planner
(tests/vllm/realcalls_scenarios.py ``gen``), the guard's prediction compared with every real
call in both directions (tests/differential/compare.py): no overflow, never below the
largest real plan, never more than 1 MiB above it (what ``exact`` allocates), no predicted
planner that never ran, no call on a planner the guard did not predict.

The default run draws a small seeded sample per line (FLASHINFER_GUARD_DIFF_N deployments on
each of FLASHINFER_GUARD_DIFF_GPUS, seed FLASHINFER_GUARD_DIFF_SEED); ``python -m
tests.differential --n 5000`` runs any size, ci/matrix.sh a larger sample per line.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.differential.__main__ import report, run_vllm  # noqa: E402
from tests.differential.compare import findings  # noqa: E402

SEED = int(os.environ.get("FLASHINFER_GUARD_DIFF_SEED", "17"))
N = int(os.environ.get("FLASHINFER_GUARD_DIFF_N", "2"))
GPUS = os.environ.get("FLASHINFER_GUARD_DIFF_GPUS", "h100,b300").split(",")
LINE = f"vllm-{md.version('vllm')}"


@pytest.mark.parametrize("gpu", GPUS)
def test_differential_generated_deployments(gpu):
    results = run_vllm(gpu, SEED, N)
    assert len(results) == N, [r.get("setup_error") for r in results]
    bad, lines = report(results, LINE)
    calls = sum(len(r.get("calls") or []) for r in results)
    print(f"\n{LINE} {gpu}: {len(results)} deployments, {calls} planning calls, {bad} with findings")
    assert calls > 0
    assert not lines, "\n".join(lines)


def test_compare_finds_each_kind_of_error():
    """The comparison itself: a hand-made record of each kind of error is reported."""
    call = {"tag": "capture:8:b0", "wrapper": "BatchDecodeWithPagedKVCacheWrapper", "backend": "fa2",
            "float_bytes": 10 << 20, "ok": True}
    pre = {"tag": "eager:x:b0", "wrapper": "BatchPrefillWithPagedKVCacheWrapper", "backend": "fa2",
           "float_bytes": 1 << 20, "ok": True}

    def rec(need, planners, calls):
        return {"calls": calls, "prediction": [{"need_bytes": need, "planners": planners}]}

    ok = rec(10 << 20, {"prefill": "fa2", "decode": "fa2"}, [call, pre])
    assert findings(ok) == []
    kinds = lambda r: sorted({k for k, _ in findings(r)})  # noqa: E731
    assert kinds(rec((10 << 20) - 1, {"prefill": "fa2", "decode": "fa2"}, [call, pre])) == ["under"]
    assert kinds(rec((12 << 20), {"prefill": "fa2", "decode": "fa2"}, [call, pre])) == ["over"]
    assert kinds(rec(10 << 20, {"prefill": "fa3", "decode": "fa2"}, [call, pre])) == ["mismatch", "never-ran"]
    assert kinds(rec(10 << 20, {"prefill": "trtllm", "decode": "fa2"}, [call])) == []
    assert kinds(rec(10 << 20, {"prefill": "fa2", "decode": "fa2"}, [call])) == ["never-ran"]
    assert kinds(rec(10 << 20, {"prefill": "fa2", "decode": "fa2"}, [call, pre, dict(pre, ok=False)])) == ["overflow"]
