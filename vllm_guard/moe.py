"""MoE guard: keep vLLM off FlashInfer's TRT-LLM fused MoE where it crashes.

What it does comes from the evidence table (guard_core.moe_evidence), per op, for
the GPU vLLM's platform reports (SM10x only; NVML, no CUDA initialisation), the
installed FlashInfer and the host (guard_core.decisions.decide_moe):

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

Targets are found by feature. A missing one where the guard is needed is one
warning naming the target and the line; where nothing is needed, a debug line.
The stand-down on a host the bug never affects (x86 with ``auto``) is a debug
line too.
"""

from __future__ import annotations

from guard_core.patch_table import PatchTable
from guard_core.patching import PatchSet, guarded, rebind_everywhere

from ._log import get_log

UTILS = "vllm.utils.flashinfer"
TARGET = "has_flashinfer_trtllm_fused_moe"
# Modules that import TARGET by name (vLLM 0.19 .. 0.33). Others are found by
# the sys.modules scan done whenever one of these is imported.
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

_decisions: dict = {}  # (op, SM) -> MoeDecision, once the GPU is known
_patches = PatchSet()
_rebinds: dict[str, object] = {}  # "old": the original, "new": its wrapper, for later imports
SKIP_OPS_VAR = "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS"  # vLLM 0.29+ envs.py (PR #48268)
KERNEL_WARMUP = "vllm.model_executor.warmup.kernel_warmup"
BF16_EXPERTS = "vllm.model_executor.layers.fused_moe.experts.trtllm_bf16_moe"
# vLLM quantization names -> the FlashInfer TRT-LLM MoE op their experts run (None: unquantized)
QUANT_OPS = {None: "bf16", "fp8": "fp8", "modelopt": "fp8", "modelopt_fp4": "nvfp4", "nvfp4": "nvfp4",
             "mxfp4": "mxfp4", "gpt_oss_mxfp4": "mxfp4", "compressed-tensors": None}


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


def decision(op: str | None = None, gpu="live"):
    """The MoE decision for ``op`` (None: the gate every TRT-LLM op shares) on this GPU
    (``gpu=None``: before the GPU is known, as for a GPU that reaches the path)."""
    from guard_core.decisions import decide_moe
    from guard_core.settings import get_settings
    from guard_core.versions import flashinfer_version

    sm = _gpu_sm() if gpu == "live" else gpu
    key = (op, sm)
    if key in _decisions:
        return _decisions[key]
    can_skip = None
    if op == "bf16" and get_settings().moe == "strict":
        can_skip = _can_skip_autotune()
    import platform

    d = decide_moe(get_settings(), machine=platform.machine(), flashinfer_version=flashinfer_version(),
                   gpu=sm, op=op, can_skip_autotune=can_skip)
    if sm is not None or gpu is None:
        _decisions[key] = d
    return d


def potential(op: str | None = None):
    """What the guard may do for ``op`` on a GPU that reaches the path: decides what to patch."""
    return decision(op, gpu=None)


def _may_block() -> bool:
    return any(potential(op).block for op in (None, "bf16", "mxfp4"))


def _warn(d) -> None:
    """The one start-up WARNING of a known fault the default leaves in place."""
    from guard_core.decisions import moe_advice

    get_log().warning_once("moe-warn", d.line(moe_advice(d)))


def _considered(d, op_name: str) -> None:
    """vLLM considers a TRT-LLM op the guard leaves in place: say what the table holds."""
    from guard_core.decisions import moe_advice

    if d.action == "warn":
        _warn(d)
    elif d.action == "info":
        get_log().info_once(f"moe-info:{op_name}", d.line(moe_advice(d)))
    elif d.action == "skip_autotune":
        get_log().info_once(f"moe-skip:{op_name}", d.line(_skip_text()))


def _user_skip_ops():
    """The user's VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS as vLLM parses it, or None when unset."""
    import os

    raw = os.environ.get(SKIP_OPS_VAR)
    if raw is None:
        return None
    return [v.strip() for v in raw.split(",") if v.strip()]


