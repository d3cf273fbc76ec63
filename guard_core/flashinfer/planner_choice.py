"""Which FlashInfer planner serves each phase: one function for both adapters and the CLI.

Mirrors FlashInfer's own dispatch and the framework's conditions, fed with
facts the adapter reads (or the CLI is told). Rules (each checked by running the
framework's own ``plan()`` calls through FlashInfer's real planner code, see
``tests/realcalls``):

- FlashInfer's prefill wrapper with ``backend="auto"`` asks
  ``determine_attention_backend``: FA3 (the SM90 planner, int buffer only) on
  SM90 when the dtypes allow it (no FP8 at all, or FP8 query *and* FP8 KV);
  FA2 otherwise, and FA2 on every other architecture.
- Tensor-core decode (``BatchDecodeWithPagedKVCacheWrapper(use_tensor_cores=True)``)
  with ``backend="auto"`` plans FA2 unless an FP8 dtype is involved; with FP8
  it asks ``determine_attention_backend`` like the prefill wrapper.
- CUDA-core decode (``use_tensor_cores=False``) runs ``DecodePlan``.
- vLLM up to 0.25: the query stays in the model dtype unless TRT-LLM attention
  is usable (then ``q_data_type = kv_cache_dtype``); from 0.26 the builder
  holds one query dtype per phase (``q_data_type_prefill`` /
  ``q_data_type_decode``, ``get_q_data_type``): with an FP8 KV cache on SM90
  and SM10x the query is FP8 too (so SM90 prefill plans FA3), except SM90/SM12x
  decode, which keeps the model dtype unless TRT-LLM attention is forced off.
  The adapter passes the builder's own values; ``vllm_query_dtypes`` is that
  rule for the CLI, which has no builder. Decode always runs with tensor cores;
  on SM10x it decodes with TRT-LLM-gen (nothing planned in this buffer) only
  when ``use_trtllm_decode_attention and dcp_world_size <= 1``; with decode
  context parallel the decode wrapper plans all DCP ranks' query heads.
- SGLang: tensor-core decode by its own rule (GQA group and KV dtype); the
  adapter passes what SGLang decided.

A fact that is ``None`` is unknown: every choice it could lead to is returned
as a candidate, the caller sizes each and keeps the larger need, and the
missing fact is named in ``missing`` for one warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product

from guard_core.flashinfer.sizing import Planners

__all__ = ["PlannerFacts", "choose_planners", "dtype_bytes", "dtype_kind", "fa3_head_dim_gate", "size_choice",
           "vllm_query_dtypes"]

FP8_NAMES = ("fp8", "fp8_e4m3", "fp8_e5m2", "float8_e4m3fn", "float8_e5m2", "e4m3", "e5m2")
FP4_NAMES = ("nvfp4", "fp4", "float4_e2m1fn_x2")


def dtype_kind(name) -> str | None:
    """'fp8' | 'fp4' | '16bit' | None (unknown), from a dtype or its name."""
    if name is None:
        return None
    text = str(name).lower().replace("torch.", "")
    if text in ("auto", "bfloat16", "bf16", "float16", "fp16", "half"):
        return "16bit"
    if text in FP8_NAMES or text.startswith("float8") or text.startswith("fp8"):
        return "fp8"
    if text in FP4_NAMES or "fp4" in text:
        return "fp4"
    if text in ("float32", "fp32", "float"):
        return "32bit"
    return None


def dtype_bytes(kind: str | None) -> int | None:
    return {"fp8": 1, "fp4": 1, "16bit": 2, "32bit": 4}.get(kind) if kind else None


@dataclass(frozen=True)
class PlannerFacts:
    """What decides the planners, per rank. ``None`` means unknown."""

    framework: str  # "vllm" | "sglang"
    cc: tuple[int, int] | None
    kv_dtype: str | None = "auto"  # "auto" (model dtype), "fp8", "fp8_e4m3", "nvfp4", a torch dtype name ...
    # vLLM: TRT-LLM attention usable here (SM10x with FlashInfer's cubins);
    # then the query takes the KV dtype and decode may run TRT-LLM-gen.
    trtllm_attention: bool | None = False
    # vLLM: use_trtllm_decode_attention / use_trtllm_prefill (None: follow trtllm_attention)
    trtllm_decode: bool | None = None
    trtllm_prefill: bool | None = None
    dcp_size: int = 1
    # SGLang's decision (None: unknown); vLLM always decodes with tensor cores
    tensor_core_decode: bool | None = True
    # vLLM: the query dtype per phase as the builder holds it (0.26+). "derive": vLLM
    # <= 0.25's rule (the KV dtype only where TRT-LLM attention is usable); None: unknown
    # (both the model dtype and the KV dtype are sized)
    q_prefill: str | None = "derive"
    q_decode: str | None = "derive"
    # vLLM's prefill rule (use_trtllm_attention(is_prefill=True), vllm/utils/flashinfer.py:
    # 0.23.0:388-463, 0.33.0:724-810): --attention-config.use_trtllm_attention (None: auto,
    # True: forced on, False: forced off), attention sinks, and whether any layer of this
    # builder runs non-causal (0.33 `use_non_causal`, the DFlash drafter: FA2 prefill,
    # flashinfer.py:1594 `prefill_use_trtllm = causal and ...`). None: unknown.
    trtllm_force: bool | None = None
    has_sinks: bool = False
    noncausal: bool | None = False
    # --attention-config.disable_flashinfer_q_quantization (vLLM <= 0.25: the query stays in
    # the model dtype even where TRT-LLM attention is usable; 0.23.0 flashinfer.py:648-660)
    q_quant_disabled: bool = False


@dataclass(frozen=True)
class PlannerChoice:
    candidates: tuple[Planners, ...]
    missing: tuple[str, ...] = ()
    reasons: tuple[str, ...] = field(default=())
    decode_qo_heads_factor: int = 1  # decode plans this many ranks' query heads (vLLM DCP)

    @property
    def planners(self) -> Planners:
        return self.candidates[0]


def _fa_backend(cc, q_kind, kv_kind, *, tensor_core_decode: bool) -> str:
    fp8 = "fp8" in (q_kind, kv_kind)
    if tensor_core_decode and not fp8:
        return "fa2"  # decode's auto: FA2 unless an FP8 dtype is involved
    sm90 = cc is not None and tuple(cc) == (9, 0)
    if not sm90:
        return "fa2"
    q8, kv8 = q_kind == "fp8", kv_kind == "fp8"
    return "fa3" if q8 == kv8 else "fa2"  # is_fa3_backend_supported refuses mixed FP8


def _sm10x(cc) -> bool:
    return cc is not None and cc[0] == 10


def choose_planners(facts: PlannerFacts) -> PlannerChoice:
    missing: list[str] = []
    ccs = [facts.cc]
    if facts.cc is None:
        missing.append("compute capability")
        ccs = [(8, 9), (9, 0), (10, 0)]
    kinds = [dtype_kind(facts.kv_dtype)]
    if kinds[0] is None:
        missing.append(f"KV-cache dtype ({facts.kv_dtype!r})")
        kinds = ["16bit", "fp8"]
    trt = [facts.trtllm_attention]
    if facts.framework == "vllm" and facts.trtllm_attention is None:
        missing.append("TRT-LLM attention availability")
        trt = [False, True]
    qps, qds = [facts.q_prefill], [facts.q_decode]
    if facts.framework == "vllm":
        for name, given, opts in (("prefill", facts.q_prefill, qps), ("decode", facts.q_decode, qds)):
            if given is None:
                missing.append(f"{name} query dtype")
                opts[:] = ["16bit", "kv"]
            elif given != "derive" and dtype_kind(given) is None:
                missing.append(f"{name} query dtype ({given!r})")
                opts[:] = ["16bit", "kv"]
    tcd = [facts.tensor_core_decode]
    if facts.tensor_core_decode is None:
        missing.append("tensor-core decode")
        tcd = [True, False]

    out: list[Planners] = []
    reasons: list[str] = []
    for cc, kv_kind, trtllm, tc, qp, qd in product(ccs, kinds, trt, tcd, qps, qds):
        if facts.framework == "vllm":
            p, why = _vllm(facts, cc, kv_kind, bool(trtllm), qp, qd)
        else:
            p, why = _sglang(facts, cc, kv_kind, bool(tc))
        if p not in out:
            out.append(p)
            reasons.append(why)
    factor = max(1, int(facts.dcp_size or 1)) if facts.framework == "vllm" else 1
    return PlannerChoice(tuple(out), tuple(missing), tuple(reasons), factor)


def _q_kind(given, derived: str, kv_kind: str) -> str:
    if given == "derive":
        return derived
    if given == "kv":
        return kv_kind
    return dtype_kind(given) or derived


def vllm_query_dtypes(cc, kv_kind: str | None, trtllm_forced_off: bool = False) -> tuple[str, str]:
    """vLLM 0.26+'s query dtype kinds (prefill, decode): ``get_q_data_type`` for a
    CLI that has no builder to read them from (checked through the real calls)."""
    if kv_kind != "fp8" or cc is None:
        return "16bit", "16bit"
    fp8_q = tuple(cc) == (9, 0) or cc[0] == 10
    prefill = "fp8" if fp8_q else "16bit"
    decode = prefill
    if (tuple(cc) == (9, 0) or cc[0] == 12) and not trtllm_forced_off:
        decode = "16bit"  # XQA decode needs a 16-bit query
    return prefill, decode


def _platform_fp8(name) -> bool:
    """Whether a query dtype is CUDA's ``current_platform.fp8_dtype()``, float8_e4m3fn
    (vLLM's cache dtype "fp8" is e4m3 too); an e5m2 query is not (vllm/platforms/cuda.py)."""
    text = str(name).lower().replace("torch.", "")
    return "e4m3" in text or text == "fp8"


def _vllm_trtllm_prefill(facts: PlannerFacts, usable: bool, q_name, kv_kind: str) -> tuple:
    """(TRT-LLM prefill for causal batches, FA2 prefill possible too) by vLLM's own
    ``use_trtllm_attention(is_prefill=True)`` (vllm/utils/flashinfer.py 0.23.0:388-463,
    0.33.0:724-810): never when forced off, with DCP, off the supported platform
    (``usable``: SM10x with the cubins); always for an FP8 query or attention sinks;
    else, when not forced, only with an unquantized KV cache ("auto"). An FP8 KV cache
    with a 16-bit query (``disable_flashinfer_q_quantization``) therefore prefills with
    FA2 on SM10x too, and so does an e5m2 query (``q_dtype == current_platform.fp8_dtype()``
    is e4m3 only: found by the differential search, vLLM 0.23 on B300 with
    ``--kv-cache-dtype fp8_e5m2``). Non-causal layers always prefill with FA2 (0.33.0
    flashinfer.py:1594, ``_noncausal_prefill_wrapper`` with backend "auto")."""
    if facts.trtllm_prefill is not None:  # the caller knows the answer
        trt = bool(facts.trtllm_prefill) and usable
    elif not usable or facts.trtllm_force is False or int(facts.dcp_size or 1) > 1:
        trt = False
    elif _platform_fp8(q_name) or facts.has_sinks or facts.trtllm_force is True:
        trt = True
    else:
        trt = kv_kind == "16bit"
    return trt, facts.noncausal is not False


def _vllm(facts: PlannerFacts, cc, kv_kind, trtllm: bool, qp="derive", qd="derive"):
    if kv_kind == "fp4":
        return Planners(prefill="trtllm", decode="trtllm"), "NVFP4 KV cache: TRT-LLM attention only"
    usable = trtllm and _sm10x(cc)
    derived = kv_kind if (usable and not facts.q_quant_disabled) else "16bit"
    q_prefill, q_decode = _q_kind(qp, derived, kv_kind), _q_kind(qd, derived, kv_kind)
    # decode: the builder's own use_trtllm_decode_attention, on every GPU. vLLM >= 0.32
    # decodes with XQA on SM90/SM12x under that flag (0.33.0 flashinfer.py:996-1041,
    # FlashInferDecodeKernel.XQA), which plans nothing in this buffer; the flag is already
    # False where XQA/TRT-LLM-gen cannot serve (head dim, DCP with XQA).
    trt_decode = usable if facts.trtllm_decode is None else bool(facts.trtllm_decode)
    if qp == "derive":
        q_name = facts.kv_dtype if (usable and not facts.q_quant_disabled) else "16bit"
    elif qp == "kv":
        q_name = facts.kv_dtype
    else:
        q_name = qp
    trt_prefill, fa2_too = _vllm_trtllm_prefill(facts, usable, q_name, kv_kind)
    if trt_decode and int(facts.dcp_size or 1) <= 1:
        decode, dwhy = "trtllm", "decode TRT-LLM-gen" if _sm10x(cc) else "decode XQA"
    else:
        decode = _fa_backend(cc, q_decode, kv_kind, tensor_core_decode=True)
        dwhy = f"tensor-core decode {decode.upper()}"
        if trt_decode:
            dwhy += f" (DCP {facts.dcp_size}: no TRT-LLM decode)"
    if trt_prefill and not fa2_too:
        prefill = "trtllm"
    else:
        prefill = _fa_backend(cc, q_prefill, kv_kind, tensor_core_decode=False)
    why = f"prefill {prefill.upper()}, {dwhy}"
    if trt_prefill and fa2_too:
        why += " (causal prefill TRT-LLM; non-causal layers FA2)"
    return Planners(prefill=prefill, decode=decode), why


def _sglang(facts: PlannerFacts, cc, kv_kind, tensor_core: bool):
    # SGLang pins FlashInfer's FA2 backend on every wrapper that plans float scratch,
    # so FlashInfer's "auto" (FA3 on SM90) never decides them (read from the wheels,
    # sglang/srt/layers/attention/flashinfer_backend.py; checked through SGLang's own
    # plan() calls in tests/sglang/test_realcalls.py):
    # - paged prefill (extend): backend="fa2" (0.5.5:258, capture draft-extend 0.5.5:613);
    #   self.prefill_backend = "fa2" passed at 0.5.11:126,270 and 0.5.23:335,538;
    # - verify: 0.5.11:126,277 / 0.5.23:335,545 (and the CUDA-graph ones 0.5.11:630,
    #   0.5.23:1195) pass "fa2"; 0.5.5 leaves "auto" (262, 580) but always plans verify with
    #   a custom mask, which FlashInfer 0.5.0's is_fa3_backend_supported refuses -> FA2;
    # - tensor-core decode: self.decode_backend = "fa2" at 0.5.11:127,284,578 and
    #   0.5.23:336,552,1147; on 0.5.5 (FlashInfer 0.5.0) the wrapper's tensor-core plan
    #   hard-codes "fa2" (flashinfer/decode.py:1031, fast_decode_plan likewise);
    # - CUDA-core decode (should_use_tensor_core false: GQA group < 4 with 16-bit KV) is
    #   FlashInfer's DecodePlan.
    # Only the ragged extend wrapper keeps "auto" (0.5.5:231, 0.5.11:243, 0.5.23:501; "cutlass"
    # on SM100): with 16-bit q/kv that is FA3 on SM90, int buffer only, or FA2 elsewhere,
    # which the FA2 prefill sizing above covers.
    decode = "fa2" if tensor_core else "decode"
    prefill = "fa2"
    return Planners(prefill=prefill, decode=decode), f"prefill {prefill.upper()}, decode {decode}"


FA3_HEAD_DIMS = ((64, 64), (128, 128), (256, 256), (192, 128))


def fa3_supports_head_dims(head_dim_qk: int, head_dim_vo: int) -> bool:
    """FlashInfer's ``is_fa3_prefill_head_dim_supported`` (flashinfer/utils.py, 0.6.15+;
    0.7.2:504-508): the SM90 kernels are instantiated for these pairs only."""
    return (int(head_dim_qk), int(head_dim_vo)) in FA3_HEAD_DIMS


def fa3_head_dim_gate(choice: PlannerChoice, layout, flashinfer_version: str | None) -> PlannerChoice:
    """FA3 only where FlashInfer would pick it for these head dims: from 0.6.15
    ``determine_attention_backend`` (utils.py 0.7.2:616-628) answers FA2 for any other
    pair, and every wrapper passes its head dims (prefill.py 0.7.2:1509,2977,4769;
    decode.py 0.6.16:1646). Releases before 0.6.15 have no gate (0.6.14's utils.py has no
    ``is_fa3_prefill_head_dim_supported``)."""
    from guard_core.flashinfer import releases

    try:
        gated = flashinfer_version is not None and releases.has(flashinfer_version, "fa3_head_dim_gate")
    except Exception:
        gated = True
    if not gated or fa3_supports_head_dims(layout.head_dim_qk, layout.head_dim_vo):
        return choice
    out: list[Planners] = []
    for p in choice.candidates:
        q = Planners(prefill="fa2" if p.prefill == "fa3" else p.prefill,
                     decode="fa2" if p.decode == "fa3" else p.decode,
                     decode_blocks_per_sm=p.decode_blocks_per_sm, decode_uniform_q_len=p.decode_uniform_q_len)
        if q not in out:
            out.append(q)
    if out == list(choice.candidates):
        return choice
    why = (f"head dims {layout.head_dim_qk}/{layout.head_dim_vo}: FlashInfer {flashinfer_version} has no FA3 "
           "kernel for them, FA2 instead")
    return PlannerChoice(tuple(out), choice.missing, tuple(r + f" ({why})" for r in choice.reasons),
                         choice.decode_qo_heads_factor)


def size_choice(layout, limits, gpu, flashinfer_version: str, choice: PlannerChoice, caller: str,
                kv_dtype_bytes_options=None):
    """The requirement over every candidate of ``choice`` (the larger need wins).

    With decode context parallel (``choice.decode_qo_heads_factor`` > 1) the
    decode phase is sized with that many ranks' query heads. A missing fact
    becomes the first note ("unknown: ...; sized for the larger need").
    """
    from dataclasses import replace as _replace

    from guard_core.flashinfer.sizing import compute_requirement, merge_requirements

    choice = fa3_head_dim_gate(choice, layout, flashinfer_version)
    layouts = [layout]
    if kv_dtype_bytes_options:
        layouts = [_replace(layout, kv_dtype_bytes=int(b)) for b in dict.fromkeys(kv_dtype_bytes_options)]
    reqs = []
    for lay in layouts:
        for p in choice.candidates:
            f = choice.decode_qo_heads_factor
            # DCP: decode and the paged prefill plan all DCP ranks' query heads
            # (the ragged prefill plan, with this rank's heads, needs less)
            lay_f = _replace(lay, num_qo_heads=lay.num_qo_heads * f) if f > 1 else lay
            r = compute_requirement(lay_f, limits, gpu, flashinfer_version, p, caller)
            reqs.append(r)
    notes = []
    if choice.missing:
        notes.append("unknown: " + ", ".join(choice.missing) + "; sized for the larger need")
    if choice.decode_qo_heads_factor > 1:
        notes.append(f"decode context parallel {choice.decode_qo_heads_factor}: decode and prefill plan "
                     f"{layout.num_qo_heads * choice.decode_qo_heads_factor} query heads")
    return merge_requirements(reqs, notes)
