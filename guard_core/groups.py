"""A model's attention as layer groups: the unit the workspace is sized by.

A model is a list of groups, each ``(q heads, kv heads, head dim qk/vo,
kind, window, sinks, count)`` for the whole model; ``per_rank(tp)`` splits the
heads the way the servers do. Every group that runs through FlashInfer's
planners is sized and the need is the largest over groups and phases (vLLM
0.33 shares one buffer across its attention groups, ``v1/worker/gpu/attn_utils.py``;
earlier lines give each group's builder its own buffer of the same default size,
so the largest need is what must fit either way).

Kinds: ``full`` (causal attention over the whole context), ``sliding``
(a window of ``window`` tokens), ``chunked`` (Llama 4's chunked local attention,
``window`` = chunk size), ``mla`` (FlashInfer's MLA planner and its own buffer:
not sized here). Layers that run no attention through FlashInfer (Mamba, linear
attention, Nemotron-NAS no-op blocks) are counted in ``other_layers``.

``read_config`` is the built-in reader of a published ``config.json``: it mirrors
what the servers read (each rule cites the server or transformers code it
follows) and is checked against vLLM's and SGLang's own readings over a corpus of
real configs (``tests/data/model_configs``, ``tests/vllm/test_model_groups.py``,
``tests/sglang/test_model_groups.py``). Where a server is installed, its own
reading is preferred (``server_groups``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace

__all__ = ["GroupsError", "rank_groups_from", "read_config", "read_with_server", "reader_main", "server_view",
           "single"]

KINDS = ("full", "sliding", "chunked", "mla")


class GroupsError(ValueError):
    """A config this reader cannot turn into attention groups (one line)."""


@dataclass(frozen=True)
class AttentionGroup:
    """Layers of one attention shape and kind, for the whole model (before TP)."""

    kind: str
    num_qo_heads: int
    num_kv_heads: int
    head_dim_qk: int
    head_dim_vo: int
    count: int
    window: int | None = None  # sliding window / chunk size in tokens
    sinks: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown attention kind {self.kind!r}")

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.num_qo_heads, self.num_kv_heads, self.head_dim_qk, self.head_dim_vo)

    def label(self) -> str:
        if self.kind == "sliding":
            return f"sliding window {self.window}" if self.window else "sliding window"
        if self.kind == "chunked":
            return f"chunked local attention {self.window}" if self.window else "chunked local attention"
        if self.kind == "mla":
            return "MLA (not applicable: FlashInfer's MLA planner, its own buffer)"
        return "full attention"


@dataclass(frozen=True)
class RankGroup:
    """One group per rank: heads after tensor parallelism."""

    kind: str
    num_qo_heads: int
    num_kv_heads: int
    head_dim_qk: int
    head_dim_vo: int
    count: int
    window: int | None = None
    sinks: bool = False

    @property
    def key(self) -> tuple:
        return (self.kind, self.num_qo_heads, self.num_kv_heads, self.head_dim_qk, self.head_dim_vo, self.count)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "num_qo_heads": self.num_qo_heads, "num_kv_heads": self.num_kv_heads,
                "head_dim_qk": self.head_dim_qk, "head_dim_vo": self.head_dim_vo, "count": self.count,
                "window": self.window, "sinks": self.sinks}


def rank_heads(q: int, kv: int, tp: int, name: str = "model") -> tuple[int, int]:
    """Query and KV heads per rank. Both servers split query heads evenly and
    KV heads evenly where there are at least ``tp`` of them, else replicate one
    per rank (vLLM ``ModelConfig.get_num_kv_heads``: ``max(1, total // tp)``;
    ``QKVParallelLinear`` requires ``tp % kv == 0`` then, vllm 0.33
    ``model_executor/layers/linear.py``)."""
    if tp <= 0:
        raise GroupsError(f"--tp must be positive, got {tp}")
    if q % tp:
        raise GroupsError(f"{name}: {q} query heads are not divisible by tensor parallel size {tp}")
    if kv >= tp:
        if kv % tp:
            raise GroupsError(f"{name}: {kv} KV heads are not divisible by tensor parallel size {tp}")
        return q // tp, kv // tp
    if tp % kv:
        raise GroupsError(f"{name}: tensor parallel size {tp} is not a multiple of {kv} KV heads")
    return q // tp, 1


@dataclass(frozen=True)
class ModelGroups:
    name: str
    architecture: str
    groups: tuple[AttentionGroup, ...]
    num_layers: int = 0
    other_layers: tuple[tuple[str, int], ...] = ()  # (kind, count) of layers outside FlashInfer's planners
    max_len: int | None = None
    source: str = "built-in reader"
    notes: tuple[str, ...] = field(default=())

    @property
    def uses_mla(self) -> bool:
        return bool(self.groups) and all(g.kind == "mla" for g in self.groups)

    @property
    def attention_layers(self) -> int:
        return sum(g.count for g in self.groups)

    def planned(self) -> tuple[AttentionGroup, ...]:
        """The groups FlashInfer's planners size in the guarded buffer (not MLA)."""
        return tuple(g for g in self.groups if g.kind != "mla")

    def per_rank(self, tp: int = 1) -> tuple[RankGroup, ...]:
        """Groups per rank, merged where they coincide (same kind and shape)."""
        out: dict[tuple, RankGroup] = {}
        for g in self.groups:
            if g.kind == "mla":
                q, kv = rank_heads(g.num_qo_heads, g.num_qo_heads, tp, self.name)[0], 1
            else:
                q, kv = rank_heads(g.num_qo_heads, g.num_kv_heads, tp, self.name)
            k = (g.kind, q, kv, g.head_dim_qk, g.head_dim_vo, g.window, g.sinks)
            if k in out:
                out[k] = replace(out[k], count=out[k].count + g.count)
            else:
                out[k] = RankGroup(g.kind, q, kv, g.head_dim_qk, g.head_dim_vo, g.count, g.window, g.sinks)
        return tuple(out.values())

    def describe(self) -> list[str]:
        lines = []
        for g in self.groups:
            hd = f"head_dim {g.head_dim_qk}" + (f"/{g.head_dim_vo}" if g.head_dim_vo != g.head_dim_qk else "")
            lines.append(f"{g.count} layers {g.label()}: {g.num_qo_heads} q / {g.num_kv_heads} kv heads, {hd}"
                         + (", attention sinks" if g.sinks else ""))
        for kind, n in self.other_layers:
            lines.append(f"{n} layers {kind} (outside FlashInfer's attention planners)")
        return lines

    def as_dict(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "source": self.source,
                "num_layers": self.num_layers, "max_len": self.max_len,
                "groups": [dict(kind=g.kind, num_qo_heads=g.num_qo_heads, num_kv_heads=g.num_kv_heads,
                                head_dim_qk=g.head_dim_qk, head_dim_vo=g.head_dim_vo, count=g.count,
                                window=g.window, sinks=g.sinks) for g in self.groups],
                "other_layers": [{"kind": k, "count": n} for k, n in self.other_layers],
                "notes": list(self.notes)}


def merge(groups) -> tuple[AttentionGroup, ...]:
    """Groups of the same kind and shape as one (counts added), first-seen order."""
    out: dict[tuple, AttentionGroup] = {}
    for g in groups:
        k = (g.kind, g.shape, g.window, g.sinks)
        out[k] = replace(out[k], count=out[k].count + g.count) if k in out else g
    return tuple(out.values())


def single(name: str, architecture: str, q: int, kv: int, dqk: int, dvo: int | None = None, layers: int = 0,
           attention_layers: int | None = None, kind: str = "full", source: str = "given") -> ModelGroups:
    """One group (a preset, or --qo-heads/--kv-heads/--head-dim)."""
    n = layers if attention_layers is None else attention_layers
    other = ((("other", layers - n),) if layers > n else ())
    g = AttentionGroup(kind, q, kv, dqk, dvo or dqk, max(n, 1))
    return ModelGroups(name, architecture, (g,), layers, other, None, source)


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


_ATTN_TYPES = {"full_attention": "full", "attention": "full", "global": "full", "sliding_attention": "sliding",
               "local_sliding": "sliding", "sliding": "sliding", "chunked_attention": "chunked"}


def _int(v, what: str, name: str, lo: int = 1, hi: int = 1 << 20):
    if type(v) is int and lo <= v <= hi:
        return v
    raise GroupsError(f"{name}: {what} must be an integer from {lo} to {hi}, got {v!r}"[:300])


def text_scope(cfg: dict, name: str = "config.json") -> tuple[dict, dict | None]:
    """(the text model's config, the defaults of its model type or None)."""
    for sub in ("text_config", "llm_config", "language_config", "thinker_config"):
        v = cfg.get(sub)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise GroupsError(f"{name}: {sub} must be an object")
        if sub == "thinker_config" and isinstance(v.get("text_config"), dict):
            v = v["text_config"]
        if v:
            return v, None
    return cfg, None


def _raw_reader(cfg: dict, text: dict, defaults: dict | None):
    """``raw(*keys)``: the first key set in the text scope, then its defaults, then the top level."""
    def raw(*keys):
        for k in keys:
            if text.get(k) is not None:
                return text[k]
        if defaults:
            for k in keys:
                if defaults.get(k) is not None:
                    return defaults[k]
        if text is not cfg:
            for k in keys:
                if cfg.get(k) is not None:
                    return cfg[k]
        return None

    return raw


def read_config(cfg: dict, name: str = "config.json") -> ModelGroups:
    """The attention groups of a published config.json, as the servers read it.

    What the config leaves out is taken from transformers' declared defaults for its model
    type first (``fill_defaults``), as vLLM's config loading does."""
    if not isinstance(cfg, dict):
        raise GroupsError(f"{name}: not a JSON object")
    cfg = fill_defaults(cfg)
    text, defaults = text_scope(cfg, name)
    archs = cfg.get("architectures") or text.get("architectures") or ["?"]
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else "?"
    raw = _raw_reader(cfg, text, defaults)

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
    groups: list[AttentionGroup] = []
    other: dict[str, int] = {}
    for i, k in enumerate(kinds):
        if k not in KINDS:
            other[k] = other.get(k, 0) + 1
            continue
        q = per_layer_q[i] if per_layer_q else heads
        groups.append(_layer_group(k, raw, name, model_type, q, kv, hd, vdim, window, sinks))
    return ModelGroups(name, arch, merge(groups), len(kinds) or layers, tuple(other.items()), max_len,
                       "built-in reader", ())


def _kv_heads(raw, model_type: str, heads: int, name: str) -> int:
    """KV heads as vLLM 0.33 reads them: Falcon's multi-query flag first (one KV head unless
    new_decoder_architecture; ``FalconModelArchConfigConvertor.get_total_num_kv_heads``,
    transformers_utils/model_arch_config_convertor.py:503-520), else the first of
    CONFIG_FIELD_ALIASES["total_num_kv_heads"] set (n_head_kv, num_kv_heads,
    num_key_value_heads, multi_query_group_num, num_attention_groups;
    transformers_utils/config.py:56-63), else the query heads."""
    if model_type in ("falcon", "RefinedWeb", "RefinedWebModel") and not raw("new_decoder_architecture") \
            and raw("multi_query"):
        return 1
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
    if model_type in ("gemma4", "gemma4_text") and k == "full":
        # Gemma 4 full-attention layers: global_head_dim; num_global_key_value_heads when
        # attention_k_eq_v (vllm models/gemma4.py Gemma4DecoderLayer.__init__)
        dqk = dvo = _int(raw("global_head_dim") or hd, "global_head_dim", name, hi=2048)
        gkv = raw("num_global_key_value_heads") if raw("attention_k_eq_v") else None
        kvh = _int(gkv, "num_global_key_value_heads", name, hi=4096) if gkv is not None else kv
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
    return [_ATTN_TYPES.get(t, t.replace("_", " ")) for t in (lt[:n] if n else lt)]


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
    (_kinds_qwen2_window, "Qwen2 use_sliding_window / max_window_layers (transformers Qwen2Config.layer_types)"),
)


