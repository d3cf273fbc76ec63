"""`plan` in vLLM's environment, run as a user runs it: no trace, vLLM imported only in plan's one
server process (its parser, model reader and resolution), and the same answer as the in-process plan
(issue 42 items 1 and 2; tests/common/no_trace.py says what each plan wrote before)."""

from __future__ import annotations

import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

from tests.common.no_trace import plan_watched

CORPUS = Path(__file__).resolve().parents[1] / "data" / "model_configs"


def test_plan_leaves_no_trace_and_imports_vllm_once(tmp_path):
    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    (model / "config.json").write_text((CORPUS / "Qwen3-32B.json").read_text())
    launch = ["vllm", "serve", str(model), "--attention-backend", "FLASHINFER", "-tp", "2", "--max-model-len", "8192"]
    d, rec = plan_watched(tmp_path, launch, vllm_cache_seed=os.environ.get("VLLM_CACHE_ROOT"))
    assert d["resolution"]["server"] is True, d["resolution"]
    assert d["model_reader"]["server"], d["model_reader"]
    assert "own parser" in d["launch"]["reader"], d["launch"]
    assert rec["imported"] == [], rec  # neither vLLM nor torch nor FlashInfer in plan's own process
    pythons = [a for a in rec["started"] if "-m" in a]
    assert len(pythons) == 1 and pythons[0][pythons[0].index("-m") + 1] == "guard_core.deployment.module_host", rec
    # one answer: the plan in this process (vLLM imported here: its parser runs here) says the same
    from guard_core.commands import cli
    import vllm.engine.arg_utils  # noqa: F401 (its parser then runs in this process)

    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert cli.main(["plan", "--json", "--gpu", "h200", "--", *launch]) == 0
    here = json.loads(out.getvalue())
    for key in ("layout", "limits", "need", "workspace_bytes", "verdict", "server_default_bytes"):
        assert d[key] == here[key], key
    assert d["resolution"]["resolved"] == here["resolution"]["resolved"]
    assert d["launch"] == here["launch"]  # the parse crossed as JSON reads as the parse in this process
