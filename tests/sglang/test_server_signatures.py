"""Issue 42 item 3: every SGLang function `plan`'s server resolution calls (sglang_guard/server_resolution.py
and plan_resolve.py, which it runs) keeps the signature recorded for this line (tests/common/
server_signatures.py, tests/data/server_signatures.json): a change shows up here as one failing test
naming the function; and a changed signature at our call is said by the resolution as OUR error,
naming the call and the line, never as SGLang refusing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.common import server_signatures as ss

REPO = Path(__file__).resolve().parents[2]
SGLANG = metadata.version("sglang")
CHANGED = "sglang.srt.configs.model_config:ModelConfig.from_server_args"


def _table() -> dict:
    table = ss.recorded("sglang", SGLANG)
    if table is None:
        pytest.fail(f"no recorded signatures for SGLang {SGLANG}: python -m tests.common.server_signatures record "
                    "sglang")
    return table


def test_the_calls_keep_their_recorded_signatures():
    diffs = ss.differences(_table(), ss.installed("sglang"))
    assert not diffs, f"SGLang {SGLANG}: the resolution's calls changed:\n" + "\n".join(diffs)


def test_a_planted_signature_change_fails_by_name(monkeypatch):
    ss.installed("sglang")  # the kernel stand-in first, as the resolution does
    from sglang.srt.configs.model_config import ModelConfig

    def from_server_args(cls, server_args, model_path, model_revision):  # a release that added arguments
        raise AssertionError("not called")

    monkeypatch.setattr(ModelConfig, "from_server_args", classmethod(from_server_args))
    diffs = ss.differences(_table(), ss.installed("sglang"))
    assert len(diffs) == 1 and diffs[0].startswith(CHANGED + ": recorded "), diffs


_PLANTED = """
import sys
from sglang_guard import simulated_device
simulated_device.install_kernel_stand_in()
from sglang.srt.layers import dp_attention
def compute_dp_attention_world_info(tp_rank, tp_size):  # a release that dropped arguments
    raise AssertionError("not reached: the call binds no such arguments")
dp_attention.compute_dp_attention_world_info = compute_dp_attention_world_info
from sglang_guard.server_resolution import main
sys.exit(main())
"""


def test_a_changed_signature_at_our_call_is_said_as_ours(tmp_path):
    # a function only our resolution calls (plan_resolve._attention_tp): SGLang's own resolution does
    # not call it, so the TypeError is raised at our call (a planted ModelConfig.from_server_args is
    # also called inside SGLang's own resolution pipeline on 0.5.2x: SGLang's frame, not ours)
    (tmp_path / "config.json").write_text((REPO / "tests" / "data" / "model_configs" /
                                           "Meta-Llama-3.1-8B.json").read_text())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "SGLANG_", "SGL_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", FLASHINFER_GUARD="0",
               PYTHONPATH=str(REPO))
    req = {"tokens": ["--attention-backend", "flashinfer"], "model": str(tmp_path), "gpu": "h200", "trtllm": None,
           "flags": {}}
    p = subprocess.run([sys.executable, "-c", _PLANTED], input=json.dumps(req), capture_output=True, text=True,
                       env=env, cwd=str(REPO), timeout=900)
    mark = "FLASHINFER_GUARD_RESOLVED "
    ans = [json.loads(x[len(mark):]) for x in p.stdout.splitlines() if x.startswith(mark)]
    assert p.returncode == 0 and len(ans) == 1, p.stderr[-3000:]
    a = ans[0]
    assert a["ok"] is False and a["ours"] is True, a
    assert a["refusal"].startswith(f"flashinfer-guard's own call into SGLang {SGLANG} failed (our error, not SGLang "), a
    assert "TypeError" in a["refusal"] and "compute_dp_attention_world_info" in a["refusal"]
    assert "refused the command" not in a["refusal"]
    assert "sglang_guard/plan_resolve.py:" in a["refusal"] and "\n" not in a["refusal"]
    print(a["refusal"])