def _layer_kinds(text, cfg, raw, model_type, layers, window, name) -> list[str]:
    """The kind of each layer (LAYER_KIND_RULES, first that answers), else all full attention."""
    for rule, _source in LAYER_KIND_RULES:
        kinds = rule(raw, model_type, layers, window, name)
        if kinds is not None:
            return kinds
    return ["full"] * layers


def server_view(groups, framework: str) -> tuple[RankGroup, ...]:
    """The rank groups as the server's FlashInfer backend plans them.

    vLLM builds one metadata builder per KV-cache group, each with its own heads
    and head dims (``v1/attention/backends/flashinfer.py``): the groups as read.
    SGLang plans every layer with one shape (``layers/attention/flashinfer_backend.py``
    ``FlashInferIndicesUpdaterDecode``: ``get_max_num_attention_heads() // tp``, the
    model's ``get_num_kv_heads(tp)`` and ``head_dim``; 0.5.23 lines 1593-1603): one
    group of every attention layer, the full-attention layers' shape with the most
    query heads, sized without its window (a window only lowers the need)."""
    groups = tuple(groups)
    if framework != "sglang":
        return groups
    att = [g for g in groups if g.kind != "mla"]
    if not att:
        return groups
    base = next((g for g in att if g.kind == "full"), att[0])
    return (RankGroup("full", max(g.num_qo_heads for g in att), base.num_kv_heads, base.head_dim_qk,
                      base.head_dim_vo, sum(g.count for g in att), None, any(g.sinks for g in att)),)


