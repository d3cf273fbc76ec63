"""The capture loop of tests/vllm/realcalls_scenarios.py is a replica of vLLM's
``GPUModelRunner._dummy_run`` request counting (``dummy_run_batch``: cdiv requests for a uniform
decode, the remainder in the last request, every seq len ``max_query_len``, padded requests
empty; each rule cited per line there). A replica is only right while the real function is the
one it was read from: this test holds the AST of the installed line's ``_dummy_run`` to the hash
it had when the replica was written (read from the wheel's source with ``ast``, vLLM not
imported). When it fails, re-read ``_dummy_run`` at that line, update ``dummy_run_batch`` and its
citations, then the hash here.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata as md
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)

# A function the line does not have (vLLM 0.34.0 removed Model Runner V1: no
# v1/worker/gpu_model_runner.py, no VllmConfig.use_v2_model_runner; its worker builds V2 alone,
# v1/worker/gpu_worker.py 0.34.0:583-590): its replica is not used there (gpu_host_runner says "v2").
ABSENT = "absent"

# vLLM line -> sha256 (first 16 hex) of ast.dump(GPUModelRunner._dummy_run) in v1/worker/gpu_model_runner.py
DUMMY_RUN_AST = {
    "0.23.0": "e381166598107bc0",
    "0.32.0": "79504b5ebd7a8ac5",
    "0.33.0": "79504b5ebd7a8ac5",
    "0.34.0": ABSENT,
}


def dummy_run_hash() -> str:
    root = os.path.dirname(importlib.util.find_spec("vllm").origin)
    path = os.path.join(root, "v1", "worker", "gpu_model_runner.py")
    if not os.path.exists(path):
        return ABSENT
    with open(path) as f:
        tree = ast.parse(f.read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "GPUModelRunner":
            for fn in node.body:
                if isinstance(fn, ast.FunctionDef) and fn.name == "_dummy_run":
                    return hashlib.sha256(ast.dump(fn, include_attributes=False).encode()).hexdigest()[:16]
    raise AssertionError("GPUModelRunner._dummy_run not found")


def test_dummy_run_is_the_function_the_replica_copies():
    line = md.version("vllm")
    if line not in DUMMY_RUN_AST:
        pytest.fail(f"vLLM {line}: no committed _dummy_run hash; read its request counting, check "
                    f"realcalls_scenarios.dummy_run_batch, and add the line (hash {dummy_run_hash()})")
    assert dummy_run_hash() == DUMMY_RUN_AST[line], (
        f"vLLM {line}: GPUModelRunner._dummy_run changed; re-check realcalls_scenarios.dummy_run_batch")


def test_dummy_run_batch_counts_as_vllm_does():
    """The replica on the cases the cited lines distinguish (expected values read off vLLM's code)."""
    from realcalls_scenarios import dummy_run_batch

    # uniform decode, 4-token verifies, 10 tokens: cdiv(10, 4) = 3 requests, the last of 2 tokens
    assert dummy_run_batch(10, True, 4, 512, None) == ([4, 4, 2], [4, 4, 4])
    # padded to the descriptor's 4 requests with empty ones (no query, seq len 0)
    assert dummy_run_batch(8, True, 4, 2, 4) == ([4, 4, 0, 0], [4, 4, 0, 0])
    # mixed (non-uniform) FULL capture: min(num_tokens, max_num_seqs) requests, seq len num_tokens
    assert dummy_run_batch(7, False, 1, 3, None) == ([2, 2, 3], [7, 7, 7])


# --- Model Runner V2 (issue 27: the default runner on a GPU host for the lines and models
# realcalls_scenarios.gpu_host_runner names): the harness calls V2's own ``CudaGraphManager``
# (its ``_init_candidates`` makes the capture descriptors) and ``InputBatch.make_dummy`` (the dummy
# batch); what stays a replica (realcalls_scenarios.v2_capture_batches / capture_v2 /
# resolve_cudagraphs) is held here to the AST each function had when it was read. When one
# fails, re-read that function at that line, update the replica and its citations, then the hash.

def _fn_hash(relpath: str, cls: str | None, name: str) -> str:
    """The function's AST hash, or ABSENT where the line has no such file, class or function."""
    root = os.path.dirname(importlib.util.find_spec("vllm").origin)
    path = os.path.join(root, *relpath.split("/"))
    if not os.path.exists(path):
        return ABSENT
    with open(path) as f:
        tree = ast.parse(f.read())
    scope = tree.body
    if cls is not None:
        scope = next((n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls), [])
    fn = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name), None)
    if fn is None:
        return ABSENT
    return hashlib.sha256(ast.dump(fn, include_attributes=False).encode()).hexdigest()[:16]


