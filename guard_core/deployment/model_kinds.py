"""The model-kind table: how each layout names its layers (one row per layout, with the upstream file:line),
and the config spellings of attention kinds. Read by the built-in reader (``config_reader``).
"""

from __future__ import annotations


from guard_core.deployment.groups import GroupsError

__all__ = ["LAYER_KIND_RULES"]

_ATTN_TYPES = {"full_attention": "full", "attention": "full", "global": "full", "sliding_attention": "sliding",
               "local_sliding": "sliding", "sliding": "sliding", "chunked_attention": "chunked"}

# ---------------------------------------------------------------------------
# the model-kind table: how each layout names its layers. One row per layout, in order; the
# first row whose rule answers gives every layer's kind (full/sliding/chunked, or a label for
# a layer outside FlashInfer's attention planners). A new layout is one row here and one
# config in tests/data/model_configs_published (with its source), checked against vLLM's
# own reading by tests/vllm/test_published_configs.py.

_BLOCK_TYPES = {"attention": "full", "full_attention": "full", "hybrid": "full", "sliding_attention": "sliding",
                "mamba": "mamba", "linear_attention": "linear attention"}


def _kinds_layer_types(raw, mt, n, window, name):
    lt = raw("layer_types")
    if not (isinstance(lt, list) and lt):
        return None
    if not all(isinstance(t, str) for t in lt):
        raise GroupsError(f"{name}: layer_types must be a list of layer kinds (strings)")
    # Zamba2's layer_types is its layers_block_type (transformers Zamba2Config.attribute_map), where
    # "hybrid" is the shared attention block (vllm 0.33 config/model.py:1757-1762)
    names = dict(_ATTN_TYPES, hybrid="full") if mt == "zamba2" else _ATTN_TYPES
    return [names.get(t, t.replace("_", " ")) for t in (lt[:n] if n else lt)]


def _kinds_layers_block_type(raw, mt, n, window, name):
    lbt = raw("layers_block_type")
    if not (isinstance(lbt, list) and lbt):
        return None
    if not all(isinstance(t, str) for t in lbt):
        raise GroupsError(f"{name}: layers_block_type must be a list of layer kinds (strings)")
    # "hybrid" is an attention layer only in Zamba2 (the shared transformer block)
    names = dict(_BLOCK_TYPES, hybrid="full" if mt == "zamba2" else "hybrid")
    return [names.get(t, t.replace("_", " ")) for t in lbt]


def _kinds_zamba2_default(raw, mt, n, window, name):
    if mt != "zamba2":
        return None
    return (["mamba"] + (["mamba"] * 5 + ["full"]) * 7 + ["mamba"] * 4 + ["full"] + ["mamba"] * 3 + ["full"]
            + ["mamba"] * 2)


def _kinds_jamba(raw, mt, n, window, name):
    period, offset = raw("attn_layer_period"), raw("attn_layer_offset")
    if mt != "jamba" or type(period) is not int or type(offset) is not int or period <= 0:
        return None
    return ["full" if i % period == offset else "mamba" for i in range(n)]


def _kinds_hybrid_override(raw, mt, n, window, name):
    pat = raw("hybrid_override_pattern")
    if not (isinstance(pat, str) and pat):
        return None
    names = {"*": "full", "M": "mamba", "-": "mlp", "E": "moe"}
    return [names.get(c, f"block {c}") for c in pat]


def _kinds_mimo(raw, mt, n, window, name):
    hp = raw("hybrid_layer_pattern")
    if not (isinstance(hp, list) and hp and mt == "mimo_v2_flash"):
        return None
    return ["sliding" if v == 1 else "full" for v in hp]


def _kinds_interval(raw, mt, n, window, name):
    interval = raw("full_attention_interval")
    if not (type(interval) is int and interval > 0):
        return None
    return ["full" if (i + 1) % interval == 0 else "linear attention" for i in range(n)]


def _kinds_llama4(raw, mt, n, window, name):
    chunk = raw("attention_chunk_size")
    if not (mt in ("llama4", "llama4_text") and type(chunk) is int and chunk > 0):
        return None
    nope = raw("no_rope_layers")
    if not (isinstance(nope, list) and len(nope) == n):
        iv = raw("no_rope_layer_interval") or 4
        nope = [int((i + 1) % iv != 0) for i in range(n)]
    return ["chunked" if v else "full" for v in nope]


