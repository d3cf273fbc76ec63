"""The differential search on this SGLang line (issue 17): generated deployments (published
model shapes per TP rank, KV dtype, context length, --cuda-graph-max-bs, EAGLE with topk 1 or
> 1, GPU) run through SGLang's own backend, capture path and, for EAGLE topk > 1, its own
multi-step draft backend, with FlashInfer's real planner; eager batches are the guard's
witnesses plus the independent worst-case search of tests/differential/search.py (grid, then
random restarts and hill-climbing). Each is compared with the guard in both directions
(tests/differential/compare.py sglang_findings): no overflow, never below the largest real
plan, never more than 1 MiB above it, no call on an unpredicted planner. Issue 27: the
guard's witnesses (with the graphs) must reach its number, and an injected gap (the guard
right about a shrunk copy of its witness, blind to the worse batches) is found by the search
alone.

FLASHINFER_GUARD_DIFF_N deployments per line (default 1; ci/matrix.sh draws 4), seed FLASHINFER_GUARD_DIFF_SEED.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.differential.__main__ import summarize  # noqa: E402
from tests.differential.compare import sglang_findings, sglang_search_stats  # noqa: E402
from tests.differential.space import (sglang_cases, sglang_deterministic_cases,  # noqa: E402
                                      sglang_launch_command)
from tests.differential.space_sglang import sglang_wide_cases, sglang_wide_launch_command  # noqa: E402

SEED = int(os.environ.get("FLASHINFER_GUARD_DIFF_SEED", "17"))
N = int(os.environ.get("FLASHINFER_GUARD_DIFF_N", "1"))
LINE = f"sglang-{md.version('sglang')}"
# issue 27 item 4: the widened space (SGLang resolves each deployment on the table GPU itself);
# FLASHINFER_GUARD_DIFF_SPACE=narrow draws the space of before (per-rank shapes, one H200 launch)
NARROW = os.environ.get("FLASHINFER_GUARD_DIFF_SPACE") == "narrow"
CASES = sglang_cases(SEED, N) if NARROW else sglang_wide_cases(SEED, N)
_launch = sglang_launch_command if NARROW else sglang_wide_launch_command
if os.environ.get("FLASHINFER_GUARD_DIFF_SEARCH"):  # evaluations of the worst-case search (ci/matrix.sh: 800)
    CASES = [dict(c, search=int(os.environ["FLASHINFER_GUARD_DIFF_SEARCH"])) for c in CASES]
DET_CASES = sglang_deterministic_cases(SEED, N)


@pytest.mark.parametrize("opts", CASES, ids=[f"gen{SEED}_{i}" for i in range(len(CASES))])
def test_differential_generated_deployment(opts):
    from test_realcalls import realcalls

    run_opts = {k: v for k, v in opts.items() if k != "source"}
    r = realcalls(phases=["capture", "eager"], inject=True, draft_eager=True, **run_opts).result
    # the draft's eager batches are replayed through SGLang's multi-step draft backend and (issue
    # 27) its draft-extend backend (realcalls_scenarios._draft_extend): the whole draft envelope is
    # compared in both directions
    found = sglang_findings(r)
    calls = len(r["calls"]) + len((r.get("draft") or {}).get("calls") or [])
    real = max([c["float_bytes"] for c in r["calls"]] + [c["float_bytes"] for c in (r.get("draft") or {}).get("calls") or []])
    rows = sglang_search_stats(r)
    print(f"\n{_launch(opts, LINE)}: {calls} planning calls, real largest {real} B, "
          f"guard {r['prediction'] and r['prediction'].get('float_bytes')} B; " + summarize(rows))
    assert calls > 0
    again = ("python tests/sglang/realcalls_scenarios.py run "
             f"'{json.dumps(dict(run_opts, phases=['capture', 'eager'], inject=True, draft_eager=True))}'")
    assert not found, _launch(opts, LINE) + " | " + "; ".join(f"{k}: {d}" for k, d in found) + \
        " | rerun: " + again
    assert (r.get("search") or {}).get("evaluations"), "the worst-case search did not run"
    assert all(x["witness_ok"] for x in rows), rows
    assert not [x for x in rows if x.get("injected") and not x["found_after"]], rows


@pytest.mark.parametrize("opts", DET_CASES, ids=[f"det{SEED}_{i}" for i in range(len(DET_CASES))])
def test_differential_deterministic_deployment(opts):
    """--enable-deterministic-inference (issue 19): the same two-way comparison; where the guard
    says the need is not affordable, its stated longest prompt is what FlashInfer's planner plans
    in the guard's buffer (an overflow only past it)."""
    import re

    from test_realcalls import realcalls

    run_opts = {k: v for k, v in opts.items() if k not in ("source", "env")}
    r = realcalls(env=opts["env"] or None, phases=["capture", "det"], **run_opts).result
    cmd = sglang_launch_command(opts, LINE) + " --enable-deterministic-inference " + " ".join(
        f"{k}={v}" for k, v in opts["env"].items())
    assert r["calls"] and r["prediction"], cmd
    dec = r["prediction"].get("decision") or {}
    if dec.get("action") == "limit":
        longest = int(re.search(r"prompts up to ([0-9,]+) tokens", dec["text"]).group(1).replace(",", ""))
        for c in r["calls"]:
            if c["phase"] == "fixed_split_prefill" and c.get("prompt", 0) <= longest:
                assert c["float_bytes"] <= r["workspace_bytes"], cmd
        return
    found = sglang_findings(r)
    real = max(c["float_bytes"] for c in r["calls"])
    print(f"\n{cmd}: {len(r['calls'])} planning calls, real largest {real} B, guard {r['prediction']['float_bytes']} B")
    assert not found, cmd + " | " + "; ".join(f"{k}: {d}" for k, d in found)
