"""The workspace paid for where vLLM sizes its KV cache (issue 28).

vLLM sizes the KV cache in ``Worker.determine_available_memory`` and allocates
FlashInfer's float workspace afterwards (V2 runner: ``init_attn_backend``; V1:
lazily in ``_get_workspace_buffer``), in the slack ``1 - gpu_memory_utilization``
left for something else (vLLM #46883). Read from the locked wheels:

- ``v1/worker/gpu_worker.py``: ``determine_available_memory`` 0.23.0:372,
  0.32.0:634, 0.33.0:641; ``model_runner.profile_run()`` inside
  ``memory_profiling`` 0.23.0:406-410, 0.32.0:679-693, 0.33.0:686-700; the
  ``kv_cache_memory_bytes`` branch (nothing measured) 0.23.0:384-402,
  0.32.0:649-671, 0.33.0:656-681; the CUDA-graph estimate
  ``profile_cudagraph_memory()`` 0.23.0:425, 0.32.0:704, 0.33.0:717.
- ``utils/mem_utils.py`` ``memory_profiling``: 0.23.0 counts the torch peak
  increase *during* the profile (so a buffer allocated before it is not counted),
  0.33.0 the drop of free memory since the worker started plus the transient
  peak (0.33.0:312-319). A buffer allocated at the start of ``profile_run`` and
  alive to its end is counted exactly once by both.
- V1 ``profile_cudagraph_memory`` (``v1/worker/gpu_model_runner.py`` 0.33.0:6268)
  samples free memory around the first FULL capture, which is where V1 allocates
  its own workspace lazily: the unguarded server counts its own buffer there.
  V2's builds its minimal KV cache and attention backends before sampling
  (``v1/worker/gpu/cudagraph_utils.py``): not counted.

The hook (one patch row, ``Worker.determine_available_memory``, feature-detected):

1. before vLLM's own code runs, the adapter's own decision for every FlashInfer
   layer group (throwaway ``FlashInferMetadataBuilder`` objects built from the
   worker's own KV-cache specs and layers, decided by
   ``vllm_guard.workspace_facts.decide``): the buffer FlashInfer will get;
2. ``model_runner.profile_run`` (an instance attribute for this call only)
   allocates that buffer first, so it is alive through vLLM's measurement;
3. every later ``_get_workspace_buffer`` (and V2's shared buffer) is handed that
   same tensor: nothing is allocated twice; a builder that asks inside the
   measurement (V1 FULL-graph profiling) takes it without allocating, so vLLM's
   measurement does not count it a second time;
4. the value vLLM returns is moved so that the budget changes by exactly
   ``kv_budget.BudgetMove.charge`` (``FLASHINFER_GUARD_RESERVE``): auto, the
   guard's change to vLLM's own size; full, the whole buffer; off, no hook.

Fail-open: any failure (a target missing, the allocation refused, no KV spec)
leaves vLLM's own path, with one warning naming why.
"""

from __future__ import annotations

import threading

from guard_core.runtime.patch_table import PatchTable, Wrap
from guard_core.runtime.wrapping import guarded
from guard_core.units import fmt_mib, nbytes

from ._log import get_log
from .runner import uses_v2_runner

__all__ = ["WORKER", "install", "uninstall", "claim", "Reservation", "state"]

WORKER = "vllm.v1.worker.gpu_worker"
BACKEND = "vllm.v1.attention.backends.flashinfer"
KEY = "kv-budget"

_lock = threading.RLock()