# (file under vllm/, class, function): what the replica copies from it
V2_FUNCTIONS = {
    # the capture order: PIECEWISE then FULL, largest first, warm-up and capture passes
    ("v1/worker/gpu/cudagraph_utils.py", "CudaGraphManager", "capture"): "capture order, passes",
    # create_forward_fn: num_reqs = desc.num_reqs or min(num_tokens, max_num_reqs); the max_query_len promise
    ("v1/worker/gpu/cudagraph_utils.py", "ModelCudaGraphManager", "capture"): "request count, promise",
    # make_dummy with the promise; prepare_attn with CUDAGraphMode.NONE and for_capture = FULL
    ("v1/worker/gpu/cudagraph_utils.py", None, "prepare_inputs_to_capture"): "full_cudagraph, max_query_len",
    # unpadded counts, max_query_len, max_seq_len = max_model_len for capture, seq_lens_cpu_upper_bound
    ("v1/worker/gpu/model_states/default.py", "DefaultModelState", "prepare_attn"): "metadata fields",
    # build_for_cudagraph_capture when for capture, else build
    ("v1/worker/gpu/attn_utils.py", None, "build_attn_metadata"): "which build",
    # how V2 calls resolve_cudagraph_mode_and_sizes (realcalls_scenarios.resolve_cudagraphs)
    ("v1/worker/gpu/model_runner.py", "GPUModelRunner", "initialize_kv_cache"): "V2 resolution call",
    # how V1 calls it
    ("v1/worker/gpu_model_runner.py", "GPUModelRunner", "_check_and_update_cudagraph_mode"): "V1 resolution call",
    # the runner a GPU host builds (realcalls_scenarios.gpu_host_runner)
    ("config/vllm.py", "VllmConfig", "use_v2_model_runner"): "runner choice",
}

# vLLM line -> the hashes of V2_FUNCTIONS, in its order
V2_AST = {
    "0.23.0": ["6eda3c5dbff1c9ba", "61a44ceba05e01fb", "1bb489fe65c7fd57", "872b17ce2a3d849e", "0f072d341c944f15",
               "d9ba97d7444d4e77", "8cec8758d9fe6aa2", "823ea94a0d799117"],
    "0.32.0": ["fea4024510869f1b", "3f94bbd07dba19b7", "50dbe1c22acffefd", "c41fb3641bb56d9c", "3222769add16f51b",
               "e5665bd3451730cd", "95c7e52859de1298", "34d05992352e0086"],
    "0.33.0": ["fea4024510869f1b", "542d4ee64dcf83de", "f7d4c23f55b3f76b", "56697fcd76b0c846", "3222769add16f51b",
               "281bfa89a7df5109", "95c7e52859de1298", "bb8c4292b08669b1"],
    # 0.34.0, re-read against 0.33.0 (cudagraph_utils.py 0.34.0:456-550, 662-847, 887-974; attn_utils.py
    # 0.34.0:472-602; gpu/model_runner.py 0.34.0:644-874): capture takes an optional stream; the
    # persistent outputs are sized for the widest graph; LoRA leaves the capture call;
    # prepare_inputs_to_capture may reuse a slot-mapping buffer; build_attn_metadata pads RSWA prefix
    # lengths; the V2 resolution call drops use_v2_model_runner and the graph manager takes
    # decode_query_lens (realcalls_scenarios.resolve_cudagraphs / v2_graph_manager follow both). The
    # request counts, max_query_len promise, for_capture and build choice the replica copies are
    # unchanged. No V1 runner and no runner choice (ABSENT).
    "0.34.0": ["8a8de2ecb8369f22", "7d52a7533de01a41", "7e17008649cf01f7", "56697fcd76b0c846", "e18388088569ebd6",
               "4203432caba918f4", ABSENT, ABSENT],
}


def test_v2_capture_functions_are_the_ones_the_replica_copies():
    line = md.version("vllm")
    now = [_fn_hash(*key) for key in V2_FUNCTIONS]
    if line not in V2_AST:
        pytest.fail(f"vLLM {line}: no committed Model Runner V2 hashes; read the functions of V2_FUNCTIONS, "
                    f"check realcalls_scenarios.v2_capture_batches, and add the line ({now})")
    changed = [f"{key[0]} {key[1] or ''}.{key[2]} ({why})"
               for (key, why), h, want in zip(V2_FUNCTIONS.items(), now, V2_AST[line]) if h != want]
    assert not changed, f"vLLM {line}: changed since the V2 capture replica was read: {changed}"
