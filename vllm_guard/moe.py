"""MoE guard: keep vLLM off FlashInfer's TRT-LLM fused MoE where it crashes.

On aarch64 with FlashInfer below FLASHINFER_GUARD_MOE_FIXED_IN (``auto``), or
everywhere (``on``):

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

from guard_core.patching import PatchSet, guarded, rebind_everywhere, when_imported

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

_decision = None
_patches = PatchSet()
_rebinds: dict[str, object] = {}  # "old": the original, "new": its wrapper, for later imports


def decision():
    """This process's MoE decision (settings, CPU architecture, FlashInfer)."""
    global _decision
    if _decision is None:
        import platform

        from guard_core.decisions import decide_moe
        from guard_core.settings import get_settings
        from guard_core.versions import flashinfer_version

        _decision = decide_moe(get_settings(), machine=platform.machine(), flashinfer_version=flashinfer_version())
    return _decision


def install(settings) -> None:
    when_imported(UTILS, _on_utils, key="vllm_guard.moe.utils")
    for name in IMPORTERS:
        when_imported(name, _on_importer, key="vllm_guard.moe.importer")
    when_imported(MXFP4, _on_mxfp4, key="vllm_guard.moe.mxfp4")
    when_imported(BF16_GATE, _on_bf16_gate, key="vllm_guard.moe.bf16_gate")
    when_imported(FI_UTILS, _on_fi_utils, key="vllm_guard.moe.fi_utils")
    when_imported(ARG_UTILS, _on_arg_utils, key="vllm_guard.moe.arg_utils")
    when_imported(MXFP4_ORACLE, _on_mxfp4_oracle, key="vllm_guard.moe.mxfp4_oracle")


def uninstall() -> None:
    """Undo every patch (the rebinds included); ``install`` patches again afterwards."""
    global _decision
    _patches.undo()
    _rebinds.clear()
    _decision = None


def _not_applicable(target: str, needed: bool = True) -> None:
    from guard_core.support import line_label

    d = decision()
    get_log().missing_target("moe", target, line_label("vllm"),
                             needed=d.reason if (needed and d.block) else None)


# --- has_flashinfer_trtllm_fused_moe ---------------------------------------

def _on_utils(module) -> None:
    guarded(get_log(), "moe", "moe guard", _announce)
    guarded(get_log(), "moe", "moe guard", _patch_utils, module)


def _announce() -> None:
    from ._log import announce_line

    announce_line()


def _patch_utils(module) -> None:
    from guard_core.support import unaffected_moe_host

    d = decision()
    if not callable(getattr(module, TARGET, None)):
        _not_applicable(f"{UTILS}.{TARGET}")
        return
    if not d.block:
        if unaffected_moe_host(d):
            get_log().debug(f"moe: ok, {d.reason}", key="moe-ok")
        else:
            get_log().info_once("moe-ok", f"moe: ok, {d.reason}")
        return
    original = getattr(module, TARGET)

    def make(orig):
        def has_flashinfer_trtllm_fused_moe() -> bool:
            if decision().block:
                if guarded(get_log(), "moe", "moe guard", orig, default=False):
                    get_log().info_once(
                        "moe-block",
                        decision().line("FlashInfer TRT-LLM fused MoE reported unavailable; "
                                        "vLLM selects its next MoE backend"),
                    )
                return False
            return orig()

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


def _on_importer(module) -> None:
    def rebind(mod):
        old, new = _rebinds.get("old"), _rebinds.get("new")
        if old is None:
            return
        # this module, and any other that picked the original up meanwhile
        rebind_everywhere(old, new, prefix="vllm")
        for fn_name in DEPENDENT_CACHES:
            clear = getattr(getattr(mod, fn_name, None), "cache_clear", None)
            if callable(clear):
                clear()

    guarded(get_log(), "moe", "moe guard", rebind, module)


# --- vLLM 0.19's BF16 gate (a module function that does not ask TARGET) ------

def _on_bf16_gate(module) -> None:
    guarded(get_log(), "moe", "moe guard (BF16)", _patch_bf16_gate, module)


def _patch_bf16_gate(module) -> None:
    # later lines keep the module (its fused op) without the gate: nothing to do there
    if not decision().block or not callable(vars(module).get("_supports_current_device")):
        return

    make = _blocking_gate(
        "moe guard (BF16)", "moe-block-bf16",
        "FlashInfer TRT-LLM BF16 MoE reported unsupported; vLLM selects its next BF16 MoE backend",
        also=_warn_bf16_route)
    _patches.wrap(module, "_supports_current_device", make)


