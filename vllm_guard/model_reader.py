"""A model's attention layer groups as vLLM itself reads them (offline).

    python -m vllm_guard.model_reader CONFIG_DIR_OR_FILE [--tp 1 --tp 8]

prints one JSON line: ``{"ok": true, "groups": {tp: [...]}, ...}`` or
``{"ok": false, "refusal": "one line"}``. ``guard_core.commands.plan_report`` runs it in a
subprocess (vLLM's import and its log lines stay out of the plan's output), and
the corpus test compares it with the built-in reader.

vLLM's own code is the reader of record: ``vllm.config.ModelConfig`` built from
the local config.json (``skip_tokenizer_init``: no tokenizer, nothing
downloaded; ``HF_HUB_OFFLINE=1`` is set), its per-rank numbers
(``get_num_attention_heads``, ``get_num_kv_heads``, ``get_head_size``,
``get_num_layers_by_block_type``, ``use_mla``) and its parsed config
(``hf_text_config``, transformers' or vLLM's own config class with their
defaults). Layer shapes that differ per layer are read from that parsed config
the way vLLM's model files read them (each cited below); nothing here reads
the raw JSON.
"""

from __future__ import annotations

import os
import sys


def _get(obj, name, default=None):
    """An attribute of a (possibly heterogeneous) transformers config: transformers 5.x
    raises for a per-layer attribute read off the whole-model config."""
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def _kinds(tc, n: int) -> list[str]:
    lt = _get(tc, "layer_types")
    mt = _get(tc, "model_type", "")
    if mt == "gpt_oss":
        # vllm models/gpt_oss.py OAIAttention: sliding_window on even layers
        return ["sliding" if i % 2 == 0 else "full" for i in range(n)]
    if mt in ("mimo_v2_flash", "mimo_v2") and _get(tc, "hybrid_layer_pattern"):
        # vllm models/mimo_v2.py: is_swa = hybrid_layer_pattern[layer_id] == 1
        return ["sliding" if tc.hybrid_layer_pattern[i] == 1 else "full" for i in range(n)]
    if mt in ("llama4", "llama4_text") and _get(tc, "attention_chunk_size"):
        # vllm models/llama4.py: use_chunked_local_attn = not nope and attention_chunk_size
        return ["full" if tc.no_rope_layers[i] == 0 else "chunked" for i in range(n)]
    if mt == "nemotron_h":
        # vllm models/nemotron_h.py builds layers from hybrid_override_pattern ('*' attention)
        pat = _get(tc, "hybrid_override_pattern", "") or ""
        return ["full" if c == "*" else {"M": "mamba", "-": "mlp", "E": "moe"}.get(c, f"block {c}") for c in pat]
    if mt == "zamba2":
        # vllm 0.33 config/model.py:1757-1762 and models/zamba2.py:751-755: the "hybrid" layers
        # run attention (transformers' Zamba2Config maps layer_types to layers_block_type)
        lbt = list(_get(tc, "layers_block_type", None) or [])
        return ["full" if t == "hybrid" else str(t).replace("_", " ") for t in lbt[:n]]
    if isinstance(lt, (list, tuple)) and lt:
        names = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
                 "chunked_attention": "chunked"}
        return [names.get(t, str(t).replace("_", " ")) for t in list(lt)[:n]]
    lbt = _get(tc, "layers_block_type")
    if isinstance(lbt, (list, tuple)) and lbt:
        # vllm 0.33 config/model.py:1751-1764 (get_num_layers_by_block_type): "attention" layers,
        # and in Zamba2 the "hybrid" ones (models/zamba2.py:751-755 builds their Attention)
        att = ("attention", "full_attention") + (("hybrid",) if mt == "zamba2" else ())
        return ["full" if t in att else str(t).replace("_", " ") for t in list(lbt)[:n]]
    return ["full"] * n


def _layer_arch(mc):
    """vLLM's per-layer architecture configs (0.33+: ``ModelConfig.model_arch_config[i]``,
    ``get_num_kv_heads(pc, arch_config)``), or None where vLLM reads one shape per model."""
    arch = getattr(mc, "model_arch_config", None)
    if arch is None or not hasattr(type(arch), "__getitem__"):
        return None
    import inspect

    try:
        if "arch_config" not in inspect.signature(mc.get_num_kv_heads).parameters:
            return None
    except (TypeError, ValueError):
        return None
    return arch