class Reservation:
    """What the guard reserved in this worker: the buffers (V2: one shared; V1: one
    per FlashInfer builder group), the budget move and where it stands."""

    def __init__(self, mode, shared, groups, per_token, device):
        self.mode = mode
        self.shared = shared  # V2 model runner: one buffer for every builder
        self.groups = groups  # [(buffer bytes, server bytes, BuilderDecision, layer names)]
        self.per_token = per_token
        self.device = device
        self.buffers: list = []  # tensors, in group order
        self.window = None  # "profile" / "graph-v1" while vLLM measures, else None
        self.counted = 0  # bytes the unguarded server would have counted of its own
        self.claimed_during: list[str] = []  # windows in which builders were handed the buffer
        self.failed: str | None = None
        self.move = None  # kv_budget.BudgetMove once settled

    @property
    def buffer_bytes(self) -> int:
        return sum(g[0] for g in self.groups)

    @property
    def server_bytes(self) -> int:
        return sum(g[1] for g in self.groups)


_state: dict = {"reservation": None}


def state() -> Reservation | None:
    """The reservation of this process (tests)."""
    return _state["reservation"]


def install(settings) -> None:
    if settings.reserve == "off" or settings.workspace == "off":
        return
    _TABLE.install()


def uninstall() -> None:
    _TABLE.undo()
    _state["reservation"] = None


# --- the adapter's decision before vLLM measures ------------------------------------

def _flashinfer_groups(worker):
    """[(spec, layer names)] of the layers that run vLLM's FlashInfer backend, from the
    worker's own KV-cache specs (``Worker.get_kv_cache_spec``) and the layers the model
    registered in ``compilation_config.static_forward_context``."""
    import sys

    module = sys.modules.get(BACKEND)
    if module is None:  # no layer of this model imported vLLM's FlashInfer backend
        return None, [], {}
    builder_cls = module.FlashInferMetadataBuilder
    specs = worker.get_kv_cache_spec()
    ctx = worker.vllm_config.compilation_config.static_forward_context
    groups: dict = {}
    for name, spec in specs.items():
        layer = ctx.get(name)
        get_backend = getattr(layer, "get_attn_backend", None)
        backend = get_backend() if callable(get_backend) else getattr(layer, "attn_backend", None)
        get_builder = getattr(backend, "get_builder_cls", None)
        if not callable(get_builder):
            continue
        cls = get_builder()
        if not (isinstance(cls, type) and issubclass(cls, builder_cls)):
            continue
        groups.setdefault((cls, spec), []).append(name)
    return module, [(cls, spec, names) for (cls, spec), names in groups.items()], specs


def _per_token(specs) -> int | None:
    """vLLM's KV bytes per token: every layer's ``page_size_bytes / block_size``
    (``v1/kv_cache_interface.py`` ``AttentionSpec.page_size_bytes``: 0.23.0:105,
    0.33.0:259) summed, as ``get_kv_cache_config`` divides the budget for one
    uniform group. None for a hybrid model (pages padded across groups): then the
    line gives bytes only."""
    from guard_core.decide.kv_budget import per_token_from_pages

    kinds = {type(s).__name__ for s in specs.values()}
    if not kinds or not all("Attention" in k or "SlidingWindow" in k for k in kinds):
        return None
    return per_token_from_pages((s.page_size_bytes, s.block_size) for s in specs.values())


def _prepare(worker) -> Reservation | None:
    from guard_core.decide.kv_budget import buffer_under_guard
    from guard_core.runtime.settings import get_settings

    from . import workspace_facts

    settings = get_settings()
    module, groups, specs = _flashinfer_groups(worker)
    if not groups:
        return None
    device = getattr(worker, "device", None)
    decided = []
    from vllm.config import set_current_vllm_config

    for cls, spec, names in groups:
        with set_current_vllm_config(worker.vllm_config):
            builder = cls(spec, names, worker.vllm_config, device)
        dec = workspace_facts.decide(builder, module)
        if dec is None:
            return None  # the guard stands down for this builder: vLLM's own accounting
        d = dec.decision
        b = buffer_under_guard(d.action if d is not None else "off",
                               int(d.allocate_bytes) if d is not None else 0, int(dec.server_bytes))
        decided.append((b, int(dec.server_bytes), dec, frozenset(names)))
    # the worker's runner: 0.23-0.33 ``Worker.use_v2_model_runner``; 0.34.0 V2 alone (vllm_guard.runner)
    shared = uses_v2_runner(worker)
    if shared:  # V2: the first builder's buffer, shared by all (attn_utils.py init_attn_backend)
        decided = [(max(g[0] for g in decided), max(g[1] for g in decided), decided[0][2],
                    frozenset().union(*(g[3] for g in decided)))]
    r = Reservation(settings.reserve, shared, decided, _per_token(specs), device)
    if r.mode == "auto" and r.buffer_bytes == r.server_bytes:
        get_log().info_once(KEY, f"KV budget (FLASHINFER_GUARD_RESERVE=auto): workspace {fmt_mib(r.buffer_bytes)} "
                                 "is vLLM's own size; KV budget unchanged")
        return None
    return r


