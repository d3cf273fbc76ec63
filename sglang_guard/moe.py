"""The TRT-LLM fused-MoE guard inside SGLang.

Where SGLang makes ``moe_runner_backend`` / ``speculative_moe_runner_backend``
``flashinfer_trtllm`` on a guarded host (guard_core.decisions.decide_moe), the
guard puts the next backend SGLang accepts for that quantization instead
(``_fallback``) and says so in one warning line; an explicit user request is
replaced the same way and the line says it was the user's.

* Main process, SGLang <= 0.5.15: ``ServerArgs._handle_model_specific_adjustments``
  picks TRT-LLM for some models and ``_handle_moe_kernel_config`` for mxfp8; we wrap
  ``_handle_moe_kernel_config`` (checked before and after it runs) and
  ``__post_init__`` (to know what the user asked for).
* Every scheduler, all lines: after ``initialize_moe_config`` (the process-wide
  runner backends the MoE layers read) the same replacement, plus NVFP4 with
  ``auto``, which SGLang's ``create_moe_runner`` turns into TRT-LLM: it gets
  ``flashinfer_cutlass`` explicitly.
"""

from __future__ import annotations

import platform

TRTLLM = "flashinfer_trtllm"
FIELDS = ("moe_runner_backend", "speculative_moe_runner_backend")
_USER_ATTR = "_flashinfer_guard_user_moe"
_decision = []


def decision():
    if not _decision:
        from guard_core.decisions import decide_moe
        from guard_core.settings import get_settings
        from guard_core.versions import flashinfer_version

        _decision.append(decide_moe(get_settings(), machine=platform.machine(),
                                    flashinfer_version=flashinfer_version()))
    return _decision[0]


def _fallback(backend: str, quantization) -> str:
    """The backend SGLang accepts next for this quantization (its own asserts)."""
    if backend.startswith(TRTLLM):
        if quantization in ("modelopt_fp4", "nvfp4", "modelopt_mixed"):
            return "flashinfer_cutlass"
        if quantization == "mxfp8":
            return "cutlass"
        return "triton"
    return backend


def _is_trtllm(value) -> bool:
    v = getattr(value, "value", value)
    return isinstance(v, str) and v.startswith(TRTLLM)


# ------------------------------------------------------------ main process (ServerArgs)

def on_server_args_module(module) -> None:
    from guard_core.patching import guarded

    from .plugin import log

    guarded(log(), "moe.patch", "MoE guard", _patch_server_args, module)


def _patch_server_args(module) -> None:
    from guard_core.patching import wrap_attr

    from .plugin import log

    cls = getattr(module, "ServerArgs", None)
    if cls is None or "_handle_moe_kernel_config" not in vars(cls):
        log().debug("moe: ServerArgs._handle_moe_kernel_config not on this SGLang version; "
                    "the scheduler-side guard still applies", key="moe.sa.na")
        return
    wrap_attr(cls, "__post_init__", _make_post_init)
    wrap_attr(cls, "_handle_moe_kernel_config", _make_kernel_config)


def _make_post_init(orig):
    def __post_init__(self, *args, **kwargs):
        try:
            object.__setattr__(self, _USER_ATTR, {f: getattr(self, f, None) for f in FIELDS})
        except Exception:
            pass
        return orig(self, *args, **kwargs)

    return __post_init__


def _make_kernel_config(orig):
    def _handle_moe_kernel_config(self, *args, **kwargs):
        from guard_core.patching import guarded

        from .plugin import log

        guarded(log(), "moe.before", "MoE guard", _guard_server_args, self)
        result = orig(self, *args, **kwargs)
        guarded(log(), "moe.after", "MoE guard", _guard_server_args, self)
        return result

    return _handle_moe_kernel_config


def _guard_server_args(sa) -> None:
    from .plugin import log

    user = getattr(sa, _USER_ATTR, {}) or {}
    dec = None
    for f in FIELDS:
        value = getattr(sa, f, None)
        if not _is_trtllm(value):
            continue
        dec = dec or decision()
        if not dec.block:
            log().info_once(f"moe.kept.{f}", dec.line(f"--{f.replace('_', '-')} {value} kept"))
            continue
        new = _fallback(value, getattr(sa, "quantization", None))
        setattr(sa, f, new)
        who = "requested explicitly" if user.get(f) == value else "chosen by SGLang for this model"
        log().warning_once(f"moe.sa.{f}", dec.line(
            f"TRT-LLM fused MoE disabled; --{f.replace('_', '-')} {value} ({who}) replaced by {new}"))