def _skip_text() -> str:
    from guard_core.moe_evidence import BF16_AUTOTUNE_OP

    user = _user_skip_ops()
    if user is None:
        return (f"BF16 TRT-LLM MoE kept; skipping its autotune sweep at warm-up, as {SKIP_OPS_VAR}="
                f"{BF16_AUTOTUNE_OP} would (the serving-time reports remain; FLASHINFER_GUARD_MOE=on blocks it)")
    if BF16_AUTOTUNE_OP in user:
        return f"BF16 TRT-LLM MoE kept; its autotune sweep is skipped by the user's {SKIP_OPS_VAR}"
    return (f"BF16 TRT-LLM MoE kept; the user's {SKIP_OPS_VAR}={','.join(user)} is kept as set "
            f"(add {BF16_AUTOTUNE_OP} to skip its autotune sweep)")


def install(settings) -> None:
    _TABLE.install()


def uninstall() -> None:
    """Undo every patch (the rebinds included); ``install`` patches again afterwards."""
    _patches.undo()
    _rebinds.clear()
    _decisions.clear()


def _not_applicable(target: str, needed: bool = True, op: str | None = None) -> None:
    from guard_core.releases import line_label

    d = potential(op)
    get_log().missing_target("moe", target, line_label("vllm"),
                             needed=d.reason if (needed and d.block) else None)


# --- has_flashinfer_trtllm_fused_moe ---------------------------------------

def _announce() -> None:
    from ._log import announce_line

    announce_line()


def _patch_utils(module) -> None:
    from guard_core.releases import unaffected_moe_host

    d = potential()
    if not callable(getattr(module, TARGET, None)):
        _not_applicable(f"{UTILS}.{TARGET}")
        return
    if not d.block and d.action != "warn":
        if unaffected_moe_host(d):
            get_log().debug(f"moe: ok, {d.reason}", key="moe-ok")
        else:
            get_log().info_once("moe-ok", f"moe: ok, {d.reason}")
        return
    original = getattr(module, TARGET)

    def make(orig):
        def has_flashinfer_trtllm_fused_moe() -> bool:
            d = decision()
            if d.block:
                if guarded(get_log(), "moe", "moe guard", orig, default=False):
                    get_log().info_once(
                        "moe-block",
                        d.line("FlashInfer TRT-LLM fused MoE reported unavailable; "
                               "vLLM selects its next MoE backend"),
                    )
                return False
            answer = orig()
            if answer and d.action == "warn":
                guarded(get_log(), "moe", "moe guard", _warn, d)
            return answer

        return has_flashinfer_trtllm_fused_moe

    if _patches.wrap(module, TARGET, make):
        wrapper = getattr(module, TARGET)
        _rebinds["old"], _rebinds["new"] = original, wrapper
        rebind_everywhere(original, wrapper, prefix="vllm")
        _clear_dependent_caches()

        def unbind():
            rebind_everywhere(wrapper, original, prefix="vllm")
            _clear_dependent_caches()

        _patches.on_undo(unbind)


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


def _rebind_importer(mod) -> None:
    old, new = _rebinds.get("old"), _rebinds.get("new")
    if old is None:
        return
    # this module, and any other that picked the original up meanwhile
    rebind_everywhere(old, new, prefix="vllm")
    for fn_name in DEPENDENT_CACHES:
        clear = getattr(getattr(mod, fn_name, None), "cache_clear", None)
        if callable(clear):
            clear()


# --- vLLM 0.19's BF16 gate (a module function that does not ask TARGET) ------

def _patch_bf16_gate(module) -> None:
    # later lines keep the module (its fused op) without the gate: nothing to do there
    if potential("bf16").action == "none" or not callable(vars(module).get("_supports_current_device")):
        return

    make = _blocking_gate(
        "moe guard (BF16)", "moe-block-bf16",
        "FlashInfer TRT-LLM BF16 MoE reported unsupported; vLLM selects its next BF16 MoE backend",
        also=_warn_bf16_route, op="bf16")
    _patches.wrap(module, "_supports_current_device", make)


# --- the BF16 TRT-LLM experts (0.20+): open reports from FlashInfer 0.6.16 -----------

