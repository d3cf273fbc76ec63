"""The SGLang MoE guard in every scheduler (after ``initialize_moe_config``, the
process-wide runner backends the MoE layers read) and, under ``strict``, the BF16
autotune sweep skipped through SGLang's own skip list (0.5.23). The decision is
moe_facts.py's; moe.py's rows wrap these.
"""

from __future__ import annotations

from guard_core.runtime.wrapping import guarded

from ._log import log
from .moe_facts import SKIP_FIELD, _fallback, _is_trtllm, _kept, _op, decision

# ------------------------------------------------------------ every scheduler (runtime)

def _make_initialize(orig, module):
    # (server_args) up to ~0.5.21; no arguments later (it reads the runtime context)
    def initialize_moe_config(*args, **kwargs):
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
    if server_args is None:
        from sglang.srt.runtime_context import get_server_args

        server_args = get_server_args()

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
        op = _op(name, quant)
        can_skip = None
        if op == "bf16":  # the skip list was declared at configuration time where the line has one
            can_skip = hasattr(server_args, SKIP_FIELD)
        dec = decision(op, can_skip_autotune=can_skip)
        if not dec.block:
            if dec.action == "skip_autotune":
                log().info_once(f"moe.rt.skip.{name}", dec.line(
                    f"{what} kept; its autotune sweep skipped through --flashinfer-autotune-skip-ops"))
            else:
                _kept(f"moe.rt.kept.{name}", f"{what} kept", dec)
            continue
        new = "flashinfer_cutlass" if nvfp4_auto else _fallback(raw, quant)
        slot.set(enum(new))
        replaced.update({"from": raw, "to": new})
        log().warning_once(f"moe.rt.{name}", dec.line(
            f"TRT-LLM fused MoE disabled in this scheduler; {what} replaced by {new}"))


# ------------------------------------------ strict: skip the BF16 autotune sweep (0.5.23)

def _make_skip_ops(orig, module=None):
    def get_flashinfer_autotune_skip_ops(*args, **kwargs):
        skip = orig(*args, **kwargs)
        return guarded(log(), "moe.autotune", "MoE guard", _add_bf16_skip, skip, default=skip)

    return get_flashinfer_autotune_skip_ops


def _add_bf16_skip(skip):
    """SGLang's skip set plus the BF16 op where strict asks for it and the user gave no
    --flashinfer-autotune-skip-ops (SGLang 0.5.23 flashinfer_autotune.py:53-56 builds the
    set from that option and its own workaround list)."""
    from sglang.srt.runtime_context import get_exec

    from guard_core.flashinfer.moe_evidence import BF16_AUTOTUNE_OP

    if decision("bf16", can_skip_autotune=True).action != "skip_autotune":
        return skip
    if get_exec().kernel.flashinfer_autotune_skip_ops:  # the user's own list is kept as set
        return skip
    return set(skip or ()) | {BF16_AUTOTUNE_OP}