# ------------------------------------------------------------ every scheduler (runtime)

def on_moe_utils_module(module) -> None:
    from guard_core.patching import guarded

    from .plugin import log

    guarded(log(), "moe.patch.rt", "MoE guard", _patch_moe_utils, module)


def _patch_moe_utils(module) -> None:
    from guard_core.patching import wrap_attr

    from .plugin import log

    if not hasattr(module, "initialize_moe_config") or not hasattr(module, "MoeRunnerBackend"):
        log().info_once("moe.rt.na", "moe: initialize_moe_config not on this SGLang version; "
                        "not applicable, nothing patched")
        return
    wrap_attr(module, "initialize_moe_config", lambda orig: _make_initialize(module, orig))


def _make_initialize(module, orig):
    # (server_args) up to ~0.5.21; no arguments later (it reads the runtime context)
    def initialize_moe_config(*args, **kwargs):
        from guard_core.patching import guarded

        from .plugin import log

        result = orig(*args, **kwargs)
        guarded(log(), "moe.runtime", "MoE guard", _guard_runtime, module,
                args[0] if args else kwargs.get("server_args"))
        return result

    return initialize_moe_config


def _quantization(server_args):
    q = getattr(server_args, "quantization", None)
    if q:
        return q
    try:  # a ModelOpt checkpoint that SGLang detects from its config
        hf = server_args.get_hf_config()
        qc = getattr(hf, "quantization_config", None) or {}
        if not isinstance(qc, dict):
            qc = qc.to_dict()
        algo = str(qc.get("quant_algo") or qc.get("quantization", {}).get("quant_algo") or "").upper()
        if "NVFP4" in algo or algo == "FP4":
            return "modelopt_fp4"
    except Exception:
        pass
    return None


class _Slot:
    """Where this SGLang keeps a runner backend: a module global (<= 0.5.21) or the
    runtime flags (get_flags().moe, later lines)."""

    def __init__(self, module, glob, flag):
        self.module, self.glob, self.flag = module, glob, flag

    def _flags(self):
        from sglang.srt.runtime_context import get_flags

        return get_flags().moe

    def get(self):
        if hasattr(self.module, self.glob):
            return getattr(self.module, self.glob)
        try:
            return getattr(self._flags(), self.flag)
        except Exception:
            return None

    def set(self, value):
        if hasattr(self.module, self.glob):
            setattr(self.module, self.glob, value)
        else:
            setattr(self._flags(), self.flag, value)


def _guard_runtime(module, server_args) -> None:
    from .plugin import log

    if server_args is None:
        from sglang.srt.runtime_context import get_server_args

        server_args = get_server_args()

    dec = decision()
    quant = _quantization(server_args)
    enum = module.MoeRunnerBackend
    slots = (("moe_runner_backend", _Slot(module, "MOE_RUNNER_BACKEND", "runner_backend")),
             ("speculative_moe_runner_backend",
              _Slot(module, "SPECULATIVE_MOE_RUNNER_BACKEND", "speculative_runner_backend")))
    replaced = {}
    for name, slot in slots:
        value = slot.get()
        if value is None:
            continue
        raw = getattr(value, "value", value)
        if name != "moe_runner_backend" and getattr(server_args, name, None) is None:
            # SGLang copies the main backend when no speculative one was given: follow it silently
            if replaced and raw == replaced["from"]:
                slot.set(enum(replaced["to"]))
            continue
        nvfp4_auto = raw == "auto" and quant == "modelopt_fp4"
        if not (_is_trtllm(value) or nvfp4_auto):
            continue
        what = f"{name} {raw}" + (" (NVFP4: SGLang picks flashinfer_trtllm in create_moe_runner)"
                                   if nvfp4_auto else "")
        if not dec.block:
            log().info_once(f"moe.rt.kept.{name}", dec.line(f"{what} kept"))
            continue
        new = "flashinfer_cutlass" if nvfp4_auto else _fallback(raw, quant)
        slot.set(enum(new))
        replaced.update({"from": raw, "to": new})
        log().warning_once(f"moe.rt.{name}", dec.line(
            f"TRT-LLM fused MoE disabled in this scheduler; {what} replaced by {new}"))
