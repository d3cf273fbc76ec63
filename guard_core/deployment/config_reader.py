"""The built-in reader of a published ``config.json``: the model as attention layer groups, each rule citing
the vLLM/transformers code it follows; what a config leaves out comes from ``model_defaults.json``.
"""

from __future__ import annotations

import os

from guard_core.deployment.config_layers import _int, _layer_shape, _per_layer_overrides
from guard_core.deployment.groups import AttentionGroup, GroupsError, KINDS, ModelGroups, merge
from guard_core.deployment.model_kinds import _layer_kinds

__all__ = ["MLA_MODEL_TYPES", "fill_defaults", "model_defaults", "read_config", "text_scope"]

# ---------------------------------------------------------------------------
# the built-in config reader


# vLLM 0.33 ModelArchConfigConvertorBase.is_deepseek_mla
# (transformers_utils/model_arch_config_convertor.py:294-341): these text model types run MLA
# when kv_lora_rank is set (DeepSeek-V4 style configs with compress ratios: when head_dim is
# set); ModelConfig.use_mla (config/model.py:2068-2081) turns it off for is_causal false
# (bidirectional embedding checkpoints). Any other kv_lora_rank model (MiniCPM3 ...) runs
# ordinary attention: its head size is ModelConfig.get_head_size's.
MLA_MODEL_TYPES = ("axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "deepseek_v41",
                   "dots3_note", "deepseek_mtp", "k3_dspark", "glm5_next", "glm5_next_text", "glm_moe_dsa",
                   "glm4_moe_lite", "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash",
                   "pangu_ultra_moe", "pangu_ultra_moe_mtp", "bailing_hybrid", "bailing_hybrid_mtp",
                   "bailing_hybrid_v3_mtp", "hy_v4", "hy_v4_mtp")

# transformers' declared config defaults per model_type (ci/dump_model_defaults.py, checked
# against the installed transformers by tests/vllm/test_model_defaults.py)
MODEL_DEFAULTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "model_defaults.json")
_LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers")
_defaults_cache: dict = {}


def model_defaults() -> dict:
    """{model_type: declared defaults} from the committed table (empty when it cannot be read)."""
    if "models" not in _defaults_cache:
        import json

        try:
            with open(MODEL_DEFAULTS_FILE, encoding="utf-8") as fh:
                t = json.load(fh)
            _defaults_cache["models"] = t.get("models", {}) if isinstance(t, dict) else {}
            _defaults_cache["transformers"] = t.get("transformers") if isinstance(t, dict) else None
        except (OSError, ValueError):
            _defaults_cache["models"] = {}
    return _defaults_cache["models"]


def fill_defaults(cfg: dict, inherited: dict | None = None, depth: int = 0) -> dict:
    """``cfg`` with what it leaves out taken from transformers' declared defaults for its
    ``model_type`` (a sub-config with no model type of its own takes its parent class's
    declared sub-config defaults), as transformers' config class fills them when vLLM loads
    the config. Only absent keys are filled (an explicit null stays null, as transformers
    keeps it); a list default (a per-layer pattern) only where the config sets no layer count
    of its own (transformers derives it from the count otherwise; the reader's rules do)."""
    if not isinstance(cfg, dict) or depth > 4:
        return cfg
    mt = cfg.get("model_type")
    own = model_defaults().get(mt) if isinstance(mt, str) else None
    d = own if own is not None else (inherited or {})
    out = dict(cfg)
    sets_layers = any(k in cfg for k in _LAYER_COUNT_KEYS)
    for k, v in d.items():
        if isinstance(v, dict):
            if k not in cfg:
                out[k] = fill_defaults({}, v, depth + 1)
            elif isinstance(cfg[k], dict):
                out[k] = fill_defaults(cfg[k], v, depth + 1)
            continue
        if k in cfg or (isinstance(v, list) and sets_layers):
            continue
        out[k] = v
    for k, v in cfg.items():  # a sub-config naming its own model type (llava's text_config: "llama")
        if isinstance(v, dict) and not isinstance(d.get(k), dict) and isinstance(v.get("model_type"), str):
            out[k] = fill_defaults(v, None, depth + 1)
    return out



_TEXT_SUBS = ("text_config", "llm_config", "language_config", "thinker_config")


def _text_path(cfg: dict, name: str) -> tuple[str, ...]:
    """The keys from the top level to the text model's config in ``cfg`` (``()``: the top level)."""
    for sub in _TEXT_SUBS:
        v = cfg.get(sub)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise GroupsError(f"{name}: {sub} must be an object")
        path: tuple[str, ...] = (sub,)
        if sub == "thinker_config" and isinstance(v.get("text_config"), dict):
            v, path = v["text_config"], (sub, "text_config")
        if v:
            return path
    return ()