def _allocate(r: Reservation) -> None:
    import torch

    for g in r.groups:
        r.buffers.append(torch.zeros(int(g[0]), dtype=torch.uint8, device=r.device))


def _release(r: Reservation, why: str) -> None:
    r.failed = why
    r.buffers.clear()
    if _state["reservation"] is r:
        _state["reservation"] = None
    get_log().warning_once(KEY + "-failed", f"KV budget: the workspace could not be reserved inside vLLM's memory "
                                            f"profile ({why}); vLLM sizes the KV cache and the workspace as without "
                                            "flashinfer-guard")


# --- the patch row ------------------------------------------------------------

def _wrap_runner(r: Reservation, runner, name: str, window: str, allocate: bool):
    """``runner.<name>`` for this call only (an instance attribute, removed after):
    allocate the reservation first (profile_run) and mark the measuring window."""
    orig = getattr(runner, name, None)
    if not callable(orig) or name in vars(runner):
        return None

    def wrapped(*args, **kwargs):
        if allocate and not r.buffers and r.failed is None:
            try:
                _allocate(r)
            except Exception as exc:  # the device refuses: vLLM's own path, one warning
                r.buffers.clear()
                guarded(get_log(), KEY, "KV budget", _release, r, f"{type(exc).__name__}: "
                        + " ".join(str(exc).split())[:200])
        r.window = window
        try:
            return orig(*args, **kwargs)
        finally:
            r.window = None

    setattr(runner, name, wrapped)
    return lambda: runner.__dict__.pop(name, None)


def _make_determine(orig, module):
    def determine_available_memory(self, *args, **kwargs):
        with _lock:
            r = guarded(get_log(), KEY, "KV budget reservation", _prepare, self)
        if r is None:
            return orig(self, *args, **kwargs)
        _state["reservation"] = r
        runner = getattr(self, "model_runner", None)
        undo = [guarded(get_log(), KEY, "KV budget reservation", _wrap_runner, r, runner, "profile_run",
                        "profile", True)]
        if not r.shared:  # V1: its own workspace is allocated inside the graph estimate's samples
            undo.append(guarded(get_log(), KEY, "KV budget reservation", _wrap_runner, r, runner,
                                "profile_cudagraph_memory", "graph-v1", False))
        if undo[0] is None:
            _state["reservation"] = None
            get_log().warning_once(KEY + "-failed", "KV budget: model_runner.profile_run not found; "
                                                    "vLLM sizes the KV cache as without flashinfer-guard")
            return orig(self, *args, **kwargs)
        try:
            returned = orig(self, *args, **kwargs)
        except BaseException:
            guarded(get_log(), KEY, "KV budget", r.buffers.clear)
            _state["reservation"] = None
            raise
        finally:
            for u in undo:
                if u is not None:
                    guarded(get_log(), KEY, "KV budget", u)
        if r.failed is not None or not r.buffers:
            if r.failed is None:
                guarded(get_log(), KEY, "KV budget", _release, r, "vLLM never ran its profile")
            return returned
        # read after vLLM's call: a start-up plan (0.33 maybe_apply_startup_plan) sets it inside
        measured = not getattr(getattr(self, "cache_config", None), "kv_cache_memory_bytes", None)
        out = guarded(get_log(), KEY, "KV budget", _settle, self, r, returned, measured)
        return returned if out is None else out

    return determine_available_memory


