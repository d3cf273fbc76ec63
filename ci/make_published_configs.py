"""Write tests/data/model_configs_published/: decoder config.json files the built-in model
reader had not seen, each with its source in manifest.json.

Run with the vLLM 0.33 environment's python (it uses transformers for the re-saved files):

    ~/.cache/flashinfer-guard/envs/vllm-0.33.0/bin/python ci/make_published_configs.py

Three kinds of file, each named in the manifest:
- ``published``: a checkpoint's config.json written out from its published text (the
  Hugging Face repository named), the fields that decide attention kept as published;
- ``resaved``: a corpus file (tests/data/model_configs) loaded and saved again by the
  installed transformers (``PreTrainedConfig.from_dict(...).to_dict()``, what
  ``save_pretrained`` writes): how a checkpoint re-saved with transformers 5 is published
  (Nemotron-H's ``hybrid_override_pattern`` becomes ``layers_block_type``, and so on);
- ``defaults``: a config that leaves its fields to transformers' defaults (the model type and
  architecture only, plus the fields named): transformers' class for that model type fills
  them, as vLLM reads them. The class's docstring names the checkpoint those defaults follow.
The expected reading of every file is vLLM 0.33's own (tests/vllm/test_published_configs.py),
never this script's.
"""

from __future__ import annotations

import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(REPO, "tests", "data", "model_configs_published")
CORPUS = os.path.join(REPO, "tests", "data", "model_configs")