def _walk(cfg: dict, path: tuple[str, ...]) -> dict:
    for k in path:
        cfg = cfg.get(k) if isinstance(cfg, dict) else None
    return cfg if isinstance(cfg, dict) else {}


def text_scope(cfg: dict, name: str = "config.json") -> tuple[dict, dict | None]:
    """(the text model's config, the defaults of its model type or None)."""
    return _walk(cfg, _text_path(cfg, name)), None


def scoped_reader(cfg: dict, name: str = "config.json"):
    """(``raw(*keys)``, the text model's config with defaults filled, the whole config with defaults
    filled) for ``cfg`` as the file states it.

    The rule (issue 42 item 6): a value the file states wins over any default, at the level where
    the file states it; transformers' declared defaults fill only what the file leaves out. So
    ``raw`` looks, for each key in the order given: in the text sub-config as stated, then (where
    the text model sits in a sub-config) at the top level as stated, then in the text
    sub-config's declared defaults, then the top level's. A multimodal config in the legacy
    flat layout (Qwen2-VL's published config.json: the text fields at the top level, no
    ``text_config``) is read from its top level, as transformers 5.20.2 builds its text config
    from those fields (models/qwen2_vl/configuration_qwen2_vl.py:171-179, "Hub configs are saved
    as flat dicts") and vLLM 0.33 reads that text config (transformers_utils/config.py:1258-1272,
    get_hf_text_config); the declared defaults of the nested ``text_config`` (Qwen2VLTextConfig:
    64 heads, 8 KV heads, 80 layers) fill only what neither level states. The text sub-config is
    the one the file states (``text_config``, ``llm_config``, ``language_config``,
    ``thinker_config.text_config``), else the one its class declares (a ``text_config`` the file
    leaves empty is no text model of its own)."""
    stated = cfg
    filled = fill_defaults(cfg)
    path = _text_path(stated, name) or _text_path(filled, name)
    text_filled = _walk(filled, path)
    levels = (_walk(stated, path), stated, text_filled, filled) if path else (stated, filled)

    def raw(*keys):
        # key by key (vLLM's getattr_iter over CONFIG_FIELD_ALIASES, vllm 0.33 config/utils.py:132, is
        # key-major over a config with its class's defaults filled): a spelling the class itself
        # does not read (FalconConfig in transformers 5.20.2 declares num_attention_heads and maps no
        # n_head, configuration_falcon.py:69) does not beat the class's own field
        for k in keys:
            for level in levels:
                if level.get(k) is not None:
                    return level[k]
        return None

    return raw, text_filled, filled