def _inspect_in_this_process() -> None:
    """vLLM inspects each architecture's model class in a subprocess
    (``models/registry.py`` ``_run_in_subprocess``: "to avoid initializing CUDA" in the
    server process), one per architecture not in its cache. This reader is itself a
    throwaway process: the same inspection runs here, without a Python start per
    architecture (the answer, ``_ModelInfo.from_model_cls``, is the same)."""
    try:
        from vllm.model_executor.models import registry

        if callable(getattr(registry, "_run_in_subprocess", None)):
            registry._run_in_subprocess = lambda fn: fn()
    except Exception:
        pass


def read(path: str, tps=(1,)) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

    _inspect_in_this_process()

    from vllm.config import ModelConfig

    model = os.path.dirname(path) if path.endswith(".json") else path
    try:
        mc = ModelConfig(model=model, skip_tokenizer_init=True)
    except Exception as exc:  # the server refuses this config: say so in one line
        msg = " ".join(str(exc).split())[:300]
        return {"ok": False, "refusal": f"vLLM refuses the config: {type(exc).__name__}: {msg}"}
    return read_config(mc, tps)


def read_config(mc, tps=(1,)) -> dict:
    """The answer of ``read`` from vLLM's own ``ModelConfig`` (also the one inside a resolved
    ``VllmConfig``: ``vllm_guard.server_resolution``)."""
    from types import SimpleNamespace

    tc = mc.hf_text_config
    n = int(mc.get_total_num_hidden_layers())
    mt = _get(tc, "model_type", "")
    arch = _layer_arch(mc)
    per_layer = arch is not None and getattr(arch, "per_layer_overrides", None) is not None
    out = {"ok": True, "architecture": (mc.architectures or ["?"])[0], "model_type": mt,
           "num_layers": n, "max_len": int(mc.max_model_len), "use_mla": bool(mc.use_mla),
           "head_size": int(mc.get_head_size()), "per_layer_arch": per_layer, "groups": {}, "attention_layers": {}}
    m = SimpleNamespace(mc=mc, tc=tc, n=n, mt=mt, arch=arch, per_layer=per_layer,
                        het=bool(_get(tc, "is_heterogeneous", False)), kinds=_kinds(tc, n))
    for tp in tps:
        _read_tp(m, tp, out)
    return out


def _read_tp(m, tp: int, out: dict) -> None:
    """The attention layer groups of one tensor-parallel size into ``out`` (or its refusal)."""
    from types import SimpleNamespace

    mc, tc = m.mc, m.tc
    pc = SimpleNamespace(tensor_parallel_size=tp, pipeline_parallel_size=1, rank=0,
                         decode_context_parallel_size=1)
    total_heads = int(mc.model_arch_config.total_num_attention_heads) if hasattr(mc, "model_arch_config") \
        else int(_get(tc, "num_attention_heads", 0) or 0)
    if total_heads and total_heads % tp:
        # vllm config/model.py ModelConfig.verify_with_parallel_config
        out["groups"][str(tp)] = {"refusal": f"Total number of attention heads ({total_heads}) must be "
                                             f"divisible by tensor parallel size ({tp})."}
        return
    try:
        q = int(mc.get_num_attention_heads(pc))
        kv = int(mc.get_num_kv_heads(pc))
        try:
            n_attn = int(mc.get_num_layers_by_block_type(pc, "attention"))
        except Exception:
            n_attn = None
    except Exception as exc:
        out["groups"][str(tp)] = {"refusal": f"{type(exc).__name__}: {exc}"[:300]}
        return
    out["attention_layers"][str(tp)] = n_attn
    hd = int(mc.get_head_size())
    if mc.use_mla:
        dvo = int(_get(tc, "v_head_dim", 0) or 0)
        out["groups"][str(tp)] = [dict(kind="mla", num_qo_heads=q, num_kv_heads=1, head_dim_qk=hd,
                                       head_dim_vo=dvo, count=m.n, window=None, sinks=False)]
        return
    rows: dict[tuple, dict] = {}
    other: dict[str, int] = {}
    m.blocks = _get(tc, "block_configs")
    m.heads_total = int(_get(tc, "num_attention_heads") or mc.model_arch_config.total_num_attention_heads)
    for i, k in enumerate(m.kinds):
        key = _layer_shape(m, pc, tp, i, k, q, kv, hd)
        if isinstance(key, str):  # not an attention layer FlashInfer plans: counted by kind
            other[key] = other.get(key, 0) + 1
        elif key in rows:
            rows[key]["count"] += 1
        else:
            k, lq, lkv, dqk, dvo, win, snk = key
            rows[key] = dict(kind=k, num_qo_heads=lq, num_kv_heads=lkv, head_dim_qk=dqk, head_dim_vo=dvo,
                             count=1, window=win, sinks=snk)
    out["groups"][str(tp)] = list(rows.values())
    out["other_layers"] = other


