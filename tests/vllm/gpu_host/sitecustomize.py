"""A GPU host, as far as vLLM's platform choice can tell (issue 41 item 3): NVML answers
$FG_GPU_HOST_COUNT devices (default 8) named $FG_GPU_HOST_NAME, so vLLM picks its CUDA platform
(``vllm.platforms.cuda_platform_plugin``: ``nvmlDeviceGetCount() > 0``, 0.23.0/0.33.0
platforms/__init__.py:61-84) exactly as on the host where users run ``flashinfer-guard plan``;
CUDA itself stays absent (``CUDA_VISIBLE_DEVICES=""`` in plan's resolution subprocess: torch counts
0 devices). Put this folder first on PYTHONPATH; nothing else changes. Only NVML is stood in
(the library behind nvidia-smi needs the driver); vLLM's own code runs unchanged."""

import importlib.abc
import importlib.util
import os
import sys

_COUNT = int(os.environ.get("FG_GPU_HOST_COUNT", "8"))
_NAME = os.environ.get("FG_GPU_HOST_NAME", "NVIDIA H200")
_CC = tuple(int(x) for x in os.environ.get("FG_GPU_HOST_CC", "9.0").split("."))
_MEM = int(os.environ.get("FG_GPU_HOST_MEMORY", str(141 * 10**9)))


def _patch(m):
    class _Mem:
        total, free, used = _MEM, _MEM, 0

    class _Pci:
        busId = b"00000000:00:00.0"

    m.nvmlInit = lambda *a, **k: None
    m.nvmlShutdown = lambda *a, **k: None
    m.nvmlDeviceGetCount = lambda: _COUNT
    m.nvmlDeviceGetHandleByIndex = lambda i: ("gpu", int(i))
    m.nvmlDeviceGetHandleByUUID = lambda u: ("gpu", 0)
    m.nvmlDeviceGetIndex = lambda h: h[1]
    m.nvmlDeviceGetName = lambda h: _NAME
    m.nvmlDeviceGetUUID = lambda h: f"GPU-fg-{h[1]}"
    m.nvmlDeviceGetCudaComputeCapability = lambda h: _CC
    m.nvmlDeviceGetMemoryInfo = lambda h: _Mem()
    m.nvmlDeviceGetP2PStatus = lambda a, b, c: getattr(m, "NVML_P2P_STATUS_OK", 0)
    m.nvmlDeviceGetNumaNodeId = lambda h: 0
    m.nvmlDeviceGetCpuAffinity = lambda h, n: [0] * n
    m.nvmlDeviceGetPciInfo = lambda h: _Pci()


class _Finder(importlib.abc.MetaPathFinder):
    NAMES = ("vllm.third_party.pynvml", "pynvml")

    def find_spec(self, name, path, target=None):
        if name not in self.NAMES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        real = spec.loader

        class _Loader(importlib.abc.Loader):
            def create_module(self, s):
                return real.create_module(s)

            def exec_module(self, module):
                real.exec_module(module)
                _patch(module)

        spec.loader = _Loader()
        return spec


sys.meta_path.insert(0, _Finder())
