"""FlashInfer float-workspace sizing inside SGLang's FlashInferAttnBackend: the
patch rows; the decision per size and the one apply are workspace_apply.py's.

For each backend SGLang builds, the wrapper around ``FlashInferAttnBackend.__init__``

1. gathers the facts (workspace_facts.read: the attention, the serving limits,
   the GPU, FlashInfer's version) and asks guard_core for the need once
   (guard_core.decide.workspace.need; a fact it cannot read is sized both ways,
   the larger need kept, and named in one warning);
2. applies the decision once, in ``_Apply``: SGLang's own ``__init__`` runs
   unchanged, except that while it runs the ``SGLANG_FLASHINFER_WORKSPACE_SIZE``
   field answers ``get()`` with the decided size. SGLang may ask several times
   with different sizes of its own (its ``.set(512 MiB)`` / ``.set(2 GiB)``, a
   user's export): each answer is guard_core's decision for that size
   (workspace_decision.decide, or decide_fixed_split under deterministic
   inference), and we never shrink SGLang's size. A cached per-process buffer
   smaller than the decision is dropped first, so SGLang allocates a new one.
   Where the device cannot hold the raised size, SGLang's own size and one warning.

``decisions()`` returns what was gathered and decided for each backend of this
process (the tests' seam). TRTLLMHAAttnBackend (a subclass with its own buffers,
reading the env var before ``super().__init__``) and the MLA backends (other
classes) are left alone. A second row wraps ``ModelRunner.load_model``: under
deterministic inference the fixed-split need is said before the weights load
(``early_fixed_split_check``). Any exception in our part: one warning, SGLang's
own behaviour.
"""

from __future__ import annotations

from guard_core.runtime.patch_table import PatchTable, Wrap

from ._log import log
from .workspace_apply import NATIVE_VAR, WorkspaceRecord, _Apply, _decide, _gather, _requirement, _state  # noqa: F401

BACKEND_MODULE = "sglang.srt.layers.attention.flashinfer_backend"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
HOOK_KEY = "sglang_guard.workspace"  # the rows' post-import hook keys (the plugin's HOOK_PREFIX)
_SKIP_CLASSES = ("TRTLLMHAAttnBackend",)


def decisions() -> tuple:
    """The ``WorkspaceRecord`` of every backend the guard sized in this process, oldest
    first: ``facts`` (what was read), ``need`` (guard_core's), ``server_bytes`` (the
    sizes SGLang asked with) and ``outcome`` (the decision applied). The early
    deterministic check is not a backend and is not recorded."""
    return tuple(_state.records)


def remember_user_size(environ) -> None:
    """Record the user's SGLANG_FLASHINFER_WORKSPACE_SIZE before SGLang's own .set()s."""
    if _state.user_size_known:
        return
    raw = environ.get(NATIVE_VAR)
    try:
        _state.user_size = int(raw) if raw is not None else None
    except ValueError:
        _state.user_size = None
    _state.user_size_known = True


# ---------------------------------------------------------------- the wrapped __init__

def _applies(backend) -> bool:
    return not any(k.__name__ in _SKIP_CLASSES for k in type(backend).__mro__)


def _make_init(orig, module):
    def __init__(self, model_runner, *args, **kwargs):
        from guard_core.runtime.wrapping import guarded

        if not _applies(self):
            return orig(self, model_runner, *args, **kwargs)
        rec = guarded(log(), "workspace.size", "workspace sizing", _gather, module, model_runner)
        if rec is None:
            return orig(self, model_runner, *args, **kwargs)
        _state.records.append(rec)
        return _Apply(module, rec).run(orig, self, (model_runner, *args), kwargs)

    return __init__


# ------------------------------------------- deterministic inference: before the weights load

def _make_load_model(orig, module):
    def load_model(self, *args, **kwargs):
        from guard_core.runtime.wrapping import guarded

        guarded(log(), "workspace.early", "deterministic pre-check", early_fixed_split_check, self)
        return orig(self, *args, **kwargs)

    return load_model


