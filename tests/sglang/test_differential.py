"""The differential search on this SGLang line (issue 17): generated deployments (published
model shapes per TP rank, KV dtype, context length, --cuda-graph-max-bs, EAGLE with topk 1 or
> 1, GPU) run through SGLang's own backend, capture path and, for EAGLE topk > 1, its own
multi-step draft backend, with FlashInfer's real planner; eager batches are the guard's
witnesses plus an independent random + greedy search. Each is compared with the guard in
both directions (tests/differential/compare.py sglang_findings): no overflow, never below the
largest real plan, never more than 1 MiB above it, no call on an unpredicted planner.

FLASHINFER_GUARD_DIFF_N deployments per line (default 2), seed FLASHINFER_GUARD_DIFF_SEED.
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

from tests.differential.compare import sglang_findings  # noqa: E402
from tests.differential.space import sglang_cases, sglang_launch_command  # noqa: E402

SEED = int(os.environ.get("FLASHINFER_GUARD_DIFF_SEED", "17"))
N = int(os.environ.get("FLASHINFER_GUARD_DIFF_N", "2"))
LINE = f"sglang-{md.version('sglang')}"
CASES = sglang_cases(SEED, N)


@pytest.mark.parametrize("opts", CASES, ids=[f"gen{SEED}_{i}" for i in range(len(CASES))])
def test_differential_generated_deployment(opts):
    from test_realcalls import realcalls

    run_opts = {k: v for k, v in opts.items() if k != "source"}
    r = realcalls(phases=["capture", "eager"], **run_opts).result
    found = sglang_findings(r)
    calls = len(r["calls"]) + len((r.get("draft") or {}).get("calls") or [])
    real = max([c["float_bytes"] for c in r["calls"]] + [c["float_bytes"] for c in (r.get("draft") or {}).get("calls") or []])
    print(f"\n{sglang_launch_command(opts, LINE)}: {calls} planning calls, real largest {real} B, "
          f"guard {r['prediction'] and r['prediction'].get('float_bytes')} B")
    assert calls > 0
    assert not found, sglang_launch_command(opts, LINE) + " | " + "; ".join(f"{k}: {d}" for k, d in found)
