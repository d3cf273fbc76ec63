"""Dump transformers' declared config defaults per model_type for the built-in model reader.

Run with the vLLM 0.33 environment's python (its transformers is the one dumped):

    ~/.cache/flashinfer-guard/envs/vllm-0.33.0/bin/python ci/dump_model_defaults.py

It writes guard_core/deployment/model_defaults.json: for every ``model_type`` of transformers'
``CONFIG_MAPPING``, the declared default (the config class's dataclass field default) of
each field the attention reader reads, and the same for each sub-config the class declares
(``sub_configs``: ``text_config``, ``thinker_config``, ...), nested under its key. A default
that transformers computes in ``__post_init__`` from other fields is declared ``None`` (e.g.
Mistral's ``head_dim``, hidden_size // heads) and is left out: the reader's own rule computes
it from the config's values, as transformers does. ``tests/vllm/test_model_defaults.py`` checks
that the committed file equals what this script reads from the installed transformers.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(os.path.dirname(HERE), "guard_core", "deployment", "model_defaults.json")

# the fields the built-in reader reads (guard_core.deployment.groups), in every spelling it knows
FIELDS = (
    "model_type", "num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "num_kv_heads", "n_head_kv",
    "multi_query", "multi_query_group_num", "multi_query_attention", "num_attention_groups", "new_decoder_architecture",
    "head_dim", "kv_channels", "attention_head_dim", "hidden_size_per_head", "hidden_size", "n_embd", "d_model",
    "num_hidden_layers", "n_layer", "num_layers", "max_position_embeddings", "n_positions", "seq_length",
    "sliding_window", "sliding_window_pattern", "use_sliding_window", "max_window_layers", "attn_layer_period",
    "attn_layer_offset", "full_attention_interval", "no_rope_layer_interval", "attention_chunk_size",
    "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "global_head_dim",
    "num_global_key_value_heads", "attention_k_eq_v", "is_causal", "layer_types", "layers_block_type",
    "hybrid_override_pattern", "num_attention_heads_per_layer", "num_mem_blocks",
)
JSON_TYPES = (int, float, str, bool, type(None), list)


def declared(cls, depth: int = 0) -> dict:
    """The declared defaults of ``cls`` for FIELDS (None left out), and its sub-configs'."""
    out: dict = {}
    mt = getattr(cls, "model_type", "") or ""
    if mt:
        out["model_type"] = mt
    try:
        fields = {f.name: f for f in dataclasses.fields(cls)}
    except TypeError:
        fields = {}
    for name in FIELDS:
        f = fields.get(name)
        if f is None:
            continue
        if f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            v = f.default_factory()  # type: ignore[misc]
        else:
            continue
        if v is None or not isinstance(v, JSON_TYPES):
            continue
        if isinstance(v, list) and not all(isinstance(x, (int, str)) for x in v):
            continue
        out[name] = v
    if depth < 3:
        for key, sub in sorted((getattr(cls, "sub_configs", None) or {}).items()):
            if isinstance(sub, type):
                d = declared(sub, depth + 1)
                if len(d) > 1:
                    out[key] = d
    return out


def table() -> dict:
    import transformers
    from transformers import CONFIG_MAPPING

    models = {}
    for mt in sorted(CONFIG_MAPPING.keys()):
        try:
            cls = CONFIG_MAPPING[mt]
        except Exception:  # a model type whose class does not import here
            continue
        d = declared(cls)
        d.pop("model_type", None)
        if d:
            models[mt] = d
    return {"transformers": transformers.__version__, "models": models}


def main() -> int:
    t = table()
    with open(OUT, "w", encoding="utf-8") as fh:
        json.dump(t, fh, indent=0, sort_keys=True, separators=(",", ":"))
        fh.write("\n")
    print(f"wrote {OUT}: {len(t['models'])} model types, transformers {t['transformers']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
