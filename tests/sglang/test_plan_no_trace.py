"""`plan` in SGLang's environment, run as a user runs it: no trace, SGLang imported only in plan's one
server process (its parser, model reader and resolution), and the same answer as the in-process plan
(issue 42 items 1 and 2; tests/common/no_trace.py says what each plan wrote before)."""

from __future__ import annotations

from tests.common.no_trace import check_plan_in_one_server_process


def test_plan_leaves_no_trace_and_imports_sglang_once(tmp_path):
    check_plan_in_one_server_process(
        tmp_path, lambda m: ["python", "-m", "sglang.launch_server", "--model-path", m, "--attention-backend",
                             "flashinfer", "--tp-size", "2", "--context-length", "8192"],
        "sglang.srt.server_args")