def _patch_bf16_experts(module) -> None:
    if potential("bf16").action == "none":
        return
    classes = _gated_classes(module)
    if not classes:
        _not_applicable(f"{BF16_EXPERTS} experts' _supports_current_device", op="bf16")
        return
    make = _blocking_gate(
        "moe guard (BF16)", "moe-block-bf16",
        "FlashInfer TRT-LLM BF16 MoE experts reported unsupported; vLLM selects its next BF16 MoE backend",
        op="bf16")
    for cls in classes:
        _patches.wrap(cls, "_supports_current_device", make)


def _gated_classes(module) -> list:
    return [
        obj for obj in vars(module).values()
        if isinstance(obj, type) and obj.__module__ == module.__name__
        and callable(getattr(obj, "_supports_current_device", None))  # own or inherited
    ]


# --- strict: skip the BF16 autotune sweep (vLLM 0.29+) ------------------------------

def _patch_kernel_warmup(module) -> None:
    if potential("bf16").action != "skip_autotune":
        return
    if not callable(getattr(module, "_flashinfer_autotune_skip_ops", None)):
        _not_applicable(f"{KERNEL_WARMUP}._flashinfer_autotune_skip_ops", op="bf16")
        return

    def make(orig):
        def _flashinfer_autotune_skip_ops(*args, **kwargs):
            skip = orig(*args, **kwargs)
            return guarded(get_log(), "moe", "moe guard (autotune)", _add_bf16_skip, skip, default=skip)

        return _flashinfer_autotune_skip_ops

    _patches.wrap(module, "_flashinfer_autotune_skip_ops", make)


def _add_bf16_skip(skip):
    """vLLM's own skip set plus the BF16 op, where strict asks for it and the user did not
    set VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS (vLLM 0.33 warmup/kernel_warmup.py:299-301 reads
    it; None means "skip nothing")."""
    from guard_core.moe_evidence import BF16_AUTOTUNE_OP

    d = decision("bf16")
    if d.action != "skip_autotune" or _user_skip_ops() is not None:
        return skip
    get_log().info_once("moe-skip:bf16", d.line(_skip_text()))
    return set(skip or ()) | {BF16_AUTOTUNE_OP}


def _warn_bf16_route() -> None:
    if guarded(get_log(), "moe", "moe guard (BF16)", _bf16_route_asked, default=False):
        # the user's own route to TRT-LLM is not followed: a warning, as for an explicit --moe-backend
        get_log().warning_once(
            "moe-env-route",
            decision("bf16").line("VLLM_FLASHINFER_MOE_BACKEND=latency (TRT-LLM) with VLLM_USE_FLASHINFER_MOE_FP16=1 "
                                  "not followed; vLLM selects its next BF16 MoE backend"),
        )


def _blocking_gate(what: str, key: str, message: str, also=None, op: str | None = None):
    """A wrapper factory for a ``_supports_current_device`` gate of ``op``'s experts: where
    the guard blocks ``op``, the gate answers False (one info line, when the original would
    have said True, then ``also()``); elsewhere the original answers, and where it says True
    the table's warning or note for ``op`` is said once."""

    def make(orig):
        def _supports_current_device(*args, **kwargs) -> bool:
            d = decision(op)
            if d.block:
                if guarded(get_log(), "moe", what, orig, *args, default=False, **kwargs):
                    get_log().info_once(key, d.line(message))
                    if also is not None:
                        also()
                return False
            answer = orig(*args, **kwargs)
            if answer:
                guarded(get_log(), "moe", what, _considered, d, op or "every op")
            return answer

        return _supports_current_device

    return make


def _bf16_route_asked() -> bool:
    """VLLM_USE_FLASHINFER_MOE_FP16=1 with the latency (TRT-LLM) backend, as vLLM reads them."""
    import vllm.envs as envs

    return bool(envs.VLLM_USE_FLASHINFER_MOE_FP16) and envs.VLLM_FLASHINFER_MOE_BACKEND == "latency"


# --- MXFP4 TRT-LLM experts (not gated by TARGET) ----------------------------

def _patch_mxfp4(module) -> None:
    if potential("mxfp4").action not in ("block", "warn", "on"):
        return
    classes = _gated_classes(module)
    if not classes:
        _not_applicable(f"{MXFP4} experts' _supports_current_device", op="mxfp4")
        return

    make = _blocking_gate(
        "moe guard (MXFP4)", "moe-block-mxfp4",
        "FlashInfer TRT-LLM MXFP4 MoE experts reported unsupported; vLLM selects its next MXFP4 backend",
        op="mxfp4")

    for cls in classes:
        _patches.wrap(cls, "_supports_current_device", make)


