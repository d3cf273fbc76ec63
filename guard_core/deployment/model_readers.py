"""Who reads a model's config.json, in order (docs: DESIGN.md section 2, "Model facts").

1. the installed server's own config code (vLLM's ``ModelConfig`` through
   ``vllm_guard.model_reader``, SGLang's through ``sglang_guard.model_reader``), where that
   server is installed in this environment: the default there;
2. transformers' config classes, where transformers is installed: the config is built by the
   class ``CONFIG_MAPPING[model_type]`` (never remote code: ``trust_remote_code`` is never
   passed and only transformers' own classes are looked up), and its ``to_dict()`` (every field
   with transformers' defaults filled in) is read by the built-in rules;
3. the built-in reader (``guard_core.deployment.presets.facts_from_config``), last; it fills what the
   config leaves out from the committed table of transformers' declared defaults.

A reader that cannot read hands over to the next; only the last one refuses, in one line
naming what it could not read (and why each reader before it could not).
"""

from __future__ import annotations

import importlib.util

from guard_core.deployment.presets import ModelError, ModelFacts, facts_from_config, read_config

__all__ = ["ReaderChainError", "facts_by_chain", "installed_readers"]

MODES = ("auto", "builtin", "server", "transformers")


class ReaderChainError(ModelError):
    """No reader could read the config (one line)."""


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_readers(framework: str, mode: str = "auto") -> list[str]:
    """The readers tried, in order: 'server', 'transformers', 'builtin'."""
    if mode == "builtin":
        return ["builtin"]
    if mode == "transformers":  # transformers' classes alone (the reader a machine without a server uses)
        return ["transformers"] if _installed("transformers") else []
    out = []
    if framework in ("vllm", "sglang") and _installed(framework):
        out.append("server")
    if mode != "server" and _installed("transformers"):
        out.append("transformers")
    out.append("builtin")
    return out


def _server_facts(framework: str, path: str, name: str, environ=None) -> ModelFacts:
    """The model's groups at TP 1 (the whole model) as the installed server reads them."""
    from guard_core.deployment.groups import AttentionGroup, GroupsError, ModelGroups, merge
    from guard_core.deployment.server_reader import SERVER_LABEL, run_server_reader

    # TP 1 is the whole model; the common TPs are read in the same run, so the per-rank
    # reading that follows (plan_report's model stage) reuses this answer
    res = run_server_reader(framework, path, (1, 2, 4, 8), environ)
    label = SERVER_LABEL.get(framework, framework)
    if not res.get("ok"):
        raise ModelError(f"{label}: {res.get('refusal')}")
    rows = (res.get("groups") or {}).get("1")
    if not isinstance(rows, list):
        raise ModelError(f"{label}: {(rows or {}).get('refusal', 'no groups')}")
    try:
        gs = merge(AttentionGroup(r["kind"], int(r["num_qo_heads"]),
                                  int(r["num_qo_heads"]) if r["kind"] == "mla" else int(r["num_kv_heads"]),
                                  int(r["head_dim_qk"]), int(r["head_dim_vo"] or r["head_dim_qk"]), int(r["count"]),
                                  r.get("window"), bool(r.get("sinks"))) for r in rows)
    except (KeyError, TypeError, ValueError) as exc:
        raise ModelError(f"{label}: unreadable answer ({type(exc).__name__})") from None
    other = tuple((k, int(n)) for k, n in (res.get("other_layers") or {}).items())
    mg = ModelGroups(name, str(res.get("architecture") or "?"), gs, int(res.get("num_layers") or 0), other,
                     res.get("max_len"), label)
    if not gs:
        raise ModelError(f"{label}: no attention layers")
    if mg.uses_mla:
        g = gs[0]
        return ModelFacts(name, name, mg.architecture, g.num_qo_heads, g.num_qo_heads, g.head_dim_qk,
                          g.head_dim_vo, mg.num_layers, mg.attention_layers, "mla",
                          "MLA: FlashInfer's MLA planner and its own buffer", groups=mg)
    top = max(mg.planned(), key=lambda g: (g.num_qo_heads * (g.head_dim_vo + 1), g.head_dim_qk))
    try:
        mg.per_rank(1)
    except GroupsError as exc:
        raise ModelError(f"{label}: {exc}") from None
    return ModelFacts(name, name, mg.architecture, top.num_qo_heads, top.num_kv_heads, top.head_dim_qk,
                      top.head_dim_vo if top.head_dim_vo != top.head_dim_qk else None, mg.num_layers,
                      mg.attention_layers, "hybrid" if other else "gqa", groups=mg)


def _transformers_facts(cfg: dict, name: str) -> ModelFacts:
    """The config built by transformers' own class for its model_type (no remote code), every
    field with transformers' defaults, read by the built-in rules."""
    mt = cfg.get("model_type")
    try:
        from transformers import CONFIG_MAPPING  # optional
    except Exception as exc:
        raise ModelError(f"transformers: not importable ({type(exc).__name__})") from None
    if not isinstance(mt, str) or mt not in CONFIG_MAPPING:
        raise ModelError(f"transformers: no config class for model_type {mt!r} (remote code is never run)")
    try:
        obj = CONFIG_MAPPING[mt].from_dict(dict(cfg))
        built = obj.to_dict()
        # the canonical names through the class's attribute_map (MPT's n_heads is its
        # num_attention_heads), as vLLM reads them off the config object
        for canonical in (getattr(type(obj), "attribute_map", None) or {}):
            if built.get(canonical) is None:
                v = getattr(obj, canonical, None)
                if isinstance(v, (int, str, bool, list)):
                    built[canonical] = v
    except Exception as exc:  # transformers refuses the config: one line
        msg = " ".join(str(exc).split())[:200]
        raise ModelError(f"transformers refuses the config: {type(exc).__name__}: {msg}") from None
    facts = facts_from_config(built, name)
    mg = facts.model_groups()
    from dataclasses import replace

    return replace(facts, groups=replace(mg, source="transformers' config classes"))


def facts_by_chain(path: str, framework: str = "vllm", mode: str = "auto", environ=None,
                   first_error: ModelError | None = None) -> tuple[ModelFacts, str, list[str]]:
    """(facts, the reader that read them, why each reader before it could not).

    ``first_error``: the built-in reader's refusal already in hand (the caller tried it first
    because it is cheap); it is the last word only when every other reader also refuses."""
    cfg = None
    tried: list[str] = []
    readers = installed_readers(framework, mode)
    for i, reader in enumerate(readers):
        try:
            if reader == "server":
                return _server_facts(framework, path, path, environ), "server", tried
            if cfg is None:
                cfg = read_config(path)  # a file that is not a readable JSON object ends here
            if reader == "transformers":
                return _transformers_facts(cfg, path), "transformers", tried
            if first_error is not None:
                raise first_error
            return facts_from_config(cfg, path), "builtin", tried
        except ModelError as exc:
            if i == len(readers) - 1:  # the last reader's refusal is the answer
                why = "; ".join(tried)
                raise ReaderChainError(f"{exc}" + (f" (also: {why})" if why else "")) from None
            tried.append(" ".join(str(exc).split())[:240])
    raise ReaderChainError(f"{path}: no reader for --model-reader {mode} is installed here")