def _kinds_gemma2(raw, mt, n, window, name):
    if not (mt == "gemma2" and window):
        return None
    return ["sliding" if (i + 1) % 2 else "full" for i in range(n)]


def _kinds_gemma3(raw, mt, n, window, name):
    if not (mt in ("gemma3", "gemma3_text") and window):
        return None
    pattern = raw("sliding_window_pattern") or 6
    return ["sliding" if (i + 1) % pattern else "full" for i in range(n)]


_GEMMA4_FAMILY = ("gemma4", "gemma4_text", "gemma4_unified", "gemma4_unified_text", "diffusion_gemma",
                  "diffusion_gemma_text", "embedding_gemma2", "embedding_gemma2_text")


def _kinds_gemma4(raw, mt, n, window, name):
    if mt not in _GEMMA4_FAMILY:
        return None
    # a fixed 5:1 pattern (configuration_gemma4.py:190-195; embedding_gemma2 reads a
    # sliding_window_pattern keyword, configuration_embedding_gemma2.py:97), the last layer full (:197-201)
    pattern = (raw("sliding_window_pattern") or 6) if mt.startswith("embedding_gemma2") else 6
    if type(pattern) is not int or pattern < 1:
        raise GroupsError(f"{name}: sliding_window_pattern must be a positive integer, got {pattern!r}"[:300])
    kinds = ["sliding" if (i + 1) % pattern else "full" for i in range(n)]
    return kinds[:-1] + ["full"] if kinds else kinds


def _kinds_qwen2_window(raw, mt, n, window, name):
    if raw("use_sliding_window") is False:
        return ["full"] * n
    if raw("use_sliding_window") is True and window:
        mwl = raw("max_window_layers") or n
        return ["sliding" if i >= mwl else "full" for i in range(n)]
    return None


# (rule, where the layout is defined upstream)
LAYER_KIND_RULES = (
    (_kinds_layer_types, "layer_types as written (transformers' convention; vllm 0.33 config/model.py:1773-1783)"),
    (_kinds_layers_block_type, "layers_block_type (Jamba, Zamba2, Nemotron-H re-saved by transformers 5: "
                               "vllm 0.33 config/model.py:1751-1764, models/zamba2.py:751-755, "
                               "models/jamba.py:322; transformers configuration_nemotron_h.py:84)"),
    (_kinds_zamba2_default, "Zamba2 without layers_block_type: transformers configuration_zamba2.py:128-137"),
    (_kinds_jamba, "Jamba: attention every attn_layer_period-th layer from attn_layer_offset "
                   "(transformers configuration_jamba.py:99-103, which vllm models/jamba.py:322 reads)"),
    (_kinds_hybrid_override, "Nemotron-H hybrid_override_pattern: '*' attention, 'M' Mamba, '-' MLP, 'E' MoE "
                             "(vllm models/nemotron_h.py; transformers configuration_nemotron_h.py:158-163)"),
    (_kinds_mimo, "MiMo-V2-Flash hybrid_layer_pattern: 1 sliding, 0 full (vllm models/mimo_v2.py)"),
    (_kinds_interval, "full_attention_interval: every interval-th layer full, the rest linear attention "
                      "(transformers Qwen3NextConfig.layer_types)"),
    (_kinds_llama4, "Llama 4: chunked local attention on RoPE layers, full on NoPE layers (vllm "
                    "models/llama4.py Llama4Attention; transformers Llama4TextConfig.no_rope_layers)"),
    (_kinds_gemma2, "Gemma 2 without layer_types: sliding on even layers (transformers Gemma2Config)"),
    (_kinds_gemma3, "Gemma 3 without layer_types: every sliding_window_pattern-th (6) layer full "
                    "(transformers Gemma3TextConfig)"),
    (_kinds_gemma4, "Gemma 4 family without layer_types: every 6th layer full and the last "
                    "(transformers 5.20.2 Gemma4TextConfig.__post_init__, configuration_gemma4.py:190-201)"),
    (_kinds_qwen2_window, "Qwen2 use_sliding_window / max_window_layers (transformers Qwen2Config.layer_types)"),
)


def _layer_kinds(text, cfg, raw, model_type, layers, window, name) -> list[str]:
    """The kind of each layer (LAYER_KIND_RULES, first that answers), else all full attention."""
    for rule, _source in LAYER_KIND_RULES:
        kinds = rule(raw, model_type, layers, window, name)
        if kinds is not None:
            return kinds
    return ["full"] * layers


