"""Attention groups of different shapes on one shared workspace, in the real vLLM.

    python tests/vllm/groups_scenarios.py

Gemma-4-31B's two attention groups (google/gemma-4-31B-it config.json: sliding layers 32 q /
16 kv heads, head_dim 256; full layers 32 q / 4 kv heads, global_head_dim 512) as two real
``FlashInferMetadataBuilder``s, one per KV-cache group as vLLM builds them. Each builder alone
allocates its own buffer through vLLM's ``_get_workspace_buffer``; then, as vLLM 0.33's model
runner does (``v1/worker/gpu/attn_utils.py``), the first builder's buffer is handed to the second
through ``set_workspace_buffer``. Prints one ``RESULT: {json}`` line. What is faked is what
scenarios.py fakes (no GPU here), nothing else.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from scenarios import (allow_static_graphs, cpu_only_impl_buffers, fake_gpu, load_plugins,  # noqa: E402
                       model_dir, result)

SLIDING = (32, 16, 256)
FULL = (32, 4, 512)
CONFIG = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 5376, "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 256,
    "num_hidden_layers": 2, "intermediate_size": 8192, "vocab_size": 151936,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6, "rope_theta": 10000,
}


def make_config():
    from vllm.config import CompilationConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig

    mc = ModelConfig(model=model_dir(CONFIG), skip_tokenizer_init=True, max_model_len=32768)
    return VllmConfig(
        model_config=mc,
        scheduler_config=SchedulerConfig(max_num_seqs=512, max_num_batched_tokens=8192, max_model_len=32768,
                                         is_encoder_decoder=False),
        device_config=DeviceConfig(device="cpu"),
        compilation_config=CompilationConfig(cudagraph_mode="FULL_AND_PIECEWISE"),
    )


def make_builder(vc, shape, tag: str):
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend, FlashInferMetadataBuilder
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    try:
        from vllm.model_executor.layers.attention import Attention
    except ImportError:  # older layout
        from vllm.attention.layer import Attention

    q, kv, hd = shape
    spec = FullAttentionSpec(block_size=16, num_kv_heads=kv, head_size=hd, dtype=torch.bfloat16)
    with set_current_vllm_config(vc):
        layer = Attention(num_heads=q, head_size=hd, scale=hd ** -0.5, num_kv_heads=kv,
                          attn_backend=FlashInferBackend, prefix=f"model.layers.{tag}.self_attn.attn")
        return FlashInferMetadataBuilder(spec, [layer.layer_name], vc, torch.device("cpu"))


def nbytes(buf) -> int:
    return int(buf.untyped_storage().nbytes())


def main() -> None:
    import importlib.metadata as md

    fake_gpu()
    if os.environ.get("FG_TEST_NO_PLUGINS") != "1":
        load_plugins()
    allow_static_graphs()
    cpu_only_impl_buffers()
    alone = {}
    for name, shape in (("sliding", SLIDING), ("full", FULL)):
        vc = make_config()
        b = make_builder(vc, shape, f"{name}0")
        alone[name] = nbytes(b._get_workspace_buffer())
    shared = {}
    for order in (("sliding", "full"), ("full", "sliding")):
        vc = make_config()
        first = make_builder(vc, dict(sliding=SLIDING, full=FULL)[order[0]], f"{order[0]}1")
        second = make_builder(vc, dict(sliding=SLIDING, full=FULL)[order[1]], f"{order[1]}1")
        buf = first._get_workspace_buffer()
        before = nbytes(buf)
        second.set_workspace_buffer(buf)
        held = second._get_workspace_buffer()
        shared["_then_".join(order)] = {"first_alone": before, "after": nbytes(buf), "second_holds": nbytes(held),
                                        "same_storage": held.untyped_storage().data_ptr() == buf.untyped_storage().data_ptr()}
    result(vllm=md.version("vllm"), flashinfer=md.version("flashinfer-python"), alone=alone, shared=shared)


if __name__ == "__main__":
    main()
