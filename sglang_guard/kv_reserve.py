"""The workspace paid for where SGLang sizes its KV pool (issue 28).

SGLang fixes the KV pool budget before it builds its attention backends, and
``FlashInferAttnBackend.__init__`` allocates the float workspace afterwards, out of
the operator's slack (``1 - mem_fraction_static``):

* 0.5.23: ``Scheduler.init_memory_pools`` -> ``KVCacheConfigurator._profile_available_bytes``
  (mem_cache/kv_cache_configurator.py:2990-3065: free memory after weights minus
  pre-load memory x (1 - mem_fraction_static) minus the multimodal reservation of
  ``mm_runtime_reservation_gb``, 202-217) -> ``init_attention_backends``
  (managers/scheduler.py ~1115; the buffer: layers/attention/flashinfer_backend.py:457-463);
* 0.5.11: ``ModelRunnerKVCacheMixin._profile_available_bytes``
  (model_executor/model_runner_kv_cache_mixin.py:56-70, bytes), then the backend
  (flashinfer_backend.py:198-214, the module global);
* 0.5.5: ``ModelRunner.profile_max_num_token`` (model_executor/model_runner.py:1260-1323,
  tokens from ``rest_memory`` in GiB at 1317-1322) from ``init_memory_pool`` (471), before
  ``init_attention_backend()`` (478; the buffer: flashinfer_backend.py:186-195).

SGLang reserves its multimodal late allocations out of the same budget by subtracting
them from ``rest_memory`` (``mm_runtime_reservation_gb``); the guard does the same for
the workspace, in the function SGLang sizes with (feature-detected, one patch row per
place), once per process (the buffer is one per process: the module global or the
runtime registry's ``flashinfer_workspace``):

* ``FLASHINFER_GUARD_RESERVE=auto`` (default): the budget moves by the guard's change
  to SGLang's own buffer size (``guard_core.decide.kv_budget.BudgetMove``): charged for bytes
  added, credited for bytes ``exact`` gives back;
* ``full``: the buffer the guard will give FlashInfer is created right there, before
  SGLang measures free memory (so its own measurement holds it), and put where the
  backend finds it (the module global ``global_workspace_buffer`` <= 0.5.15, the
  runtime registry ``get_context().resources.buffers["flashinfer_workspace"]`` on
  later lines): the backend reuses that tensor, nothing is allocated twice;
* ``off``: nothing.

The backend later allocates at least the size charged here (workspace_apply._Apply reads
``reserved_bytes()``), so the buffer is the one paid for. Where SGLang sizes the pool
after CUDA-graph capture (0.5.23 post-capture KV sizing, ``post_capture_kv_active``:
model_runner_components/kv_pool_runtime.py:34-48), its measurement holds the workspace
already: nothing is moved and the line says so. Any failure: one warning, SGLang's own
sizing untouched.
"""

from __future__ import annotations

from guard_core.runtime.patch_table import PatchTable, Wrap

from ._log import log
from .kv_reservation import Reservation, _state, reservation, reserved_bytes  # noqa: F401 (read here and by tests)

GIB = 1 << 30
CONFIGURATOR_MODULE = "sglang.srt.mem_cache.kv_cache_configurator"  # 0.5.2x
MIXIN_MODULE = "sglang.srt.model_executor.model_runner_kv_cache_mixin"  # 0.5.11
RUNNER_MODULE = "sglang.srt.model_executor.model_runner"  # 0.5.5
HOOK_KEY = "sglang_guard.kv_reserve"


# ---------------------------------------------------------------- the decision at budget time

def _server_bytes(module, runner) -> int:
    """SGLang's own workspace size for this backend, as its ``__init__`` will set it: the
    SGLANG_FLASHINFER_WORKSPACE_SIZE value (the user's or 384 MiB), 512 MiB for its
    architecture list (0.5.5 flashinfer_backend.py:158-163, 0.5.23:421-431), 2 GiB under
    deterministic inference (0.5.5:183, 0.5.23:451); ``.set()`` overrides the user's value."""
    from guard_core.decide.fixed_split import SGLANG_FORCED_BYTES
    from guard_core.deployment.server_defaults import SGLANG_LARGE, sglang_default_workspace
    from guard_core.versions import installed_version

    from . import workspace, workspace_facts

    if workspace_facts.deterministic(runner):
        return SGLANG_FORCED_BYTES
    archs = list(getattr(getattr(runner.model_config, "hf_config", None), "architectures", None) or [])
    line = installed_version("sglang")
    if any(sglang_default_workspace(line, a) == SGLANG_LARGE for a in archs):
        return SGLANG_LARGE
    fld = getattr(module.envs, workspace.NATIVE_VAR)
    return int(type(fld).get(fld))


