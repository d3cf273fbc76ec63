"""The decision for each size SGLang asks with, and the one apply (workspace.py's rows
call it from the wrapped ``FlashInferAttnBackend.__init__``).

- ``WorkspaceRecord``: one backend's facts, need and the decision applied; ``_state`` the
  workspace guard's memory in this process (shared with workspace.py, reset by its
  ``uninstall``);
- ``_gather`` (the facts and guard_core's need, once per backend) and ``_decide`` (guard_core's
  decision for one size SGLang asked with; kv_reserve asks the same two);
- ``_Apply``: while SGLang's own ``__init__`` runs, its size field answers with the
  decision; where the device cannot hold it, SGLang's own size and one warning;
  ``_report`` the decision's one line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from guard_core.runtime.lifecycle import AdapterState
from guard_core.flashinfer.releases import NATIVE_VAR as _NATIVE_VARS
from guard_core.units import nbytes
from guard_core.decide.workspace import is_out_of_memory

from ._log import log

NATIVE_VAR = _NATIVE_VARS["sglang"]


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
    flashinfer_asked: dict = field(default_factory=dict)  # workspace_ask: FlashInfer's answers, or why not asked


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


# ---------------------------------------------------------------- gathering facts

def _gather(module, runner) -> WorkspaceRecord | None:
    """The facts for this backend and guard_core's need over them (once per backend)."""
    from guard_core.decide import workspace as workspace_decision
    from guard_core.runtime.settings import get_settings

    from . import workspace_facts

    read = workspace_facts.read(module, runner)
    if read is None:
        return None
    computed, asked = None, {}
    if get_settings().workspace != "off":
        computed = workspace_decision.need(read.workspace)
        if not read.fixed_split and read.workspace.layout is not None:
            # FlashInfer's own workspace_size() for the eager witnesses, only where the module
            # SGLang plans with is already loaded (workspace_ask): the larger figure wins
            from guard_core.flashinfer.ask import cross_check

            from .workspace_ask import asker

            computed = cross_check(computed, asker(runner, read.workspace.layout, asked))
        for key, text in computed.warnings:
            log().warning_once(key, text)
    return WorkspaceRecord(read.workspace, computed, read.fixed_split, read.device, flashinfer_asked=asked)


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
    from .kv_reservation import reserved_bytes

    return int(reserved_bytes() or 0)


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

