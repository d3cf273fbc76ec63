"""Embedded attention facts of well-known models, and config.json reading.

Only what the planners see is kept: query/KV heads, head dims, how many
layers use full attention (hybrid models run linear-attention or Mamba layers
outside FlashInfer's planners; sliding-window layers do use them), and
whether the model uses MLA (FlashInfer's MLA planner and buffer, not these).
Numbers are from each model's published ``config.json``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

__all__ = ["DEFAULT_MODEL", "MAX_CONFIG_BYTES", "ModelError", "ModelFacts", "PRESETS", "facts_from_config",
           "find_preset", "load_model"]


class ModelError(ValueError):
    pass


@dataclass(frozen=True)
class ModelFacts:
    name: str
    hf_id: str
    architecture: str
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    v_head_dim: int | None = None
    num_layers: int = 0
    attention_layers: int = 0  # layers that go through FlashInfer's attention planners
    kind: str = "gqa"  # gqa | hybrid | mla
    note: str = ""
    # every attention layer group (guard_core.deployment.groups.ModelGroups); None: one group of the fields above
    groups: object = None

    @property
    def uses_mla(self) -> bool:
        return self.kind == "mla"

    def model_groups(self):
        """The attention layer groups (guard_core.deployment.groups.ModelGroups)."""
        from guard_core.deployment.groups import single

        if self.groups is not None:
            return self.groups
        return single(self.name, self.architecture, self.num_attention_heads, self.num_key_value_heads,
                      self.head_dim, self.v_head_dim or self.head_dim, self.num_layers,
                      self.attention_layers or None, "mla" if self.kind == "mla" else "full", source="preset")

    def as_dict(self) -> dict:
        return {
            "name": self.name, "hf_id": self.hf_id, "architecture": self.architecture,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "v_head_dim": self.v_head_dim or self.head_dim,
            "num_layers": self.num_layers, "attention_layers": self.attention_layers, "kind": self.kind,
            "note": self.note,
            "groups": self._groups_dict(),
        }

    def _groups_dict(self) -> dict:
        mg = self.model_groups()
        d = mg.as_dict()
        d["lines"] = mg.describe()
        d["other"] = [list(o) for o in mg.other_layers]
        return d


_P = ModelFacts
PRESETS: tuple[ModelFacts, ...] = (
    _P("Qwen3.5-397B-A17B", "Qwen/Qwen3.5-397B-A17B", "Qwen3_5MoeForConditionalGeneration", 32, 2, 256,
       num_layers=60, attention_layers=15, kind="hybrid",
       note="Gated DeltaNet + full attention every 4th layer; the vLLM seed crash (also the -NVFP4 checkpoint)"),
    _P("Qwen3-VL-32B-Instruct", "Qwen/Qwen3-VL-32B-Instruct", "Qwen3VLForConditionalGeneration", 64, 8, 128,
       num_layers=64, attention_layers=64, note="the SGLang seed crash (also the -FP8 checkpoint)"),
    _P("Qwen3-VL-235B-A22B-Instruct", "Qwen/Qwen3-VL-235B-A22B-Instruct", "Qwen3VLMoeForConditionalGeneration",
       64, 4, 128, num_layers=94, attention_layers=94),
    _P("Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B", "Qwen3MoeForCausalLM", 64, 4, 128,
       num_layers=94, attention_layers=94),
    _P("Qwen3-32B", "Qwen/Qwen3-32B", "Qwen3ForCausalLM", 64, 8, 128, num_layers=64, attention_layers=64),
    _P("Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", "Qwen3MoeForCausalLM", 32, 4, 128,
       num_layers=48, attention_layers=48),
    _P("Qwen3-Next-80B-A3B-Instruct", "Qwen/Qwen3-Next-80B-A3B-Instruct", "Qwen3NextForCausalLM", 16, 2, 256,
       num_layers=48, attention_layers=12, kind="hybrid", note="Gated DeltaNet + full attention every 4th layer"),
    _P("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct", "LlamaForCausalLM", 32, 8, 128,
       num_layers=32, attention_layers=32),
    _P("Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "LlamaForCausalLM", 64, 8, 128,
       num_layers=80, attention_layers=80),
    _P("Llama-3.1-405B-Instruct", "meta-llama/Llama-3.1-405B-Instruct", "LlamaForCausalLM", 128, 8, 128,
       num_layers=126, attention_layers=126),
    _P("gpt-oss-120b", "openai/gpt-oss-120b", "GptOssForCausalLM", 64, 8, 64,
       num_layers=36, attention_layers=36, note="alternating 128-token sliding-window and full attention; sinks"),
    _P("gemma-3-27b-it", "google/gemma-3-27b-it", "Gemma3ForConditionalGeneration", 32, 16, 128,
       num_layers=62, attention_layers=62, note="5 sliding-window (1024) layers per full-attention layer"),
    _P("GLM-4.5", "zai-org/GLM-4.5", "Glm4MoeForCausalLM", 96, 8, 128, num_layers=92, attention_layers=92),
    _P("DeepSeek-V3", "deepseek-ai/DeepSeek-V3", "DeepseekV3ForCausalLM", 128, 128, 192, v_head_dim=128,
       num_layers=61, attention_layers=61, kind="mla",
       note="MLA (kv_lora_rank 512): FlashInfer's MLA planner and its own buffer, not these planners"),
    _P("Kimi-K2-Instruct", "moonshotai/Kimi-K2-Instruct", "DeepseekV3ForCausalLM", 64, 64, 192, v_head_dim=128,
       num_layers=61, attention_layers=61, kind="mla", note="MLA, like DeepSeek-V3"),
)

DEFAULT_MODEL = "Qwen3.5-397B-A17B"


def _key(name: str) -> str:
    return name.lower().replace("_", "-").rsplit("/", 1)[-1]


_BY_KEY = {}
for _m in PRESETS:
    _BY_KEY[_key(_m.name)] = _m
    _BY_KEY[_key(_m.hf_id)] = _m


def preset_names() -> list[str]:
    return [m.name for m in PRESETS]


def find_preset(name: str) -> ModelFacts | None:
    if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
        return None
    k = _key(name)
    # quantised / variant checkpoints: Qwen3.5-397B-A17B-NVFP4, Qwen3-VL-32B-Instruct-FP8
    # (a loop, not recursion: a name of many suffixes must not exhaust the stack)
    while True:
        if k in _BY_KEY:
            return _BY_KEY[k]
        for suffix in _SUFFIXES:
            if k.endswith(suffix):
                k = k[: -len(suffix)]
                break
        else:
            return None


_SUFFIXES = ("-nvfp4", "-fp8", "-fp4", "-awq", "-gptq", "-int4", "-instruct", "-it", "-thinking")
MAX_NAME_CHARS = 512
MAX_CONFIG_BYTES = 4 << 20  # the largest config.json read; real ones are a few KiB
_MAX_JSON_INT_DIGITS = 30
# bounds of the integer fields (inclusive); far above every published model
MAX_HEADS = 4096
MAX_HEAD_DIM = 2048
_INT_FIELDS = {
    "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS,
    "head_dim": MAX_HEAD_DIM, "v_head_dim": MAX_HEAD_DIM, "qk_nope_head_dim": MAX_HEAD_DIM,
    "qk_rope_head_dim": MAX_HEAD_DIM, "hidden_size": 1 << 20, "num_hidden_layers": 1 << 16,
    "kv_lora_rank": 1 << 16, "full_attention_interval": 1 << 16,
}


class _BigInt(str):
    """A JSON integer literal too long to convert; kept as text so the error can show it."""


def _parse_int(text: str):
    return int(text) if len(text) <= _MAX_JSON_INT_DIGITS else _BigInt(text)


def show_path(path) -> str:
    """A path for a one-line message: as is when printable ASCII, else escaped; bounded."""
    from guard_core.runtime.settings import show_value

    if isinstance(path, str) and path.isascii() and path.isprintable() and len(path) <= 200:
        return path
    return show_value(path, 200)


def _show_json(value) -> str:
    """A JSON value for a one-line message: its JSON text (ASCII, escaped), at most 40 characters."""
    if isinstance(value, _BigInt):
        return f"{value[:20]}..." if len(value) > 20 else str(value)
    try:
        text = json.dumps(value, ensure_ascii=True)
    except Exception:  # too deep, or not JSON at all
        return f"<{type(value).__name__}>"
    return text if len(text) <= 40 else text[:40] + "..."


def _what(value) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, _BigInt):
        return f"a {len(value)}-digit number"
    if isinstance(value, float):
        return "not a finite number" if value != value or value in (float("inf"), float("-inf")) else "a decimal number, not an integer"
    if isinstance(value, int):
        return "out of range"
    return {str: "a string", list: "a list", dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _check_int(name: str, field: str, value) -> int:
    hi = _INT_FIELDS[field]
    if type(value) is int and 1 <= value <= hi:
        return value
    raise ModelError(f"{show_path(name)}: {field} must be an integer from 1 to {hi}, got {_show_json(value)} "
                     f"({_what(value)})")


def facts_from_config(cfg: dict, name: str = "config.json") -> ModelFacts:
    """Attention facts from a Hugging Face config dict (VL ``text_config``, ``thinker_config``,
    hybrids), what it leaves out taken from transformers' declared defaults for its model type
    (guard_core.deployment.config_reader.fill_defaults; guard_core/deployment/model_defaults.json).

    Every field used is validated: integers must be JSON integers (no booleans,
    fractions, strings or non-finite numbers) within the bounds above; anything
    else is one ModelError naming the file, the field and the value.
    """
    shown = show_path(name)
    if not isinstance(cfg, dict):
        raise ModelError(f"{shown}: not a JSON object")
    archs = cfg.get("architectures")
    if archs is None or archs == []:
        archs = ["?"]
    if (not isinstance(archs, list) or not all(isinstance(a, str) and 0 < len(a) <= 200 for a in archs)):
        raise ModelError(f"{shown}: architectures must be a list of names, got {_show_json(archs)}")
    for sub in ("text_config", "llm_config", "language_config", "thinker_config"):
        v = cfg.get(sub)
        if v is not None and not isinstance(v, dict):
            raise ModelError(f"{shown}: {sub} must be an object, got {_show_json(v)}")
    from guard_core.deployment.groups import GroupsError
    from guard_core.deployment.config_reader import scoped_reader

    try:
        # what the file states wins at the level where it states it; defaults fill the rest
        raw, _text, _filled = scoped_reader(cfg, name)
    except GroupsError as exc:
        raise ModelError(str(exc)) from None

    def get(key, default=None):
        v = raw(key)
        return default if v is None else _check_int(name, key, v)

    heads_key = next((k for k in ("num_attention_heads", "n_head", "num_heads") if raw(k) is not None), None)
    if heads_key is None:
        raise ModelError(f"{shown}: no num_attention_heads or n_head (looked in text_config/llm_config/"
                         "language_config/thinker_config and transformers' defaults for its model_type); "
                         "pass --qo-heads/--kv-heads/--head-dim instead")
    heads = _check_int(name, "num_attention_heads", raw(heads_key))
    kv = get("num_key_value_heads", heads)
    layers = get("num_hidden_layers", 0)
    if raw("kv_lora_rank") is not None:
        get("kv_lora_rank")
    for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if raw(key) not in (None, 0):  # 0: a DeepSeek-V2 layout without MLA (vLLM get_head_size)
            get(key)
    head_dim = raw("head_dim")
    head_dim = None if head_dim == 0 else head_dim
    head_dim = _check_int(name, "head_dim", head_dim) if head_dim is not None else None
    hidden = raw("hidden_size") if raw("hidden_size") is not None else raw("n_embd")
    if hidden is not None:
        hidden = _check_int(name, "hidden_size", hidden)
    if head_dim is None and not any(raw(k) is not None for k in ("hidden_size_per_head", "kv_channels",
                                                                 "attention_head_dim", "kv_lora_rank")):
        if hidden is None:
            raise ModelError(f"{shown}: neither head_dim nor hidden_size given")
        head_dim = hidden // heads
        if not 1 <= head_dim <= MAX_HEAD_DIM:
            raise ModelError(f"{shown}: hidden_size {hidden} / num_attention_heads {heads} gives head_dim "
                             f"{head_dim}, outside 1 to {MAX_HEAD_DIM}; give head_dim")
    layer_types = raw("layer_types")
    if layer_types is not None and layer_types != []:
        if (not isinstance(layer_types, list) or len(layer_types) > _INT_FIELDS["num_hidden_layers"]
                or not all(isinstance(t, str) for t in layer_types)):
            raise ModelError(f"{shown}: layer_types must be a list of layer kinds (strings), "
                             f"got {_show_json(layer_types)}")
    if raw("full_attention_interval") is not None:
        get("full_attention_interval")
    return _with_groups(cfg, name, ModelFacts(name, name, archs[0], heads, kv, head_dim or 0, None, layers, layers,
                                              "gqa"))


def _with_groups(cfg: dict, name: str, facts: ModelFacts) -> ModelFacts:
    """The facts with every attention layer group (guard_core.deployment.config_reader.read_config),
    the headline numbers taken from the group with the largest need per token."""
    from dataclasses import replace as _replace

    from guard_core.deployment.groups import GroupsError
    from guard_core.deployment.config_reader import read_config as read_groups

    try:
        mg = read_groups(cfg, name)
    except GroupsError as exc:
        raise ModelError(str(exc)) from None
    except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:
        raise ModelError(f"{show_path(name)}: cannot read the attention layers ({type(exc).__name__})") from None
    planned = mg.planned()
    if not planned:
        if mg.uses_mla:
            g = mg.groups[0]
            return _replace(facts, groups=mg, kind="mla", num_key_value_heads=g.num_qo_heads,
                            head_dim=g.head_dim_qk, v_head_dim=g.head_dim_vo, num_layers=mg.num_layers,
                            attention_layers=mg.attention_layers,
                            note="MLA: FlashInfer's MLA planner and its own buffer")
        return _replace(facts, groups=mg, kind="hybrid", attention_layers=0, num_layers=mg.num_layers)
    top = max(planned, key=lambda g: (g.num_qo_heads * (g.head_dim_vo + 1), g.head_dim_qk))
    kind = "hybrid" if mg.other_layers else "gqa"
    return _replace(facts, num_attention_heads=top.num_qo_heads, num_key_value_heads=top.num_kv_heads,
                    head_dim=top.head_dim_qk, v_head_dim=top.head_dim_vo if top.head_dim_vo != top.head_dim_qk else None,
                    num_layers=mg.num_layers or facts.num_layers, attention_layers=mg.attention_layers, kind=kind,
                    groups=mg)


def _os_reason(exc: BaseException) -> str:
    return getattr(exc, "strerror", None) or type(exc).__name__


def read_config(path: str) -> dict:
    """A config.json, read safely: a regular file only (never a FIFO, device or
    socket, which could block or never end), at most 4 MiB, strict UTF-8, JSON
    nesting bounded by the parser's recursion limit. One ModelError otherwise."""
    import stat

    shown = show_path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise ModelError(f"no such file: {shown}") from None
    except (OSError, ValueError) as exc:  # ValueError: an embedded NUL
        raise ModelError(f"cannot read {shown}: {_os_reason(exc)}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ModelError(f"cannot read {shown}: not a regular file (a FIFO, device, socket or directory "
                             "is not read)")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ModelError(f"cannot read {shown}: {st.st_size} bytes, more than the {MAX_CONFIG_BYTES >> 20} MiB "
                             "a config.json may have")
        chunks, total = [], 0
        while total <= MAX_CONFIG_BYTES:
            chunk = os.read(fd, min(1 << 20, MAX_CONFIG_BYTES + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > MAX_CONFIG_BYTES:
            raise ModelError(f"cannot read {shown}: more than the {MAX_CONFIG_BYTES >> 20} MiB a config.json may have")
    except OSError as exc:
        raise ModelError(f"cannot read {shown}: {_os_reason(exc)}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        # strict UTF-8 without a byte-order mark skipped: transformers opens config.json with
        # encoding="utf-8" and json.loads refuses a leading BOM ("Unexpected UTF-8 BOM";
        # configuration_utils.py _dict_from_json_file, transformers 4.57.6:864-867, 5.20.2:1115-1118)
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelError(f"cannot read {shown}: not UTF-8 (byte {exc.start})") from None
    try:
        cfg = json.loads(text, parse_int=_parse_int)
    except json.JSONDecodeError as exc:
        raise ModelError(f"cannot read {shown}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ModelError(f"cannot read {shown}: JSON nested too deeply") from None
    except (ValueError, MemoryError) as exc:
        raise ModelError(f"cannot read {shown}: not JSON ({type(exc).__name__})") from None
    if not isinstance(cfg, dict):
        raise ModelError(f"{shown}: not a JSON object")
    return cfg


def load_model(spec: str) -> ModelFacts:
    """A preset name or a path to config.json (or a directory holding one)."""
    if not isinstance(spec, str) or not spec.strip():
        raise ModelError(f"empty model name: give a config.json path or one of: {', '.join(preset_names())}")
    if os.path.isdir(spec):
        spec = os.path.join(spec, "config.json")
    if spec.endswith(".json") or os.path.lexists(spec):
        return facts_from_config(read_config(spec), spec)
    found = find_preset(spec)
    if found is None:
        from guard_core.runtime.settings import show_value

        raise ModelError(f"unknown model {show_value(spec, 200)}: give a config.json path or one of: "
                         f"{', '.join(preset_names())}")
    return found
