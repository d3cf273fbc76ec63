"""Issue 42 item 3: every vLLM function `plan`'s server resolution calls (vllm_guard/server_resolution.py)
keeps the signature recorded for this line (tests/common/server_signatures.py, tests/data/
server_signatures.json): a change shows up here as one failing test naming the function; and a
changed signature at our call is said by the resolution as OUR error, naming the call and the line,
never as vLLM refusing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.common import server_signatures as ss

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VLLM = os.environ.get("FLASHINFER_GUARD_VLLM_LINE") or __import__("importlib.metadata").metadata.version("vllm")
CHANGED = "vllm.config:CompilationConfig.resolve_cudagraph_mode_and_sizes"


def _table() -> dict:
    table = ss.recorded("vllm", VLLM)
    if table is None:
        pytest.fail(f"no recorded signatures for vLLM {VLLM}: python -m tests.common.server_signatures record vllm")
    return table


def test_the_calls_keep_their_recorded_signatures():
    diffs = ss.differences(_table(), ss.installed("vllm"))
    assert not diffs, f"vLLM {VLLM}: the resolution's calls changed:\n" + "\n".join(diffs)


def test_a_planted_signature_change_fails_by_name(monkeypatch):
    from vllm.config import CompilationConfig

    def resolve_cudagraph_mode_and_sizes(self, min_cg_support, min_cg_backend_name):  # a release that dropped args
        raise AssertionError("not called")

    monkeypatch.setattr(CompilationConfig, "resolve_cudagraph_mode_and_sizes", resolve_cudagraph_mode_and_sizes)
    diffs = ss.differences(_table(), ss.installed("vllm"))
    assert len(diffs) == 1 and diffs[0].startswith(CHANGED + ": recorded "), diffs


_PLANTED = """
import sys
from vllm.config import CompilationConfig
def resolve_cudagraph_mode_and_sizes(self, min_cg_support, min_cg_backend_name):
    raise AssertionError("not reached: the call binds no such arguments")
CompilationConfig.resolve_cudagraph_mode_and_sizes = resolve_cudagraph_mode_and_sizes
from vllm_guard.server_resolution import main
sys.exit(main())
"""


def test_a_changed_signature_at_our_call_is_said_as_ours(tmp_path):
    # the planted change in the resolution's own process: the TypeError is raised at our call
    # (vllm_guard/server_resolution.py _resolve_graphs), and the answer says so, naming vLLM's version
    import shutil

    shutil.copy(REPO / "tests" / "data" / "model_configs" / "Qwen3-8B.json", tmp_path / "config.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "VLLM_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", FLASHINFER_GUARD="0",
               PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    req = {"tokens": [], "model": str(tmp_path), "gpu": "h200", "trtllm": None, "flags": {}}
    p = subprocess.run([sys.executable, "-c", _PLANTED], input=json.dumps(req), capture_output=True, text=True,
                       env=env, cwd=str(REPO), timeout=900)
    ans = [json.loads(x[len(ss_mark()):]) for x in p.stdout.splitlines() if x.startswith(ss_mark())]
    assert p.returncode == 0 and len(ans) == 1, p.stderr[-3000:]
    a = ans[0]
    assert a["ok"] is False and a["ours"] is True and "refuses" not in a, a
    assert a["refusal"].startswith(f"flashinfer-guard's own call into vLLM {VLLM} failed (our error, not vLLM "), a
    assert "TypeError" in a["refusal"] and "resolve_cudagraph_mode_and_sizes" in a["refusal"]
    assert "vllm_guard/server_resolution.py:" in a["refusal"] and "\n" not in a["refusal"]
    print(a["refusal"])


def ss_mark() -> str:
    return "FLASHINFER_GUARD_RESOLVED "