def read_config(cfg: dict, name: str = "config.json") -> ModelGroups:
    """The attention groups of a published config.json, as the servers read it.

    What the file states wins at the level where it states it; what it leaves out is taken from
    transformers' declared defaults for its model type (``fill_defaults``, ``scoped_reader``), as
    vLLM's config loading does. Each layer carries its own shape (``per_layer_config``, Gemma 4's
    ``global_head_dim``: ``_per_layer_overrides``)."""
    if not isinstance(cfg, dict):
        raise GroupsError(f"{name}: not a JSON object")
    raw, text, cfg = scoped_reader(cfg, name)
    archs = cfg.get("architectures") or text.get("architectures") or ["?"]
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "?"

    model_type = text.get("model_type") or cfg.get("model_type") or ""
    # heads: num_attention_heads, or the GPT-2/Falcon/BLOOM spelling n_head that transformers'
    # attribute_map reads as num_attention_heads (e.g. GPT2Config, FalconConfig, BloomConfig)
    heads_raw = raw("num_attention_heads", "n_head", "num_heads")
    if heads_raw is None:
        raise GroupsError(f"{name}: no num_attention_heads or n_head (looked in text_config/llm_config/"
                          "language_config/thinker_config and transformers' defaults for its model_type); "
                          "pass --qo-heads/--kv-heads/--head-dim instead")
    heads = _int(heads_raw, "num_attention_heads", name, hi=4096)
    # layers: num_hidden_layers; n_layer (GPT-2 attribute_map); ChatGLM's num_layers (vLLM's
    # ChatGLMConfig maps it, vllm transformers_utils/configs/chatglm.py attribute_map)
    layers = raw("num_hidden_layers", "n_layer", "num_layers")
    layers = _int(layers, "num_hidden_layers", name, hi=1 << 16) if layers is not None else 0
    max_len = raw("max_position_embeddings", "n_positions", "seq_length")
    max_len = max_len if type(max_len) is int and 0 < max_len <= (1 << 27) else None

    kv = _kv_heads(raw, model_type, heads, name)
    if _is_mla(raw, model_type):
        return _mla_groups(raw, name, arch, heads, layers, max_len)
    if raw("kv_lora_rank") is not None and model_type == "minicpm3":
        return _minicpm3_groups(raw, name, arch, heads, layers, max_len)

    hd, vdim = _head_dims(raw, name, heads, model_type)
    if model_type == "zamba2":
        # vllm 0.33 models/zamba2.py Zamba2Attention:195: Attention(num_heads, attention_head_dim)
        # with no num_kv_heads, so as many KV heads as query heads
        kv = heads
    if heads % kv:
        raise GroupsError(f"{name}: {heads} query heads are not a multiple of {kv} KV heads")
    window = raw("sliding_window")
    window = window if type(window) is int and window > 0 else None
    sinks = model_type == "gpt_oss"  # every gpt-oss layer has per-head sinks (vllm models/gpt_oss.py)

    blocks = raw("block_configs")
    if isinstance(blocks, list) and blocks:
        return _block_config_groups(blocks, name, arch, heads, hd, vdim, max_len)

    kinds = _layer_kinds(text, cfg, raw, model_type, layers, window, name)
    per_layer_q = _per_layer_heads(raw, len(kinds), name)
    overrides = _per_layer_overrides(raw, model_type, kinds, name)
    groups: list[AttentionGroup] = []
    other: dict[str, int] = {}
    for i, k in enumerate(kinds):
        if k not in KINDS:
            other[k] = other.get(k, 0) + 1
            continue
        q = per_layer_q[i] if per_layer_q else heads
        lk, lq, lkv, lhd, lvd, lwin = _layer_shape(overrides.get(i), k, name, q, kv, hd, vdim, window,
                                                   raw("v_head_dim") not in (None, 0))
        groups.append(_layer_group(lk, raw, name, model_type, lq, lkv, lhd, lvd, lwin, sinks))
    return ModelGroups(name, arch, merge(groups), len(kinds) or layers, tuple(other.items()), max_len,
                       "built-in reader", ())


# The model types whose config carries a ``multi_query`` flag that means one KV head (transformers
# 5.20.2 has it on exactly these two config classes):
# - Falcon (and its RefinedWeb spellings): one KV head unless new_decoder_architecture
#   (vllm 0.33 FalconModelArchConfigConvertor.get_total_num_kv_heads,
#   transformers_utils/model_arch_config_convertor.py:507-523);
# - GPT-BigCode (StarCoder, SantaCoder): transformers' GPTBigCodeConfig.__post_init__ sets
#   ``num_key_value_heads = 1 if self.multi_query else self.n_head``
#   (models/gpt_bigcode/configuration_gpt_bigcode.py:82-83; multi_query defaults to True, :78),
#   over any value the file states; vLLM 0.33 serves GPTBigCodeForCausalLM through its Transformers
#   backend (model_executor/models/registry.py:753) and reads the KV heads off that config through
#   CONFIG_FIELD_ALIASES (ModelArchConfigConvertorBase.get_total_num_kv_heads,
#   transformers_utils/model_arch_config_convertor.py:152-157; transformers_utils/config.py:56-63).
# model_type -> the field that, when true, makes the flag ignored (None: nothing does)
MULTI_QUERY_MODEL_TYPES = {"falcon": "new_decoder_architecture", "RefinedWeb": "new_decoder_architecture",
                           "RefinedWebModel": "new_decoder_architecture", "gpt_bigcode": None}


def _kv_heads(raw, model_type: str, heads: int, name: str) -> int:
    """KV heads as vLLM 0.33 reads them: the multi-query flag of the model types that have one
    first (MULTI_QUERY_MODEL_TYPES: one KV head; GPT-BigCode without it as many as query heads),
    else the first of CONFIG_FIELD_ALIASES["total_num_kv_heads"] set (n_head_kv, num_kv_heads,
    num_key_value_heads, multi_query_group_num, num_attention_groups;
    transformers_utils/config.py:56-63), else the query heads."""
    if model_type in MULTI_QUERY_MODEL_TYPES:
        ignored_by = MULTI_QUERY_MODEL_TYPES[model_type]
        if not (ignored_by and raw(ignored_by)) and raw("multi_query"):
            return 1
        if model_type == "gpt_bigcode":  # multi_query false: num_key_value_heads = n_head (:83)
            return heads
    kv_raw = raw("n_head_kv", "num_kv_heads", "num_key_value_heads")
    if kv_raw is None and raw("multi_query_attention") is not False:
        kv_raw = raw("multi_query_group_num")
    if kv_raw is None:
        kv_raw = raw("num_attention_groups")
    return _int(kv_raw, "num_key_value_heads", name, hi=4096) if kv_raw is not None else heads


