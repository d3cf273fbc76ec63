"""Issue 42 item 6, "The built-in reader reads what the file says", in the core environment (no vLLM,
no transformers). Each case was misread by the built-in reader before this change:

1. a multimodal config in the legacy flat layout (Qwen2-VL-7B-Instruct's published config.json:
   the text model's fields at the top level, no ``text_config``) was read as the declared defaults
   of the nested ``text_config`` (64 q / 8 kv heads x 80 layers) instead of 28 / 4 x 28;
2. multi-query GPT-BigCode (StarCoder) was read with as many KV heads as query heads, not one;
3. Gemma 4's full-attention layers without ``global_head_dim`` stated (transformers' default 512)
   or with their per-layer head dims in ``per_layer_config`` (how transformers 5.20.2 saves a
   Gemma 4 config) were sized at the sliding layers' head dim 256: an under-sizing.

The rule: a value the config states wins over any default, at the level where the file states
it; defaults fill only what the file leaves out; each attention layer group carries its own head
dim. Expected values come from each file's own fields and the transformers / vLLM 0.33 rule
cited, never from guard_core; tests/vllm/test_published_configs.py holds the same files to vLLM
0.33's own ModelConfig.
"""

import copy
import json
import os
import random

import pytest

from guard_core.deployment.config_reader import read_config
from guard_core.deployment.presets import facts_from_config, load_model

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(os.path.dirname(HERE), "data")
PUB = os.path.join(DATA, "model_configs_published")
CORPUS = os.path.join(DATA, "model_configs")


def cfg(name, root=PUB):
    with open(os.path.join(root, name + ".json")) as fh:
        return json.load(fh)


def rank_keys(facts, tp=1):
    return sorted((g.kind, g.num_qo_heads, g.num_kv_heads, g.head_dim_qk, g.head_dim_vo, g.count, g.window)
                  for g in facts.model_groups().per_rank(tp) if g.kind != "mla")


def keys(name, tp=1):
    return rank_keys(load_model(os.path.join(PUB, name + ".json")), tp)


def keys_of(config: dict, tp=1):
    return rank_keys(facts_from_config(config, "config.json"), tp)


# ---------------------------------------------------------------------------
# 1. the legacy flat layout: the file's top-level fields, not the nested text_config defaults