# --- VLLM_FLASHINFER_MOE_BACKEND=latency (older env route, read in workers) --

def _patch_fi_utils(module) -> None:
    if not potential().block:
        return
    enum = getattr(module, "FlashinferMoeBackend", None)
    fn = getattr(module, "get_flashinfer_moe_backend", None)
    if enum is None or not callable(fn) or not hasattr(enum, "TENSORRT_LLM") or not hasattr(enum, "CUTLASS"):
        # no latency (TRT-LLM) route through this function on this line: nothing to guard
        _not_applicable(f"{FI_UTILS}.get_flashinfer_moe_backend", needed=False)
        return

    def make(orig):
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

    if _patches.wrap(module, "get_flashinfer_moe_backend", make):
        new = module.get_flashinfer_moe_backend
        old = new.__wrapped__
        rebind_everywhere(old, new, prefix="vllm")
        _patches.on_undo(lambda: rebind_everywhere(new, old, prefix="vllm"))


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


def _patch_mxfp4_oracle(module) -> None:
    if not potential("mxfp4").block:
        return
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

    _patches.on_undo(restore)


# --- explicit --moe-backend flashinfer_trtllm --------------------------------

def _patch_arg_utils(module) -> None:
    if not _may_block():
        return
    cls = getattr(module, "EngineArgs", None)
    if cls is None or not callable(getattr(cls, "create_engine_config", None)):
        _not_applicable(f"{ARG_UTILS}.EngineArgs.create_engine_config")
        return

    def make(orig):
        def create_engine_config(self, *args, **kwargs):
            config = orig(self, *args, **kwargs)
            guarded(get_log(), "moe", "moe guard (config rewrite)", rewrite_moe_backend, config)
            return config

        return create_engine_config

    _patches.wrap(cls, "create_engine_config", make)


def _op_of(model_config):
    """The TRT-LLM MoE op a model's experts run, from its quantization (None: unknown)."""
    if model_config is None:
        return None
    quant = getattr(model_config, "quantization", None)
    return QUANT_OPS.get(quant) if quant in QUANT_OPS else None


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
        d = decision(op)
        if not d.block:
            continue
        owner.moe_backend = "auto"
        changed.append(owner_name)
        get_log().warning_once(
            "moe-rewrite:" + owner_name,
            d.line(f"TRT-LLM fused MoE disabled; {flag} flashinfer_trtllm replaced by auto"),
        )
    return changed


# --- the patch table: (module, hook key, what, apply), applied by guard_core.patch_table ---

_TABLE = PatchTable(get_log)
_TABLE.row(UTILS, "vllm_guard.moe.utils", "moe guard", _patch_utils, before=_announce)
for _name in IMPORTERS:
    _TABLE.row(_name, "vllm_guard.moe.importer", "moe guard", _rebind_importer)
_TABLE.row(MXFP4, "vllm_guard.moe.mxfp4", "moe guard (MXFP4)", _patch_mxfp4)
_TABLE.row(BF16_GATE, "vllm_guard.moe.bf16_gate", "moe guard (BF16)", _patch_bf16_gate)
_TABLE.row(FI_UTILS, "vllm_guard.moe.fi_utils", "moe guard (env route)", _patch_fi_utils)
_TABLE.row(ARG_UTILS, "vllm_guard.moe.arg_utils", "moe guard (config)", _patch_arg_utils,
           before=_announce, before_what="moe guard")
_TABLE.row(MXFP4_ORACLE, "vllm_guard.moe.mxfp4_oracle", "moe guard (MXFP4 env route)", _patch_mxfp4_oracle)
_TABLE.row(BF16_EXPERTS, "vllm_guard.moe.bf16_experts", "moe guard (BF16)", _patch_bf16_experts)
_TABLE.row(KERNEL_WARMUP, "vllm_guard.moe.kernel_warmup", "moe guard (autotune)", _patch_kernel_warmup)
