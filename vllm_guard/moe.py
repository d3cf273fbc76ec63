"""MoE guard: keep vLLM off FlashInfer's TRT-LLM fused MoE where it crashes.

What it does comes from the evidence table (guard_core.flashinfer.moe_evidence), per op, for
the GPU vLLM's platform reports (SM10x only; NVML, no CUDA initialisation), the
installed FlashInfer and the host: this module reads them into a
``guard_core.decide.moe.MoeFacts`` and applies the one ``MoeOutcome`` the core
returns (``guard_core.decide.moe.decide``):

- warn (default, any host, SM10x, FlashInfer < 0.6.16): one WARNING when vLLM
  asks whether the TRT-LLM routed MoE is available (it stays available);
- info (default, BF16 on SM10x from 0.6.16, open reports): one INFO line when
  vLLM considers the BF16 TRT-LLM experts;
- skip_autotune (strict, BF16 from 0.6.16, vLLM 0.29+): the BF16 op joins
  ``_flashinfer_autotune_skip_ops`` (what ``VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS``
  does, keeping vLLM's own default skips), unless the user set that variable;
  on lines without it the BF16 TRT-LLM experts are blocked instead;
- block (Grace with SM10x and FlashInfer < FLASHINFER_GUARD_MOE_FIXED_IN by
  default; any host under ``strict``; everywhere under ``on``):

- ``vllm.utils.flashinfer.has_flashinfer_trtllm_fused_moe`` answers False. It
  is ``functools.cache``d and imported by name into the TRT-LLM expert modules,
  so the wrapper keeps ``cache_clear``/``__wrapped__``, is rebound in every
  vLLM module that holds the original (now and on later imports), and caches
  that captured the old answer are cleared;
- the MXFP4 TRT-LLM experts, which that function does not gate, report the
  device unsupported (``_supports_current_device``); so does vLLM 0.19's
  BF16 gate, a module-level ``_supports_current_device`` in
  ``fused_moe/flashinfer_trtllm_moe.py`` that checks only the GPU family
  (from 0.20 the BF16 experts class asks TARGET);
- an explicit request still boots: ``kernel_config.moe_backend`` and
  ``speculative_config.moe_backend`` = ``flashinfer_trtllm`` on the config that
  ``EngineArgs.create_engine_config()`` returns become ``auto``; the older env
  route ``VLLM_FLASHINFER_MOE_BACKEND=latency`` (read in the workers through
  ``get_flashinfer_moe_backend()``) becomes ``throughput`` (FlashInfer CUTLASS),
  and the MXFP4 routes to TRT-LLM (``VLLM_USE_FLASHINFER_MOE_MXFP4_BF16`` on
  SM10x, ``VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8``), read by the MXFP4 oracle,
  are hidden from it so that its auto-selection picks the next backend.

Targets are dotted paths with a feature check, one row per vLLM module in the
patch table at the end (``guard_core.runtime.patch_table``), undone by ``uninstall()``;
what is read and decided (and said) is moe_facts.py's, what each wrapped function
answers moe_apply.py's.
A missing one where the guard is needed is one
warning naming the target and the line; where nothing is needed, a debug line.
The stand-down on a host the bug never affects (x86 with ``auto``) is a debug
line too.
"""

from __future__ import annotations

from guard_core.runtime.patch_table import PatchTable, Wrap

from ._log import get_log
from .moe_apply import (_BF16_EXPERTS_WRAP, _BF16_GATE_WRAP, _MXFP4_WRAP, _EnvsView, _has_latency_route,  # noqa: F401
                        _make_backend_getter, _make_create_engine_config, _make_has_trtllm, _make_skip_ops,
                        rewrite_moe_backend)
from .moe_facts import (MXFP4_ENV_ROUTES, SKIP_OPS_VAR, _may_block, _not_applicable, _state,  # noqa: F401
                        decision, facts, potential)

