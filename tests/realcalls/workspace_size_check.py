"""FlashInfer's ``workspace_size(...)`` (PR #3741) through its real Python wrappers and the planner
stand-in, against guard_core's mirror and against ``plan()`` (issue 27 item 5).

    python tests/realcalls/workspace_size_check.py [N]

For N FA2 prefill requests of the conformance grid (tests/conformance/grid.py; no CUDA-graph
wrapper, no window, FP16/BF16 KV) on their GPUs: FlashInfer's ``BatchPrefillWithPagedKVCacheWrapper``
(the installed release's Python code) asked ``workspace_size(...)``, which reaches the compiled
module's size-only planner (the stand-in runs FlashInfer's own ``PrefillPlanWorkspaceSize``); then
``plan(...)`` with the same inputs (FlashInfer's ``PrefillPlan``, its allocation total recorded by
the stand-in); and guard_core's mirror (``guard_core.flashinfer.planner.run_planner``). Prints one
``RESULT {json}``: whether the wrapper has the method, and per request the three float sizes.
"""

from __future__ import annotations

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, REPO)


def main(n: int) -> dict:
    import importlib.metadata as md

    import torch

    from tests.conformance import grid
    from tests.realcalls import standin

    version = md.version("flashinfer-python")
    rec = standin.install("NVIDIA H100 80GB HBM3", 132, (9, 0))
    import flashinfer

    W = flashinfer.BatchPrefillWithPagedKVCacheWrapper
    out = {"flashinfer": version, "has_workspace_size": hasattr(W, "workspace_size"), "rows": []}
    if not out["has_workspace_size"]:
        return out
    from guard_core.flashinfer.planner import run_planner

    reqs = [r for r in grid.make_grid(version) if r["planner"] == "prefill"
            and not r["params"]["enable_cuda_graph"] and r["params"]["window_left"] < 0
            and r["params"]["head_dim_qk"] == r["params"]["head_dim_vo"] and r["params"]["head_dim_qk"] in (64, 128, 256)
            and r["params"]["fixed_split_size"] < 0 and not r["params"]["disable_split_kv"]
            and r["params"].get("kv_dtype_bytes", 2) == 2 and not r["params"].get("num_colocated_ctas")
            and r["params"]["total_num_rows"] == r["params"]["qo_indptr"][-1]]
    for req in reqs[:n]:
        p = req["params"]
        # the request's GPU for this call (the stand-in's device answers)
        st = standin.installed()
        st.gpu.num_sms, st.gpu.cc = int(p["num_sms"]), (int(p["cc_major"]), int(p["cc_minor"]))
        ws = torch.empty(1 << 30, dtype=torch.uint8)
        w = W(ws, "NHD", backend="fa2")
        qo = torch.tensor(p["qo_indptr"], dtype=torch.int32)
        kv = torch.tensor(p["kv_indptr"], dtype=torch.int32)
        bs = int(p["batch_size"])
        idx = torch.arange(int(kv[-1]), dtype=torch.int32)
        last = torch.full((bs,), int(p["page_size"]), dtype=torch.int32)
        args = (qo, kv, idx, last, int(p["num_qo_heads"]), int(p["num_kv_heads"]), int(p["head_dim_qk"]),
                int(p["page_size"]))
        kw = dict(causal=True, q_data_type=torch.bfloat16, kv_data_type=torch.bfloat16)
        row = {"id": req["id"]}
        try:
            row["workspace_size"] = list(w.workspace_size(*args, **kw))
        except Exception as e:  # reported, the test fails on it
            row["workspace_size_error"] = f"{type(e).__name__}: {e}"
        n0 = len(rec.calls)
        try:
            w.plan(*args, **kw)
        except Exception as e:
            row["plan_error"] = f"{type(e).__name__}: {e}"
        calls = rec.calls[n0:]
        row["plan"] = [calls[-1].get("float_bytes"), calls[-1].get("int_bytes")] if calls else None
        # the mirror with what the wrapper passed to the planner (its own total_num_rows, causal)
        params = dict(p)
        if calls:
            params["total_num_rows"] = int(calls[-1].get("total_num_rows") or p["total_num_rows"])
        got = run_planner(version, "prefill", params)
        row["mirror"] = [got.get("float_bytes"), got.get("int_bytes")] if got.get("ok") else got.get("error")
        out["rows"].append(row)
    return out


if __name__ == "__main__":
    res = main(int(sys.argv[1]) if len(sys.argv) > 1 else 200)
    print("RESULT " + json.dumps(res), flush=True)
