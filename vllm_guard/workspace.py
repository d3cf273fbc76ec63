"""Workspace guard: FlashInferMetadataBuilder's float workspace, sized exactly.

``FlashInferMetadataBuilder._get_workspace_buffer`` allocates one float
workspace per builder (394 MiB by default; from vLLM 0.26 at least
``max_num_batched_tokens * q_heads * head_dim * 16`` bytes). FlashInfer's
planner can ask for more at CUDA-graph capture (FlashInfer < 0.7.1 sizes its
split-KV scratch by packed query rows) and then aborts start-up.

Two parts. Gathering facts is ``vllm_guard.workspace_facts`` (the builder read
into ``WorkspaceFacts``, one core decision per builder). This module holds the
patch rows (``_get_workspace_buffer``, and ``set_workspace_buffer`` where the V2
model runner shares the first builder's buffer) and ``apply``, the one place
where a decision sets the buffer's size: vLLM allocates
``max(what it would allocate, need)`` through its own code, with its size
source raised; where vLLM's own size is enough it is left alone.
"""

from __future__ import annotations

from guard_core.runtime.patch_table import PatchTable, Wrap
from guard_core.runtime.wrapping import guarded
from guard_core.units import nbytes
from guard_core.decide.workspace import is_out_of_memory

from . import kv_reserve, workspace_facts
from ._log import get_log
from .workspace_facts import NATIVE_VAR

__all__ = ["BACKEND", "BUILDER", "install", "uninstall", "apply"]

BACKEND = "vllm.v1.attention.backends.flashinfer"
BUILDER = "FlashInferMetadataBuilder"

def install(settings) -> None:
    if settings.workspace == "off":
        # one line, when vLLM's FlashInfer backend is actually used
        _OFF_TABLE.install()
        return
    _TABLE.install()
    kv_reserve.install(settings)  # the buffer paid for where vLLM sizes its KV cache (issue 28)
    # whatever the model might still miss: an overflowing plan() gets a buffer that fits
    from guard_core.runtime import safety_net

    from guard_core.flashinfer.mla_planner import capacity

    safety_net.install(get_log(), mla_capacity=capacity)


def uninstall() -> None:
    from guard_core.runtime import safety_net

    _TABLE.undo()
    _OFF_TABLE.undo()
    kv_reserve.uninstall()
    safety_net.uninstall()


def _on_backend_off(module) -> None:
    get_log().info_once("workspace-off", "workspace: off (FLASHINFER_GUARD_WORKSPACE=off); vLLM sizes it")


# --- the patch rows ---------------------------------------------------------

def _make_get(orig, module):
    def _get_workspace_buffer(self, *args, **kwargs):
        if getattr(self, "_workspace_buffer", None) is not None:
            return orig(self, *args, **kwargs)
        decided = guarded(get_log(), "workspace", "workspace sizing", workspace_facts.decide, self, module)
        # the buffer reserved inside vLLM's memory profile (kv_reserve), handed over: nothing allocated twice
        reserved = guarded(get_log(), "kv-budget", "KV budget hand-over", kv_reserve.claim, self, decided)
        if reserved is not None:
            self._workspace_buffer = reserved
            return reserved
        if decided is None:
            return orig(self, *args, **kwargs)
        return apply(self, module, decided, allocate=lambda: orig(self, *args, **kwargs))

    return _get_workspace_buffer


def _make_set(orig, module):
    def set_workspace_buffer(self, workspace_buffer, *args, **kwargs):
        guarded(get_log(), "workspace", "workspace sizing (shared buffer)",
                _size_shared, self, module, workspace_buffer)
        return orig(self, workspace_buffer, *args, **kwargs)

    return set_workspace_buffer


def _size_shared(builder, module, buffer) -> None:
    decided = workspace_facts.decide(builder, module)
    if decided is not None:
        apply(builder, module, decided, shared=buffer)


def _callable(name):
    return lambda owner, module: callable(getattr(owner, name, None))


def _missing(target: str) -> None:
    from guard_core.flashinfer import releases
    from guard_core.versions import flashinfer_version

    get_log().missing_target("workspace", target, releases.line_label("vllm"),
                             needed=releases.workspace_guard_needed(flashinfer_version()))


_TABLE = PatchTable(get_log)
_TABLE.row(BACKEND, "vllm_guard.workspace", "workspace guard", error_key="workspace", missing=_missing, wraps=(
    Wrap(f"{BUILDER}._get_workspace_buffer", _make_get, feature=_callable("_get_workspace_buffer")),
    Wrap(f"{BUILDER}.set_workspace_buffer", _make_set, feature=_callable("set_workspace_buffer"),
         required=False),
))
# FLASHINFER_GUARD_WORKSPACE=off: nothing patched, one line when the backend is imported
_OFF_TABLE = PatchTable(get_log)
_OFF_TABLE.row(BACKEND, "vllm_guard.workspace.off", "workspace guard", _on_backend_off, error_key="workspace")