PUBLISHED = {
    "gpt2": ("openai-community/gpt2", {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
        "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
        "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": 1024, "n_embd": 768, "n_head": 12,
        "n_layer": 12, "n_positions": 1024, "resid_pdrop": 0.1, "summary_activation": None,
        "summary_first_dropout": 0.1, "summary_proj_to_labels": True, "summary_type": "cls_index",
        "summary_use_proj": True, "vocab_size": 50257}),
    "gpt2-xl": ("openai-community/gpt2-xl", {
        "activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
        "n_ctx": 1024, "n_embd": 1600, "n_head": 25, "n_layer": 48, "n_positions": 1024,
        "layer_norm_epsilon": 1e-05, "vocab_size": 50257}),
    "gpt-j-6b": ("EleutherAI/gpt-j-6b", {
        "activation_function": "gelu_new", "architectures": ["GPTJForCausalLM"], "model_type": "gptj",
        "n_embd": 4096, "n_head": 16, "n_inner": None, "n_layer": 28, "n_positions": 2048, "rotary_dim": 64,
        "layer_norm_epsilon": 1e-05, "tie_word_embeddings": False, "vocab_size": 50400}),
    "bloom-560m": ("bigscience/bloom-560m", {
        "apply_residual_connection_post_layernorm": False, "architectures": ["BloomForCausalLM"],
        "attention_dropout": 0.0, "bos_token_id": 1, "eos_token_id": 2, "hidden_dropout": 0.0,
        "hidden_size": 1024, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "bloom",
        "n_head": 16, "n_inner": None, "n_layer": 24, "offset_alibi": 100, "pad_token_id": 3,
        "skip_bias_add": True, "skip_bias_add_qkv": False, "vocab_size": 250880}),
    "falcon-7b": ("tiiuae/falcon-7b", {
        "alibi": False, "apply_residual_connection_post_layernorm": False, "architectures": ["FalconForCausalLM"],
        "attention_dropout": 0.0, "bias": False, "bos_token_id": 11, "eos_token_id": 11, "hidden_dropout": 0.0,
        "hidden_size": 4544, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "falcon",
        "multi_query": True, "new_decoder_architecture": False, "num_attention_heads": 71,
        "num_hidden_layers": 32, "parallel_attn": True, "torch_dtype": "bfloat16", "vocab_size": 65024}),
    "falcon-40b": ("tiiuae/falcon-40b (the RefinedWeb spelling n_head/n_head_kv/n_layer, which "
                   "transformers' FalconConfig.attribute_map reads)", {
        "alibi": False, "apply_residual_connection_post_layernorm": False, "architectures": ["FalconForCausalLM"],
        "bias": False, "bos_token_id": 11, "eos_token_id": 11, "hidden_size": 8192, "layer_norm_epsilon": 1e-05,
        "model_type": "falcon", "n_head": 128, "n_head_kv": 8, "n_layer": 60, "new_decoder_architecture": True,
        "parallel_attn": True, "torch_dtype": "bfloat16", "vocab_size": 65024}),
    "deepseek-vl2-tiny": ("deepseek-ai/deepseek-vl2-tiny (the attention fields of its language_config: the "
                          "use_mla: false DeepSeek-V2 layout, head dims 0)", {
        "architectures": ["DeepseekVLV2ForCausalLM"], "model_type": "deepseek_vl_v2",
        "language_config": {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2",
                            "hidden_size": 1280, "intermediate_size": 6848, "kv_lora_rank": None,
                            "max_position_embeddings": 4096, "moe_intermediate_size": 896, "n_group": 1,
                            "n_routed_experts": 64, "n_shared_experts": 2, "num_attention_heads": 10,
                            "num_experts_per_tok": 6, "num_hidden_layers": 12, "num_key_value_heads": 10,
                            "q_lora_rank": None, "qk_nope_head_dim": 0, "qk_rope_head_dim": 0, "topk_group": 1,
                            "topk_method": "greedy", "torch_dtype": "bfloat16", "use_mla": False, "v_head_dim": 0,
                            "vocab_size": 129280},
        "projector_config": {"input_dim": 1152, "model_type": "mlp_projector", "n_embed": 1280,
                             "projector_type": "downsample_mlp_gelu"},
        "vision_config": {"layers": 27, "model_name": "siglip_so400m_patch14_384", "model_type": "vision",
                          "width": 1152}}),
    "Jamba-v0.1": ("ai21labs/Jamba-v0.1", {
        "architectures": ["JambaForCausalLM"], "attention_dropout": 0.0, "attn_layer_offset": 4,
        "attn_layer_period": 8, "bos_token_id": 1, "eos_token_id": 2, "expert_layer_offset": 1,
        "expert_layer_period": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
        "intermediate_size": 14336, "mamba_conv_bias": True, "mamba_d_conv": 4, "mamba_d_state": 16,
        "mamba_dt_rank": 256, "mamba_expand": 2, "mamba_proj_bias": False, "max_position_embeddings": 262144,
        "model_type": "jamba", "num_attention_heads": 32, "num_experts": 16, "num_experts_per_tok": 2,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "torch_dtype": "bfloat16",
        "use_mamba_kernels": True, "vocab_size": 65536}),
    # issue 42 item 6 (written out from the published values with no network access, not downloaded)
    "Qwen2-VL-7B-Instruct": ("Qwen/Qwen2-VL-7B-Instruct", {
        "architectures": ["Qwen2VLForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 151643,
        "eos_token_id": 151645, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
        "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu",
        "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 18944,
        "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2_vl",
        "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4, "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0, "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "transformers_version": "4.41.2", "use_cache": True, "use_sliding_window": False,
        "vision_config": {"depth": 32, "embed_dim": 1280, "mlp_ratio": 4, "num_heads": 16, "in_chans": 3,
                          "hidden_size": 3584, "patch_size": 14, "spatial_merge_size": 2, "spatial_patch_size": 14,
                          "temporal_patch_size": 2},
        "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 152064},
        "the legacy flat layout: the text model's fields at the top level, only vision_config nested, no "
        "text_config (issue 42 item 6: read as the nested text_config defaults, 64 q / 8 kv heads x 80 layers)"),
    "starcoder": ("bigcode/starcoder", {
        "activation_function": "gelu_pytorch_tanh", "architectures": ["GPTBigCodeForCausalLM"],
        "attention_softmax_in_fp32": True, "attn_pdrop": 0.1, "bos_token_id": 0, "embd_pdrop": 0.1,
        "eos_token_id": 0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt_bigcode",
        "multi_query": True, "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40, "n_positions": 8192,
        "resid_pdrop": 0.1, "scale_attention_softmax_in_fp32": True, "scale_attn_weights": True,
        "torch_dtype": "float32", "transformers_version": "4.28.1", "use_cache": True, "vocab_size": 49152},
        "GPT-BigCode, multi_query true: one KV head (issue 42 item 6); the published file's runtime-only keys "
        "(inference_runner, max_batch_size, pad_key_length, ...) left out"),
}
# where a PUBLISHED entry's text was written out without network access (so the manifest says it)
OFFLINE = " Written out from the published values without network access here, not downloaded."

# corpus files re-saved by the installed transformers (layers_block_type, filled layer_types ...;
# Gemma 4: global_head_dim / num_global_key_value_heads become per_layer_config)
RESAVED = ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", "Nemotron-H-56B-Base-8K", "gemma-2-9b", "Qwen2-7B-Instruct",
           "Mistral-7B-Instruct-v0.2", "Llama-4-Scout-17B-16E-Instruct", "gemma-4-26B-A4B")

# (file name, model type, architecture, extra fields, why it is here)
DEFAULTS = (
    ("llama-defaults", "llama", "LlamaForCausalLM", {}, "every attention field left to LlamaConfig"),
    ("mistral-defaults", "mistral", "MistralForCausalLM", {}, "MistralConfig: 8 KV heads, sliding window 4096"),
    ("qwen3-defaults", "qwen3", "Qwen3ForCausalLM", {}, "Qwen3Config: head_dim 128, hidden 4096"),
    ("gemma3-text-defaults", "gemma3_text", "Gemma3ForCausalLM", {},
     "Gemma3TextConfig: head_dim 256 (not hidden/heads), layer_types from sliding_window_pattern 6"),
    ("gemma2-defaults", "gemma2", "Gemma2ForCausalLM", {}, "Gemma2Config: head_dim 256, alternating windows"),
    ("zamba2-defaults", "zamba2", "Zamba2ForCausalLM", {},
     "Zamba2Config: layers_block_type with 'hybrid' layers, attention_head_dim"),
    ("qwen2_5_omni-defaults", "qwen2_5_omni", "Qwen2_5OmniForConditionalGeneration", {},
     "Qwen2_5OmniConfig: the text model under thinker_config.text_config"),
    ("deepseek_v4-defaults", "deepseek_v4", "DeepseekV4ForCausalLM", {},
     "DeepseekV4Config: MLA by compress_ratios and head_dim, no kv_lora_rank rule"),
    ("laguna-per-layer-heads", "laguna", "LagunaForCausalLM",
     {"num_hidden_layers": 8, "num_attention_heads": 64,
      "num_attention_heads_per_layer": [64, 48, 48, 48, 64, 48, 48, 48]},
     "LagunaConfig defaults with the per-layer head list its docstring describes (a constructed list: "
     "no Laguna config.json is available offline here)"),
    ("deepseek_v2-lite-defaults", "deepseek_v2", "DeepseekV2ForCausalLM", {},
     "DeepseekV2Config: kv_lora_rank 512 by default, so MLA"),
    ("gpt_bigcode-defaults", "gpt_bigcode", "GPTBigCodeForCausalLM", {},
     "GPTBigCodeConfig: multi_query defaults to true, so one KV head with nothing stated"),
    ("gemma4-text-defaults", "gemma4_text", "Gemma4ForCausalLM", {},
     "Gemma4TextConfig: full-attention layers take global_head_dim 512 (a __post_init__ keyword default, "
     "not a declared field) over head_dim 256; layer_types every 6th layer and the last full"),
)


def _resave(cfg: dict) -> dict:
    from transformers import AutoConfig

    c = AutoConfig.for_model(**cfg)
    d = c.to_dict()
    for k in ("transformers_version", "_name_or_path"):
        d.pop(k, None)
    return d


def main() -> int:
    import transformers

    os.makedirs(OUT, exist_ok=True)
    manifest = {}
    for name, (src, cfg, *why) in PUBLISHED.items():
        manifest[name] = {"kind": "published", "source": f"https://huggingface.co/{src}/blob/main/config.json"
                          if " " not in src else src}
        if why:
            manifest[name]["why"] = why[0].rstrip(".") + "." + OFFLINE
        _write(name, cfg)
    for name in RESAVED:
        with open(os.path.join(CORPUS, name + ".json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
        _write(name + "-resaved", _resave(cfg))
        manifest[name + "-resaved"] = {"kind": "resaved", "source": f"tests/data/model_configs/{name}.json "
                                       f"saved again by transformers {transformers.__version__}"}
    for name, mt, arch, extra, why in DEFAULTS:
        cfg = {"architectures": [arch], "model_type": mt, **extra}
        _write(name, cfg)
        manifest[name] = {"kind": "defaults", "source": f"transformers {transformers.__version__} "
                          f"CONFIG_MAPPING[{mt!r}] defaults", "why": why}
    with open(os.path.join(OUT, "manifest.json"), "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.write("\n")
    return 0


def _write(name: str, cfg: dict) -> None:
    with open(os.path.join(OUT, name + ".json"), "w", encoding="utf-8") as fh:
        json.dump(cfg, fh, indent=1, sort_keys=True, default=str)
        fh.write("\n")


if __name__ == "__main__":
    raise SystemExit(main())
