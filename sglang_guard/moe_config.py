"""The SGLang MoE guard at configuration time (the main process; the resolved values SGLang
prints and hands to every process are already the fallback): ``guard_config`` and the
wrappers moe.py's rows put around ``ServerArgs`` (<= 0.5.15) and the resolution
pipeline (0.5.20+). The decision is moe_facts.py's.
"""

from __future__ import annotations

from guard_core.runtime.wrapping import guarded

from ._log import log
from .moe_facts import FIELDS, SKIP_FIELD, SOURCE, _USER_ATTR, _fallback, _is_trtllm, _kept, _op, decision

# ------------------------------------------------- configuration time (main process)

def _stash(sa):
    """SGLang's declaration stash while it is the source of truth (0.5.15 before
    materialisation, 0.5.20+ always), else None (fields are written directly)."""
    stash = getattr(sa, "_resolved_overrides", None)
    if not isinstance(stash, list) or getattr(sa, "_declarations_materialized", False):
        return None
    return stash


def _current(sa, field):
    """The value SGLang resolves for ``field`` so far (last declaration wins)."""
    stash = _stash(sa)
    if stash is not None:
        for item in reversed(stash):
            try:
                _source, declared = item
            except (TypeError, ValueError):
                continue
            if isinstance(declared, dict) and field in declared:
                return declared[field]
    return getattr(sa, field, None)


def _set(sa, field, value) -> None:
    stash = _stash(sa)
    if stash is not None:
        stash.append((SOURCE, {field: value}))
        return
    setattr(sa, field, value)
    stash = getattr(sa, "_resolved_overrides", None)
    if isinstance(stash, list):  # 0.5.15 after materialisation: keep the record consistent
        stash.append((SOURCE, {field: value}))


def _user_value(sa, field):
    user = getattr(sa, _USER_ATTR, None)
    if isinstance(user, dict):
        return user.get(field)
    raw = getattr(sa, "_raw_input", None)  # 0.5.20+: the caller's input, before any step
    if isinstance(raw, dict):
        return raw.get(field)
    return None


def guard_config(sa) -> list:
    """Replace a TRT-LLM MoE runner backend SGLang resolved so far where the decision for
    its op blocks (returns the fields changed); where the table only warns or notes, or
    strict skips the BF16 autotune sweep (get_flashinfer_autotune_skip_ops, below), say so."""
    from guard_core.flashinfer.moe_evidence import BF16_AUTOTUNE_OP

    changed = []
    for f in FIELDS:
        value = _current(sa, f)
        if not _is_trtllm(value):
            continue
        value = getattr(value, "value", value)
        flag = "--" + f.replace("_", "-")
        quant = _current(sa, "quantization")
        op = _op(f, quant)
        can_skip = hasattr(sa, SKIP_FIELD) if op == "bf16" else None
        dec = decision(op, can_skip_autotune=can_skip)
        if dec.action == "skip_autotune":
            user = _current(sa, SKIP_FIELD)
            if not user:
                text = (f"{flag} {value} kept; its autotune sweep will be skipped, as --flashinfer-autotune-skip-ops "
                        f"{BF16_AUTOTUNE_OP} does (the serving-time reports remain; FLASHINFER_GUARD_MOE=on "
                        "blocks it)")
            elif BF16_AUTOTUNE_OP in list(user):
                text = f"{flag} {value} kept; its autotune sweep is skipped by the user's --flashinfer-autotune-skip-ops"
            else:
                text = (f"{flag} {value} kept; the user's --flashinfer-autotune-skip-ops {' '.join(user)} kept as set "
                        f"(add {BF16_AUTOTUNE_OP} to skip its autotune sweep)")
            log().info_once(f"moe.skip.{f}", dec.line(text))
            continue
        if not dec.block:
            _kept(f"moe.kept.{f}", f"{flag} {value} kept", dec)
            continue
        new = _fallback(value, quant)
        _set(sa, f, new)
        changed.append(f)
        who = "requested explicitly" if _user_value(sa, f) == value else "chosen by SGLang for this model"
        log().warning_once(f"moe.sa.{f}", dec.line(
            f"TRT-LLM fused MoE disabled; {flag} {value} ({who}) replaced by {new}"))
    return changed


def _guard(sa) -> None:
    guarded(log(), "moe.config", "MoE guard", guard_config, sa)


def _server_args_resolve_here(module) -> bool:
    """False (and a debug line) where ServerArgs resolves through the pipeline (0.5.20+)."""
    cls = getattr(module, "ServerArgs", None)
    if cls is None or callable(getattr(cls, "_handle_moe_kernel_config", None)):
        return True
    if callable(getattr(cls, "resolve_once", None)):
        log().debug("moe: ServerArgs resolves through arg_groups.pipeline on this SGLang; "
                    "guarded there", key="moe.sa.pipeline")
        return False
    return True


def _make_post_init(orig, module=None):
    def __post_init__(self, *args, **kwargs):
        try:
            object.__setattr__(self, _USER_ATTR, {f: getattr(self, f, None) for f in FIELDS})
        except Exception:
            pass
        result = orig(self, *args, **kwargs)
        _guard(self)  # what later steps (speculative decoding) resolved as well
        return result

    return __post_init__


def _make_kernel_config(orig, module=None):
    def _handle_moe_kernel_config(self, *args, **kwargs):
        _guard(self)  # before SGLang's checks and derived settings see TRT-LLM
        result = orig(self, *args, **kwargs)
        _guard(self)  # what the quantization rules chose
        return result

    return _handle_moe_kernel_config


def _make_step(before: bool):
    def flashinfer_guard_moe_step(server_args, previous):
        if before:
            _guard(server_args)
        previous(server_args)
        _guard(server_args)

    flashinfer_guard_moe_step.__flashinfer_guard__ = True
    return flashinfer_guard_moe_step


def _make_pipeline(orig, module=None):
    def run_resolution_pipeline(server_args, *args, **kwargs):
        result = orig(server_args, *args, **kwargs)
        _guard(server_args)  # the last net: whatever a later step declared
        return result

    return run_resolution_pipeline