def qwen2_vl_expected(c, tp=1):
    # transformers 5.20.2 Qwen2VLConfig.__post_init__ (models/qwen2_vl/configuration_qwen2_vl.py:171-179)
    # builds text_config from the top-level fields of a flat hub config; vLLM 0.33 reads that
    # text config (transformers_utils/config.py:1258-1272). use_sliding_window false: every layer full.
    q, kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c["hidden_size"] // q
    return [("full", q // tp, max(1, kv // tp), hd, hd, c["num_hidden_layers"], None)]


def test_flat_qwen2_vl_reads_its_top_level_fields():
    c = cfg("Qwen2-VL-7B-Instruct")
    assert "text_config" not in c and c["model_type"] == "qwen2_vl"
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["num_hidden_layers"]) == (28, 4, 28)
    for tp in (1, 2, 4):
        assert keys("Qwen2-VL-7B-Instruct", tp) == qwen2_vl_expected(c, tp)  # main: 64/8 x 80


@pytest.mark.parametrize("text_config", [{}, {"model_type": "qwen2_vl_text"}, {"vocab_size": 152064}])
def test_flat_with_a_text_config_that_states_none_of_those_fields(text_config):
    # a text_config without the attention fields: the fields the file states at the top level win
    # over the nested class's declared defaults (64 / 8 x 80, hidden 8192)
    c = dict(cfg("Qwen2-VL-7B-Instruct"), text_config=text_config)
    assert keys_of(c) == qwen2_vl_expected(cfg("Qwen2-VL-7B-Instruct"))


def test_a_value_stated_in_the_text_config_wins_there():
    # stated at both levels: the text model's own level is where the file states the text model
    c = dict(cfg("Qwen2-VL-7B-Instruct"), text_config={"num_attention_heads": 16, "num_key_value_heads": 2,
                                                          "hidden_size": 2048})
    assert keys_of(c) == [("full", 16, 2, 128, 128, 28, None)]  # layers: the top level's 28, not 80


def test_headline_facts_follow_the_same_rule():
    f = facts_from_config(cfg("Qwen2-VL-7B-Instruct"), "Qwen2-VL-7B-Instruct.json")
    assert (f.num_attention_heads, f.num_key_value_heads, f.head_dim, f.num_layers) == (28, 4, 128, 28)


# ---------------------------------------------------------------------------
# 2. multi-query GPT-BigCode: one KV head


def test_starcoder_multi_query_is_one_kv_head():
    # transformers 5.20.2 GPTBigCodeConfig.__post_init__ (configuration_gpt_bigcode.py:82-83):
    # num_key_value_heads = 1 if multi_query else n_head; vLLM 0.33 reads num_key_value_heads
    # (transformers_utils/config.py:56-63). Head dim n_embd / n_head.
    c = cfg("starcoder")
    assert c["model_type"] == "gpt_bigcode" and c["multi_query"] is True
    hd = c["n_embd"] // c["n_head"]
    for tp in (1, 2, 8):  # one KV head, replicated per rank (ModelConfig.get_num_kv_heads: max(1, 1 // tp))
        assert keys("starcoder", tp) == [("full", c["n_head"] // tp, 1, hd, hd, c["n_layer"], None)]


def test_gpt_bigcode_multi_query_by_default():
    # multi_query left out: GPTBigCodeConfig declares it True (configuration_gpt_bigcode.py:78),
    # n_head 12, n_embd 768, n_layer 12
    assert keys("gpt_bigcode-defaults") == [("full", 12, 1, 64, 64, 12, None)]


def test_gpt_bigcode_without_multi_query_has_a_kv_head_per_query_head():
    c = dict(cfg("starcoder"), multi_query=False)
    assert keys_of(c) == [("full", 48, 48, 128, 128, 40, None)]


# ---------------------------------------------------------------------------
# 3. per-layer-type head dims: each group its own (Gemma 4's full layers at global_head_dim)


def gemma4_expected(t, full_hd, full_kv):
    # transformers 5.20.2 Gemma4TextConfig.__post_init__ (configuration_gemma4.py:190-222): full
    # layers take head_dim = global_head_dim (default 512) and, when attention_k_eq_v,
    # num_key_value_heads = num_global_key_value_heads; vLLM 0.33 models/gemma4.py:577-580 reads
    # each layer's config. Sliding layers keep head_dim / num_key_value_heads / sliding_window.
    lt = t["layer_types"]
    q, kv, hd = t["num_attention_heads"], t["num_key_value_heads"], t["head_dim"]
    return sorted([("full", q, full_kv, full_hd, full_hd, lt.count("full_attention"), None),
                   ("sliding", q, kv, hd, hd, lt.count("sliding_attention"), t["sliding_window"])])


def test_gemma4_defaults_full_layers_at_global_head_dim_512():
    # Gemma4TextConfig defaults: 30 layers, 8 q / 4 kv heads, head_dim 256, sliding_window 512,
    # layer_types every 6th layer full (the last forced full), global_head_dim 512 (a keyword
    # default popped in __post_init__, so not a declared field), attention_k_eq_v False
    lt = ["sliding_attention" if (i + 1) % 6 else "full_attention" for i in range(30)]
    lt[-1] = "full_attention"
    t = dict(num_attention_heads=8, num_key_value_heads=4, head_dim=256, sliding_window=512, layer_types=lt)
    assert keys("gemma4-text-defaults") == gemma4_expected(t, 512, 4)  # main: 30 x full 8/4/256


def test_gemma4_published_without_global_head_dim_takes_the_default():
    c = cfg("gemma-4-26B-A4B", CORPUS)
    t = c["text_config"]
    assert keys_of(c) == gemma4_expected(t, t["global_head_dim"], t["num_global_key_value_heads"])  # as published
    c2 = copy.deepcopy(c)
    del c2["text_config"]["global_head_dim"]
    assert keys_of(c2) == gemma4_expected(t, 512, t["num_global_key_value_heads"])  # main: full layers at 256


def resaved_gemma4(c):
    """The published Gemma 4 config as transformers 5.20.2 writes it back (to_dict): the
    __post_init__ keywords global_head_dim / num_global_key_value_heads popped (not written), the
    per-layer overrides written as per_layer_config with zero-padded layer keys
    (integrations/heterogeneity/configuration_utils.py:362-381), the globals kept."""
    c = copy.deepcopy(c)
    t = c["text_config"]
    over = {"head_dim": t.pop("global_head_dim"), "num_key_value_heads": t.pop("num_global_key_value_heads")}
    full = [i for i, k in enumerate(t["layer_types"]) if k == "full_attention"]
    width = len(str(max(full)))
    t["per_layer_config"] = {str(i).zfill(width): dict(over) for i in full}
    return c, over


def test_gemma4_per_layer_config_as_transformers_saves_it():
    c, over = resaved_gemma4(cfg("gemma-4-26B-A4B", CORPUS))
    t = c["text_config"]
    assert "global_head_dim" not in t and "05" in t["per_layer_config"]
    # main: the full layers at head_dim 256 with 8 KV heads (the sliding layers' shape)
    assert keys_of(c) == gemma4_expected(t, over["head_dim"], over["num_key_value_heads"])
    for tp in (2, 8):  # the per-layer KV heads split (or replicate) per rank like any other
        full = [k for k in keys_of(c, tp) if k[0] == "full"]
        assert full == [("full", t["num_attention_heads"] // tp, max(1, over["num_key_value_heads"] // tp),
                         512, 512, t["layer_types"].count("full_attention"), None)]


def test_gemma4_resaved_by_transformers():
    # tests/data/model_configs/gemma-4-26B-A4B.json loaded and saved again by transformers 5.20.2
    # (ci/make_published_configs.py): the same shape as resaved_gemma4 above, written by transformers
    c = cfg("gemma-4-26B-A4B-resaved")
    t = c["text_config"]
    assert "global_head_dim" not in t and t["per_layer_config"]["05"] == {"head_dim": 512, "num_key_value_heads": 2}
    assert keys("gemma-4-26B-A4B-resaved") == gemma4_expected(t, 512, 2)  # main: full layers 16/8/256
    assert resaved_gemma4(cfg("gemma-4-26B-A4B", CORPUS))[0]["text_config"]["per_layer_config"] == t["per_layer_config"]


def test_per_layer_config_is_read_on_any_model():
    # transformers 5.20.2 PreTrainedConfig reads per_layer_config on every config class
    # (configuration_utils.py:493-508); a layer's value is its override, else the whole model's
    # (integrations/heterogeneity/configuration_utils.py:194-208)
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_attention_heads": 32,
         "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 4096, "num_hidden_layers": 4,
         "per_layer_config": {"1": {"head_dim": 256}, "3": {"num_key_value_heads": 4}}}
    assert keys_of(c) == sorted([("full", 32, 8, 128, 128, 2, None), ("full", 32, 8, 256, 256, 1, None),
                                 ("full", 32, 4, 128, 128, 1, None)])


def test_the_largest_head_dim_heads_the_facts():
    # the headline (what a one-group consumer sizes) is the group with the largest need per token:
    # the 512 full layers, never the 256 sliding ones
    c, _ = resaved_gemma4(cfg("gemma-4-26B-A4B", CORPUS))
    f = facts_from_config(c, "gemma-4-26B-A4B-resaved.json")
    assert f.head_dim == 512


# ---------------------------------------------------------------------------
# property: in a flat layout, every field stated at the top level is what the reader returns


def _multimodal_model_types():
    """Model types whose transformers class nests the text model (a declared text sub-config) and
    runs ordinary attention (transformers 5.20.2 defaults table, read as data)."""
    with open(os.path.join(os.path.dirname(HERE), "..", "guard_core", "deployment", "model_defaults.json")) as fh:
        models = json.load(fh)["models"]
    out = []
    for mt, d in sorted(models.items()):
        for sub in ("text_config", "llm_config", "language_config", "thinker_config"):
            if isinstance(d.get(sub), dict):
                out.append((mt, sub))
                break
    return out


MULTIMODAL = _multimodal_model_types()


def test_the_generator_covers_the_multimodal_types():
    assert len(MULTIMODAL) >= 40 and ("qwen2_vl", "text_config") in MULTIMODAL


@pytest.mark.parametrize("mt,sub", MULTIMODAL, ids=[m for m, _ in MULTIMODAL])
def test_flat_layout_property(mt, sub):
    rng = random.Random(f"issue42-{mt}")
    for trial in range(6):
        kv = rng.choice([1, 2, 4, 8])
        heads = kv * rng.choice([1, 2, 3, 4, 7])
        hd = rng.choice([64, 80, 96, 128, 256])
        layers = rng.randint(1, 64)
        c = {"model_type": mt, "num_attention_heads": heads, "num_key_value_heads": kv, "num_hidden_layers": layers,
             "head_dim": hd, "hidden_size": heads * hd,
             # the wider full layers some families have (Gemma 4): stated too, so every layer's
             # shape is stated at the top level
             "global_head_dim": hd, "num_global_key_value_heads": kv}
        # no text sub-config, an empty one, or one that states none of these fields
        variant = trial % 3
        if variant == 1:
            c[sub] = {}
        elif variant == 2:
            c[sub] = {"vocab_size": 1000}
        mg = read_config(c, f"{mt}.json")
        what = (mt, variant, c)
        assert mg.num_layers == layers, what
        if mg.uses_mla:  # the text model's declared defaults make it MLA (kv_lora_rank): no KV heads to check
            assert all(g.num_qo_heads == heads for g in mg.groups), what
            continue
        assert mg.planned() or mg.other_layers, what
        for g in mg.planned():
            assert (g.num_qo_heads, g.num_kv_heads, g.head_dim_qk) == (heads, kv, hd), (what, g)
