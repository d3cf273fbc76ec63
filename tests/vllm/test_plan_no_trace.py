"""`plan` in vLLM's environment, run as a user runs it: no trace, vLLM imported only in plan's one
server process (its parser, model reader and resolution), and the same answer as the in-process plan
(issue 42 items 1 and 2; tests/common/no_trace.py says what each plan wrote before)."""

from __future__ import annotations

import os

from tests.common.no_trace import check_plan_in_one_server_process


def test_plan_leaves_no_trace_and_imports_vllm_once(tmp_path):
    check_plan_in_one_server_process(
        tmp_path, lambda m: ["vllm", "serve", m, "--attention-backend", "FLASHINFER", "-tp", "2", "--max-model-len",
                             "8192"],
        "vllm.engine.arg_utils", vllm_cache_seed=os.environ.get("VLLM_CACHE_ROOT"))
