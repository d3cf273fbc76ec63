"""What vLLM's MoE guard reads and decides in this process, and how it says it: the facts
(the GPU vLLM's platform reports, FlashInfer, the host, whether this vLLM can skip one
op's autotune sweep, the user's own routes) read into a ``guard_core.decide.moe.MoeFacts``,
the core's ``MoeOutcome`` per op (remembered in ``_state`` until moe.py's ``uninstall``),
and the warning/info lines the table holds for it. moe_apply.py answers for the patched
vLLM functions with it; moe.py holds the patch rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard_core.runtime.lifecycle import AdapterState

from ._log import get_log

# env routes that force the MXFP4 TRT-LLM experts: name -> only on SM10x?
MXFP4_ENV_ROUTES = {"VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": True, "VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8": False}
SKIP_OPS_VAR = "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS"  # vLLM 0.29+ envs.py (PR #48268)


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
