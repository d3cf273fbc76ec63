"""The MoE runner backend the main process resolves (what SGLang prints and passes on) is
already the fallback on a guarded host, on every line: ServerArgs up to 0.5.15, the
argument-resolution pipeline from 0.5.20 (issue 9, item 1)."""

import json
import os
import sys

import pytest

from conftest import FLASHINFER, HERE, SGLANG, Run, _key
from tests.common import forkserver  # noqa: E402

GUARDS = _key(FLASHINFER) < (0, 6, 16)  # FLASHINFER_GUARD_MOE=auto blocks on aarch64 below this
PIPELINE = _key(SGLANG) >= (0, 5, 20)

_runs: dict = {}


def config(env=None, **opts):
    key = (json.dumps(env or {}, sort_keys=True), json.dumps(opts, sort_keys=True))
    if key not in _runs:
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))}
        e.update(env or {})
        proc = forkserver.run([sys.executable, os.path.join(HERE, "moe_config_scenarios.py"), "config",
                               json.dumps(opts)], capture_output=True, text=True, env=e, timeout=900)
        _runs[key] = Run(proc)
    return _runs[key]


def _warnings(run):
    return [l for l in run.lines("moe") if "TRT-LLM fused MoE disabled;" in l]


def test_explicit_request_resolved_to_the_fallback_when_blocked():
    """FLASHINFER_GUARD_MOE=on blocks on every line, so every line's configuration path is
    exercised: the resolved backend is triton (FP8), the user's request is named once."""
    run = config(env={"FLASHINFER_GUARD_MOE": "on"}, machine="x86_64", explicit=True)
    r = run.result["resolved"]
    assert r["moe_runner_backend"] == "triton"
    assert r["speculative_moe_runner_backend"] in (None, "triton")
    (line,) = [l for l in _warnings(run) if "--moe-runner-backend" in l]
    assert "FLASHINFER_GUARD_MOE=on" in line
    assert "--moe-runner-backend flashinfer_trtllm (requested explicitly) replaced by triton" in line
    if PIPELINE:
        # the record keeps the caller's input; the fallback is a declaration of ours
        assert run.result["input"] == "flashinfer_trtllm"
        assert {"moe_runner_backend": "triton"} in run.result["declared_by_guard"]


def test_explicit_request_on_aarch64_auto():
    run = config(machine="aarch64", explicit=True)
    r = run.result["resolved"]
    if GUARDS:
        assert r["moe_runner_backend"] == "triton"
        assert any("requested explicitly) replaced by triton" in l for l in _warnings(run))
    else:
        assert r["moe_runner_backend"] == "flashinfer_trtllm"
        assert _warnings(run) == []
        kept = [l for l in run.lines("moe") if "kept" in l]
        assert kept and all(">= 0.6.16" in l for l in kept)


def test_x86_auto_is_untouched_and_quiet():
    """x86 with an SM100 GPU: the backend is SGLang's; before FlashInfer 0.6.16 (the
    route-map read, FlashInfer #4237/#4288, is in the release on every host) one WARNING
    says so and names the switch, from 0.6.16 nothing is said at INFO."""
    run = config(machine="x86_64", explicit=True, cc="10.0")
    assert run.result["resolved"]["moe_runner_backend"] == "flashinfer_trtllm"
    assert run.result["declared_by_guard"] == []
    if GUARDS:
        (line,) = {l.split("] ", 1)[-1] for l in run.lines("moe")}
        assert "route-map-oob:" in line and "FLASHINFER_GUARD_MOE=strict" in line and "kept" in line
    else:
        assert run.lines("moe") == []  # the stand-down on an unaffected host is a debug line


def test_x86_auto_stand_down_visible_at_debug():
    run = config(env={"FLASHINFER_GUARD_LOG": "debug"}, machine="x86_64", explicit=True, cc="9.0")
    assert any("x86_64 host" in l and "kept" in l for l in run.lines("moe"))


# --- one test per evidence-table row at configuration time (issue 20) ------------------------
# Explicit --moe-runner-backend flashinfer_trtllm with an FP8 DeepSeek checkpoint; the GPU
# and the FlashInfer release the guard reads are simulated (cc, fi); expected: the issue's
# rules (Grace + SM10x + < 0.6.16 blocks; any host warns, strict blocks; never off SM10x).

def test_row_route_map_oob_grace_blocks():
    run = config(machine="aarch64", explicit=True, cc="10.0", fi="0.6.15.post1")
    assert run.result["resolved"]["moe_runner_backend"] == "triton"
    (line,) = [l for l in _warnings(run) if "--moe-runner-backend" in l]
    assert "aarch64 with FlashInfer 0.6.15.post1 < 0.6.16 on SM100, fp8 MoE" in line
    assert "route-map-oob-grace:" in line and "requested explicitly) replaced by triton" in line


def test_row_route_map_oob_any_host_warns():
    run = config(machine="x86_64", explicit=True, cc="10.3", fi="0.6.15.post1")
    assert run.result["resolved"]["moe_runner_backend"] == "flashinfer_trtllm"
    assert _warnings(run) == [] and run.result["declared_by_guard"] == []
    (line,) = {l.split("] ", 1)[-1] for l in run.lines("moe")}
    assert "x86_64 with FlashInfer 0.6.15.post1 < 0.6.16 on SM103" in line and "#4237" in line
    assert "FLASHINFER_GUARD_MOE=strict" in line


def test_row_route_map_oob_strict_blocks():
    run = config(env={"FLASHINFER_GUARD_MOE": "strict"}, machine="x86_64", explicit=True, cc="10.0",
                 fi="0.6.15.post1")
    assert run.result["resolved"]["moe_runner_backend"] == "triton"
    (line,) = [l for l in _warnings(run) if "--moe-runner-backend" in l]
    assert "FLASHINFER_GUARD_MOE=strict, evidence route-map-oob:" in line


def test_row_never_off_sm10x():
    run = config(env={"FLASHINFER_GUARD_MOE": "strict"}, machine="aarch64", explicit=True, cc="12.0",
                 fi="0.6.15.post1")
    assert run.result["resolved"]["moe_runner_backend"] == "flashinfer_trtllm"
    assert run.result["declared_by_guard"] == [] and run.lines("moe") == []


@pytest.mark.parametrize("machine", ["aarch64"])
def test_model_choice_on_sm100_resolved_to_the_fallback(machine):
    """DeepSeek-V3 FP8 on a (faked) SM100 GPU: SGLang itself picks flashinfer_trtllm at
    configuration time; with the guard blocking, the main process resolves triton."""
    plain = config(env={"FLASHINFER_GUARD": "0"}, machine=machine, sm100=True)
    assert plain.result["resolved"]["moe_runner_backend"] == "flashinfer_trtllm"  # the premise
    run = config(env={"FLASHINFER_GUARD_MOE": "on"}, machine=machine, sm100=True)
    assert run.result["resolved"]["moe_runner_backend"] == "triton"
    assert run.result["resolved"]["quantization"] == plain.result["resolved"]["quantization"]
    (line,) = [l for l in _warnings(run) if "--moe-runner-backend" in l]
    assert "(chosen by SGLang for this model) replaced by triton" in line
