"""Issue 27 (found by the widened differential space): SGLang's FlashInfer backend plans with page
size 1 whatever ``--page-size`` says (it flattens its pages into token indices: flashinfer_backend.py
0.5.5:1071,1090,1379; 0.5.11:1174,1193,1491; 0.5.23:1847,1866,2403). The guard sized with the
server's page size: under ``--page-size 64`` its eager witness was 66 pages where FlashInfer plans
4,224 tokens, and the witness batch, run through SGLang's backend, did not reach the guard's number
(``[sglang-0.5.11, l40s] --model Qwen/Qwen3-30B-A3B --page-size 64 --disable-cuda-graph
--max-running-requests 1024``: over by 2,113,536 B). Now the guard sizes page 1
(guard_core.deployment.sglang_defaults.SGLANG_FLASHINFER_PAGE), in the adapter and in ``plan``.

Run through SGLang's own ServerArgs resolution, backend and FlashInfer's real planner (stand-ins:
tests/sglang/realcalls_scenarios.py)."""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from tests.differential.compare import sglang_findings, sglang_search_stats  # noqa: E402

OPTS = {"model_shape": [32, 4, 128], "resolve": True, "tp_size": 1, "kv": "auto", "context": 8192, "kv_width": 8256,
        "gpu": "l40s", "search": 20, "seed": 2027029, "max_running_requests": 1024, "disable_cuda_graph": True,
        "page_size": 64}


def test_page_size_64_is_sized_as_flashinfer_plans_it():
    from test_realcalls import realcalls

    r = realcalls(**OPTS).result
    assert r["resolved"]["graphs_off"] and r["calls"]
    # every plan SGLang made has KV lengths in tokens (last page 1)
    witness = [w for s in r["prediction"]["scenarios"] if s["name"] == "eager_prefill" for w in s["witness"]]
    assert witness and max(p for _q, p, _c in witness) > 4096, witness  # tokens, not 64-token pages
    rows = sglang_search_stats(r)
    assert all(x["witness_ok"] for x in rows), rows
    assert not sglang_findings(r), sglang_findings(r)
