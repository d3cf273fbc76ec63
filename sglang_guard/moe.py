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
end, ``guard_core.runtime.patch_table``), undone by ``uninstall()``. What is read
and decided: moe_facts.py; configuration time: moe_config.py; every scheduler and
the autotune skip: moe_runtime.py. A target missing where the guard is needed: one
warning naming it and the line; where nothing is needed: a debug line. Stand-downs on hosts the bug never
affects (x86 with ``auto``): debug lines.
"""

from __future__ import annotations

from guard_core.runtime.patch_table import PatchTable, Wrap

from ._log import announce_line, log
from .moe_config import (_make_kernel_config, _make_pipeline, _make_post_init, _make_step,  # noqa: F401
                         _server_args_resolve_here, guard_config)
from .moe_facts import FIELDS, SKIP_FIELD, SOURCE, TRTLLM, _missing, _state, decision, facts  # noqa: F401
from .moe_runtime import _make_initialize, _make_skip_ops

SERVER_ARGS = "sglang.srt.server_args"
RESOLUTION_HOOKS = "sglang.srt.arg_groups.resolution_hooks"
PIPELINE = "sglang.srt.arg_groups.pipeline"
MOE_UTILS = "sglang.srt.layers.moe.utils"
AUTOTUNE = "sglang.srt.model_executor.runner.flashinfer_autotune"
HOOK_KEY = "sglang_guard.moe."


def install() -> None:
    """Post-import hooks on every place SGLang resolves the MoE runner backend (the table below)."""
    _TABLE.install()


def uninstall() -> None:
    """Undo every patch and resolution hook; ``install`` patches again afterwards."""
    _TABLE.undo()
    _state.reset()


# ------------------------------------------- resolution hooks (0.5.20+): an apply of the table

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