def _warn_bf16_route() -> None:
    if guarded(get_log(), "moe", "moe guard (BF16)", _bf16_route_asked, default=False):
        # the user's own route to TRT-LLM is not followed: a warning, as for an explicit --moe-backend
        get_log().warning_once(
            "moe-env-route",
            decision().line("VLLM_FLASHINFER_MOE_BACKEND=latency (TRT-LLM) with VLLM_USE_FLASHINFER_MOE_FP16=1 "
                            "not followed; vLLM selects its next BF16 MoE backend"),
        )


def _blocking_gate(what: str, key: str, message: str, also=None):
    """A wrapper factory for a ``_supports_current_device`` gate that does not ask TARGET:
    where the guard blocks, the gate answers False (one info line, when the original would
    have said True, then ``also()``); elsewhere the original answers."""

    def make(orig):
        def _supports_current_device(*args, **kwargs) -> bool:
            if decision().block:
                if guarded(get_log(), "moe", what, orig, *args, default=False, **kwargs):
                    get_log().info_once(key, decision().line(message))
                    if also is not None:
                        also()
                return False
            return orig(*args, **kwargs)

        return _supports_current_device

    return make


def _bf16_route_asked() -> bool:
    """VLLM_USE_FLASHINFER_MOE_FP16=1 with the latency (TRT-LLM) backend, as vLLM reads them."""
    import vllm.envs as envs

    return bool(envs.VLLM_USE_FLASHINFER_MOE_FP16) and envs.VLLM_FLASHINFER_MOE_BACKEND == "latency"


# --- MXFP4 TRT-LLM experts (not gated by TARGET) ----------------------------

def _on_mxfp4(module) -> None:
    guarded(get_log(), "moe", "moe guard (MXFP4)", _patch_mxfp4, module)


def _patch_mxfp4(module) -> None:
    if not decision().block:
        return
    classes = [
        obj for obj in vars(module).values()
        if isinstance(obj, type) and obj.__module__ == module.__name__
        and callable(getattr(obj, "_supports_current_device", None))  # own or inherited
    ]
    if not classes:
        _not_applicable(f"{MXFP4} experts' _supports_current_device")
        return

    make = _blocking_gate(
        "moe guard (MXFP4)", "moe-block-mxfp4",
        "FlashInfer TRT-LLM MXFP4 MoE experts reported unsupported; vLLM selects its next MXFP4 backend")

    for cls in classes:
        _patches.wrap(cls, "_supports_current_device", make)


# --- VLLM_FLASHINFER_MOE_BACKEND=latency (older env route, read in workers) --

def _on_fi_utils(module) -> None:
    guarded(get_log(), "moe", "moe guard (env route)", _patch_fi_utils, module)


def _patch_fi_utils(module) -> None:
    if not decision().block:
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
        if sm10x_only is None or not decision().block:
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
            decision().line(f"{name}=1 (FlashInfer TRT-LLM MXFP4 MoE) ignored; vLLM selects its next MXFP4 backend"),
        )
        return True

    def is_set(self, name):
        return False if self._hidden(name) else self._real.is_set(name)

    def __getattr__(self, name):
        value = getattr(self._real, name)
        if name in MXFP4_ENV_ROUTES and self._hidden(name):
            return False
        return value


def _on_mxfp4_oracle(module) -> None:
    guarded(get_log(), "moe", "moe guard (MXFP4 env route)", _patch_mxfp4_oracle, module)


def _patch_mxfp4_oracle(module) -> None:
    if not decision().block:
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

def _on_arg_utils(module) -> None:
    guarded(get_log(), "moe", "moe guard", _announce)
    guarded(get_log(), "moe", "moe guard (config)", _patch_arg_utils, module)


def _patch_arg_utils(module) -> None:
    if not decision().block:
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


def rewrite_moe_backend(config) -> list[str]:
    """Replace an explicit ``flashinfer_trtllm`` MoE backend by ``auto``."""
    changed = []
    if not decision().block:
        return changed
    for owner_name, flag in (("kernel_config", "--moe-backend"), ("speculative_config", "speculative_config.moe_backend")):
        owner = getattr(config, owner_name, None)
        if owner is not None and getattr(owner, "moe_backend", None) == "flashinfer_trtllm":
            owner.moe_backend = "auto"
            changed.append(owner_name)
            get_log().warning_once(
                "moe-rewrite:" + owner_name,
                decision().line(f"TRT-LLM fused MoE disabled; {flag} flashinfer_trtllm replaced by auto"),
            )
    return changed
