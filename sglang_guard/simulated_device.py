"""The GPU ``flashinfer-guard plan --gpu`` names, simulated for SGLang's own resolution (``plan_resolve``).

Only what SGLang's launch-argument resolution and the adapter's fact reader ask of a device is
answered, in the resolver's own subprocess and nowhere else (a server never imports this module):

* memory: ``get_device_memory_capacity`` (MiB), which ``ServerArgs.__post_init__`` reads for
  its capture ceiling, chunked prefill size and static memory fraction (server_args.py 0.5.5:
  ``_handle_gpu_memory_settings``; 0.5.23: ``arg_groups/memory_hook.py``, ``cuda_graph_hook.py``),
  replaced in every SGLang module that imported it by name;
* compute capability: SGLang's ``is_sm90_supported`` / ``is_sm100_supported`` /
  ``is_sm120_supported`` / ``is_blackwell_supported`` / ``is_blackwell`` helpers
  (utils/common.py 0.5.5:193-233), where a module holds them;
* the device name: ``get_device_name`` (utils/common.py 0.5.23:1020);
* the GPU the adapter's reader sizes for: ``guard_core.gpus.detect_gpu`` answers the table GPU;
* ``sgl_kernel`` (SGLang's CUDA kernel package), only where it cannot be imported here (it
  loads ``libcuda.so.1`` at import): an inert package whose attributes raise when called, so
  SGLang's Python modules import; no kernel runs in a resolution.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types

__all__ = ["install_kernel_stand_in", "point", "CAPABILITY_HELPERS"]


class _Inert:
    def __init__(self, name):
        self._name = name

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{self._name}.{name}")

    def __call__(self, *a, **k):
        raise RuntimeError(f"{self._name} needs an NVIDIA GPU (flashinfer-guard plan resolves on a simulated one)")


class _InertModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Inert(f"{self.__name__}.{name}")


class _InertFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname == self.root or fullname.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        m = _InertModule(spec.name)
        m.__path__ = []
        return m

    def exec_module(self, module):
        pass


def install_kernel_stand_in() -> bool:
    """``sgl_kernel`` as an inert package where the real one cannot be imported (no driver);
    True when the stand-in was installed."""
    try:
        import sgl_kernel  # noqa: F401
        return False
    except Exception:  # OSError (libcuda.so.1), ImportError, RuntimeError ...
        for name in [n for n in sys.modules if n == "sgl_kernel" or n.startswith("sgl_kernel.")]:
            del sys.modules[name]
        sys.meta_path.insert(0, _InertFinder("sgl_kernel"))
        return True


# helper name -> the compute capabilities (major) it answers True for (utils/common.py 0.5.5:193-233)
CAPABILITY_HELPERS = {"is_sm90_supported": (9,), "is_sm100_supported": (10,), "is_sm120_supported": (12,),
                      "is_blackwell_supported": (10, 12), "is_blackwell": (10, 12)}


def point(gpu: dict) -> None:
    """Every SGLang module imported so far answers the simulated GPU: ``gpu`` is
    ``{"name", "key", "cc": [major, minor], "memory_mib"}``. Call again after importing more."""
    import guard_core.gpus as gpus

    mib, major, name = gpu.get("memory_mib"), int(gpu["cc"][0]), gpu.get("name") or gpu.get("key")
    table = gpus.lookup_gpu(gpu["key"]) if gpu.get("key") else None
    if table is not None:
        gpus.detect_gpu = lambda device=None: table
    for mod in list(sys.modules.values()):
        mname = getattr(mod, "__name__", "") or ""
        if not mname.startswith("sglang"):
            continue
        d = getattr(mod, "__dict__", {})
        if mib and "get_device_memory_capacity" in d:
            mod.get_device_memory_capacity = lambda device=None, _m=mib: _m
        for helper, majors in CAPABILITY_HELPERS.items():
            if callable(d.get(helper)):
                setattr(mod, helper, lambda *a, _v=(major in majors), **k: _v)
        if name and callable(d.get("get_device_name")):
            mod.get_device_name = lambda device_id=0, _n=name: _n
