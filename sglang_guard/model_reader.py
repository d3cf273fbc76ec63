"""A model's attention layer groups as SGLang itself reads them (offline).

    python -m sglang_guard.model_reader CONFIG_DIR_OR_FILE ... [--tp 1 --tp 8]

prints one ``FLASHINFER_GUARD_GROUPS {json}`` line per path, like
``vllm_guard.model_reader``. SGLang's own code is the reader of record:
``sglang.srt.configs.model_config.ModelConfig`` built from the local
config.json (offline, no tokenizer, nothing downloaded), the numbers its
FlashInfer backend takes from it (``num_attention_heads // tp``,
``get_num_kv_heads(tp)``, ``head_dim``, ``v_head_dim``, ``attention_arch``;
``layers/attention/flashinfer_backend.py``), and its sliding-window layer ids
(``swa_attention_layer_ids`` / ``full_attention_layer_ids`` where the model
has them; else the parsed config's ``layer_types``). Nothing here reads the raw
JSON.
"""

from __future__ import annotations

import os
import sys


def _get(obj, name, default=None):
    try:
        return getattr(obj, name, default)
    except Exception:
        return default


def _kinds(mc, tc, n: int) -> list[str]:
    """Each layer: an attention kind, or what else it runs (linear attention, Mamba ...)."""
    kinds = ["full"] * n
    lt = _get(tc, "layer_types")
    lin, full = _get(tc, "linear_layer_ids"), _get(tc, "full_attention_layer_ids")
    pat = _get(tc, "hybrid_override_pattern")
    if isinstance(lt, (list, tuple)) and lt:
        names = {"full_attention": "full", "attention": "full", "sliding_attention": "sliding",
                 "chunked_attention": "chunked"}
        kinds = [names.get(t, str(t).replace("_", " ")) for t in list(lt)[:n]]
    elif isinstance(lin, (list, tuple)) and isinstance(full, (list, tuple)) and lin:
        # SGLang's hybrid configs (configs/qwen3_next.py linear_layer_ids / full_attention_layer_ids)
        kinds = ["full" if i in set(full) else "linear attention" for i in range(n)]
    elif isinstance(pat, str) and pat:
        kinds = ["full" if c == "*" else {"M": "mamba", "-": "mlp", "E": "moe"}.get(c, f"block {c}") for c in pat]
    # SGLang's own sliding-window layer ids where it runs the model as hybrid SWA
    # (configs/model_config.py is_hybrid_swa_model / get_hybrid_layer_ids)
    swa = _get(mc, "swa_attention_layer_ids") if _get(mc, "is_hybrid_swa", False) else None
    if swa:
        s = set(swa)
        kinds = [("sliding" if i in s else "full") if k in ("full", "sliding", "chunked") else k
                 for i, k in enumerate(kinds)]
    return kinds


def read(path: str, tps=(1,)) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig

    model = os.path.dirname(path) if path.endswith(".json") else path
    try:
        mc = ModelConfig(model, trust_remote_code=False)
    except Exception as exc:  # SGLang refuses this config: one line
        msg = " ".join(str(exc).split())[:300]
        return {"ok": False, "refusal": f"SGLang refuses the config: {type(exc).__name__}: {msg}"}
    tc = mc.hf_text_config
    n = int(_get(mc, "num_hidden_layers", 0) or _get(tc, "num_hidden_layers", 0) or 0)
    mla = _get(mc, "attention_arch") == AttentionArch.MLA
    out = {"ok": True, "architecture": (_get(mc.hf_config, "architectures") or ["?"])[0],
           "model_type": _get(tc, "model_type", ""), "num_layers": n, "max_len": int(_get(mc, "context_len", 0) or 0),
           "use_mla": bool(mla), "head_size": int(mc.head_dim), "groups": {}}
    kinds = _kinds(mc, tc, n)
    for tp in tps:
        try:
            from sglang.srt.distributed.utils import divide

            # SGLang's QKVParallelLinear (layers/linear.py): divide(total_num_heads, tp_size), and
            # divide(tp_size, total_num_kv_heads) where KV heads replicate
            total_kv = int(mc.get_total_num_kv_heads())
            divide(int(mc.get_max_num_attention_heads() if hasattr(mc, "get_max_num_attention_heads")
                       else mc.num_attention_heads), tp)
            if 0 < total_kv < tp:
                divide(tp, total_kv)
            # what its FlashInfer backend plans with (flashinfer_backend.py FlashInferIndicesUpdaterDecode)
            q = int(mc.get_max_num_attention_heads() if hasattr(mc, "get_max_num_attention_heads")
                    else mc.num_attention_heads) // tp
            kv = int(mc.get_num_kv_heads(tp))
        except AssertionError as exc:
            out["groups"][str(tp)] = {"refusal": f"SGLang cannot split the heads at tp {tp}: {exc}"[:300]}
            continue
        except Exception as exc:
            out["groups"][str(tp)] = {"refusal": f"{type(exc).__name__}: {exc}"[:300]}
            continue
        hd = int(mc.head_dim)
        dvo = int(_get(mc, "v_head_dim", None) or hd)
        if mla:
            out["groups"][str(tp)] = [dict(kind="mla", num_qo_heads=q, num_kv_heads=1, head_dim_qk=hd,
                                           head_dim_vo=dvo, count=n, window=None, sinks=False)]
            continue
        rows: dict[tuple, dict] = {}
        other: dict[str, int] = {}
        window = _get(tc, "sliding_window", None)
        for k in kinds:
            if k not in ("full", "sliding", "chunked"):
                other[k] = other.get(k, 0) + 1
                continue
            win = window if k == "sliding" else (_get(tc, "attention_chunk_size") if k == "chunked" else None)
            key = (k, q, kv, hd, dvo, win)
            if key in rows:
                rows[key]["count"] += 1
            else:
                rows[key] = dict(kind=k, num_qo_heads=q, num_kv_heads=kv, head_dim_qk=hd, head_dim_vo=dvo, count=1,
                                 window=win, sinks=False)
        out["groups"][str(tp)] = list(rows.values())
        out["other_layers"] = other
    return out


def main(argv=None) -> int:
    from guard_core.deployment.server_reader import reader_main

    return reader_main(read, "SGLang", "python -m sglang_guard.model_reader", argv)


if __name__ == "__main__":
    sys.exit(main())
