"""FlashInfer's own ``workspace_size()`` for the eager witnesses, SGLang side (issue 27 item 5).

From 0.6.15 (FlashInfer PR #3741) ``BatchPrefillWithPagedKVCacheWrapper.workspace_size(...)``
returns the float workspace a ``plan()`` would need. It answers through the compiled prefill
module of the variant it is asked about (``get_batch_prefill_module``, flashinfer/prefill.py
0.7.2:2466-2494): asked about a variant this process has not loaded, it would build or load one.
So here FlashInfer is asked only where the FA2 prefill module SGLang itself plans with (its
``q_data_type`` = the runner's dtype, ``data_type`` = the backend's KV dtype,
flashinfer_backend.py 0.5.23:1604-1605; int32 indptr; the layer's head dims; no positional
encoding, window or soft-cap flags as the layout says) is already loaded in this process:
FlashInfer's JIT registry (``flashinfer.jit.core.jit_spec_registry``, filled by ``gen_jit_spec``
when ``get_batch_prefill_module`` generates a variant, jit/core.py 0.7.2:812-813) holds the spec
named as the FA2 getter names its primary module (``_get_batch_prefill_module_uri(base, "fa2",
"equal", "full")``, jit/attention/modules.py 0.7.2:174-185, prefill.py:545) and its library
exists (``is_compiled``). Then the cached getter returns the loaded module; nothing is built,
nothing new is loaded. Anything else (an older FlashInfer, no registry, another variant, a
window or soft cap the layout carries, an error): not asked, the guard's own figure stands.

In a server the first backend is sized before any plan (nothing loaded: not asked); later
backends of the same variant (EAGLE's draft backends after the target's CUDA graphs) are asked.
Cost: one throwaway wrapper per asked decision (its 8 MiB int buffer and pinned host buffer),
dropped when the decision is made.
"""

from __future__ import annotations

__all__ = ["asker", "variant_loaded", "prefill_module_args"]


def prefill_module_args(runner, layout):
    """The ``get_batch_prefill_module`` arguments SGLang's prefill plan uses for ``layout`` on
    ``runner``, as ``workspace_size`` derives them (prefill.py 0.7.2:2482-2494), or None."""
    import torch

    q_dt = getattr(runner, "dtype", None)
    kv_dt = getattr(runner, "kv_cache_dtype", None)
    if not isinstance(q_dt, torch.dtype):
        return None
    if not isinstance(kv_dt, torch.dtype):
        kv_dt = q_dt
    return (q_dt, kv_dt, q_dt, torch.int32, int(layout.head_dim_qk), int(layout.head_dim_vo), 0,
            int(layout.window_left) >= 0, False, False)


def variant_loaded(args) -> bool:
    """Whether FlashInfer's FA2 prefill module for ``args`` is already generated in this process
    and compiled (see the module text)."""
    try:
        from flashinfer.jit.attention import modules
        from flashinfer.jit.core import jit_spec_registry
    except Exception:
        return False
    uri_of = getattr(modules, "_get_batch_prefill_module_uri", None)
    base_of = getattr(modules, "get_batch_prefill_uri", None)
    if uri_of is None or base_of is None:
        return False
    name = uri_of(base_of("fa2", *args), "fa2", "equal", "full")
    spec = jit_spec_registry.get_all_specs().get(name)
    return bool(spec is not None and getattr(spec, "is_compiled", False))


def asker(runner, layout, record: dict):
    """The ``ask(scenario)`` of guard_core.flashinfer.ask.cross_check for this SGLang runner:
    FlashInfer's ``workspace_size()`` for the scenario's witness, or None where it is not asked.
    ``record`` gets ``asked`` (answers) and ``skipped`` (why not asked)."""
    state = {}

    def ask(scenario):
        import flashinfer

        from guard_core.flashinfer.ask import workspace_size_of

        W = getattr(flashinfer, "BatchPrefillWithPagedKVCacheWrapper", None)
        if W is None or not hasattr(W, "workspace_size"):
            record["skipped"] = "FlashInfer has no workspace_size()"
            return None
        args = prefill_module_args(runner, layout)
        if args is None or not variant_loaded(args):
            record["skipped"] = "the prefill module SGLang plans with is not loaded yet"
            return None
        f = workspace_size_of(W, state, getattr(runner, "device", None), scenario.witness, layout.page_size,
                              layout.num_qo_heads, layout.num_kv_heads, layout.head_dim_qk, "fa2",
                              head_dim_vo=int(layout.head_dim_vo), causal=True, window_left=int(layout.window_left),
                              q_data_type=args[0], kv_data_type=args[1])
        record.setdefault("asked", []).append((scenario.name, int(f), int(scenario.float_bytes)))
        return int(f)

    return ask
