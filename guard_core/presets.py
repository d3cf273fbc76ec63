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

    @property
    def uses_mla(self) -> bool:
        return self.kind == "mla"

    def per_rank(self, tp: int) -> tuple[int, int]:
        """Query and KV heads per attention-TP rank (KV heads replicate past their count)."""
        if tp <= 0:
            raise ModelError(f"--tp must be positive, got {tp}")
        q, kv = self.num_attention_heads, self.num_key_value_heads
        if q % tp:
            raise ModelError(f"{self.name}: {q} query heads are not divisible by tensor parallel size {tp}")
        if kv >= tp:
            if kv % tp:
                raise ModelError(f"{self.name}: {kv} KV heads are not divisible by tensor parallel size {tp}")
            return q // tp, kv // tp
        if tp % kv:
            raise ModelError(f"{self.name}: tensor parallel size {tp} is not a multiple of {kv} KV heads")
        return q // tp, 1

    def as_dict(self) -> dict:
        return {
            "name": self.name, "hf_id": self.hf_id, "architecture": self.architecture,
            "num_attention_heads": self.num_attention_heads, "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim, "v_head_dim": self.v_head_dim or self.head_dim,
            "num_layers": self.num_layers, "attention_layers": self.attention_layers, "kind": self.kind,
            "note": self.note,
        }


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
    k = _key(name)
    if k in _BY_KEY:
        return _BY_KEY[k]
    # quantised / variant checkpoints: Qwen3.5-397B-A17B-NVFP4, Qwen3-VL-32B-Instruct-FP8
    for suffix in ("-nvfp4", "-fp8", "-fp4", "-awq", "-gptq", "-int4", "-instruct", "-it", "-thinking"):
        if k.endswith(suffix):
            return find_preset(k[: -len(suffix)])
    return None


def facts_from_config(cfg: dict, name: str = "config.json") -> ModelFacts:
    """Attention facts from a Hugging Face config dict (VL ``text_config``, hybrids)."""
    archs = cfg.get("architectures") or ["?"]
    text = cfg.get("text_config") or cfg.get("llm_config") or cfg
    if not isinstance(text, dict):
        raise ModelError(f"{name}: text_config is not an object")

    def get(key, default=None):
        v = text.get(key)
        return cfg.get(key, default) if v is None else v

    heads = get("num_attention_heads")
    if not isinstance(heads, int) or heads <= 0:
        raise ModelError(f"{name}: no num_attention_heads (looked in text_config too); "
                         "pass --qo-heads/--kv-heads/--head-dim instead")
    kv = get("num_key_value_heads", heads)
    if not isinstance(kv, int) or kv <= 0:
        raise ModelError(f"{name}: num_key_value_heads must be a positive integer")
    layers = get("num_hidden_layers", 0) or 0
    if get("kv_lora_rank"):
        qk = (get("qk_nope_head_dim", 128) or 0) + (get("qk_rope_head_dim", 64) or 0)
        return ModelFacts(name, name, archs[0], heads, heads, qk, get("v_head_dim", 128), layers, layers, "mla",
                          "MLA: FlashInfer's MLA planner and its own buffer")
    head_dim = get("head_dim")
    if not head_dim:
        hidden = get("hidden_size")
        if not hidden:
            raise ModelError(f"{name}: neither head_dim nor hidden_size given")
        head_dim = hidden // heads
    kind, attn_layers = "gqa", layers
    layer_types = get("layer_types")
    if isinstance(layer_types, list) and layer_types:
        full = sum(1 for t in layer_types if str(t) in ("full_attention", "attention", "sliding_attention"))
        if full < len(layer_types):
            kind, attn_layers = "hybrid", full
    elif get("full_attention_interval"):
        interval = int(get("full_attention_interval"))
        kind, attn_layers = "hybrid", layers // interval
    if heads % kv:
        raise ModelError(f"{name}: {heads} query heads are not a multiple of {kv} KV heads")
    return ModelFacts(name, name, archs[0], heads, kv, int(head_dim), None, layers, attn_layers, kind)


def load_model(spec: str) -> ModelFacts:
    """A preset name or a path to config.json (or a directory holding one)."""
    if os.path.isdir(spec):
        spec = os.path.join(spec, "config.json")
    if spec.endswith(".json") or os.path.exists(spec):
        try:
            with open(spec, encoding="utf-8") as fh:
                cfg = json.load(fh)
        except FileNotFoundError:
            raise ModelError(f"no such file: {spec}") from None
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot read {spec}: {exc}") from None
        if not isinstance(cfg, dict):
            raise ModelError(f"{spec}: not a JSON object")
        return facts_from_config(cfg, spec)
    found = find_preset(spec)
    if found is None:
        raise ModelError(f"unknown model {spec!r}: give a config.json path or one of: {', '.join(preset_names())}")
    return found