def _is_mla(raw, model_type: str) -> bool:
    """vLLM 0.33 ``ModelConfig.use_mla`` (config/model.py:2068-2081) through
    ``is_deepseek_mla`` (transformers_utils/model_arch_config_convertor.py:294-341): one of
    MLA_MODEL_TYPES, causal, and kv_lora_rank set (DeepSeek-V4 configs, which carry
    compress ratios: head_dim set; vllm transformers_utils/deepseek_v4_utils.py
    get_compress_ratios reads compress_ratios or compress_rates, and transformers'
    DeepseekV4Config always fills compress_rates from default_compress_rates,
    configuration_deepseek_v4.py:144-145)."""
    if model_type not in MLA_MODEL_TYPES or raw("is_causal") is False:
        return False
    if model_type == "deepseek_v4" or raw("compress_ratios") is not None or raw("compress_rates") is not None:
        return raw("head_dim") is not None
    return raw("kv_lora_rank") is not None


def _mla_groups(raw, name: str, arch: str, heads: int, layers: int, max_len: int | None) -> ModelGroups:
    """MLA: FlashInfer's MLA planner and its own buffer (nothing planned in the guarded one)."""
    dqk = _pos(raw("qk_nope_head_dim"), 128) + _pos(raw("qk_rope_head_dim"), 64)
    g = AttentionGroup("mla", heads, heads, dqk, _pos(raw("v_head_dim"), 128), max(layers, 1))
    return ModelGroups(name, arch, (g,), layers, (), max_len, "built-in reader",
                       ("MLA: FlashInfer's MLA planner and its own buffer",))


def _pos(v, default: int) -> int:
    return v if type(v) is int and 0 < v <= 1 << 16 else default


def _minicpm3_groups(raw, name: str, arch: str, heads: int, layers: int, max_len: int | None) -> ModelGroups:
    """MiniCPM3 has kv_lora_rank but runs ordinary attention (vllm models/minicpm3.py:
    Attention(num_heads, qk_head_dim, num_kv_heads=num_heads), the value padded to qk_head_dim)."""
    dqk = _int(raw("qk_nope_head_dim"), "qk_nope_head_dim", name) + _int(raw("qk_rope_head_dim"),
                                                                           "qk_rope_head_dim", name)
    g = AttentionGroup("full", heads, heads, dqk, dqk, max(layers, 1))
    return ModelGroups(name, arch, (g,), layers, (), max_len, "built-in reader",
                       ("MiniCPM3: ordinary attention with qk_nope + qk_rope head dim, the value padded to it "
                        "(vLLM minicpm3.py)",))


def _per_layer_heads(raw, n: int, name: str) -> list[int] | None:
    """Per-layer query heads (Laguna: num_attention_heads_per_layer; vllm 0.33
    models/laguna.py:490-496 reads ``per_layer_heads[layer_idx]``), or None."""
    v = raw("num_attention_heads_per_layer")
    if v is None:
        return None
    if not isinstance(v, list) or len(v) < n:
        raise GroupsError(f"{name}: num_attention_heads_per_layer must list one head count per layer ({n})")
    return [_int(x, "num_attention_heads_per_layer", name, hi=4096) for x in v[:n]]


def _head_dims(raw, name: str, heads: int, model_type: str = "") -> tuple[int, int]:
    """(qk head dim, value head dim) as vLLM 0.33 ``get_head_size`` reads it
    (transformers_utils/model_arch_config_convertor.py:91-117): head_dim when set and above 0
    (a DeepSeek-V2 layout without MLA writes 0), PLaMo's hidden_size_per_head, Zamba2's
    attention_head_dim (Zamba2ModelArchConfigConvertor; transformers computes it as
    2 * hidden_size // heads, configuration_zamba2.py:115), ChatGLM's kv_channels and
    Nemotron-H's attention_head_dim, else hidden_size (n_embd, d_model) // heads."""
    if model_type == "zamba2":
        hd = raw("attention_head_dim")
        if hd is None:
            hidden = _int(raw("hidden_size"), "hidden_size", name)
            hd = 2 * hidden // heads
    else:
        hd = raw("head_dim")
        if hd == 0:
            hd = None
        if hd is None:
            hd = raw("hidden_size_per_head", "kv_channels", "attention_head_dim")
    if hd is None:
        hidden = raw("hidden_size", "n_embd", "d_model")
        if hidden is None:
            raise GroupsError(f"{name}: neither head_dim nor hidden_size (n_embd) given")
        hd = _int(hidden, "hidden_size", name) // heads
    hd = _int(hd, "head_dim", name, hi=2048)
    vdim = raw("v_head_dim")
    vdim = _int(vdim, "v_head_dim", name, hi=2048) if vdim not in (None, 0) else hd
    return hd, vdim