# --- the one apply ------------------------------------------------------------

def apply(builder, module, decided, allocate=None, shared=None):
    """Give ``builder`` the buffer ``decided`` (a ``workspace_facts.BuilderDecision``)
    asks for; the one place where the guard changes a workspace size.

    - ``shared``: the buffer handed to ``set_workspace_buffer`` (V2 model runner:
      one buffer for all builders). When this builder needs more than it holds,
      that same buffer grows in place (vLLM shares it at initialisation, before any
      CUDA graph is captured) instead of this builder getting a copy.
    - otherwise ``allocate()`` is vLLM's own ``_get_workspace_buffer``:
      ``exact`` below vLLM's own size (the user's choice) puts a buffer of exactly
      the need in first, which vLLM's code keeps; a larger size raises vLLM's size
      source while vLLM allocates (and grows the result in place if vLLM sized it
      some other way); a size the device cannot hold falls back to vLLM's own, with
      one warning. The decision's line is logged when it takes effect.

    Our own steps are ``guarded``; vLLM's allocation itself is not.
    """
    log, dec, server = get_log(), decided.decision, decided.server_bytes or 0
    key = "workspace:" + dec.line if dec is not None else None
    if shared is not None:
        if dec is None or dec.action == "off":
            return shared
        have, need = nbytes(shared), int(dec.numbers.get("need_bytes", 0))
        floor = dec.allocate_bytes if dec.action == "size" else need
        if have < floor:
            target = max(dec.allocate_bytes, floor)
            shared.resize_(int(target))
            from guard_core.runtime import safety_net

            safety_net.refresh_workspace_sizes(shared)  # no wrapper keeps the old size
            log.info_once("workspace-shared:" + dec.line,
                          f"workspace: shared buffer grown {have / (1 << 20):.0f} MiB -> {target / (1 << 20):.0f} MiB "
                          f"for this builder's need ({need / (1 << 20):.1f} MiB)")
        return shared
    if dec is None:
        return allocate()
    if dec.action == "exact" and dec.allocate_bytes < server:
        def preempt():  # never more than the device would have given vLLM
            import torch

            builder._workspace_buffer = torch.zeros(dec.allocate_bytes, dtype=torch.uint8, device=builder.device)
            log.decision(dec, key=key)

        guarded(log, "workspace", "workspace sizing", preempt)
        return allocate()
    if dec.allocate_bytes <= server:
        guarded(log, "workspace", "workspace sizing", lambda: log.decision(dec, key=key))
        return allocate()
    target = dec.allocate_bytes
    try:
        with _raised_size_source(module, target):
            buf = allocate()
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise
        # the device cannot hold the decided size (e.g. FLASHINFER_GUARD_WORKSPACE=200GiB):
        # vLLM's own size, as without the guard, and one warning
        log.warning_once("workspace-oom", f"workspace: the device cannot hold {target / (1 << 20):.0f} MiB "
                                          f"({type(exc).__name__}); left to vLLM's own size ({server / (1 << 20):.0f} MiB)")
        builder._workspace_buffer = None
        return allocate()

    def settle():  # the line with what vLLM really allocated; grown in place if still short
        have = nbytes(buf)
        if have < target:
            buf.resize_(int(target))  # every holder of this tensor sees the larger buffer
            from guard_core.runtime import safety_net

            safety_net.refresh_workspace_sizes(buf)
            log.warning_once("workspace-grown:" + dec.line,
                             f"workspace: vLLM allocated {have / (1 << 20):.0f} MiB despite the raised size; "
                             f"grown in place to {target / (1 << 20):.0f} MiB")
        log.decision(dec, key=key)

    if buf is not None:
        guarded(log, "workspace", "workspace sizing", settle)
    held = getattr(builder, "_workspace_buffer", None)
    return held if held is not None else buf


class _raised_size_source:
    """For the duration of vLLM's own allocation, vLLM's size source
    (``envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE``, read through the envs
    module's ``__getattr__``) answers at least ``target``. vLLM's own rules
    (batch invariance, the 0.26+ heuristic, a larger user size) still apply on
    top; the environment itself is never touched."""

    def __init__(self, module, target: int):
        self.envs = getattr(module, "envs", None)
        self.target = target
        self.had = False
        self.old = None

    def __enter__(self):
        if self.envs is None:
            return self
        d = self.envs.__dict__
        self.had, self.old = NATIVE_VAR in d, d.get(NATIVE_VAR)
        current = int(getattr(self.envs, NATIVE_VAR))
        setattr(self.envs, NATIVE_VAR, max(current, int(self.target)))
        return self

    def __exit__(self, *exc):
        if self.envs is None:
            return False
        try:
            if self.had:
                setattr(self.envs, NATIVE_VAR, self.old)
            else:
                delattr(self.envs, NATIVE_VAR)
        except Exception:
            pass
        return False
