"""FlashInfer float-workspace sizing inside SGLang's FlashInferAttnBackend: the
patch rows and the one apply.

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

from dataclasses import dataclass, field
from typing import Any

from guard_core.runtime.lifecycle import AdapterState
from guard_core.runtime.patch_table import PatchTable, Wrap
from guard_core.flashinfer.releases import NATIVE_VAR as _NATIVE_VARS
from guard_core.units import nbytes
from guard_core.decide.workspace import is_out_of_memory

from ._log import log

NATIVE_VAR = _NATIVE_VARS["sglang"]
BACKEND_MODULE = "sglang.srt.layers.attention.flashinfer_backend"
MODEL_RUNNER = "sglang.srt.model_executor.model_runner"
HOOK_KEY = "sglang_guard.workspace"  # the rows' post-import hook keys (the plugin's HOOK_PREFIX)
_SKIP_CLASSES = ("TRTLLMHAAttnBackend",)


@dataclass
class WorkspaceRecord:
    """One FlashInferAttnBackend of this process: what was gathered, the need, and the
    decision applied."""

    facts: Any  # guard_core.decide.workspace.WorkspaceFacts
    need: Any = None  # its WorkspaceNeed (None with FLASHINFER_GUARD_WORKSPACE=off)
    fixed_split: bool = False  # deterministic inference: decided by decide_fixed_split
    device: Any = None
    server_bytes: list = field(default_factory=list)  # each size SGLang asked with, in order
    outcome: Any = None  # the WorkspaceDecision applied (None: SGLang's own size)
    from_cache: bool = False  # the process's cached buffer was big enough and kept
    assessed: dict = field(default_factory=dict)  # fixed split: server bytes -> assessment


@dataclass
class _State(AdapterState):
    """What the workspace guard remembers in this process (reset by ``uninstall``, but
    the user's export, read once before SGLang's own ``.set()``s)."""

    KEEP = ("user_size_known", "user_size")
    user_size_known: bool = False
    user_size: int | None = None  # the user's SGLANG_FLASHINFER_WORKSPACE_SIZE at process start
    reported: bool = False  # a workspace line was logged
    early_said: str | None = None  # the pre-check's warning, when it warned
    records: list = field(default_factory=list)  # every backend's WorkspaceRecord (decisions())


_state = _State()


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


# ---------------------------------------------------------------- gathering facts

def _gather(module, runner) -> WorkspaceRecord | None:
    """The facts for this backend and guard_core's need over them (once per backend)."""
    from guard_core.decide import workspace as workspace_decision
    from guard_core.runtime.settings import get_settings

    from . import workspace_facts

    read = workspace_facts.read(module, runner)
    if read is None:
        return None
    computed = None
    if get_settings().workspace != "off":
        computed = workspace_decision.need(read.workspace)
        for key, text in computed.warnings:
            log().warning_once(key, text)
    return WorkspaceRecord(read.workspace, computed, read.fixed_split, read.device)


def _requirement(rec: WorkspaceRecord):
    return rec.need.requirement if rec.need is not None else None


def _decide(rec: WorkspaceRecord, server_bytes: int):
    """guard_core's decision for the size SGLang asked with (the need is the record's)."""
    from guard_core.decide import workspace as workspace_decision
    from guard_core.runtime.settings import get_settings

    server_bytes = int(server_bytes)
    rec.server_bytes.append(server_bytes)
    user = _state.user_size
    user = user if (user is not None and user == server_bytes) else None
    settings = get_settings()
    if rec.fixed_split and _requirement(rec) is not None:
        a = rec.assessed.get(server_bytes)
        if a is None:
            from guard_core.decide.fixed_split import gpu_memory_bytes

            a = workspace_decision.assess_fixed_split(rec.facts, rec.need, server_bytes=server_bytes,
                                                      settings=settings,
                                                      gpu_memory=gpu_memory_bytes(rec.facts.gpu, rec.device))
            rec.assessed[server_bytes] = a
        return workspace_decision.decide_fixed_split(rec.facts, rec.need, a, server_bytes=server_bytes,
                                                     settings=settings).decision
    return workspace_decision.decide(rec.facts, server_bytes=server_bytes, user_bytes=user, settings=settings,
                                     computed=rec.need).decision


# ---------------------------------------------------------------- the one apply

