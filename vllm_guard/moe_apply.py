"""What the functions vLLM's MoE guard wraps answer (moe.py's rows put them in place):
``has_flashinfer_trtllm_fused_moe``, the experts' ``_supports_current_device`` gates,
the BF16 autotune skip list (strict), the older ``VLLM_FLASHINFER_MOE_BACKEND=latency``
route, the MXFP4 oracle's view of ``vllm.envs``, and an explicit ``--moe-backend
flashinfer_trtllm`` rewritten on the engine config. The decision and its lines are
moe_facts.py's.
"""

from __future__ import annotations

from guard_core.runtime.wrapping import guarded

from ._log import get_log
from .moe_facts import (MXFP4_ENV_ROUTES, _bf16_route_asked, _considered, _say, _skip_text, _user_skip_ops,
                        _warn, decision)


# --- has_flashinfer_trtllm_fused_moe ---------------------------------------

def _make_has_trtllm(orig, module):
    def has_flashinfer_trtllm_fused_moe() -> bool:
        o = decision()
        if o.block:
            if guarded(get_log(), "moe", "moe guard", orig, default=False):
                get_log().info_once(
                    "moe-block",
                    o.line("FlashInfer TRT-LLM fused MoE reported unavailable; "
                           "vLLM selects its next MoE backend"),
                )
            return False
        answer = orig()
        if answer and o.action == "warn":
            guarded(get_log(), "moe", "moe guard", _warn, o)
        return answer

    return has_flashinfer_trtllm_fused_moe


# --- the experts' _supports_current_device gates (BF16, MXFP4; vLLM 0.19's BF16 module gate) ---

def _blocking_gate(what: str, key: str, message: str, also=None, op: str | None = None):
    """A wrapper factory for a ``_supports_current_device`` gate of ``op``'s experts: where
    the guard blocks ``op``, the gate answers False (one info line, when the original would
    have said True, then ``also()``); elsewhere the original answers, and where it says True
    the table's warning or note for ``op`` is said once."""

    def make(orig, module=None):
        def _supports_current_device(*args, **kwargs) -> bool:
            o = decision(op)
            if o.block:
                if guarded(get_log(), "moe", what, orig, *args, default=False, **kwargs):
                    get_log().info_once(key, o.line(message))
                    if also is not None:
                        also()
                return False
            answer = orig(*args, **kwargs)
            if answer:
                guarded(get_log(), "moe", what, _considered, o, op or "every op")
            return answer

        return _supports_current_device

    return make


def _warn_bf16_route() -> None:
    if guarded(get_log(), "moe", "moe guard (BF16)", _bf16_route_asked, default=False):
        # the user's own route to TRT-LLM is not followed: a warning, as for an explicit --moe-backend
        get_log().warning_once(
            "moe-env-route",
            decision("bf16").line("VLLM_FLASHINFER_MOE_BACKEND=latency (TRT-LLM) with VLLM_USE_FLASHINFER_MOE_FP16=1 "
                                  "not followed; vLLM selects its next BF16 MoE backend"),
        )


_BF16_GATE_WRAP = _blocking_gate(
    "moe guard (BF16)", "moe-block-bf16",
    "FlashInfer TRT-LLM BF16 MoE reported unsupported; vLLM selects its next BF16 MoE backend",
    also=_warn_bf16_route, op="bf16")
_BF16_EXPERTS_WRAP = _blocking_gate(
    "moe guard (BF16)", "moe-block-bf16",
    "FlashInfer TRT-LLM BF16 MoE experts reported unsupported; vLLM selects its next BF16 MoE backend",
    op="bf16")
_MXFP4_WRAP = _blocking_gate(
    "moe guard (MXFP4)", "moe-block-mxfp4",
    "FlashInfer TRT-LLM MXFP4 MoE experts reported unsupported; vLLM selects its next MXFP4 backend",
    op="mxfp4")


# --- strict: skip the BF16 autotune sweep (vLLM 0.29+) ------------------------------

def _make_skip_ops(orig, module):
    def _flashinfer_autotune_skip_ops(*args, **kwargs):
        skip = orig(*args, **kwargs)
        return guarded(get_log(), "moe", "moe guard (autotune)", _add_bf16_skip, skip, default=skip)

    return _flashinfer_autotune_skip_ops