# ---------------------------------------------------------------------------
# the server's own reading

SERVER_LABEL = {"vllm": "vLLM's own config code", "sglang": "SGLang's own config code"}
SERVER_TIMEOUT_S = 180
_MARK = "FLASHINFER_GUARD_GROUPS "


def rank_groups_from(rows) -> tuple[RankGroup, ...]:
    return tuple(RankGroup(r["kind"], int(r["num_qo_heads"]), int(r["num_kv_heads"]), int(r["head_dim_qk"]),
                           int(r["head_dim_vo"] or r["head_dim_qk"]), int(r["count"]), r.get("window"),
                           bool(r.get("sinks"))) for r in rows)


_server_answers: dict = {}


def _answer_key(framework: str, path: str, environ, python):
    try:
        st = os.stat(path)
    except OSError:
        return None
    env = os.environ if environ is None else environ
    return (framework, os.path.realpath(path), st.st_mtime_ns, st.st_size, python,
            tuple(sorted((k, v) for k, v in env.items() if k.startswith(("VLLM_", "SGLANG_", "HF_", "TRANSFORMERS_")))))


def run_server_reader(framework: str, path: str, tps=(1,), environ=None, python: str | None = None) -> dict:
    """Run ``<framework>_guard.model_reader`` (the server's own ModelConfig, offline)
    in a subprocess of ``python`` (default: this interpreter); its JSON answer, or
    ``{"ok": False, "refusal": ...}``. Nothing of the server is imported here. One run per
    file and process: an answer already in hand that covers every TP asked is reused
    (``plan`` asks once while reading the model and again per rank)."""
    key = _answer_key(framework, path, environ, python)
    done = _server_answers.get(key) if key else None
    if done is not None and (not done.get("ok") or all(str(int(t)) in done.get("groups", {}) for t in tps)):
        return done
    res = _run_server_reader(framework, path, tps, environ, python)
    if key:
        _server_answers[key] = res
    return res


