"""Which batches of an MLA model a server plans through FlashInfer's MLA planner (``MLAPlan``).

Data per server line, read from the installed wheels (SGLang 0.5.5, 0.5.11, 0.5.23; vLLM 0.33.0);
``route`` answers one deployment with an ``MlaRoute``: the attention backend the server takes for
the model (and why), the MLA path of each batch kind that plans there (``decode``, ``verify``,
``extend``), or why nothing does.

SGLang (every read line alike, file:line per line):

- The backend. ``--prefill-attention-backend`` equal to ``--decode-attention-backend`` names it
  (server_args.py 0.5.5:1124-1127, 0.5.11:2537-2540; arg_groups/overrides.py 0.5.23:1127-1131).
  With no backend given, DeepseekV3ForCausalLM (and from 0.5.11 the architectures listed beside
  it) on SM 10.x takes ``trtllm_mla`` (server_args.py 0.5.5:899-909; 0.5.11:1673-1679, 1768-1777;
  arg_groups/model_overrides/deepseek_v2.py 0.5.23:37-49, 178-185); any other MLA model takes
  ``fa3`` on Hopper, ``flashinfer`` on SM 10.x, ``triton`` elsewhere (server_args.py
  0.5.5:1159-1175; 0.5.11:2515-2531; arg_groups/model_override_base.py 0.5.23:336-351).
- ``flashinfer`` is ``FlashInferMLAAttnBackend`` (layers/attention/flashinfer_mla_backend.py).
  Decode plans ``BatchMLAPagedAttentionWrapper.plan`` with one query token per request, not causal
  (``call_begin_forward``: 0.5.5:731-758, 0.5.11:734-761, 0.5.23:959-986), CUDA graphs plan their
  capture batch (0.5.5:370-400; 0.5.23:352-373) and replay through ``fast_mla_decode_plan``
  (0.5.5:1075, 0.5.23:1386); EAGLE's draft steps decode ``topk`` rows per request through
  ``FlashInferMLAMultiStepDraftBackend`` (0.5.5:895-917, 0.5.23:1184-1206). Target verify and draft extend plan the paged wrapper, causal, with
  the draft tokens per request (0.5.5:297-318; 0.5.23:435-446, 1433 ``fast_mla_prefill_plan``).
  An extend plans the paged wrapper, causal, whenever a request has a prefix, or always with
  ``--flashinfer-mla-disable-ragged`` (``use_ragged``: 0.5.5:322-326; 0.5.11:323-329; 0.5.23:450-458,
  where captured prefill also plans it): a prefix-cache hit is enough, so the extend path is counted
  on every deployment (``call_begin_forward``: 0.5.5:879-892, 0.5.11:882-895, 0.5.23:1168-1181).
- A hybrid backend (``--prefill-attention-backend`` and ``--decode-attention-backend`` differ):
  decode takes the decode backend, extend the prefill one, target verify the prefill one unless
  ``--speculative-attention-mode decode`` (hybrid_attn_backend.py 0.5.5:42-51, 0.5.23:79-88; that
  option is not read here, so verify is counted where either side is ``flashinfer``).
- ``flashmla`` and ``trtllm_mla`` subclass it: ``flashmla`` hands extend and draft extend to the
  parent (flashmla_backend.py 0.5.5:146, 398-402), ``trtllm_mla`` hands an extend to it only with
  ``--disable-chunked-prefix-cache`` (trtllm_mla_backend.py 0.5.5:546-556): not answered here yet
  (the route says so).

vLLM 0.33.0: only ``FLASHINFER_MLA_SPARSE_SM90`` (sparse MLA on Hopper,
v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py:281, :363-375) builds a
``BatchMLAPagedAttentionWrapper``; dense MLA models run other backends there. Not answered here yet.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MlaRoute", "route", "SGLANG_TRTLLM_MLA_ARCHS", "SPARSE_MLA_ARCHS"]

# architectures SGLang gives trtllm_mla on SM 10.x when no backend is named
SGLANG_TRTLLM_MLA_ARCHS = {
    "0.5.5": ("DeepseekV3ForCausalLM",),  # server_args.py 0.5.5:899
    "0.5.11": ("DeepseekV3ForCausalLM", "KimiK25ForConditionalGeneration", "MistralLarge3ForCausalLM",
               "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM"),  # server_args.py 0.5.11:1673-1679
    "0.5.23": ("DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "KimiK25ForConditionalGeneration",
               "MistralLarge3ForCausalLM", "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM",
               "Glm5NextForConditionalGeneration", "HYV4ForCausalLM", "HYV4ForCausalLMNextN",
               "LongcatFlashForCausalLM", "LongcatFlashForCausalLMNextN",
               "Dots3NoteForCausalLM"),  # model_overrides/deepseek_v2.py 0.5.23:37-49
}
# sparse-attention MLA (DSA/NSA): SGLang runs its nsa backend (is_deepseek_nsa), vLLM its sparse ones
SPARSE_MLA_ARCHS = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM", "Glm5NextForConditionalGeneration")

_SRC = {
    "decode": {"0.5.5": "flashinfer_mla_backend.py 0.5.5:288-296, 731-758",
               "0.5.11": "flashinfer_mla_backend.py 0.5.11:289-297, 734-761",
               "0.5.23": "flashinfer_mla_backend.py 0.5.23:425-434, 959-986, 1386"},
    "verify": {"0.5.5": "flashinfer_mla_backend.py 0.5.5:297-318, 879-892",
               "0.5.11": "flashinfer_mla_backend.py 0.5.11:298-319, 882-895",
               "0.5.23": "flashinfer_mla_backend.py 0.5.23:435-446, 1168-1181, 1433"},
    "draft decode": {"0.5.5": "flashinfer_mla_backend.py 0.5.5:895-1047 (max_bs = pool x topk :917)",
                     "0.5.11": "flashinfer_mla_backend.py 0.5.11:898-1050 (max_bs = pool x topk :920)",
                     "0.5.23": "flashinfer_mla_backend.py 0.5.23:1184- (pool x topk :1206)"},
    "extend": {"0.5.5": "flashinfer_mla_backend.py 0.5.5:319-337, 879-892",
               "0.5.11": "flashinfer_mla_backend.py 0.5.11:320-340, 882-895",
               "0.5.23": "flashinfer_mla_backend.py 0.5.23:447-497, 1168-1181"},
}
_DEFAULT_SRC = {"0.5.5": "server_args.py 0.5.5:1159-1175", "0.5.11": "server_args.py 0.5.11:2515-2531",
                "0.5.23": "arg_groups/model_override_base.py 0.5.23:336-351"}
_TRTLLM_SRC = {"0.5.5": "server_args.py 0.5.5:899-909", "0.5.11": "server_args.py 0.5.11:1768-1777",
               "0.5.23": "arg_groups/model_overrides/deepseek_v2.py 0.5.23:178-185"}


@dataclass(frozen=True)
class MlaRoute:
    backend: str | None  # the attention backend the server takes ("a / b" for a hybrid)
    backend_source: str
    kinds: tuple = ()  # the batch kinds that plan through MLAPlan
    sources: tuple = ()  # (kind, server file:line) per kind
    not_applicable: str | None = None  # why nothing plans there


def _rules_line(line: str) -> str:
    from guard_core.deployment.deployment_record import known_line, line_at_least

    k = known_line("sglang", line)
    return "0.5.23" if line_at_least(k, "0.5.23") else "0.5.11" if line_at_least(k, "0.5.11") else "0.5.5"


def _sglang_backend(rl: str, cc, arch: str | None, attn, prefill, decode) -> tuple[str, str, str, str]:
    """(backend, prefill side, decode side, why) as SGLang resolves them for an MLA model."""
    if prefill is not None and prefill == decode:
        return prefill, prefill, prefill, "--prefill- and --decode-attention-backend name it"
    if attn is None:
        major = cc[0] if cc else None
        if prefill is None and decode is None and major == 10 and arch in SGLANG_TRTLLM_MLA_ARCHS[rl]:
            attn, why = "trtllm_mla", f"SGLang's default for {arch} on SM 10.x ({_TRTLLM_SRC[rl]})"
        elif tuple(cc or ()) == (9, 0):
            attn, why = "fa3", f"SGLang's default for MLA on Hopper ({_DEFAULT_SRC[rl]})"
        elif major == 10:
            attn, why = "flashinfer", f"SGLang's default for MLA on SM 10.x ({_DEFAULT_SRC[rl]})"
        else:
            attn, why = "triton", f"SGLang's default for MLA on this GPU ({_DEFAULT_SRC[rl]})"
    else:
        why = "--attention-backend"
    return attn, prefill or attn, decode or attn, why


def route(framework: str, line: str, cc, architecture: str | None, attention_backend: str | None = None,
          prefill_backend: str | None = None, decode_backend: str | None = None,
          speculative: bool = False) -> MlaRoute:
    """The MLA paths of one deployment of an MLA model (see the module docstring)."""
    if framework != "sglang":
        return MlaRoute(None, "", not_applicable=(
            "vLLM's dense MLA backends do not call FlashInfer's MLA planner; only FLASHINFER_MLA_SPARSE_SM90 "
            "(sparse MLA on Hopper, vllm 0.33 v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py:281) "
            "does, and plan does not answer it yet"))
    if architecture in SPARSE_MLA_ARCHS:
        return MlaRoute("nsa", "SGLang's sparse-attention (DSA) backend", not_applicable=(
            f"{architecture} is a sparse-attention MLA model: SGLang runs its nsa backend, not "
            "FlashInferMLAAttnBackend"))
    rl = _rules_line(line)
    attn, pre, dec, why = _sglang_backend(rl, cc, architecture, attention_backend, prefill_backend, decode_backend)
    name = attn if pre == dec else f"{pre} (prefill) / {dec} (decode)"
    kinds = []
    if dec == "flashinfer":
        kinds.append("decode")
    if speculative and "flashinfer" in (pre, dec):
        kinds.append("verify")
    if pre == "flashinfer" or (pre == "flashmla"):
        kinds.append("extend")
    if speculative and pre == "flashmla" and "verify" not in kinds:
        kinds.append("verify")  # flashmla's draft extend goes to the parent
    if not kinds:
        more = (": it plans an extend through FlashInfer's MLA planner only with --disable-chunked-prefix-cache "
                "(trtllm_mla_backend.py 0.5.5:546-556), which plan does not answer yet"
                if "trtllm_mla" in (pre, dec) else "")
        return MlaRoute(name, why, not_applicable=(
            f"SGLang {line} runs this MLA model on its {name} attention backend ({why}), which does not plan "
            f"through FlashInfer's MLA planner{more}; --attention-backend flashinfer would"))
    srcs = [(k, _SRC[k][rl]) for k in kinds]
    if "decode" in kinds and speculative:
        srcs.append(("draft decode", _SRC["draft decode"][rl]))  # EAGLE's draft steps, topk rows a request
    return MlaRoute(name, why, tuple(kinds), tuple(srcs))