def _add_bf16_skip(skip):
    """vLLM's own skip set plus the BF16 op, where strict asks for it and the user did not
    set VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS (vLLM 0.33 warmup/kernel_warmup.py:299-301 reads
    it; None means "skip nothing")."""
    from guard_core.flashinfer.moe_evidence import BF16_AUTOTUNE_OP

    o = decision("bf16")
    if o.action != "skip_autotune" or _user_skip_ops() is not None:
        return skip
    _say("moe-skip:bf16", o.note(_skip_text()))
    return set(skip or ()) | {BF16_AUTOTUNE_OP}


# --- VLLM_FLASHINFER_MOE_BACKEND=latency (older env route, read in workers) --

def _has_latency_route(owner, module) -> bool:
    enum = getattr(module, "FlashinferMoeBackend", None)
    return (enum is not None and callable(getattr(module, "get_flashinfer_moe_backend", None))
            and hasattr(enum, "TENSORRT_LLM") and hasattr(enum, "CUTLASS"))


def _make_backend_getter(orig, module):
    enum = module.FlashinferMoeBackend

    def get_flashinfer_moe_backend(*args, **kwargs):
        backend = orig(*args, **kwargs)
        if backend == enum.TENSORRT_LLM and decision().block:
            get_log().warning_once(
                "moe-env-route",
                decision().line("VLLM_FLASHINFER_MOE_BACKEND=latency (TRT-LLM) replaced by "
                                "throughput (FlashInfer CUTLASS)"),
            )
            return enum.CUTLASS
        return backend

    return get_flashinfer_moe_backend


# --- VLLM_USE_FLASHINFER_MOE_MXFP4_* (env routes to the MXFP4 TRT-LLM experts) --

class _EnvsView:
    """vLLM's ``envs`` as the MXFP4 oracle sees it: the TRT-LLM routes unset.

    Only the oracle module's global is replaced; every other reader of
    ``vllm.envs`` still sees the user's values.
    """

    def __init__(self, real, platform_module):
        self._real = real
        self._platform = platform_module

    def _hidden(self, name: str) -> bool:
        sm10x_only = MXFP4_ENV_ROUTES.get(name)
        if sm10x_only is None or not decision("mxfp4").block:
            return False
        try:
            if not self._real.is_set(name) or not getattr(self._real, name):
                return False
        except Exception:
            return False
        if sm10x_only:  # on SM90 this route is CUTLASS, not TRT-LLM
            try:
                if not self._platform.current_platform.is_device_capability_family(100):
                    return False
            except Exception:
                pass
        get_log().warning_once(
            "moe-mxfp4-route:" + name,
            decision("mxfp4").line(f"{name}=1 (FlashInfer TRT-LLM MXFP4 MoE) ignored; "
                                   "vLLM selects its next MXFP4 backend"),
        )
        return True

    def is_set(self, name):
        return False if self._hidden(name) else self._real.is_set(name)

    def __getattr__(self, name):
        value = getattr(self._real, name)
        if name in MXFP4_ENV_ROUTES and self._hidden(name):
            return False
        return value


# --- explicit --moe-backend flashinfer_trtllm --------------------------------

def _make_create_engine_config(orig, module):
    def create_engine_config(self, *args, **kwargs):
        config = orig(self, *args, **kwargs)
        guarded(get_log(), "moe", "moe guard (config rewrite)", rewrite_moe_backend, config)
        return config

    return create_engine_config


def _op_of(model_config):
    """The TRT-LLM MoE op a model's experts run, from its quantization (None: unknown)."""
    from guard_core.decide.moe import op_of

    if model_config is None:
        return None
    return op_of("vllm", getattr(model_config, "quantization", None))


def rewrite_moe_backend(config) -> list[str]:
    """Replace an explicit ``flashinfer_trtllm`` MoE backend by ``auto`` where the guard
    blocks the op the model (or its draft) runs."""
    changed = []
    main_op = _op_of(getattr(config, "model_config", None))
    spec = getattr(config, "speculative_config", None)
    draft_op = _op_of(getattr(spec, "draft_model_config", None)) if spec is not None else None
    for owner_name, flag, op in (("kernel_config", "--moe-backend", main_op),
                                 ("speculative_config", "speculative_config.moe_backend", draft_op or main_op)):
        owner = getattr(config, owner_name, None)
        if owner is None or getattr(owner, "moe_backend", None) != "flashinfer_trtllm":
            continue
        o = decision(op)
        if not o.block:
            continue
        owner.moe_backend = "auto"
        changed.append(owner_name)
        get_log().warning_once(
            "moe-rewrite:" + owner_name,
            o.line(f"TRT-LLM fused MoE disabled; {flag} flashinfer_trtllm replaced by auto"),
        )
    return changed