def early_fixed_split_check(runner):
    """SGLang deterministic inference with FlashInfer, before ModelRunner.load_model: the
    need at the longest context against SGLang's forced 2 GiB; where it is not affordable,
    the one warning (need, buffer, longest prompt that fits, the settings that fit the
    full context). The KV pool does not exist yet: decode is sized for one full-context
    request plus one-token requests; the backend's own decision follows with the pool.
    Returns the assessment (or None where the mode or FlashInfer is not in play)."""
    import types

    from guard_core.decide import workspace as workspace_decision
    from guard_core.decide.fixed_split import SGLANG_FORCED_BYTES, gpu_memory_bytes
    from guard_core.runtime.settings import get_settings

    from . import workspace_facts

    if not workspace_facts.deterministic(runner):
        return None
    backends = workspace_facts.attention_backends(runner)
    if backends and "flashinfer" not in backends:
        return None
    settings = get_settings()
    if settings.workspace in ("off", "size"):
        return None
    # the mode forces tensor-core decode: SGLang's should_use_tensor_core is not consulted
    stub = types.SimpleNamespace(should_use_tensor_core=lambda **k: True,
                                 envs=types.SimpleNamespace(**{NATIVE_VAR: None}))
    rec = _gather(stub, runner)
    if rec is None or _requirement(rec) is None or not rec.fixed_split:
        return None
    memory = gpu_memory_bytes(rec.facts.gpu, rec.device)
    a = workspace_decision.assess_fixed_split(rec.facts, rec.need, server_bytes=SGLANG_FORCED_BYTES,
                                              settings=settings, gpu_memory=memory)
    if not a.affordable:
        _state.early_said = a.text
        log().warning_once("workspace.fixed_split.early", f"workspace: before loading weights: {a.text}")
    return a


# ---------------------------------------------------------------- the patch rows

def _has_size_field(owner, module) -> bool:
    return hasattr(module, "envs") and hasattr(module.envs, NATIVE_VAR)


def _say_backend_missing(target: str) -> None:
    from guard_core.flashinfer import releases
    from guard_core.versions import flashinfer_version

    where = target.removesuffix(".__init__")
    log().missing_target("workspace", f"{where} ({NATIVE_VAR})", releases.line_label("sglang"),
                         needed=releases.workspace_guard_needed(flashinfer_version()))


def _say_runner_missing(target: str) -> None:
    log().debug("deterministic pre-check: ModelRunner.load_model not found; not applicable on this version",
                key="workspace.early.missing")


def _install_safety_net(module) -> None:
    """After the wrap: whatever the model might still miss, an overflowing plan() gets a
    buffer that fits (guard_core.runtime.safety_net)."""
    from guard_core.flashinfer.mla_planner import capacity
    from guard_core.runtime import safety_net

    if get_settings_workspace() != "off":
        safety_net.install(log(), mla_capacity=capacity)


def get_settings_workspace() -> str:
    from guard_core.runtime.settings import get_settings

    return get_settings().workspace


_TABLE = PatchTable(log)
on_backend_module = _TABLE.row(
    BACKEND_MODULE, HOOK_KEY, "workspace guard", _install_safety_net, error_key="workspace.patch",
    wraps=(Wrap("FlashInferAttnBackend.__init__", _make_init, feature=_has_size_field),),
    missing=_say_backend_missing)
on_model_runner_module = _TABLE.row(
    MODEL_RUNNER, HOOK_KEY + ".early", "deterministic pre-check", error_key="workspace.early.patch",
    wraps=(Wrap("ModelRunner.load_model", _make_load_model,
                feature=lambda owner, module: callable(getattr(owner, "load_model", None))),),
    missing=_say_runner_missing)


def install() -> None:
    """The rows' post-import hooks (each patches when SGLang imports its module)."""
    _TABLE.install()


def uninstall() -> None:
    """Undo this module's patches and the safety net (the adapter's uninstall)."""
    from guard_core.runtime import safety_net

    _TABLE.undo()
    safety_net.uninstall()
    _state.reset()


def unpatch(module) -> bool:
    """Take the wrapper off ``module.FlashInferAttnBackend.__init__`` (tests: SGLang's own
    sizing again in the same process)."""
    from guard_core.runtime.wrapping import unwrap_attr

    return unwrap_attr(module.FlashInferAttnBackend, "__init__")
