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

# vLLM line -> sha256 (first 16 hex) of ast.dump(GPUModelRunner._dummy_run) in v1/worker/gpu_model_runner.py
DUMMY_RUN_AST = {
    "0.23.0": "e381166598107bc0",
    "0.32.0": "79504b5ebd7a8ac5",
    "0.33.0": "79504b5ebd7a8ac5",
}


def dummy_run_hash() -> str:
    root = os.path.dirname(importlib.util.find_spec("vllm").origin)
    with open(os.path.join(root, "v1", "worker", "gpu_model_runner.py")) as f:
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
