"""The TRT-LLM fused-MoE guard inside SGLang.

What it does per op comes from the evidence table (guard_core.flashinfer.moe_evidence) for
the GPU (guard_core.gpus.detect_gpu: SM10x only), the installed FlashInfer and the
host, read into a ``guard_core.decide.moe.MoeFacts``; the core's one
``MoeOutcome`` (``guard_core.decide.moe.decide``) is applied here. Where SGLang makes ``moe_runner_backend`` /
``speculative_moe_runner_backend`` ``flashinfer_trtllm`` and the decision blocks
(Grace + SM10x + FlashInfer < 0.6.16 by default, any SM10x host under ``strict``),
the guard puts the next backend SGLang accepts for that quantization instead
(``guard_core.decide.moe.fallback_backend``) and says so in one warning line; an explicit user request is
replaced the same way and the line says it was the user's. Where the table only
warns (any host before 0.6.16) or notes open reports (BF16 from 0.6.16), the
backend is kept and one line says so. Under ``strict`` the BF16 op's autotune sweep
is skipped through SGLang's own ``--flashinfer-autotune-skip-ops`` where the line
has it (0.5.23 ``arg_groups/fields/exec_.py:398``, read by
``model_executor/runner/flashinfer_autotune.py:53-56``) and the user did not set
it; elsewhere the BF16 TRT-LLM MoE is replaced.

Configuration time (the main process; the resolved values SGLang prints and hands
to every process are already the fallback), found by feature:

* ``ServerArgs._handle_moe_kernel_config`` (SGLang <= 0.5.15): checked before and
  after it runs, and once more after ``__post_init__`` (which also records what the
  user asked for). Up to 0.5.14 the fields are written directly; 0.5.15 resolves
  through a declaration stash (``_resolved_overrides``, applied at the end of
  ``__post_init__``), so the fallback is declared there, last writer wins.
* The resolution pipeline (0.5.20+, ``ServerArgs`` sealed while it runs): resolution
  hooks around ``handle_moe_kernel_config`` (before SGLang's own checks and
  derived settings see TRT-LLM), after ``handle_a2a_moe`` and
  ``handle_speculative_decoding``, and after ``run_resolution_pipeline`` as the
  last net; the fallback is a declaration with source ``flashinfer_guard``.

Every scheduler, all lines: after ``initialize_moe_config`` (the process-wide
runner backends the MoE layers read) the same replacement, plus NVFP4 with
``auto``, which SGLang's ``create_moe_runner`` turns into TRT-LLM: it gets
``flashinfer_cutlass`` explicitly.

The patch points are rows of dotted targets with feature checks (the table at the
end, ``guard_core.runtime.patch_table``), undone by ``uninstall()``. A target missing where
the guard is needed: one warning naming it and the line;
where nothing is needed: a debug line. Stand-downs on hosts the bug never
affects (x86 with ``auto``): debug lines.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from guard_core.runtime.lifecycle import AdapterState
from guard_core.runtime.patch_table import PatchTable, Wrap
from guard_core.runtime.wrapping import guarded

from ._log import announce_line, log

TRTLLM = "flashinfer_trtllm"
FIELDS = ("moe_runner_backend", "speculative_moe_runner_backend")
SOURCE = "flashinfer_guard"  # the declaration source SGLang records for our fallback
_USER_ATTR = "_flashinfer_guard_user_moe"

SERVER_ARGS = "sglang.srt.server_args"
RESOLUTION_HOOKS = "sglang.srt.arg_groups.resolution_hooks"
PIPELINE = "sglang.srt.arg_groups.pipeline"
MOE_UTILS = "sglang.srt.layers.moe.utils"
AUTOTUNE = "sglang.srt.model_executor.runner.flashinfer_autotune"
HOOK_KEY = "sglang_guard.moe."


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


def install() -> None:
    """Post-import hooks on every place SGLang resolves the MoE runner backend (the table below)."""
    _TABLE.install()


def uninstall() -> None:
    """Undo every patch and resolution hook; ``install`` patches again afterwards."""
    _TABLE.undo()
    _state.reset()


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


SKIP_FIELD = "flashinfer_autotune_skip_ops"  # SGLang 0.5.23 --flashinfer-autotune-skip-ops


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


# Resolution steps (0.5.20+) whose outcome we check: before and after the MoE kernel
# step, after the steps that may still pick a TRT-LLM runner.
_STEPS = {"handle_moe_kernel_config": True, "handle_a2a_moe": False, "handle_speculative_decoding": False}


def _register_resolution_hooks(module) -> None:
    register = getattr(module, "register_resolution_hook", None)
    hooks = getattr(module, "_HOOKS", None)
    allowed = getattr(module, "_OVERRIDABLE_HOOKS", None)
    if not callable(register) or not isinstance(hooks, dict):
        _missing(f"{RESOLUTION_HOOKS}.register_resolution_hook")
        return
    for step, before in _STEPS.items():
        if allowed is not None and step not in allowed:
            continue
        fn = _make_step(before)
        if any(getattr(f, "__flashinfer_guard__", False) for f in hooks.get(step, ())):
            continue  # registered already in this process
        register(step)(fn)

        def remove(step=step, fn=fn):
            lst = hooks.get(step)
            if lst and fn in lst:
                lst.remove(fn)

        _TABLE.patches.on_undo(remove)


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


# ------------------------------- the patch table: one row per SGLang module (guard_core.runtime.patch_table)

def _callable(name):
    return lambda owner, module: callable(getattr(owner, name, None))


def _skip_asked(module) -> bool:
    return decision("bf16", gpu=None, can_skip_autotune=True).action == "skip_autotune"


_TABLE = PatchTable(log)
on_server_args_module = _TABLE.row(
    SERVER_ARGS, HOOK_KEY + "server_args", "MoE guard", error_key="moe.patch", before=announce_line,
    when=_server_args_resolve_here, missing=_missing,
    wraps=(Wrap("ServerArgs._handle_moe_kernel_config", _make_kernel_config,
                feature=_callable("_handle_moe_kernel_config")),
           Wrap("ServerArgs.__post_init__", _make_post_init)))
# resolution hooks are list entries SGLang's pipeline runs, not wrappers: an apply
on_resolution_hooks_module = _TABLE.row(RESOLUTION_HOOKS, HOOK_KEY + "resolution_hooks", "MoE guard",
                                        _register_resolution_hooks, error_key="moe.patch", before=announce_line)
on_pipeline_module = _TABLE.row(
    PIPELINE, HOOK_KEY + "pipeline", "MoE guard", error_key="moe.patch", missing=_missing,
    wraps=(Wrap("run_resolution_pipeline", _make_pipeline, feature=_callable("run_resolution_pipeline")),))
on_moe_utils_module = _TABLE.row(
    MOE_UTILS, HOOK_KEY + "runtime", "MoE guard", error_key="moe.patch.rt", before=announce_line,
    missing=_missing,
    wraps=(Wrap("initialize_moe_config", _make_initialize,
                feature=lambda owner, module: hasattr(module, "MoeRunnerBackend")),))
on_autotune_module = _TABLE.row(
    AUTOTUNE, HOOK_KEY + "autotune", "MoE guard", error_key="moe.patch.autotune", when=_skip_asked,
    missing=_missing,
    wraps=(Wrap("get_flashinfer_autotune_skip_ops", _make_skip_ops,
                feature=_callable("get_flashinfer_autotune_skip_ops")),))
