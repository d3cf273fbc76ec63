"""Issue 27 item 4: the harness's SGLang capture loop (realcalls_scenarios._capture) is a replica of
what SGLang's CUDA-graph runner hands the attention backend for one batch size; it counts
requests as SGLang does: ``bs`` requests, ``bs x num_tokens_per_bs`` tokens (0.5.5
cuda_graph_runner.py:540-702 and 0.5.11:952-1175 ``capture_one_batch_size``: ``num_tokens = bs *
self.num_tokens_per_bs``; 0.5.23 runner/decode_cuda_graph_runner.py:1368-1504
``capture_one_shape``: ``num_tokens = size * self.captured_req_width``, ``bs = size`` outside
ragged verify, then ``capture_prepare`` 1083-1247). The capture sizes themselves are SGLang's own
(``get_batch_sizes_to_capture``), not replicated.

The hash of each real function's AST (``ast.dump``, no line numbers) is committed per line: a
change to it upstream fails here, and the replica must be checked against the new code before the
hash is updated."""

from __future__ import annotations

import importlib.metadata as md
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import realcalls_wide  # noqa: E402

EXPECTED = {
    "0.5.5": {"CudaGraphRunner.capture_one_batch_size": (
        "sglang/srt/model_executor/cuda_graph_runner.py:540-702",
        "8afb4b9cf4e22f39c9116d35a54fbba439e906ccaec53ad6fee3541ab5c059c4")},
    "0.5.11": {"CudaGraphRunner.capture_one_batch_size": (
        "sglang/srt/model_executor/cuda_graph_runner.py:952-1175",
        "aaa605fb45748b7e1bf8073bcbc210e9b1cc679dd78c92a1f231620d76b92379")},
    "0.5.23": {
        "DecodeCudaGraphRunner.capture_prepare": (
            "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py:1083-1247",
            "92166651fb81c4115ac7f2ed33fd45ce8ca9e4bd77db138507d8f8bf3c1c97e4"),
        "DecodeCudaGraphRunner.capture_one_shape": (
            "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py:1368-1504",
            "4d9b36b32b2c5d0000cc84dcdd38e58d8e2d07fbe6cc938159112aed0a221242")},
}


def test_capture_functions_the_replica_follows_are_unchanged():
    line = md.version("sglang")
    assert line in EXPECTED, f"SGLang {line}: no committed hash of its capture functions; check the replica, add them"
    got = realcalls_wide.capture_source_hashes()
    assert {k: v[1] for k, v in got.items()} == {k: v[1] for k, v in EXPECTED[line].items()}, (
        f"SGLang {line}'s capture code changed: {got}; check realcalls_scenarios._capture against it")


def test_hash_changes_when_the_source_changes(tmp_path, monkeypatch):
    """The check can fail: one changed token in a copy of the function gives another hash."""
    import ast
    import hashlib

    line = md.version("sglang")
    qual, (where, digest) = next(iter(EXPECTED[line].items()))
    rel, span = where.rsplit(":", 1)
    path = md.distribution("sglang").locate_file(rel)
    text = open(path).read()
    first, last = (int(x) for x in span.split("-"))
    lines = text.splitlines(True)
    body = "".join(lines[first - 1:last])
    assert "num_tokens" in body
    edited = "".join(lines[:first - 1]) + body.replace("num_tokens", "num_tokenz", 1) + "".join(lines[last:])
    cls, meth = qual.split(".")
    for changed in (text, edited):
        tree = ast.parse(changed)
        fn = next(f for c in tree.body if isinstance(c, ast.ClassDef) and c.name == cls
                  for f in c.body if isinstance(f, ast.FunctionDef) and f.name == meth)
        same = hashlib.sha256(ast.dump(fn).encode()).hexdigest() == digest
        assert same == (changed is text)
