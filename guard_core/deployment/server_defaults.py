"""What each server does on its own, per release line and per GPU, as data.

Framework-free facts read from the released wheels (``pip download vllm==X
--no-deps`` / ``sglang==X``), used by the CLI for offline planning. The
adapters read the live values from the framework instead; the cross-check
tests (``tests/vllm/test_defaults_crosscheck.py``,
``tests/sglang/test_defaults_crosscheck.py``) compare these tables with what
the installed framework computes on the same simulated GPU.

Every derived value carries the rule it came from (``Derived.source``), so the
report can say "max seqs 1024: vLLM 0.33 default on GPUs with >= 160 GiB".

Rules (the wheel and function each one was read from):

vLLM (``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` and
``_set_default_max_num_seqs_and_batched_tokens_args``; ``vllm/config/vllm.py``
``VllmConfig._set_cudagraph_sizes``; ``vllm/v1/attention/backends/flashinfer.py``):

- batch defaults for ``vllm serve`` (usage context OPENAI_API_SERVER), by the
  device's total memory (torch's ``total_memory``, GiB = 2**30 bytes):
  0.19.1-0.26: >= 70 GiB and not A100 -> 1024 seqs / 8192 tokens, else
  256 / 2048. 0.29-0.32: >= 160 GiB -> 1024 / 16384; >= 70 GiB, not A100 ->
  1024 / 8192; else 256 / 2048. 0.33: as 0.29, and GB10 (cc 12.1) stays on the
  small tier. 0.23+: DP > 1 with expert parallel and a DeepEP-low-latency or
  NIXL-EP all2all backend defaults to 256 tokens.
- defaulted tokens: at least ``max_model_len`` when chunked prefill is off,
  at most ``max_num_seqs * max_model_len``; defaulted seqs at most the tokens.
- CUDA-graph capture ceiling (unless given): ``min(2 * max_num_seqs * (1 + k),
  C)`` with C = 512, and from 0.29 C = 1024 on compute capability 10.x
  (``is_device_capability_family(100)``); then at most the batched tokens.
  Sizes: 1, 2, 4, every 8 below 256, every 16 from 256 up to the ceiling;
  0.23+: plus the batched tokens when they are below the ceiling; 0.29+: plus
  the uniform decode sizes for k > 0 (request counts times 1 + k); 0.32+: plus
  ``max_num_seqs`` itself when k = 0 and it is below the ceiling.
- GptOssForCausalLM (0.23+): the ceiling is 1024 when no capture size is given
  (``GptOssForCausalLMConfig.verify_and_update_config``, model_executor/models/config.py
  0.23.0:164-168, 0.33.0:555-559), then at most the batched tokens.
- FlashInfer decode graphs are planned up to ``min((1 + k) * max_num_seqs,
  max capture size)`` (``_decode_cudagraph_max_bs``).
- workspace: ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE`` = 394 MiB; from 0.26
  ``max(394 MiB, max_num_batched_tokens * q_heads * head_dim * 16)``.

SGLang (``sglang/srt/server_args.py`` ``_handle_gpu_memory_settings`` up to
0.5.15; ``sglang/srt/arg_groups/memory_hook.py`` and ``cuda_graph_hook.py``
from 0.5.20; ``layers/attention/flashinfer_backend.py``):

- by the GPU memory nvidia-smi reports (MiB): < 20 GiB: 2048 chunk / graph
  bs 8; < 35 GiB: 2048 / 24 (TP < 4) or 80, from 0.5.20 4096 / 48 or 160; < 60 GiB: 4096 /
  32 or 160; < 90 GiB and < 160 GiB: 8192 / 256 (TP < 4) or 512; above: 16384
  / 512.
- capture list: 1, 2, 4, 8, 12, every 8 from 16 to 256, every 16 from 272 to
  496, every 32 from 512 up to the max; 0.5.11+: plus the max itself. With
  speculative decoding: 1..8, every 2 from 10 to 32, every 4 from 40 to 64,
  every 8 from 72 to 256, every 16 from 272.
- 0.5.22+: a default graph max above ``--max-running-requests`` is lowered to it.
- workspace: ``SGLANG_FLASHINFER_WORKSPACE_SIZE`` = 384 MiB; 512 MiB for a
  fixed architecture list (Qwen2, Qwen3, MiMo; Qwen3-VL and Qwen3-VL-MoE from 0.5.6).
- tensor-core decode (the prefill planner) for an FP8 KV cache or a GQA group >= 4.
"""