UTILS = "vllm.utils.flashinfer"
TARGET = "has_flashinfer_trtllm_fused_moe"
# Modules that import TARGET by name (vLLM 0.19 .. 0.33): the wrap's ``importers``, whose
# later import rescans sys.modules for holders of the original (Wrap.rebind, one mechanism).
IMPORTERS = (
    "vllm.model_executor.layers.fused_moe.experts.trtllm_bf16_moe",
    "vllm.model_executor.layers.fused_moe.experts.trtllm_fp8_moe",
    "vllm.model_executor.layers.fused_moe.experts.trtllm_nvfp4_moe",
    "vllm.model_executor.layers.fused_moe.experts.trtllm_lora_moe",
    "vllm.model_executor.layers.fused_moe.experts.trtllm_mxint4_moe",
    "vllm.model_executor.layers.fused_moe.flashinfer_trtllm_moe",
    "vllm.model_executor.layers.fused_moe.trtllm_moe",
    "vllm.model_executor.layers.quantization.utils.flashinfer_mxint4_moe",
    "vllm.model_executor.layers.quantization.utils.flashinfer_fp4_moe",
    "vllm.model_executor.layers.quantization.utils.flashinfer_utils",
    "vllm.model_executor.layers.fused_moe.oracle.unquantized",
    "vllm.model_executor.layers.fused_moe.oracle.fp8",
    "vllm.model_executor.layers.fused_moe.oracle.nvfp4",
    "vllm.model_executor.layers.fused_moe.oracle.mxfp4",
)
# functools.cache'd functions that call TARGET and so remember its answer.
DEPENDENT_CACHES = ("is_flashinfer_mxint4_moe_available",)
MXFP4 = "vllm.model_executor.layers.fused_moe.experts.trtllm_mxfp4_moe"
# vLLM 0.19: the BF16 TRT-LLM MoE gate is this module's own _supports_current_device()
BF16_GATE = "vllm.model_executor.layers.fused_moe.flashinfer_trtllm_moe"
FI_UTILS = "vllm.model_executor.layers.quantization.utils.flashinfer_utils"
ARG_UTILS = "vllm.engine.arg_utils"
MXFP4_ORACLE = "vllm.model_executor.layers.fused_moe.oracle.mxfp4"
KERNEL_WARMUP = "vllm.model_executor.warmup.kernel_warmup"
BF16_EXPERTS = "vllm.model_executor.layers.fused_moe.experts.trtllm_bf16_moe"
# The experts classes whose _supports_current_device gates each op's TRT-LLM experts (own or
# inherited; vLLM 0.20-0.2x: one class, later a base with modular/monolithic subclasses).
BF16_CLASSES = ("TrtLlmBf16Experts", "TrtLlmBf16ExpertsBase", "TrtLlmBf16ExpertsModular",
                "TrtLlmBf16ExpertsMonolithic")
MXFP4_CLASSES = ("TrtLlmMxfp4ExpertsBase", "TrtLlmMxfp4ExpertsMonolithic", "TrtLlmMxfp4ExpertsModular")
GATE = "_supports_current_device"


def install(settings) -> None:
    _TABLE.install()


def uninstall() -> None:
    """Undo every patch (the rebinds included); ``install`` patches again afterwards."""
    _TABLE.undo()
    _state.reset()


def _announce() -> None:
    from ._log import announce_line

    announce_line()


# --- the rows' checks and applies: has_flashinfer_trtllm_fused_moe and its caches, the experts'
# gates, the MXFP4 oracle's envs (a global rebound) -------------------------------------------

def _utils_needed(module) -> bool:
    """Patch where the guard blocks or warns (a missing target is named by the table);
    elsewhere the one stand-down line."""
    if _UTILS_WRAP.resolve(module) is None:
        return True
    note = potential().stand_down()
    if note is None:
        return True
    if note.level == "debug":
        get_log().debug(note.line, key="moe-ok")
    else:
        get_log().info_once("moe-ok", note.line)
    return False


def _clear_caches_now_and_on_undo(module) -> None:
    """After the wrap and its rebinds: caches that remembered the old answer are cleared
    (now, and on undo). A module imported later defines its caches afresh."""
    _clear_dependent_caches()
    _TABLE.patches.on_undo(_clear_dependent_caches)


def _clear_dependent_caches() -> None:
    import sys

    for mod_name, mod in list(sys.modules.items()):
        if mod is None or not mod_name.startswith("vllm"):
            continue
        for fn_name in DEPENDENT_CACHES:
            fn = getattr(mod, fn_name, None)
            clear = getattr(fn, "cache_clear", None)
            if callable(clear):
                try:
                    clear()
                except Exception:
                    pass


def _own_class(owner, module) -> bool:
    """A class the experts module itself defines (not one it imported)."""
    return isinstance(owner, type) and owner.__module__ == module.__name__


def _gate_wraps(classes, make) -> tuple:
    return tuple(Wrap(f"{c}.{GATE}", make, feature=_own_class, required=False) for c in classes)


