"""What every vLLM scenario on this CPU host needs: no pinned host memory.

Pinning needs a CUDA driver. vLLM up to 0.25 asks the platform each time
(``is_pin_memory_available``); from 0.26 it computes ``PIN_MEMORY`` once when
``vllm.utils.torch_utils`` is imported, other modules import that constant by
name, and ``CpuGpuBuffer`` takes it as a default argument. This turns all of
them off. It changes no FlashInfer size: pinning only decides where host
copies of the metadata live.
"""

from __future__ import annotations

from vllm_guard.simulated_device import no_pinned_memory

__all__ = ["no_pinned_memory"]
