"""What every vLLM scenario on this CPU host needs: no pinned host memory.

Pinning needs a CUDA driver. vLLM up to 0.25 asks the platform each time
(``is_pin_memory_available``); from 0.26 it computes ``PIN_MEMORY`` once when
``vllm.utils.torch_utils`` is imported, other modules import that constant by
name, and ``CpuGpuBuffer`` takes it as a default argument. This turns all of
them off. It changes no FlashInfer size: pinning only decides where host
copies of the metadata live.
"""

from __future__ import annotations

import sys


def no_pinned_memory() -> None:
    from vllm.platforms import current_platform

    type(current_platform).is_pin_memory_available = classmethod(lambda c: False)
    try:
        import vllm.utils.torch_utils as tu
    except ImportError:
        return
    if not hasattr(tu, "PIN_MEMORY"):
        return
    tu.PIN_MEMORY = False
    try:
        import vllm.v1.utils  # noqa: F401  (CpuGpuBuffer's default argument)
    except ImportError:
        pass
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("vllm"):
            continue
        if getattr(mod, "PIN_MEMORY", None) is True:
            mod.PIN_MEMORY = False
        buf = vars(mod).get("CpuGpuBuffer")
        kw = getattr(getattr(buf, "__init__", None), "__kwdefaults__", None)
        if isinstance(kw, dict) and kw.get("pin_memory") is True:
            kw["pin_memory"] = False