def _plan(runner) -> Reservation | None:
    """The reservation for this process's first KV sizing, or None (nothing to move)."""
    from guard_core.decide.kv_budget import BudgetMove
    from guard_core.runtime.settings import get_settings

    from . import workspace, workspace_facts

    if _state.tried:
        return None
    _state.tried = True
    settings = get_settings()
    mode = settings.reserve
    if mode == "off" or settings.workspace == "off":
        log().debug(f"KV budget: FLASHINFER_GUARD_RESERVE={mode}, FLASHINFER_GUARD_WORKSPACE={settings.workspace}: "
                    "SGLang's KV sizing untouched", key="kv.off")
        return None
    backends = workspace_facts.attention_backends(runner)
    if "flashinfer" not in backends:
        log().debug(f"KV budget: attention backends {sorted(backends)} without FlashInfer; untouched", key="kv.nofi")
        return None
    if getattr(runner, "post_capture_kv_active", False):
        log().info_once("kv.post_capture", "KV budget: SGLang sizes the KV pool after CUDA-graph capture "
                        "(post-capture KV sizing), which measures the workspace itself; nothing moved")
        return None
    import importlib

    module = importlib.import_module(workspace.BACKEND_MODULE)
    rec = workspace._gather(module, runner)
    if rec is None:
        return None
    server = _server_bytes(module, runner)
    dec = workspace._decide(rec, server)
    buffer = int(dec.allocate_bytes) if dec.action == "exact" else max(int(dec.allocate_bytes), server)
    return Reservation(BudgetMove(mode, buffer, server), where="")


def _allocate(res: Reservation, runner) -> bool:
    """full: create the buffer before SGLang measures, where the backend will find it."""
    import importlib

    import torch

    from . import workspace

    module = importlib.import_module(workspace.BACKEND_MODULE)
    if hasattr(module, "global_workspace_buffer"):  # <= 0.5.15: the module global
        if module.global_workspace_buffer is not None:
            return False
        where = "module"
    else:
        from sglang.srt.runtime_context import get_context  # 0.5.16+: the runtime buffer registry

        if get_context().resources.buffers.get("flashinfer_workspace") is not None:
            return False
        where = "registry"
    buf = torch.empty(int(res.move.buffer_bytes), dtype=torch.uint8, device=getattr(runner, "device", "cuda"))
    if where == "module":
        module.global_workspace_buffer = buf
    else:
        from sglang.srt.runtime_context import get_context

        get_context().resources.buffers["flashinfer_workspace"] = buf
    res.buffer, res.placed = buf, where
    return True


def _release(res: Reservation) -> None:
    import importlib

    from . import workspace

    if res.placed == "module":
        module = importlib.import_module(workspace.BACKEND_MODULE)
        if module.global_workspace_buffer is res.buffer:
            module.global_workspace_buffer = None
    elif res.placed == "registry":
        from sglang.srt.runtime_context import get_context

        bufs = get_context().resources.buffers
        if bufs.get("flashinfer_workspace") is res.buffer:
            bufs.pop("flashinfer_workspace", None)
    res.buffer, res.placed = None, None


def _say(res: Reservation) -> None:
    from guard_core.decide.kv_budget import budget_line, sglang_budget_where

    res.line = budget_line(res.move, sglang_budget_where(res.move.mode, res.where), res.per_token_bytes)
    log().info(res.line, key="kv.line")


def _begin(self):
    """Before SGLang measures: the plan, and under full the buffer (else None)."""
    res = _plan(self)
    if res is None:
        return None
    if res.move.mode == "full" and not _allocate(res, self):
        return None
    return res


def _failed(res, exc_text) -> None:
    if res is not None and res.placed:
        _release(res)
    log().warning_once("kv.failed", f"KV budget: not moved ({exc_text}); SGLang sizes its KV cache as without "
                       "the guard")


# ---------------------------------------------------------------- 0.5.11 / 0.5.2x: bytes

def _make_profile_bytes(where):
    def make(orig, module):
        def _profile_available_bytes(self, *args, **kwargs):
            from guard_core.runtime.wrapping import guarded

            res = None
            try:
                res = _begin(self)
            except Exception as exc:
                _failed(res, f"{type(exc).__name__}: {exc}")
                res = None
            if res is None:
                return orig(self, *args, **kwargs)
            try:
                available = orig(self, *args, **kwargs)
            except Exception:
                if not res.placed:
                    raise
                _failed(res, "SGLang's sizing failed with the buffer held")
                _state.reservation = None
                return orig(self, *args, **kwargs)
            charge = res.move.charge if res.move.mode == "auto" else 0  # full: the measurement holds it
            if charge and int(available) - charge <= 0:
                _failed(None, f"{charge} bytes do not fit in the {int(available)}-byte budget")
                return available
            res.where = where
            _state.reservation = res
            guarded(log(), "kv.cell", "KV budget", _cell_from_configurator, res, self)
            guarded(log(), "kv.say", "KV budget", _say, res)
            return int(available) - charge

        return _profile_available_bytes

    return make


