"""FlashInfer's real planner on a real GPU vs guard_core's model (run by ci/gpu_planner_check.sh).

1. Builds tests/conformance/harness.cu for one FlashInfer release twice: WITHOUT stubs (real CUDA
   runtime; the CUDA-core decode planner's occupancy comes from the driver for FlashInfer's real
   decode kernel, compiled from the release's decode.cuh for this GPU) and with the stubs the
   CPU conformance suite uses.
2. Reads the device (SM count, compute capability, shared-memory limits) from the real build,
   and the decode kernel's blocks per SM for every (head_dim, GQA group) the grid uses.
3. Runs the conformance grid (seeds included) with those device values through
   (a) the real-CUDA harness, (b) the stubbed harness, (c) guard_core.flashinfer.planner.run_planner,
   and prints: N requests, N equal real-vs-stub, N equal real-vs-model, the first differences.
Exit status 0 only when everything is equal.
"""

from __future__ import annotations

import copy
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.conformance import grid, oracle  # noqa: E402


def main(version: str) -> int:
    t0 = time.time()
    print(f"[gpu-planner-check] FlashInfer {version}; cache {oracle.cache_root()}", flush=True)
    oracle.fetch(version)
    bins = {}
    import concurrent.futures as cf

    dry = os.environ.get("FIG_GPU_CHECK_DRY_RUN") == "1"  # no GPU: stubbed build stands in
    with cf.ThreadPoolExecutor(2) as ex:
        fr = ex.submit(oracle.build, version, not dry)
        fs = ex.submit(oracle.build, version, False)
        bins["real"], bins["stub"] = fr.result(), fs.result()
    if dry:
        print("[gpu-planner-check] DRY RUN: the stubbed harness stands in for the real-CUDA one")
    print(f"[gpu-planner-check] built real-CUDA and stubbed harnesses in {time.time() - t0:.0f}s",
          flush=True)

    dev = oracle.run_binary(bins["real"], [{"id": "dev", "planner": "device_info", "params": {}}])[0]
    device = {k: dev[k] for k in ("num_sms", "cc_major", "cc_minor", "max_smem_per_sm",
                                  "max_smem_per_block_optin")}
    print(f"[gpu-planner-check] device: {device}", flush=True)

    reqs = []
    dropped = 0
    for r in grid.make_grid(version):
        r = copy.deepcopy(r)
        p = r["params"]
        if r["planner"] == "decode" and p["head_dim"] not in (64, 128, 256):
            dropped += 1  # the real-CUDA build instantiates the decode kernel for 64/128/256 only
            continue
        p.update(device)
        reqs.append(r)

    # Occupancy of the real decode kernel, per (head_dim, group), handed to the stub and model.
    keys = sorted({(r["params"]["head_dim"], r["params"]["num_qo_heads"] //
                    max(1, r["params"]["num_kv_heads"]))
                   for r in reqs if r["planner"] == "decode"})
    occ_reqs = [{"id": f"occ_{d}_{g}", "planner": "decode_occupancy",
                 "params": {"head_dim": d, "num_qo_heads": g, "num_kv_heads": 1}}
                for d, g in keys]
    occ = {}
    for (d, g), rep in zip(keys, oracle.run_binary(bins["real"], occ_reqs)):
        occ[(d, g)] = rep.get("blocks_per_sm", -1)
    print(f"[gpu-planner-check] decode kernel blocks/SM (head_dim, group) -> n: {occ}", flush=True)
    for r in reqs:
        if r["planner"] == "decode":
            p = r["params"]
            n = occ.get((p["head_dim"], p["num_qo_heads"] // max(1, p["num_kv_heads"])), -1)
            p["blocks_per_sm"] = n if n > 0 else 1

    real = oracle.run_binary(bins["real"], [dict(r, verify=True) for r in reqs])
    stub = oracle.run_binary(bins["stub"], reqs)

    try:
        from guard_core.flashinfer import planner as flashinfer_model
        run_planner = flashinfer_model.run_planner
    except Exception as e:  # noqa: BLE001
        run_planner = None
        print(f"[gpu-planner-check] guard_core.flashinfer.planner.run_planner unavailable: {e}")

    n_stub = n_model = 0
    stub_diffs, model_diffs = [], []
    for req, ref, st in zip(reqs, real, stub):
        d = oracle.compare_reply(ref, st, "real-CUDA", "stubbed")
        if d:
            stub_diffs.append((req, d))
        else:
            n_stub += 1
        if run_planner is not None:
            try:
                got = run_planner(version, req["planner"], copy.deepcopy(req["params"]))
            except Exception as e:  # noqa: BLE001
                got = {"ok": False, "error": f"model raised {type(e).__name__}: {e}"}
            d = oracle.compare_reply(ref, got, "FlashInfer(real CUDA)", "model")
            if d:
                model_diffs.append((req, d))
            else:
                n_model += 1

    by_id = {r["id"]: rep for r, rep in zip(reqs, real)}
    for sid in ("seed_vllm_qwen35", "seed_sglang_qwen3vl"):
        rep = by_id.get(sid)
        if rep and rep.get("ok"):
            fl = [(a["name"], a["bytes"]) for a in rep["allocations"] if a["buffer"] == "float"]
            print(f"[gpu-planner-check] {sid}: float {rep['float_bytes']} int {rep['int_bytes']} "
                  f"{fl}")
        else:
            print(f"[gpu-planner-check] {sid}: {rep}")

    print(f"[gpu-planner-check] {len(reqs)} requests ({dropped} decode requests with head dims "
          f"the real build does not instantiate left out)")
    print(f"[gpu-planner-check] real-CUDA vs stubbed harness: {n_stub} equal, "
          f"{len(stub_diffs)} differ")
    if run_planner is not None:
        print(f"[gpu-planner-check] real-CUDA vs guard_core model: {n_model} equal, "
              f"{len(model_diffs)} differ")
    for title, diffs in (("stub", stub_diffs), ("model", model_diffs)):
        for req, d in diffs[:5]:
            print(f"  [{title}] {req['id']}: {oracle.describe_request(req)}")
            for line in d:
                print(f"      {line}")
    print(f"[gpu-planner-check] done in {time.time() - t0:.0f}s")
    ok = not stub_diffs and not model_diffs and run_planner is not None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
