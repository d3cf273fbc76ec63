"""The TRT-LLM fused-MoE guard against the installed SGLang's own resolution."""

from conftest import FLASHINFER, SGLANG, _key

GUARDS = _key(FLASHINFER) < (0, 6, 16)  # FLASHINFER_GUARD_MOE=auto blocks on aarch64 below this
SA_HOOK = _key(SGLANG) <= (0, 5, 15)


def test_nvfp4_auto_in_scheduler_aarch64(scenario):
    run = scenario("moe_runtime", machine="aarch64", quantization="modelopt_fp4", backend="auto")
    if GUARDS:
        assert run.result["runner_backend"] == "flashinfer_cutlass"
        assert run.result["speculative_runner_backend"] == "flashinfer_cutlass"  # follows the main one
        (line,) = run.lines("moe")
        assert "aarch64 with FlashInfer" in line and "replaced by flashinfer_cutlass" in line
    else:
        assert run.result["runner_backend"] == "auto"
        (line,) = run.lines("moe")
        assert ">= 0.6.16" in line and "kept" in line


def test_nvfp4_auto_in_scheduler_x86_unchanged(scenario):
    run = scenario("moe_runtime", machine="x86_64", quantization="modelopt_fp4", backend="auto")
    assert run.result["runner_backend"] == "auto"
    assert all("replaced" not in l for l in run.lines("moe"))


def test_explicit_trtllm_in_scheduler(scenario):
    run = scenario("moe_runtime", machine="aarch64", quantization="fp8", backend="flashinfer_trtllm")
    assert run.result["runner_backend"] == ("triton" if GUARDS else "flashinfer_trtllm")


def test_moe_off_switch(scenario):
    run = scenario("moe_runtime", env={"FLASHINFER_GUARD_MOE": "off"}, machine="aarch64",
                   quantization="modelopt_fp4", backend="auto")
    assert run.result["runner_backend"] == "auto"


def test_deepseek_fp8_on_sm100_aarch64_server_args(scenario):
    if not SA_HOOK:
        # resolved by arg_groups on this line; the scheduler-side guard covers it
        run = scenario("moe_runtime", machine="aarch64", quantization="fp8", backend="flashinfer_trtllm")
        assert run.result["runner_backend"] == ("triton" if GUARDS else "flashinfer_trtllm")
        return
    run = scenario("moe_server_args", machine="aarch64")
    assert run.result["quantization"] == "fp8"
    assert run.result["moe_runner_backend"] == ("triton" if GUARDS else "flashinfer_trtllm")
    (line,) = [l for l in run.lines("moe") if "--moe-runner-backend" in l]
    assert "chosen by SGLang for this model" in line


def test_deepseek_fp8_on_sm100_x86_unchanged(scenario):
    if not SA_HOOK:
        run = scenario("moe_runtime", machine="x86_64", quantization="fp8", backend="flashinfer_trtllm")
        assert run.result["runner_backend"] == "flashinfer_trtllm"
        return
    run = scenario("moe_server_args", machine="x86_64")
    assert run.result["moe_runner_backend"] == "flashinfer_trtllm"


def test_explicit_request_replaced_and_said(scenario):
    if not SA_HOOK:
        return test_explicit_trtllm_in_scheduler(scenario)
    run = scenario("moe_server_args", machine="aarch64", explicit=True)
    assert run.result["moe_runner_backend"] == ("triton" if GUARDS else "flashinfer_trtllm")
    if GUARDS:
        assert any("requested explicitly" in l for l in run.lines("moe"))


# --- one test per evidence-table row in the scheduler (issue 20) ------------------------------
# SGLang's own initialize_moe_config; the GPU (cc) and the FlashInfer release (fi) the guard
# reads are simulated. Expected: the rules.

def _row(scenario, env=None, **opts):
    return scenario("moe_runtime", env=env, **opts)


def test_row_route_map_oob_grace_scheduler(scenario):
    run = _row(scenario, machine="aarch64", cc="10.0", fi="0.6.15.post1", quantization="modelopt_fp4", backend="auto")
    assert run.result["runner_backend"] == "flashinfer_cutlass"
    assert any("route-map-oob-grace:" in l and "replaced by flashinfer_cutlass" in l for l in run.lines("moe"))


def test_row_route_map_oob_any_host_scheduler(scenario):
    run = _row(scenario, machine="x86_64", cc="10.0", fi="0.6.15.post1", quantization="fp8",
               backend="flashinfer_trtllm")
    assert run.result["runner_backend"] == "flashinfer_trtllm"
    lines = {l.split("] ", 1)[-1] for l in run.lines("moe")}
    assert len(lines) == 1 and "route-map-oob:" in lines.pop()
    strict = _row(scenario, env={"FLASHINFER_GUARD_MOE": "strict"}, machine="x86_64", cc="10.0",
                  fi="0.6.15.post1", quantization="fp8", backend="flashinfer_trtllm")
    assert strict.result["runner_backend"] == "triton"


def test_row_never_off_sm10x_scheduler(scenario):
    run = _row(scenario, env={"FLASHINFER_GUARD_MOE": "strict"}, machine="aarch64", cc="12.1", fi="0.6.15.post1",
               quantization="modelopt_fp4", backend="auto")
    assert run.result["runner_backend"] == "auto"  # GB10: SGLang's own choice, untouched
    assert run.lines("moe") == []


def test_row_bf16_open_default_only_says_so(scenario):
    run = _row(scenario, machine="x86_64", cc="10.0", fi="0.6.17", quantization=None, backend="flashinfer_trtllm")
    assert run.result["runner_backend"] == "flashinfer_trtllm"
    lines = {l.split("] ", 1)[-1] for l in run.lines("moe")}
    assert lines and all("bf16-open:" in l and "#4919" in l and "bf16 MoE" in l for l in lines)
    assert not any("route-map-oob" in l for l in run.lines("moe"))


def test_row_bf16_open_strict(scenario):
    run = _row(scenario, env={"FLASHINFER_GUARD_MOE": "strict"}, machine="x86_64", cc="10.0", fi="0.6.17",
               quantization=None, backend="flashinfer_trtllm")
    skip = run.result["skip_ops"]
    if isinstance(skip, list):
        # SGLang's own --flashinfer-autotune-skip-ops (0.5.23): the BF16 sweep is skipped,
        # the backend kept
        assert "flashinfer::trtllm_bf16_moe" in skip
        assert run.result["runner_backend"] == "flashinfer_trtllm"
        assert any("--flashinfer-autotune-skip-ops" in l for l in run.lines("moe"))
    else:
        # no per-op skip on this line: the BF16 TRT-LLM MoE is replaced
        assert run.result["runner_backend"] == "triton"
        assert any("bf16-open:" in l and "replaced by triton" in l for l in run.lines("moe"))
