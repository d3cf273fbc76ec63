"""What each server does on its own: default workspace sizes and capture lists.

Framework-free facts read from the released wheels (see shared/reference), used
by the CLI for offline planning. The adapters read the live values from the
framework instead.
"""

from __future__ import annotations

from .versions import parse_version

MIB = 1 << 20
VLLM_DEFAULT = 394 * MIB
SGLANG_DEFAULT = 384 * MIB
SGLANG_LARGE = 512 * MIB
SGLANG_512_ARCHS_055 = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "MiMoForCausalLM")
SGLANG_512_ARCHS_056 = SGLANG_512_ARCHS_055 + ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration")

NATIVE_VAR = {"vllm": "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", "sglang": "SGLANG_FLASHINFER_WORKSPACE_SIZE"}


def vllm_default_workspace(vllm_version: str | None, max_num_batched_tokens: int, q_heads: int, head_dim: int) -> int:
    """vLLM's own float workspace: 394 MiB; from 0.26 at least tokens * heads * dim * 16."""
    if vllm_version and parse_version(vllm_version) >= parse_version("0.26"):
        return max(VLLM_DEFAULT, max_num_batched_tokens * q_heads * head_dim * 16)
    return VLLM_DEFAULT


def sglang_default_workspace(sglang_version: str | None, architecture: str | None) -> int:
    """SGLang's: 384 MiB, 512 MiB for a hard-coded list of architectures (Qwen3-VL from 0.5.6)."""
    archs = SGLANG_512_ARCHS_056
    if sglang_version and parse_version(sglang_version) < parse_version("0.5.6"):
        archs = SGLANG_512_ARCHS_055
    return SGLANG_LARGE if architecture in archs else SGLANG_DEFAULT


def default_workspace(framework: str, version: str | None, *, architecture: str | None,
                      max_num_batched_tokens: int, q_heads: int, head_dim: int) -> int:
    if framework == "sglang":
        return sglang_default_workspace(version, architecture)
    return vllm_default_workspace(version, max_num_batched_tokens, q_heads, head_dim)


def default_capture_sizes(framework: str, max_batch: int) -> tuple[int, ...]:
    """The capture lists both servers build by default, up to ``max_batch``."""
    if framework == "sglang":
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, max(max_batch, 272) + 1, 16))
    else:
        sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, max(max_batch, 256) + 1, 16))
    out = sorted({b for b in sizes if b <= max_batch} | {max_batch})
    return tuple(out)


def default_max_batched_tokens(framework: str) -> int:
    return 16384 if framework == "sglang" else 8192