def _cell_from_configurator(res: Reservation, kvc) -> None:
    """SGLang's own per-token KV size: ``create_memory_pool_configurator(...)._cell_size``
    (0.5.23 pool_configurator.py:239, 0.5.11:93), the coefficient its budget is divided by."""
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator

    cell = getattr(create_memory_pool_configurator(kvc), "_cell_size", None)
    res.per_token_bytes = int(cell) if cell else None


# ---------------------------------------------------------------- 0.5.5: tokens

def _make_profile_tokens(orig, module):
    def profile_max_num_token(self, total_gpu_memory, *args, **kwargs):
        from guard_core.runtime.wrapping import guarded

        res = None
        try:
            res = _begin(self)
        except Exception as exc:
            _failed(res, f"{type(exc).__name__}: {exc}")
            res = None
        if res is None:
            return orig(self, total_gpu_memory, *args, **kwargs)
        charge = res.move.charge if res.move.mode == "auto" else 0
        real = module.get_available_gpu_memory
        seen = {}

        def measured(*a, **k):  # SGLang's measurement (GiB), less the charge: rest_memory at 1317
            seen["free"] = real(*a, **k)
            return seen["free"] - charge / GIB

        try:
            module.get_available_gpu_memory = measured if charge else real
            try:
                tokens = orig(self, total_gpu_memory, *args, **kwargs)
            finally:
                module.get_available_gpu_memory = real
        except Exception:
            if not res.placed:
                raise
            _failed(res, "SGLang's sizing failed with the buffer held")
            return orig(self, total_gpu_memory, *args, **kwargs)
        if charge and tokens <= 0 and "free" in seen:  # SGLang's measurement again, not the device
            _failed(None, f"{charge} bytes leave no KV cache")
            module.get_available_gpu_memory = lambda *a, **k: seen["free"]
            try:
                return orig(self, total_gpu_memory, *args, **kwargs)
            finally:
                module.get_available_gpu_memory = real
        res.where = "ModelRunner.profile_max_num_token"
        _state.reservation = res
        guarded(log(), "kv.cell", "KV budget", _cell_from_probe, res, self, module, total_gpu_memory, orig)
        guarded(log(), "kv.say", "KV budget", _say, res)
        return tokens

    return profile_max_num_token


def _cell_from_probe(res: Reservation, runner, module, total_gpu_memory, orig) -> None:
    """SGLang 0.5.5 computes its cell size inline (model_runner.py:1277-1316) and returns
    tokens only: ask its own function once more, with its measurement answered by a
    budget of exactly 2**20 GiB (no device query), and read the cell size back
    (tokens = 2**50 // cell). Not where a Mamba pool changes the budget
    (handle_max_mamba_cache updates server_args)."""
    if getattr(runner, "mambaish_config", None) is not None:
        return
    real = module.get_available_gpu_memory
    slack = total_gpu_memory * (1 - runner.mem_fraction_static)
    module.get_available_gpu_memory = lambda *a, **k: slack + float(1 << 20)
    try:
        probe = int(orig(runner, total_gpu_memory))
    finally:
        module.get_available_gpu_memory = real
    if probe > 0:
        res.per_token_bytes = int(round((1 << 50) / probe))


# ---------------------------------------------------------------- the patch rows

def _say_missing(target: str) -> None:
    log().debug(f"KV budget: {target} not found; not applicable on this version", key=f"kv.missing:{target}")


def _callable(name):
    return lambda owner, module: callable(getattr(owner, name, None))


_TABLE = PatchTable(log)
on_configurator = _TABLE.row(
    CONFIGURATOR_MODULE, HOOK_KEY + ".configurator", "KV budget", error_key="kv.patch",
    wraps=(Wrap("KVCacheConfigurator._profile_available_bytes",
                _make_profile_bytes("KVCacheConfigurator._profile_available_bytes"),
                feature=_callable("_profile_available_bytes")),),
    missing=_say_missing)
on_mixin = _TABLE.row(
    MIXIN_MODULE, HOOK_KEY + ".mixin", "KV budget", error_key="kv.patch",
    wraps=(Wrap("ModelRunnerKVCacheMixin._profile_available_bytes",
                _make_profile_bytes("ModelRunner._profile_available_bytes"),
                feature=_callable("_profile_available_bytes")),),
    missing=_say_missing)
on_runner = _TABLE.row(
    RUNNER_MODULE, HOOK_KEY + ".runner", "KV budget", error_key="kv.patch",
    wraps=(Wrap("ModelRunner.profile_max_num_token", _make_profile_tokens,
                feature=lambda owner, module: (callable(getattr(owner, "profile_max_num_token", None))
                                               and callable(getattr(module, "get_available_gpu_memory", None)))),),
    missing=_say_missing)


def install() -> None:
    _TABLE.install()


def uninstall() -> None:
    _TABLE.undo()
    _state.reset()