def _hide_mxfp4_routes(module) -> None:
    """The oracle's ``envs`` global becomes an ``_EnvsView`` (a global rebound, not a wrap)."""
    real = getattr(module, "envs", None)
    if real is None or isinstance(real, _EnvsView) or not callable(getattr(real, "is_set", None)):
        _not_applicable(f"{MXFP4_ORACLE}.envs")
        return
    known = getattr(real, "environment_variables", {})
    if not any(name in known for name in MXFP4_ENV_ROUTES):
        return  # this vLLM line has no such route: nothing to hide
    import vllm.platforms as platforms

    module.envs = _EnvsView(real, platforms)

    def restore():
        if isinstance(getattr(module, "envs", None), _EnvsView):
            module.envs = module.envs._real

    _TABLE.patches.on_undo(restore)


# --- the patch table: one row per vLLM module (guard_core.runtime.patch_table) ----------------

def _callable(name):
    return lambda owner, module: callable(getattr(owner, name, None))


def _when(op=None, test=lambda o: o.block):
    return lambda module: test(potential(op))


_UTILS_WRAP = Wrap(TARGET, _make_has_trtllm, feature=_callable(TARGET), rebind=("vllm",), importers=IMPORTERS)

_TABLE = PatchTable(get_log)
_TABLE.row(UTILS, "vllm_guard.moe.utils", "moe guard", _clear_caches_now_and_on_undo, before=_announce,
           wraps=(_UTILS_WRAP,), when=_utils_needed, missing=_not_applicable)
_TABLE.row(MXFP4, "vllm_guard.moe.mxfp4", "moe guard (MXFP4)",
           when=_when("mxfp4", lambda o: o.action in ("block", "warn", "on")),
           wraps=_gate_wraps(MXFP4_CLASSES, _MXFP4_WRAP), one_of=True,
           missing=lambda t: _not_applicable(f"{MXFP4} experts' {GATE}", op="mxfp4"))
_TABLE.row(BF16_GATE, "vllm_guard.moe.bf16_gate", "moe guard (BF16)",
           # later lines keep the module (its fused op) without the gate: nothing to do there
           when=_when("bf16", lambda o: o.action != "none"),
           wraps=(Wrap(GATE, _BF16_GATE_WRAP, feature=lambda owner, m: callable(vars(m).get(GATE))),))
_TABLE.row(FI_UTILS, "vllm_guard.moe.fi_utils", "moe guard (env route)", when=_when(),
           wraps=(Wrap("get_flashinfer_moe_backend", _make_backend_getter, feature=_has_latency_route,
                       rebind=("vllm",)),),
           # no latency (TRT-LLM) route through this function on this line: nothing to guard
           missing=lambda t: _not_applicable(f"{FI_UTILS}.get_flashinfer_moe_backend", needed=False))
_TABLE.row(ARG_UTILS, "vllm_guard.moe.arg_utils", "moe guard (config)", before=_announce,
           before_what="moe guard", when=lambda module: _may_block(),
           wraps=(Wrap("EngineArgs.create_engine_config", _make_create_engine_config,
                       feature=_callable("create_engine_config")),),
           missing=lambda t: _not_applicable(f"{ARG_UTILS}.EngineArgs.create_engine_config"))
_TABLE.row(MXFP4_ORACLE, "vllm_guard.moe.mxfp4_oracle", "moe guard (MXFP4 env route)", _hide_mxfp4_routes,
           when=_when("mxfp4"))
_TABLE.row(BF16_EXPERTS, "vllm_guard.moe.bf16_experts", "moe guard (BF16)",
           when=_when("bf16", lambda o: o.action != "none"),
           wraps=_gate_wraps(BF16_CLASSES, _BF16_EXPERTS_WRAP), one_of=True,
           missing=lambda t: _not_applicable(f"{BF16_EXPERTS} experts' {GATE}", op="bf16"))
_TABLE.row(KERNEL_WARMUP, "vllm_guard.moe.kernel_warmup", "moe guard (autotune)",
           when=_when("bf16", lambda o: o.action == "skip_autotune"),
           wraps=(Wrap("_flashinfer_autotune_skip_ops", _make_skip_ops,
                       feature=_callable("_flashinfer_autotune_skip_ops")),),
           missing=lambda t: _not_applicable(f"{KERNEL_WARMUP}._flashinfer_autotune_skip_ops", op="bf16"))