from __future__ import annotations

from guard_core.deployment.deployment_record import (DEFAULT_LINE, Defaults, Deployment, Derived, ServerShape,
                                                   framework_label, installed_line, known_line, pinned_flashinfer,
                                                   short_line)
from guard_core.deployment.sglang_defaults import (SGLANG_LARGE, sglang_default_workspace, sglang_defaults,
                                                   sglang_request_pool, sglang_tensor_core_decode, sglang_workspace)
from guard_core.deployment.vllm_defaults import (VLLM_BYTES_PER_ELEM, vllm_capture_grid, vllm_defaults,
                                                 vllm_per_phase_builder, vllm_workspace)
from guard_core.flashinfer.releases import CHECKED_LINES  # the lines whose wheels the rules here were read from
from guard_core.gpus import GPU_MEMORY, gpu_memory, is_aarch64_gpu  # per-GPU facts: one table, gpus.GPU_TABLE
from guard_core.versions import is_version, parse_version

__all__ = ["DEFAULT_LINE", "Defaults", "Deployment", "Derived", "GPU_MEMORY", "SGLANG_LARGE", "ServerShape",
           "VLLM_BYTES_PER_ELEM",
           "default_workspace", "derive", "framework_label", "gpu_memory", "installed_line", "is_aarch64_gpu",
           "known_line", "pinned_flashinfer", "server_workspace", "sglang_default_workspace", "sglang_request_pool",
           "sglang_tensor_core_decode", "sglang_workspace", "short_line", "vllm_capture_grid",
           "vllm_per_phase_builder", "vllm_workspace", "workspace_source"]


def derive(d: Deployment) -> Defaults:
    """Every limit of ``d`` the user did not give, as the line would choose it on this GPU."""
    fw = d.framework
    if d.line:
        line, src = d.line, "given"
        if not is_version(line):
            raise ValueError(f"--framework-version must be a version such as {DEFAULT_LINE[fw]}, got {line!r}")
        rules = known_line(fw, line)
        if parse_version(line) < parse_version(CHECKED_LINES[fw][0]):
            src = f"given; older than every line read, simulated with {framework_label(fw)} {rules}'s rules"
        elif rules != line:
            src = f"given; simulated with the rules read from {framework_label(fw)} {rules}"
    elif installed_line(fw):
        # the line installed here is the one a launch command starts (issue #22)
        line = installed_line(fw)
        src = "installed in this environment; --framework-version to simulate another"
    else:
        line, src = DEFAULT_LINE[fw], f"default: the {framework_label(fw)} seed's line; --framework-version to change"
    out = vllm_defaults(d, line, src) if fw == "vllm" else sglang_defaults(d, line, src)
    if not d.line and not d.flashinfer and installed_line(fw):
        from guard_core.versions import flashinfer_version
        fi = flashinfer_version()
        if fi and is_version(fi):
            out.values["flashinfer"] = Derived(fi, f"installed beside {framework_label(fw)} {line}")
    return out



def server_workspace(framework: str, version: str | None, *, architecture: str | None,
                     max_num_batched_tokens: int, q_heads: int, head_dim: int) -> Derived:
    """What the server allocates on its own and why (``Derived(bytes, source)``)."""
    if framework == "sglang":
        return sglang_workspace(version, architecture)
    return vllm_workspace(version, max_num_batched_tokens, q_heads, head_dim)


def default_workspace(framework: str, version: str | None, **kw) -> int:
    return server_workspace(framework, version, **kw).value


def workspace_source(framework: str, version: str | None, **kw) -> str:
    return server_workspace(framework, version, **kw).source
