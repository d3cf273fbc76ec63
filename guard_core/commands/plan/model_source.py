"""Stage 2's model: the model's config from a path, the local Hugging Face cache or the presets,
read by the first reader that can (the built-in one, the server's own config code, transformers'),
with the command's model overrides applied; and the MTP depth a speculative method runs.
"""

from __future__ import annotations

import json
import os

from guard_core.commands.plan.records import PlanUsageError
from guard_core.deployment.hf_cache import find_config, looks_like_model_id
from guard_core.deployment.presets import DEFAULT_MODEL, ModelError, ModelFacts, find_preset, load_model

__all__ = ["resolve_model", "plan_model", "mtp_depth"]


def _groups_max_len(facts) -> int | None:
    """The max length the groups reader found (ChatGLM's seq_length, a nested language_config)."""
    mg = getattr(facts, "groups", None)
    return getattr(mg, "max_len", None)


def _max_len_of(path: str) -> int | None:
    """max_position_embeddings of a config.json (text_config first), or None."""
    try:
        if os.path.getsize(path) > (4 << 20):
            return None
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    for scope in (cfg.get("text_config"), cfg.get("llm_config"), cfg):
        if isinstance(scope, dict):
            v = scope.get("max_position_embeddings")
            if type(v) is int and 0 < v <= (1 << 27):
                return v
    return None


def _read_by_chain(spec: str, path: str, framework: str, mode: str, environ) -> tuple[ModelFacts, str]:
    """The model's facts from the first reader that can read it (guard_core.deployment.model_readers):
    the built-in reader is tried first only because it is cheap; where it cannot read, the
    installed server's own config code and then transformers' config classes are asked, and
    only when every one refuses does the run end, in one line (issue 26)."""
    from guard_core.deployment.model_readers import facts_by_chain

    if mode == "transformers" and os.path.isfile(path):  # transformers' classes alone
        return facts_by_chain(path, framework, mode, environ)[0], " (read by transformers' config classes)"
    try:
        return load_model(spec), ""
    except ModelError as exc:
        if mode == "builtin" or not os.path.isfile(path):
            raise
        facts, reader, _ = facts_by_chain(path, framework, mode, environ, first_error=exc)
        label = {"server": f"{framework}'s own config code", "transformers": "transformers' config classes"}
        return facts, f" (read by {label.get(reader, reader)}; the built-in reader could not: {exc})"


def resolve_model(name: str, environ=None, framework: str = "vllm",
                  mode: str = "auto") -> tuple[ModelFacts, str, int | None, str | None]:
    """(facts, where they came from, the model's max length or None, the config.json path or None)."""
    if os.path.isdir(name) or name.endswith(".json") or os.path.exists(name):
        path = os.path.join(name, "config.json") if os.path.isdir(name) else name
        facts, how = _read_by_chain(name, path, framework, mode, environ)
        return facts, f"config.json at {path}{how}", _max_len_of(path) or _groups_max_len(facts), path
    looked: list[str] = []
    if looks_like_model_id(name):
        path, looked = find_config(name, environ=environ)
        if path:
            facts, how = _read_by_chain(path, path, framework, mode, environ)
            return (facts, f"local Hugging Face cache: {path}{how}", _max_len_of(path) or _groups_max_len(facts),
                    path)
    preset = find_preset(name)
    if preset is not None:
        how = "embedded preset" if preset.name == name else f"embedded preset {preset.name}"
        return preset, how, None, None
    where = f"the local Hugging Face cache ({', '.join(looked)}) and " if looked else ""
    raise PlanUsageError(f"unknown model {name!r}: not found in {where}the presets; give a config.json path "
                         f"(or a directory holding one), or a preset: flashinfer-guard presets")


def plan_model(a, L, environ, notes: list):
    """(facts, source, the config's max length, config path, the model name or None for raw heads)."""
    raw = (a.qo_heads, a.kv_heads, a.head_dim)
    if any(v is not None for v in raw):
        if a.model:
            raise PlanUsageError("give either --model or --qo-heads/--kv-heads/--head-dim, not both")
        if None in raw:
            raise PlanUsageError("--qo-heads, --kv-heads and --head-dim go together")
        if a.qo_heads % a.kv_heads:
            raise PlanUsageError(f"--qo-heads {a.qo_heads} must be a multiple of --kv-heads {a.kv_heads}")
        facts = ModelFacts("custom", "custom", "custom", a.qo_heads, a.kv_heads, a.head_dim, a.v_head_dim)
        return facts, "given heads", None, None, None
    name = a.model or (L.model if L else None)
    if a.model and L and L.model and a.model != L.model:
        notes.append(f"--model {a.model} replaces the command's model {L.model}")
    model_source_default = name is None
    if name is None:
        name = DEFAULT_MODEL
    try:
        facts, model_source, model_max_len, model_path = resolve_model(
            name, environ, a.framework or (L.framework if L else "vllm"), getattr(a, "model_reader", None) or "auto")
    except ModelError as exc:
        raise PlanUsageError(str(exc)) from None
    if model_source_default:
        model_source = "the default model, the vLLM seed's"
    model_source = f"{name}: {model_source}" if name != facts.name else model_source
    if L is not None and L.model_overrides:
        facts, model_source, model_max_len, model_path = _overridden(L.model_overrides, facts, model_source,
                                                                     model_max_len, model_path, notes)
    return facts, model_source, model_max_len, model_path, name


def _overridden(ov: dict, facts, source: str, max_len, path, notes: list):
    """The model with the command's --hf-overrides / --json-model-override-args applied as the
    server applies them (``launch_command.apply_model_overrides``); the merged config is written
    to a private temporary file, which the server's own reader reads too."""
    import atexit
    import shutil
    import tempfile

    from guard_core.deployment.launch_command import apply_model_overrides
    from guard_core.deployment.presets import facts_from_config, read_config

    if not path:
        notes.append(f"{ov['option']} not applied: the model {facts.name} is a preset without a config.json")
        return facts, source, max_len, path
    try:
        merged = apply_model_overrides(read_config(path), ov)
        d = tempfile.mkdtemp(prefix="flashinfer-guard-plan-")
        atexit.register(shutil.rmtree, d, True)
        new_path = os.path.join(d, "config.json")
        with open(new_path, "w", encoding="utf-8") as fh:
            json.dump(merged, fh)
        new = facts_from_config(merged, path)
    except (ModelError, OSError, TypeError, ValueError) as exc:
        raise PlanUsageError(f"{ov['option']} in the launch command: {exc}") from None
    return (new, f"{source}, with {ov['option']} applied", _max_len_of(new_path) or _groups_max_len(new) or max_len,
            new_path)


def mtp_depth(name, environ) -> tuple[int, str]:
    """The MTP depth of a model (num_nextn_predict_layers / mtp_num_hidden_layers), else 1."""
    path = None
    if name:
        if os.path.isdir(name):
            path = os.path.join(name, "config.json")
        elif name.endswith(".json") and os.path.exists(name):
            path = name
        elif looks_like_model_id(name):
            path, _ = find_config(name, environ=environ)
    try:
        if path and os.path.getsize(path) <= (4 << 20):
            with open(path, encoding="utf-8") as fh:
                cfg = json.load(fh)
            for scope in (cfg.get("text_config"), cfg):
                if isinstance(scope, dict):
                    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers", "n_predict"):
                        v = scope.get(key)
                        if type(v) is int and 0 < v <= 16:
                            return v, f"{key} in {path}"
    except (OSError, ValueError, AttributeError):
        pass
    return 1, "the model's config is not readable here; assumed 1, the depth of every published MTP checkpoint"