def _layer_shape(m, pc, tp: int, i: int, k: str, q: int, kv: int, hd: int):
    """Layer ``i``'s (kind, q heads, kv heads, head dim qk, vo, window, sinks) per rank, as
    vLLM's model files build it, or a label for a layer without such attention."""
    mc, tc, mt, per_layer = m.mc, m.tc, m.mt, m.per_layer
    lc = tc.per_layer_config[i] if m.het else tc
    lq, lkv, dqk, win, snk = q, kv, hd, None, False
    if per_layer:
        # vLLM's own per-layer reading (0.33: model_arch_config[i], used by the model files,
        # e.g. models/gemma4.py Gemma4DecoderLayer reads config.per_layer_config[layer_idx])
        la = m.arch[i]
        lq = int(mc.get_num_attention_heads(pc, la))
        lkv = int(mc.get_num_kv_heads(pc, la))
        dqk = int(la.head_size)
    elif m.blocks:
        # vllm models/nemotron_nas.py DeciLMDecoderLayer: attention.no_op layers run no
        # attention; the others heads // n_heads_in_group KV heads
        a = m.blocks[i].attention
        if a.no_op:
            return "no attention (block no_op)"
        lkv = max(1, (m.heads_total // a.n_heads_in_group) // tp)
    if k not in ("full", "sliding", "chunked"):
        return k
    if not per_layer:
        dqk = int(_get(lc, "head_dim", None) or hd)
    dvo = int(_get(lc, "v_head_dim", None) or dqk)
    if k == "sliding":
        win = _get(lc, "sliding_window", None)
    if k == "chunked":
        win = _get(lc, "attention_chunk_size", None)
    if mt in ("gemma4", "gemma4_text") and k == "full" and not per_layer:
        # vllm 0.23 models/gemma4.py Gemma4DecoderLayer: global_head_dim on full layers;
        # num_global_key_value_heads when attention_k_eq_v
        dqk = dvo = int(_get(tc, "global_head_dim", None) or tc.head_dim)
        if _get(tc, "attention_k_eq_v", False):
            total = int(_get(tc, "num_global_key_value_heads", None) or tc.num_key_value_heads)
            lkv = max(1, total // tp)
    if mt in ("mimo_v2_flash", "mimo_v2"):
        # vllm models/mimo_v2.py MiMoV2DecoderLayer: SWA layers take swa_* heads and dims
        if k == "sliding":
            lq = int(tc.swa_num_attention_heads) // tp
            lkv = max(1, int(tc.swa_num_key_value_heads) // tp)
            dqk = int(tc.swa_head_dim)
            dvo = int(_get(tc, "swa_v_head_dim", None) or dqk)
            win = _get(tc, "sliding_window_size", None) or _get(tc, "sliding_window", None)
            snk = bool(_get(tc, "add_swa_attention_sink_bias", False))
        else:
            snk = bool(_get(tc, "add_full_attention_sink_bias", False))
    if mt == "gpt_oss":
        snk = True  # vllm models/gpt_oss.py: every layer has sinks
    per_layer_heads = _get(tc, "num_attention_heads_per_layer")
    if per_layer_heads is not None and not per_layer:
        # vllm 0.33 models/laguna.py:490-496: the layer's own head count, split over TP
        lq = int(per_layer_heads[i]) // tp
    if mt == "zamba2":
        # vllm 0.33 models/zamba2.py:195: Attention(num_heads, attention_head_dim), no num_kv_heads
        lkv = lq
    if mt == "minicpm3":
        # vllm models/minicpm3.py: Attention(num_heads, qk_head_dim, num_kv_heads=num_heads)
        dqk = dvo = int(tc.qk_nope_head_dim) + int(tc.qk_rope_head_dim)
        lkv = q
    return (k, lq, lkv, dqk, dvo, win, snk)


def main(argv=None) -> int:
    from guard_core.deployment.server_reader import reader_main

    return reader_main(read, "vLLM", "python -m vllm_guard.model_reader", argv)


if __name__ == "__main__":
    sys.exit(main())
