"""A config's per-layer attention shapes for the built-in reader (``config_reader``): the overrides a layer
states (``per_layer_config``) or its class builds (Gemma 4's ``global_head_dim``), and the checked integer
reading every field goes through. Imports only ``groups``."""

from __future__ import annotations

from guard_core.deployment.groups import GroupsError

__all__ = ["GLOBAL_HEAD_DIM_DEFAULT", "GLOBAL_HEAD_DIM_MODEL_TYPES"]

def _int(v, what: str, name: str, lo: int = 1, hi: int = 1 << 20):
    if type(v) is int and lo <= v <= hi:
        return v
    raise GroupsError(f"{name}: {what} must be an integer from {lo} to {hi}, got {v!r}"[:300])


# vLLM 0.33 reads each layer's own config (ModelArchConfigConvertorBase.get_per_layer_hf_configs,
# transformers_utils/model_arch_config_convertor.py:42-69; models/gemma4.py:577-580
# Gemma4DecoderLayer: ``layer_config = config.per_layer_config[layer_idx]``, its head_dim and
# num_key_value_heads). model_type -> (num_global_key_value_heads default, gated by attention_k_eq_v)
GLOBAL_HEAD_DIM_MODEL_TYPES = {
    "gemma4": (None, True), "gemma4_text": (None, True),
    "gemma4_unified": (None, True), "gemma4_unified_text": (None, True),
    "diffusion_gemma": (None, True), "diffusion_gemma_text": (None, True),
    "embedding_gemma2": (1, False), "embedding_gemma2_text": (1, False),
}
GLOBAL_HEAD_DIM_DEFAULT = 512  # kwargs.pop("global_head_dim", 512) in each class above
# the per-layer fields a layer's attention shape takes from per_layer_config
_PER_LAYER_FIELDS = ("num_attention_heads", "num_key_value_heads", "head_dim", "v_head_dim", "sliding_window")


def _per_layer_overrides(raw, model_type: str, kinds: list[str], name: str) -> dict[int, dict]:
    """{layer index: the fields that layer overrides}: the file's own ``per_layer_config`` (transformers
    5.20.2 reads it on every config class: configuration_utils.py:493-508; a layer's config is the
    whole config with its overrides set, integrations/heterogeneity/configuration_utils.py:194-208;
    keys are layer indices, zero-padded strings when transformers saves them, :362-381), else
    the one a GLOBAL_HEAD_DIM_MODEL_TYPES class builds from global_head_dim."""
    plc = raw("per_layer_config")
    if plc is not None:
        if not isinstance(plc, dict):
            raise GroupsError(f"{name}: per_layer_config must be an object of layer index -> overrides")
        out: dict[int, dict] = {}
        for key, ov in plc.items():
            idx = int(key) if isinstance(key, str) and key.isdigit() else None
            if idx is None or not isinstance(ov, dict):
                raise GroupsError(f"{name}: per_layer_config must map layer indices to objects, got {key!r}"[:300])
            out[idx] = {f: ov[f] for f in _PER_LAYER_FIELDS if f in ov}
        return out
    rule = GLOBAL_HEAD_DIM_MODEL_TYPES.get(model_type)
    if rule is None:
        return {}
    kv_default, gated = rule
    ghd = raw("global_head_dim")
    over = {"head_dim": GLOBAL_HEAD_DIM_DEFAULT if ghd is None else ghd}
    gkv = raw("num_global_key_value_heads")
    gkv = kv_default if gkv is None else gkv
    if gated and raw("attention_k_eq_v") is False:
        gkv = None
    if gkv is not None:
        over["num_key_value_heads"] = gkv
    return {i: over for i, k in enumerate(kinds) if k == "full"}


def _layer_shape(ov: dict | None, k: str, name: str, q: int, kv: int, hd: int, vdim: int, window: int | None,
                 v_stated: bool) -> tuple:
    """(kind, q heads, kv heads, head dim qk, vo, window) of one layer with its per-layer overrides:
    each field the layer states wins over the whole model's (a value stated wins at the level where
    it is stated). The value head dim follows the layer's head dim unless v_head_dim is stated."""
    if not ov:
        return k, q, kv, hd, vdim, window
    lq = _int(ov.get("num_attention_heads", q), "per_layer_config num_attention_heads", name, hi=4096)
    lkv = _int(ov.get("num_key_value_heads", kv), "per_layer_config num_key_value_heads", name, hi=4096)
    lhd = _int(ov.get("head_dim", hd), "per_layer_config head_dim", name, hi=2048)
    lvd = ov.get("v_head_dim", vdim if v_stated else lhd)
    lvd = _int(lvd, "per_layer_config v_head_dim", name, hi=2048)
    win = window
    if k == "sliding" and "sliding_window" in ov:
        win = ov["sliding_window"]
        if win is None:  # the layer's window taken away: attention over the whole context
            k = "full"
        else:
            win = _int(win, "per_layer_config sliding_window", name, hi=1 << 27)
    if lq % lkv:
        raise GroupsError(f"{name}: a layer's {lq} query heads are not a multiple of its {lkv} KV heads "
                          "(per_layer_config)")
    return k, lq, lkv, lhd, lvd, win
