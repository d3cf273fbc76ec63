"""What the SGLang MoE guard reads and decides in this process: the op a runner field's
MoE runs, guard_core's ``MoeOutcome`` for it on this GPU, FlashInfer and host (once per
op, remembered in ``_state`` until moe.py's ``uninstall``), the backend SGLang accepts
next, and the lines that say a backend was kept or a target is missing. moe_config.py
(configuration time) and moe_runtime.py (every scheduler) apply it; moe.py holds the
patch rows.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from guard_core.runtime.lifecycle import AdapterState

from ._log import log

TRTLLM = "flashinfer_trtllm"
FIELDS = ("moe_runner_backend", "speculative_moe_runner_backend")
SOURCE = "flashinfer_guard"  # the declaration source SGLang records for our fallback
_USER_ATTR = "_flashinfer_guard_user_moe"

SKIP_FIELD = "flashinfer_autotune_skip_ops"  # SGLang 0.5.23 --flashinfer-autotune-skip-ops


@dataclass
class _State(AdapterState):
    """What the MoE guard remembers in this process (reset by ``uninstall``)."""

    outcomes: dict = field(default_factory=dict)  # (op, SM, can skip autotune) -> MoeOutcome


_state = _State()


def _gpu_sm():
    """The GPU's SM number through guard_core.gpus.detect_gpu (torch: SGLang's main
    process queries the device itself while resolving its arguments), None when unknown."""
    try:
        from guard_core.gpus import detect_gpu

        gpu = detect_gpu()
        return gpu.sm if gpu is not None else None
    except Exception:
        return None


def facts(op=None, sm=None, can_skip_autotune=None):
    """What the MoE decision for ``op`` reads from this process (a guard_core MoeFacts)."""
    from guard_core.decide.moe import MoeFacts
    from guard_core.versions import flashinfer_version

    return MoeFacts("sglang", platform.machine(), flashinfer_version(), sm, op, can_skip_autotune,
                    missing=("gpu",) if sm is None else ())


def decision(op=None, gpu="live", can_skip_autotune=None):
    """The MoE outcome for ``op`` (None: every op) on this GPU (``gpu=None``: unknown)."""
    from guard_core.decide.moe import decide
    from guard_core.runtime.settings import get_settings

    sm = _gpu_sm() if gpu == "live" else gpu
    key = (op, sm, can_skip_autotune)
    if key not in _state.outcomes:
        _state.outcomes[key] = decide(facts(op, sm, can_skip_autotune), get_settings())
    return _state.outcomes[key]


def _op(field, quantization):
    """The op a runner field's MoE runs (guard_core.decide.moe.op_of); the speculative
    field of an unquantized or FP4 checkpoint is BF16 (its NextN/MTP drafter MoE)."""
    from guard_core.decide.moe import op_of

    return op_of("sglang", quantization, speculative=field == "speculative_moe_runner_backend")


def _fallback(backend: str, quantization) -> str:
    """The backend SGLang accepts next for this quantization (guard_core.decide.moe)."""
    from guard_core.decide.moe import fallback_backend

    return fallback_backend("sglang", backend, quantization)


def _is_trtllm(value) -> bool:
    v = getattr(value, "value", value)
    return isinstance(v, str) and v.startswith(TRTLLM)


def _missing(target: str) -> None:
    from guard_core.flashinfer.releases import line_label

    log().missing_target("moe", target, line_label("sglang"), needed=decision(gpu=None).needed)


def _kept(key: str, text: str, o=None) -> None:
    """The backend stays: a debug line where nothing applies, else the table's line
    (WARNING for a known fault, INFO for open reports or a plain stand-down on aarch64)."""
    o = o if o is not None else decision()
    note = o.note(text)
    if note.level == "warning":
        log().warning_once("moe.warn", note.line)
    elif note.level == "debug":
        log().debug(note.line, key=key)
    else:
        log().info_once(key, note.line)