class _Apply:
    """The one place that changes the size SGLang allocates: while SGLang's own
    ``__init__`` runs, its size field answers with the decision (``enter``/``exit``),
    after dropping a cached per-process buffer smaller than the decision."""

    def __init__(self, module, rec: WorkspaceRecord):
        self.module, self.rec = module, rec
        self.field = None
        self._had_get = None

    def _cached(self):
        m = self.module
        if hasattr(m, "global_workspace_buffer"):  # SGLang <= 0.5.15
            return m.global_workspace_buffer, "module"
        if hasattr(m, "get_buffer"):  # SGLang >= 0.5.19
            try:
                from sglang.srt.runtime_context import get_context

                return get_context().resources.buffers.get("flashinfer_workspace"), "context"
            except Exception:
                return None, None
        return None, None

    def _drop_cached(self, where):
        if where == "module":
            self.module.global_workspace_buffer = None
        elif where == "context":
            from sglang.srt.runtime_context import get_context

            get_context().resources.buffers.pop("flashinfer_workspace", None)

    def enter(self) -> bool:
        rec = self.rec
        self.field = getattr(self.module.envs, NATIVE_VAR)
        cached, where = self._cached()
        if cached is not None:
            have = nbytes(cached)
            dec = _decide(rec, have)
            if dec.allocate_bytes > have:
                self._drop_cached(where)  # SGLang allocates again, through our get()
            else:
                rec.outcome = dec  # the cached buffer is big enough and kept
                rec.from_cache = True
        fld = self.field
        self._had_get = fld.__dict__.get("get")
        server_get = type(fld).get

        def get(*a, **k):
            server = server_get(fld, *a, **k)  # SGLang's own value: default, its .set(), the user's
            try:
                rec.outcome = _decide(rec, server)
                if rec.outcome.action == "exact":  # the user's choice: also below SGLang's size
                    answer = int(rec.outcome.allocate_bytes)
                else:
                    answer = max(int(rec.outcome.allocate_bytes), int(server))
                return max(answer, _reserved())
            except Exception:
                return server

        fld.get = get
        return True

    def raised(self) -> bool:
        """Whether the size the guard answered is above SGLang's own."""
        dec = self.rec.outcome
        return dec is not None and dec.action in ("raise", "size") and int(dec.allocate_bytes) > 0

    def exit(self) -> None:
        fld = self.field
        if self._had_get is not None:
            fld.get = self._had_get
        else:
            fld.__dict__.pop("get", None)

    def run(self, orig, backend, args, kwargs):
        """SGLang's ``__init__`` under the decided size; where the device cannot hold it
        (e.g. FLASHINFER_GUARD_WORKSPACE=200GiB), SGLang's own size and one warning."""
        from guard_core.runtime.wrapping import guarded

        entered = guarded(log(), "workspace.apply", "workspace sizing", self.enter, default=False)
        try:
            return orig(backend, *args, **kwargs)
        except Exception as exc:
            if not (entered and is_out_of_memory(exc) and self.raised()):
                raise
            guarded(log(), "workspace.restore", "workspace sizing", self.exit)
            entered = False
            log().warning_once("workspace.oom", f"workspace: the device cannot hold "
                               f"{self.rec.outcome.allocate_bytes / (1 << 20):.0f} MiB ({type(exc).__name__}); "
                               "left to SGLang's own size")
            self.rec.outcome = None
            return orig(backend, *args, **kwargs)
        finally:
            if entered:
                guarded(log(), "workspace.restore", "workspace sizing", self.exit)
                guarded(log(), "workspace.report", "workspace sizing", _report, self.rec, backend)


def _reserved() -> int:
    """The size the KV budget was moved for in this process (kv_reserve, issue 28): the
    buffer is at least what was paid for, so the budget moved by exactly the buffer's
    change (the need at budget time, before the request pool existed, is never below
    the backend's)."""
    from . import kv_reserve

    return int(kv_reserve.reserved_bytes() or 0)


def _report(rec: WorkspaceRecord, backend) -> None:
    """The decision's one line (or why it did not hold)."""
    dec = rec.outcome
    if dec is None:
        return
    buf = getattr(backend, "workspace_buffer", None)
    have = nbytes(buf) if buf is not None else None
    if have is not None and dec.action in ("raise", "size", "exact") and have < dec.allocate_bytes:
        log().warning_once("workspace.short", f"workspace: SGLang allocated {have} bytes, below the decided "
                           f"{dec.allocate_bytes}; the guard could not apply its size here")
        return
    if rec.from_cache and _state.reported:  # another backend of this process reusing the buffer we sized
        log().debug(f"workspace: reusing this process's buffer; {dec.text}", key="workspace.reuse")
        return
    _state.reported = True
    if dec.action == "limit" and _state.early_said and dec.text.startswith(_state.early_said):
        # said once already, before the weights loaded: only what was applied, at info
        from dataclasses import replace

        dec = replace(dec, level="info", text=f"deterministic inference: {dec.allocate_bytes} bytes allocated, "
                                              "the limit as stated before loading weights")
    log().decision(dec, key=f"workspace:{dec.action}:{dec.numbers.get('need_bytes')}:{dec.allocate_bytes}")


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
    from guard_core.runtime import safety_net

    if get_settings_workspace() != "off":
        safety_net.install(log())


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
