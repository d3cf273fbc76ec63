"""guard_core.decide.moe: the one MoE entry both adapters call (facts -> outcome).

Expected values come from the evidence the table cites (guard_core/flashinfer/moe_evidence.py and
shared/reference/moe-evidence.md) and from DESIGN.md, not from guard_core: each case
names its source.
"""

import pytest

from guard_core.decide.moe import MoeFacts, decide, fallback_backend, op_of
from guard_core.runtime.settings import load_settings

AUTO = load_settings({})
STRICT = load_settings({"FLASHINFER_GUARD_MOE": "strict"})


def _facts(machine, fi, sm, op=None, framework="vllm", can_skip=None):
    return MoeFacts(framework, machine, fi, sm, op, can_skip)


@pytest.mark.parametrize("framework", ["vllm", "sglang"])
def test_gb200_before_the_fix_is_blocked_by_default(framework):
    """vLLM #46861: GB200 (aarch64, SM100), vLLM 0.23.0 / FlashInfer 0.6.12, trtllm_bf16_moe
    autotune IMA; the Grace default blocks (DESIGN 2: Grace + SM10x + < 0.6.16 blocks)."""
    o = decide(_facts("aarch64", "0.6.12", 100, "bf16", framework), AUTO)
    assert o.block and o.action == "block"
    assert o.needed == o.reason and "vLLM #46861" in o.reason
    assert o.line("x").startswith("[flashinfer-guard] moe: aarch64 with FlashInfer 0.6.12 < 0.6.16")
    assert o.stand_down() is None


def test_b200_x86_before_the_fix_warns_and_strict_blocks():
    """FlashInfer #4237 (B200 x86, Kimi-K2.5 NVFP4 on 0.6.15.post1: the route-map read),
    fixed in 0.6.16 (#4288): any host warns by default, strict blocks."""
    o = decide(_facts("x86_64", "0.6.15.post1", 100, "nvfp4"), AUTO)
    assert not o.block and o.action == "warn" and o.needed is None
    level, line = o.note()
    assert level == "warning" and "FlashInfer #4237" in line and "0.6.16" in line
    assert o.stand_down() is None  # the warning needs the patch in place
    assert decide(_facts("x86_64", "0.6.15.post1", 100, "nvfp4"), STRICT).block


def test_sm107_is_in_the_routed_family():
    """FlashInfer 0.7.4 fused_moe/api.py: _TRTLLM_ROUTED_ARCHS = (100, 103, 107)."""
    assert decide(_facts("x86_64", "0.6.12", 107), AUTO).action == "warn"


@pytest.mark.parametrize("sm", [90, 120, 121])
def test_gpus_outside_sm10x_never_reach_the_path(sm):
    """Only SM10x takes the TRT-LLM routed MoE (vLLM is_device_capability_family(100),
    FlashInfer _TRTLLM_ROUTED_ARCHS); the stand-down on such a host is a debug line (DESIGN 3)."""
    for machine in ("aarch64", "x86_64"):
        o = decide(_facts(machine, "0.6.12", sm), STRICT)
        assert not o.block and o.action == "none"
        assert o.stand_down().level == "debug" and o.stand_down().line.startswith("moe: ok, ")


def test_an_unknown_gpu_is_taken_as_reaching_the_path():
    """DESIGN 2: a missing input takes the choice with the larger risk."""
    o = decide(MoeFacts("sglang", "aarch64", "0.6.12", None, None, None, missing=("gpu",)), AUTO)
    assert o.block


def test_b300_bf16_after_the_fix_open_reports():
    """FlashInfer #4919 / SGLang #30209: 8x B300 (SM103), FlashInfer 0.6.17, the BF16 NextN/MTP
    drafter MoE of an FP4 checkpoint faults (open). Default: one INFO line, nothing changed;
    strict: skip the BF16 autotune sweep where the line can, else block."""
    op = op_of("sglang", "modelopt_fp4", speculative=True)
    assert op == "bf16" and op_of("sglang", "modelopt_fp4") == "nvfp4"
    o = decide(_facts("x86_64", "0.6.17", 103, op, "sglang"), AUTO)
    assert (o.block, o.action) == (False, "info")
    level, line = o.note("--speculative-moe-runner-backend flashinfer_trtllm kept")
    assert level == "info" and "SGLang #30209" in line and "kept; open reports" in line
    assert decide(_facts("x86_64", "0.6.17", 103, "bf16", "sglang", can_skip=True), STRICT).action == "skip_autotune"
    assert decide(_facts("x86_64", "0.6.17", 103, "bf16", "sglang", can_skip=False), STRICT).block
    # the other ops have no open report after the fix
    assert decide(_facts("aarch64", "0.6.17", 103, "fp8", "sglang"), STRICT).action == "none"


def test_the_switches():
    """FLASHINFER_GUARD_MOE=on blocks everywhere, off never (DESIGN 4)."""
    on = decide(_facts("x86_64", "0.7.4", 90), load_settings({"FLASHINFER_GUARD_MOE": "on"}))
    off = decide(_facts("aarch64", "0.6.12", 100), load_settings({"FLASHINFER_GUARD_MOE": "off"}))
    assert on.block and not off.block and off.action == "off"


def test_quantization_ops_and_fallbacks_per_framework():
    """The op each quantization's experts run (FlashInfer's op names: bf16, fp8, nvfp4,
    mxfp4) and the backend SGLang accepts next (its own asserts: FP4 -> FlashInfer CUTLASS)."""
    assert op_of("vllm", None) == "bf16" and op_of("vllm", "gpt_oss_mxfp4") == "mxfp4"
    assert op_of("vllm", "compressed-tensors") is None and op_of("vllm", "awq") is None
    assert op_of("sglang", "fp8", speculative=True) == "fp8"
    assert fallback_backend("sglang", "flashinfer_trtllm", "modelopt_fp4") == "flashinfer_cutlass"
    assert fallback_backend("sglang", "flashinfer_trtllm", None) == "triton"
    assert fallback_backend("sglang", "triton", None) == "triton"