def _run_server_reader(framework: str, path: str, tps, environ, python) -> dict:
    import json
    import os
    import subprocess
    import sys

    env = dict(os.environ if environ is None else environ)
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    import shutil
    import tempfile

    tmp = None
    if os.path.isfile(path) and os.path.basename(path) != "config.json":
        # the server's config code reads a directory's config.json: a file under another
        # name is read from a private copy named so
        tmp = tempfile.mkdtemp(prefix="flashinfer-guard-model-")
        try:
            shutil.copyfile(path, os.path.join(tmp, "config.json"))
        except OSError as exc:
            shutil.rmtree(tmp, True)
            return {"ok": False, "refusal": f"{framework} reader: cannot copy {path} ({type(exc).__name__})"}
        path = os.path.join(tmp, "config.json")
    cmd = [python or sys.executable, "-m", f"{framework}_guard.model_reader", path]
    for tp in tps:
        cmd += ["--tp", str(int(tp))]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=SERVER_TIMEOUT_S, env=env)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "refusal": f"{framework} reader did not run ({type(exc).__name__})"}
    finally:
        if tmp:
            shutil.rmtree(tmp, True)
    for line in reversed(p.stdout.splitlines()):
        if line.startswith(_MARK):
            try:
                return json.loads(line[len(_MARK):])
            except ValueError:
                break
    tail = " ".join((p.stderr or "").strip().splitlines()[-1:])[:200]
    return {"ok": False, "refusal": f"{framework} reader gave no answer (exit {p.returncode}: {tail})"}


def read_with_server(framework: str, path: str, tp: int, environ=None) -> dict:
    """The rank groups at ``tp`` as the installed server reads them:
    ``{"ok", "label", "groups": (RankGroup, ...), "use_mla"}`` or ``{"ok": False, "refusal"}``."""
    res = run_server_reader(framework, path, (tp,), environ)
    label = SERVER_LABEL.get(framework, framework)
    if not res.get("ok"):
        return {"ok": False, "label": label, "refusal": res.get("refusal")}
    rows = res.get("groups", {}).get(str(tp))
    if not isinstance(rows, list):
        return {"ok": False, "label": label, "refusal": (rows or {}).get("refusal", "no groups")}
    return {"ok": True, "label": label, "groups": rank_groups_from(rows), "use_mla": bool(res.get("use_mla")),
            "raw": res}


def reader_main(read, server: str, prog: str, argv=None) -> int:
    """The command line of a server's own config reader (vllm_guard/sglang_guard ``model_reader``):
    one ``FLASHINFER_GUARD_GROUPS <json>`` line per path, never a traceback."""
    import argparse
    import json
    import sys

    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("path", nargs="+", help="config.json files or directories holding one; one line each")
    p.add_argument("--tp", type=int, action="append")
    a = p.parse_args(argv)
    for path in a.path:
        try:
            res = read(path, tuple(a.tp or (1,)))
        except Exception as exc:  # never a traceback: one line
            res = {"ok": False, "refusal": f"{server} reader failed: {type(exc).__name__}: {exc}"[:400]}
        res["path"] = path
        sys.stdout.write(_MARK + json.dumps(res, default=str) + "\n")
        sys.stdout.flush()
    return 0
