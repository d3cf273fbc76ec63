"""A simulated GPU for vLLM's own config resolution in ``vllm_guard.server_resolution`` (never in a server).

``flashinfer-guard plan`` asks vLLM to resolve a launch command (engine args -> ``VllmConfig`` ->
the FlashInfer builder) for the GPU given to ``plan``, on a host that may have no GPU at all and
must never touch one if it has. Everything vLLM asks the device for is answered from the guard's
GPU table here; nothing else of vLLM is changed. Each answer names the vLLM code that asks:

- ``Platform.get_device_capability / get_device_name / get_device_total_memory`` (vllm/platforms/
  interface.py; asked by the quantization checks, ``is_device_capability``, the batch-token defaults
  in ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args``, 0.23.0 engine/arg_utils.py,
  0.33.0 engine/arg_utils.py);
- ``Platform.device_type``: ``""`` on a host without a GPU (``UnspecifiedPlatform``), where
  ``DeviceConfig(device="auto")`` cannot infer one; ``cpu`` there, as the guard's parser does
  (``guard_core.deployment.server_parsers``), only for building the config;
- ``Platform.support_static_graph_mode``: CUDA graphs allowed (the platform the server runs on is
  CUDA; ``CompilationConfig`` drops graphs on platforms without it);
- pinned host memory off (``no_pinned_memory``, also what the tests' CPU host uses); it changes no
  FlashInfer size, only where host copies of the metadata live;
- FlashInfer's SM count (``get_device_sm_count``, imported into v1/attention/backends/flashinfer.py
  0.33.0:24) and the multi-CTA counter buffer (``_get_multi_ctas_kv_counter_buffer``, 0.33.0:161)
  on the CPU;
- Triton present (``HAS_TRITON`` as ``vllm.config.vllm`` imported it): vLLM's CUDA wheels install
  Triton and a GPU host has a driver for it, but a host without a GPU reports it missing
  (vllm/triton_utils/importing.py: "0 active driver(s) found ... Disabling Triton"), and
  ``VllmConfig.use_v2_model_runner`` then picks Model Runner V1 (config/vllm.py 0.23.0:527,
  0.32.0:724; 0.33.0:752 exempts only the unspecified platform). A GPU server picks V2 by default
  on 0.32+ (0.23: Llama, Mistral and Qwen3 dense models), and the runner changes how vLLM sizes
  its CUDA graphs under speculation (``resolve_cudagraph_mode_and_sizes(use_v2_model_runner=...)``:
  V1 alone rounds the capture sizes to multiples of 1 + draft tokens, config/compilation.py
  0.33.0:1495-1504). Only that module's name is answered; no Triton kernel runs;
- ``has_nvidia_artifactory`` (vllm/utils/flashinfer.py 0.23.0:323, 0.33.0:647: an HTTP request to
  NVIDIA's artifactory when the cubins are not installed): answered from ``trtllm`` (plan's
  ``--trtllm-attention``), never from the network.
"""

from __future__ import annotations

import sys

__all__ = ["no_pinned_memory", "simulate"]

SIMULATED_DEVICES = 1 << 10  # GPUs the simulated host has: as many as any launch command asks for


def simulate(gpu_key: str, trtllm: bool | None) -> None:
    """Make vLLM's platform answer as the table's ``gpu_key`` (see the module doc, per line)."""
    from guard_core import gpus

    spec = gpus.find_spec(gpu_key)
    if spec is None or spec.memory is None:
        raise ValueError(f"no table entry with memory for GPU {gpu_key!r}")
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    cls = type(current_platform)
    if not getattr(current_platform, "device_type", None):
        cls.device_type = "cpu"
    cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(*spec.cc))
    cls.get_device_name = classmethod(lambda c, device_id=0: spec.name)
    cls.get_device_total_memory = classmethod(lambda c, device_id=0: spec.memory[0])
    cls.support_static_graph_mode = classmethod(lambda c: True)
    # On a GPU host vLLM picks its CUDA platform through NVML, while this process sees no device
    # (CUDA_VISIBLE_DEVICES="", plan's resolution subprocess): the CUDA platform's device_count()
    # (torch's count) is 0 and ParallelConfig refuses any TP x PP > 1 ("World size (2) is larger than
    # the number of available GPUs (0) in this node", config/parallel.py 0.33.0:1066-1076). plan
    # answers for the deployment as described, on a host with the GPUs it asks for (issue 41 item 3).
    cls.device_count = classmethod(lambda c: SIMULATED_DEVICES)
    no_pinned_memory()
    try:
        import vllm.config.vllm as vcfg
    except ImportError:  # older layouts: no runner choice there
        vcfg = None
    if vcfg is not None and hasattr(vcfg, "HAS_TRITON"):
        vcfg.HAS_TRITON = True
    import vllm.utils.flashinfer as vfi

    vfi.has_nvidia_artifactory = lambda: bool(trtllm)
    cache_clear = getattr(getattr(vfi, "supports_trtllm_attention", None), "cache_clear", None)
    if callable(cache_clear):
        cache_clear()
    import torch
    import vllm.v1.attention.backends.flashinfer as m

    if hasattr(m, "get_device_sm_count"):
        m.get_device_sm_count = lambda device=None: spec.num_sms
    if hasattr(m, "_get_multi_ctas_kv_counter_buffer"):
        real = getattr(m, "_flashinfer_guard_counter_buffer", m._get_multi_ctas_kv_counter_buffer)
        m._flashinfer_guard_counter_buffer = real
        m._get_multi_ctas_kv_counter_buffer = lambda n, device: real(n, torch.device("cpu"))


def no_pinned_memory() -> None:
    """No pinned host memory (pinning needs a CUDA driver). vLLM <= 0.25 asks the platform each time
    (``is_pin_memory_available``); 0.26+ computes ``PIN_MEMORY`` once (vllm/utils/torch_utils.py),
    modules import it by name, and ``CpuGpuBuffer`` takes it as a default argument (vllm/v1/utils.py)."""
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
        import vllm.v1.utils  # noqa: F401
    except ImportError:
        pass
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("vllm"):
            continue
        if getattr(mod, "PIN_MEMORY", None) is True:
            mod.PIN_MEMORY = False
        kw = getattr(getattr(vars(mod).get("CpuGpuBuffer"), "__init__", None), "__kwdefaults__", None)
        if isinstance(kw, dict) and kw.get("pin_memory") is True:
            kw["pin_memory"] = False
