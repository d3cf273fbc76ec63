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
patch table at the end (``guard_core.runtime.patch_table``), undone by ``uninstall()``.
A missing one where the guard is needed is one
warning naming the target and the line; where nothing is needed, a debug line.
The stand-down on a host the bug never affects (x86 with ``auto``) is a debug
line too.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard_core.runtime.lifecycle import AdapterState
from guard_core.runtime.patch_table import PatchTable, Wrap
from guard_core.runtime.wrapping import guarded

from ._log import get_log

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
# env routes that force the MXFP4 TRT-LLM experts: name -> only on SM10x?
MXFP4_ENV_ROUTES = {"VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": True, "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": False}
SKIP_OPS_VAR = "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS"  # vLLM 0.29+ envs.py (PR #48268)
KERNEL_WARMUP = "vllm.model_executor.warmup.kernel_warmup"
BF16_EXPERTS = "vllm.model_executor.layers.fused_moe.experts.trtllm_bf16_moe"
# The experts classes whose _supports_current_device gates each op's TRT-LLM experts (own or
# inherited; vLLM 0.20-0.2x: one class, later a base with modular/monolithic subclasses).
BF16_CLASSES = ("TrtLlmBf16Experts", "TrtLlmBf16ExpertsBase", "TrtLlmBf16ExpertsModular",
                "TrtLlmBf16ExpertsMonolithic")
MXFP4_CLASSES = ("TrtLlmMxfp4ExpertsBase", "TrtLlmMxfp4ExpertsMonolithic", "TrtLlmMxfp4ExpertsModular")
GATE = "_supports_current_device"


@dataclass
class _State(AdapterState):
    """What the MoE guard remembers in this process (reset by ``uninstall``)."""

    outcomes: dict = field(default_factory=dict)  # (op, SM) -> MoeOutcome, once the GPU is known


_state = _State()


# --- facts ------------------------------------------------------------------

def _gpu_sm():
    """The GPU's SM number (major*10+minor): vLLM's own platform where it is CUDA (NVML in
    the API server, no CUDA initialisation), else guard_core.gpus.detect_gpu (the seam the
    tests replace); None when unknown."""
    try:
        from vllm.platforms import current_platform

        if current_platform.is_cuda():
            cap = current_platform.get_device_capability()
            if cap is not None:
                return int(cap.major) * 10 + int(cap.minor)
    except Exception:
        pass
    try:
        from guard_core.gpus import detect_gpu

        gpu = detect_gpu()
        return gpu.sm if gpu is not None else None
    except Exception:
        return None


def _can_skip_autotune() -> bool:
    """Whether this vLLM can skip one op's FlashInfer autotune sweep (0.29+)."""
    import vllm.envs as envs

    return SKIP_OPS_VAR in getattr(envs, "environment_variables", {})


def facts(op: str | None = None, sm=None):
    """What the MoE decision for ``op`` reads from this process (a guard_core MoeFacts)."""
    import platform

    from guard_core.decide.moe import MoeFacts
    from guard_core.runtime.settings import get_settings
    from guard_core.versions import flashinfer_version

    can_skip = _can_skip_autotune() if op == "bf16" and get_settings().moe == "strict" else None
    return MoeFacts("vllm", platform.machine(), flashinfer_version(), sm, op, can_skip,
                    missing=("gpu",) if sm is None else ())


def decision(op: str | None = None, gpu="live"):
    """The MoE outcome for ``op`` (None: the gate every TRT-LLM op shares) on this GPU
    (``gpu=None``: before the GPU is known, as for a GPU that reaches the path)."""
    from guard_core.decide.moe import decide
    from guard_core.runtime.settings import get_settings

    sm = _gpu_sm() if gpu == "live" else gpu
    key = (op, sm)
    if key in _state.outcomes:
        return _state.outcomes[key]
    o = decide(facts(op, sm), get_settings())
    if sm is not None or gpu is None:
        _state.outcomes[key] = o
    return o


def potential(op: str | None = None):
    """What the guard may do for ``op`` on a GPU that reaches the path: decides what to patch."""
    return decision(op, gpu=None)


def _may_block() -> bool:
    return any(potential(op).block for op in (None, "bf16", "mxfp4"))


def _user_skip_ops():
    """The user's VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS as vLLM parses it, or None when unset."""
    import os

    raw = os.environ.get(SKIP_OPS_VAR)
    if raw is None:
        return None
    return [v.strip() for v in raw.split(",") if v.strip()]


def _bf16_route_asked() -> bool:
    """VLLM_USE_FLASHINFER_MOE_FP16=1 with the latency (TRT-LLM) backend, as vLLM reads them."""
    import vllm.envs as envs

    return bool(envs.VLLM_USE_FLASHINFER_MOE_FP16) and envs.VLLM_FLASHINFER_MOE_BACKEND == "latency"


# --- saying it ----------------------------------------------------------------

_SAY = {"warning": "warning_once", "info": "info_once"}


def _say(key: str, note) -> None:
    if note.level in _SAY:
        getattr(get_log(), _SAY[note.level])(key, note.line)


def _warn(o) -> None:
    """The one start-up WARNING of a known fault the default leaves in place."""
    _say("moe-warn", o.note())


def _considered(o, op_name: str) -> None:
    """vLLM considers a TRT-LLM op the guard leaves in place: say what the table holds."""
    if o.action == "warn":
        _warn(o)
    elif o.action == "info":
        _say(f"moe-info:{op_name}", o.note())
    elif o.action == "skip_autotune":
        _say(f"moe-skip:{op_name}", o.note(_skip_text()))


def _skip_text() -> str:
    from guard_core.flashinfer.moe_evidence import BF16_AUTOTUNE_OP

    user = _user_skip_ops()
    if user is None:
        return (f"BF16 TRT-LLM MoE kept; skipping its autotune sweep at warm-up, as {SKIP_OPS_VAR}="
                f"{BF16_AUTOTUNE_OP} would (the serving-time reports remain; FLASHINFER_GUARD_MOE=on blocks it)")
    if BF16_AUTOTUNE_OP in user:
        return f"BF16 TRT-LLM MoE kept; its autotune sweep is skipped by the user's {SKIP_OPS_VAR}"
    return (f"BF16 TRT-LLM MoE kept; the user's {SKIP_OPS_VAR}={','.join(user)} is kept as set "
            f"(add {BF16_AUTOTUNE_OP} to skip its autotune sweep)")


def _not_applicable(target: str, needed: bool = True, op: str | None = None) -> None:
    from guard_core.flashinfer.releases import line_label

    o = potential(op)
    get_log().missing_target("moe", target, line_label("vllm"), needed=o.needed if needed else None)


def install(settings) -> None:
    _TABLE.install()


def uninstall() -> None:
    """Undo every patch (the rebinds included); ``install`` patches again afterwards."""
    _TABLE.undo()
    _state.reset()


def _announce() -> None:
    from ._log import announce_line

    announce_line()


# --- has_flashinfer_trtllm_fused_moe ---------------------------------------

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


def _own_class(owner, module) -> bool:
    """A class the experts module itself defines (not one it imported)."""
    return isinstance(owner, type) and owner.__module__ == module.__name__


def _gate_wraps(classes, make) -> tuple:
    return tuple(Wrap(f"{c}.{GATE}", make, feature=_own_class, required=False) for c in classes)


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