def _settle(worker, r: Reservation, returned: int, measured: bool) -> int:
    from guard_core.decide.kv_budget import BudgetMove, budget_line, measured_return

    if not measured:  # --kv-cache-memory / a start-up plan: vLLM measured nothing
        r.move = BudgetMove(r.mode, r.buffer_bytes, r.server_bytes, r.counted)
        free = _free_bytes(worker)
        kv = int(returned)
        if free is None:
            verdict = "free memory unknown"
        elif free >= kv:
            verdict = f"weights + KV + workspace fit ({fmt_mib(free - kv)} left)"
        else:
            verdict = f"weights + KV + workspace do NOT fit: {fmt_mib(kv - free)} short; lower --kv-cache-memory"
        get_log().info_once(KEY, f"KV budget: --kv-cache-memory {fmt_mib(kv)} set, nothing measured; workspace "
                                 f"{fmt_mib(r.buffer_bytes)} allocated before the KV cache; {verdict}")
        return kv
    r.move = BudgetMove(r.mode, r.buffer_bytes, r.server_bytes, r.counted)
    where = ("inside vLLM's memory profile (allocated before the profile run, "
             "vLLM's own after KV sizing)")
    get_log().info_once(KEY, budget_line(r.move, where, r.per_token))
    return measured_return(returned, r.move)


def _free_bytes(worker) -> int | None:
    try:
        import torch

        return int(torch.cuda.mem_get_info(getattr(worker, "device", None))[0])
    except Exception:
        return None


def claim(builder, decided):
    """The reserved buffer for this builder (``_get_workspace_buffer``), or None where
    nothing is reserved for it: vLLM's own path then. Grown in place, before any graph
    holds it, if this builder needs more than reserved (not expected: the same decision)."""
    r = _state["reservation"]
    if r is None or not r.buffers or r.failed is not None:
        return None
    from guard_core.decide.kv_budget import buffer_under_guard

    d = decided.decision if decided is not None else None
    want = buffer_under_guard(d.action if d is not None else "off",
                              int(d.allocate_bytes) if d is not None else 0, int(decided.server_bytes)) \
        if decided is not None else 0
    with _lock:
        names = set(getattr(builder, "layer_names", None) or ())
        idx = 0 if r.shared else next((i for i, g in enumerate(r.groups) if names and names <= g[3]), None)
        if idx is None:
            return None
        buf = r.buffers[idx]
        if str(getattr(buf, "device", "")) != str(getattr(builder, "device", getattr(buf, "device", ""))):
            return None
        if nbytes(buf) < want:
            buf.resize_(int(want))
            from guard_core.runtime import safety_net

            safety_net.refresh_workspace_sizes(buf)
        if r.window is not None:
            r.claimed_during.append(r.window)
            if r.window == "profile" or (r.window == "graph-v1" and _graph_estimate_applied()):
                # the unguarded server would have allocated its own here, inside the measurement
                r.counted += int(decided.server_bytes) if decided is not None else 0
    if decided is not None and d is not None:
        get_log().decision(d, key="workspace:" + d.line)
    return buf


def _graph_estimate_applied() -> bool:
    try:
        import vllm.envs as envs

        return bool(envs.VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS)
    except Exception:
        return True


def _callable(name):
    return lambda owner, module: callable(getattr(owner, name, None))


def _missing(target: str) -> None:
    get_log().warning_once(KEY + "-missing", f"KV budget: {target} not found on this vLLM; the workspace is "
                                             "allocated after KV sizing as without flashinfer-guard")


_TABLE = PatchTable(get_log)
_TABLE.row(WORKER, "vllm_guard.kv_reserve", "KV budget reservation", error_key=KEY, missing=_missing, wraps=(
    Wrap("Worker.determine_available_memory", _make_determine, feature=_callable("determine_available_memory")),
))
