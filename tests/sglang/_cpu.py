"""What cannot exist on a CPU-only test machine, replaced - and nothing else.

Each stand-in says why it is needed:

* ``sgl_kernel`` (SGLang's CUDA kernel package) loads ``libcuda.so.1`` at import;
  there is no NVIDIA driver here. A module whose attributes are inert stand-ins
  (calling one raises) lets SGLang's Python modules import; no kernel is ever run.
* ``sglang.srt.utils.common.is_cuda`` is patched to True only while the FlashInfer
  backend module is imported: SGLang imports FlashInfer's wrapper classes only when
  ``is_flashinfer_available()`` (CUDA) is true. It is restored right after.
* FlashInfer's wrapper classes allocate pinned host memory in their constructor,
  which needs the NVIDIA driver: they are replaced, in the backend module only,
  by recorders that keep the float workspace buffer SGLang hands them.
* The GPU (SM count, compute capability) comes from ``guard_core.gpus.detect_gpu``,
  the seam the guard reads it through; here it answers a table GPU (H200 unless
  said otherwise).
* A real ``ModelRunner`` needs a GPU (distributed init, weights, KV pool); the
  backend gets an object with the attributes it reads from one, built from a real
  ``ServerArgs`` and a real ``ModelConfig``. The attention-TP size, which SGLang
  sets while initialising torch.distributed, is set to 1.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import types


class _Inert:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{self._name}.{name}")

    def __call__(self, *a, **k):
        raise RuntimeError(f"{self._name} needs an NVIDIA GPU (CPU test stand-in)")

    def __repr__(self):
        return f"<CPU stand-in {self._name}>"


class _InertModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{self.__name__}.{name}")


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots):
        self.roots = roots

    def find_spec(self, fullname, path=None, target=None):
        if any(fullname == r or fullname.startswith(r + ".") for r in self.roots):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _InertModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def install_cuda_only_stand_ins():
    sys.meta_path.insert(0, _InertFinder(("sgl_kernel",)))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def use_table_gpu(name="h200"):
    import guard_core.gpus as gpus

    gpu = gpus.lookup_gpu(name)
    gpus.detect_gpu = lambda device=None: gpu
    return gpu


def import_backend_module():
    """Import SGLang's flashinfer_backend with FlashInfer's names present."""
    import sglang.srt.utils.common as common

    # Every sglang module the backend module imports at top level, imported first with
    # the real is_cuda: only the backend module's own `if is_flashinfer_available()` sees True.
    import ast
    import importlib.util

    name = "sglang.srt.layers.attention.flashinfer_backend"
    with open(importlib.util.find_spec(name).origin) as f:
        tree = ast.parse(f.read())
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang"):
            __import__(node.module)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("sglang"):
                    __import__(alias.name)
    real = common.is_cuda
    common.is_cuda = lambda: True
    common.is_flashinfer_available.cache_clear()
    try:
        import sglang.srt.layers.attention.flashinfer_backend as fb
    finally:
        common.is_cuda = real
        common.is_flashinfer_available.cache_clear()
    return fb


class RecordingWrapper:
    """Stands in for a FlashInfer wrapper: keeps what SGLang passes it."""

    made = []

    def __init__(self, float_workspace_buffer, kv_layout="NHD", *args, **kwargs):
        self.float_workspace_buffer = float_workspace_buffer
        self.kwargs = kwargs
        RecordingWrapper.made.append(self)


def replace_flashinfer_wrappers(fb):
    for name in ("BatchPrefillWithRaggedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
                 "BatchDecodeWithPagedKVCacheWrapper"):
        if hasattr(fb, name):
            setattr(fb, name, type(name, (RecordingWrapper,), {}))


def set_attention_tp_size(size=1):
    import sglang.srt.layers.dp_attention as dpa

    try:  # 0.5.11+: the attention-TP group coordinator of parallel_state
        import sglang.srt.distributed.parallel_state as ps

        if hasattr(ps, "_ATTN_TP") and ps._ATTN_TP is None:
            ps._ATTN_TP = types.SimpleNamespace(world_size=size, rank_in_group=0, rank=0)
        # 0.5.15+: attention context parallel, one rank (no context parallelism)
        if hasattr(ps, "_ATTN_CP") and ps._ATTN_CP is None:
            ps._ATTN_CP = types.SimpleNamespace(world_size=1, rank_in_group=0, rank=0)
    except ImportError:
        pass
    if hasattr(dpa, "_ATTN_TP_SIZE"):
        dpa._ATTN_TP_SIZE = size
        dpa._ATTN_TP_RANK = 0
        dpa._ATTN_DP_SIZE = 1
        dpa._ATTN_DP_RANK = 0


def write_model(root, name, config) -> str:
    d = os.path.join(root, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    return d


def runtime_context(server_args):
    """SGLang >= 0.5.19 reads resolved settings from a process runtime context, which a
    scheduler fills from its ServerArgs; do the same (no-op on older lines)."""
    try:
        from sglang.srt.runtime_context import get_context
    except ImportError:
        return
    get_context().set_server_args(server_args)


def kv_pool(model_config, kv_cache_dtype):
    """A real (tiny) SGLang KV pool on the CPU, for lines whose backend reads it."""
    from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool

    return MHATokenToKVPool(size=16, page_size=1, dtype=kv_cache_dtype,
                            head_num=model_config.get_num_kv_heads(1), head_dim=model_config.head_dim,
                            layer_num=1, device="cpu", enable_memory_saver=False, enable_alt_stream=False)


def model_runner(server_args, model_config, *, pool_size=4096, kv_cache_dtype=None):
    import torch

    runtime_context(server_args)
    kv_dtype = kv_cache_dtype or torch.bfloat16
    extra = {}
    try:
        from sglang.srt.runtime_context import get_context  # noqa: F401

        pool = kv_pool(model_config, kv_dtype)
        extra = dict(token_to_kv_pool=pool, kv_index_translator=None,
                     token_to_kv_pool_allocator=types.SimpleNamespace(get_kvcache=lambda: pool),
                     prefill_attention_backend_str="flashinfer", decode_attention_backend_str="flashinfer")
    except ImportError:
        pass
    extra.setdefault("token_to_kv_pool_allocator", None)  # older lines only store it
    return types.SimpleNamespace(**extra,
        server_args=server_args,
        model_config=model_config,
        kv_cache_dtype=kv_dtype,
        dtype=torch.bfloat16,
        sliding_window_size=None,
        device="cpu",
        gpu_id=0,
        page_size=server_args.page_size or 1,
        req_to_token_pool=types.SimpleNamespace(size=pool_size, req_to_token=torch.zeros((1, 1), dtype=torch.int32)),
        is_draft_worker=False,
    )
