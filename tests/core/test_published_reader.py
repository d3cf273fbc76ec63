"""Issue 26 item 6 in the core environment (no vLLM, no transformers): the built-in reader
reads published configs it had not seen (tests/data/model_configs_published) as vLLM 0.33
does. Expected values come from each file's own fields and the vLLM rule cited, never from
guard_core; tests/vllm/test_published_configs.py checks the whole set against vLLM itself.
On main each of these refused or misread."""

import json
import os

from guard_core.deployment.presets import load_model

HERE = os.path.dirname(os.path.abspath(__file__))
PUB = os.path.join(os.path.dirname(HERE), "data", "model_configs_published")


def cfg(name):
    with open(os.path.join(PUB, name + ".json")) as fh:
        return json.load(fh)


def keys(name, tp=1):
    f = load_model(os.path.join(PUB, name + ".json"))
    return f, sorted((g.kind, g.num_qo_heads, g.num_kv_heads, g.head_dim_qk, g.count)
                     for g in f.model_groups().per_rank(tp) if g.kind != "mla")


def test_n_head_n_embd():
    c = cfg("gpt2")
    assert keys("gpt2")[1] == [("full", c["n_head"], c["n_head"], c["n_embd"] // c["n_head"], c["n_layer"])]


def test_falcon_multi_query_is_one_kv_head():
    # vllm 0.33 FalconModelArchConfigConvertor: multi_query without new_decoder_architecture -> 1
    assert keys("falcon-7b")[1] == [("full", 71, 1, 4544 // 71, 32)]


def test_layers_block_type_only():
    c = cfg("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16-resaved")
    assert "hybrid_override_pattern" not in c
    n = c["layers_block_type"].count("full_attention")
    assert keys("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16-resaved")[1] == [("full", 32, 2, 128, n)]


def test_jamba_period_and_offset():
    assert keys("Jamba-v0.1")[1] == [("full", 32, 8, 128, 32 // 8)]


def test_per_layer_heads():
    c = cfg("laguna-per-layer-heads")
    per = c["num_attention_heads_per_layer"]
    assert keys("laguna-per-layer-heads")[1] == sorted(("full", h, 8, 128, per.count(h)) for h in set(per))


def test_thinker_config_from_transformers_defaults():
    # Qwen2.5-Omni-7B's thinker text model (transformers Qwen2_5OmniTextConfig defaults, which vLLM reads)
    assert keys("qwen2_5_omni-defaults")[1] == [("full", 28, 4, 128, 28)]


def test_defaults_fill_a_config_that_leaves_fields_out():
    # Gemma3TextConfig: head_dim 256 (not hidden 2304 / 8 heads), every 6th of 26 layers full
    assert keys("gemma3-text-defaults")[1] == [("full", 8, 4, 256, 4), ("sliding", 8, 4, 256, 22)]


def test_mla_as_vllm_decides_it():
    assert load_model(os.path.join(PUB, "deepseek_v4-defaults.json")).uses_mla  # compress ratios + head_dim
    assert load_model(os.path.join(PUB, "deepseek_v2-lite-defaults.json")).uses_mla  # kv_lora_rank 512 default
    # use_mla false DeepSeek-V2 layout: kv_lora_rank null, head dims 0 -> hidden_size / heads
    f, ks = keys("deepseek-vl2-tiny")
    assert not f.uses_mla and ks == [("full", 10, 10, 1280 // 10, 12)]