# transformers 5.20.2 config classes whose full-attention layers are wider than their sliding ones:
# with no ``per_layer_config`` in the file, ``__post_init__`` builds one, every ``full_attention``
# layer overridden to ``head_dim = global_head_dim`` (default 512, a keyword popped in
# ``__post_init__``, so no declared default in model_defaults.json) and, where set,
# ``num_key_value_heads = num_global_key_value_heads``:
#   gemma4_text           models/gemma4/configuration_gemma4.py:210-222 (gated by attention_k_eq_v, :177)
#   gemma4_unified_text   models/gemma4_unified/configuration_gemma4_unified.py:177-189 (the same)
#   diffusion_gemma_text  models/diffusion_gemma/configuration_diffusion_gemma.py:130-142 (declares no
#                         attention_k_eq_v: ``getattr(self, "attention_k_eq_v", True)``, ungated)
#   embedding_gemma2_text models/embedding_gemma2/configuration_embedding_gemma2.py:121-127 (always,
#                         num_global_key_value_heads default 1)
def _block_config_groups(blocks: list, name: str, arch: str, heads: int, hd: int, vdim: int,
                         max_len: int | None) -> ModelGroups:
    """Nemotron-NAS (Llama-3.3-Nemotron-Super-49B): per-layer block_configs;
    attention.no_op layers have no attention, the others n_heads_in_group query
    heads per KV head (vllm 0.33 models/nemotron_nas.py DeciLMDecoderLayer:134,148
    looks at no_op only; model_arch_config_convertor.py NemotronNasModelArchConfigConvertor)."""
    groups: list[AttentionGroup] = []
    other: dict[str, int] = {}
    for b in blocks:
        a = b.get("attention", {}) if isinstance(b, dict) else {}
        if a.get("no_op"):
            other["no attention (block no_op)"] = other.get("no attention (block no_op)", 0) + 1
            continue
        n = _int(a.get("n_heads_in_group"), "block_configs attention.n_heads_in_group", name, hi=4096)
        groups.append(AttentionGroup("full", heads, heads // n, hd, vdim, 1))
    return ModelGroups(name, arch, merge(groups), len(blocks), tuple(other.items()), max_len,
                       "built-in reader", ())


def _layer_group(k: str, raw, name: str, model_type: str, heads: int, kv: int, hd: int, vdim: int,
                 window: int | None, sinks: bool) -> AttentionGroup:
    """One attention layer of kind ``k``, with the per-kind overrides some models carry."""
    q, kvh, dqk, dvo, win, snk = heads, kv, hd, vdim, None, sinks
    if k == "sliding":
        win = window
    if model_type == "mimo_v2_flash" and k == "sliding":
        # MiMo-V2-Flash's SWA layers: their own heads and head dims, sink bias
        # (vllm models/mimo_v2_flash.py: swa_num_attention_heads, swa_num_key_value_heads,
        # swa_head_dim, swa_v_head_dim, add_swa_attention_sink_bias)
        # validated as the main fields are (integers in range: a fractional head count or a
        # 10**9 head dim is refused, never truncated or sized; issue 29)
        q = _int(raw("swa_num_attention_heads") or heads, "swa_num_attention_heads", name, hi=4096)
        kvh = _int(raw("swa_num_key_value_heads") or kv, "swa_num_key_value_heads", name, hi=4096)
        dqk = _int(raw("swa_head_dim") or hd, "swa_head_dim", name, hi=2048)
        dvo = _int(raw("swa_v_head_dim") or vdim, "swa_v_head_dim", name, hi=2048)
        win = raw("sliding_window_size", "sliding_window") or window
        win = _int(win, "sliding_window_size", name, hi=1 << 27) if win is not None else None
        snk = bool(raw("add_swa_attention_sink_bias"))
        if q % kvh:
            raise GroupsError(f"{name}: {q} SWA query heads are not a multiple of {kvh} SWA KV heads")
    if model_type == "mimo_v2_flash" and k == "full":
        snk = bool(raw("add_full_attention_sink_bias"))
    if k == "chunked":
        win = raw("attention_chunk_size")
        win = _int(win, "attention_chunk_size", name, hi=1 << 27) if win is not None else None
    return AttentionGroup(k, q, kvh, dqk, dvo, 1, win, snk)


