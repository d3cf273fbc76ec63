"""Scenarios run one per subprocess against the real installed vLLM.

    python tests/vllm/scenarios.py NAME [--flag ...]

Each prints one ``RESULT: {json}`` line on stdout; vLLM's and our log lines go
to stdout/stderr as vLLM formats them. vLLM caches capability checks and its
plugins-loaded flag per process, hence one process per scenario.

What is faked, and why (nothing else is):
- vLLM's platform: this machine has no GPU. For the MoE scenarios the platform
  object's class is switched, after the MoE modules are imported, to a CUDA
  platform reporting compute capability 10.0 (SM100): vLLM's CUDA platform
  module itself cannot be imported without libcuda. For the workspace
  scenarios the CPU-less "unspecified" platform is told it supports static
  CUDA graphs (so the config keeps FULL decode graphs as on a GPU) and that
  pinned memory is unavailable (pinning needs a CUDA driver).
- the CPU architecture: ``platform.machine`` (no Grace host here).
- for the MoE scenarios, ``--cc`` (default 10.0): the compute capability the
  faked CUDA platform reports, and the GPU flashinfer-guard's seam
  ``guard_core.gpus.detect_gpu`` reports before that platform is in place (the
  engine config is built on vLLM's CPU platform); ``--fi``: the FlashInfer
  release flashinfer-guard reads (``guard_core.versions.flashinfer_version``),
  to put an evidence-table row in force on a line whose pinned FlashInfer lies
  outside it. vLLM's own code is untouched by either.
- the GPU's SM count and compute capability: through flashinfer-guard's own
  seam ``guard_core.gpus.detect_gpu`` (torch has no device properties on CPU).
The workspace buffer itself is a real torch tensor on the CPU device.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile

from cpu_host import no_pinned_memory

MIB = 1 << 20

# Qwen3.5-397B-A17B full-attention shape, as a dense config vLLM can parse.
QWEN35_SHAPE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
    "num_hidden_layers": 2, "intermediate_size": 8192, "vocab_size": 151936,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
    "rope_theta": 10000000,
}
# Qwen3-VL-32B's text shape (64 q / 8 KV heads, head_dim 128) as a dense config.
QWEN3VL_SHAPE = dict(QWEN35_SHAPE, hidden_size=5120, num_attention_heads=64, num_key_value_heads=8, head_dim=128)
SHAPES = {"qwen35": QWEN35_SHAPE, "qwen3vl": QWEN3VL_SHAPE}
# A Qwen3-MoE config for the engine-config scenarios.
MOE_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe",
    "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_hidden_layers": 2, "intermediate_size": 6144, "moe_intermediate_size": 768,
    "num_experts": 128, "num_experts_per_tok": 8, "vocab_size": 151936, "norm_topk_prob": True,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
    "rope_theta": 1000000, "decoder_sparse_step": 1, "mlp_only_layers": [],
}

TEST_GPU = ("NVIDIA L40S", 142, (8, 9))  # not SM10x: no TRT-LLM decode


def model_dir(config: dict) -> str:
    import atexit
    import shutil

    d = tempfile.mkdtemp(prefix="fg-model-")
    atexit.register(shutil.rmtree, d, True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f)
    return d


def result(**kw) -> None:
    print("RESULT: " + json.dumps(kw, default=str), flush=True)


def load_plugins() -> None:
    from vllm.plugins import load_general_plugins

    load_general_plugins()


def fake_machine(machine: str | None) -> None:
    if machine:
        platform.machine = lambda: machine


def fake_gpu(spec=TEST_GPU) -> None:
    from guard_core import gpus

    name, sms, cc = spec
    gpus.detect_gpu = lambda device=None: gpus.Gpu(name, sms, cc)


# --- MoE --------------------------------------------------------------------

MOE_CC = (10, 0)  # --cc
GPU_NAMES = {(10, 0): "NVIDIA B200", (10, 3): "NVIDIA B300", (12, 0): "NVIDIA RTX PRO 6000 Blackwell",
             (12, 1): "NVIDIA GB10", (9, 0): "NVIDIA H100 80GB HBM3"}


def fake_moe_gpu(cc: str | None) -> None:
    """The GPU of the MoE scenario (see the module docstring)."""
    global MOE_CC
    if cc:
        major, minor = (int(x) for x in cc.split("."))
        MOE_CC = (major, minor)
    fake_gpu((GPU_NAMES.get(MOE_CC, "NVIDIA GPU"), 148, MOE_CC))


def fake_flashinfer(version: str | None) -> None:
    if version:
        import guard_core.versions as gv

        gv.flashinfer_version = lambda: version


def make_sm100_platform():
    """Switch vLLM's platform object to a CUDA platform reporting ``MOE_CC`` (SM100 by default)."""
    import vllm.platforms as vp
    from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum

    major, minor = MOE_CC

    class FakeSM100Cuda(Platform):
        _enum = PlatformEnum.CUDA
        device_name = "cuda"
        device_type = "cuda"
        dispatch_key = "CUDA"
        ray_device_key = "GPU"

        @classmethod
        def get_device_capability(cls, device_id: int = 0):
            return DeviceCapability(major, minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return GPU_NAMES.get((major, minor), "NVIDIA GPU")

        @classmethod
        def is_pin_memory_available(cls) -> bool:
            return False

    vp.current_platform.__class__ = FakeSM100Cuda
    assert vp.current_platform.is_cuda()
    assert vp.current_platform.is_device_capability_family(100) == (major == 10)


def moe_config(backend: str = "auto", activation: str = "SILU"):
    import torch
    from vllm.model_executor.layers.fused_moe.activation import MoEActivation
    from vllm.model_executor.layers.fused_moe.config import (
        FusedMoEConfig, FusedMoEParallelConfig, RoutingMethodType)

    import dataclasses

    names = {f.name for f in dataclasses.fields(FusedMoEConfig) if f.init}
    # later lines take the full intermediate size and derive the per-partition one
    size_field = "intermediate_size" if "intermediate_size" in names else "intermediate_size_per_partition"
    return FusedMoEConfig(
        num_experts=128, experts_per_token=8, hidden_dim=2048, **{size_field: 768},
        num_local_experts=128, num_logical_experts=128, activation=getattr(MoEActivation, activation), device="cuda",
        routing_method=RoutingMethodType.Renormalize,
        moe_parallel_config=FusedMoEParallelConfig.make_no_parallel(), in_dtype=torch.bfloat16,
        moe_backend=backend)


def select_bf16(cfg):
    """vLLM's BF16 MoE oracle, called as that line's model build calls it: up to 0.19
    it takes use_ep/use_dp and returns the backend alone, later a (backend, experts) pair."""
    import inspect

    from vllm.model_executor.layers.fused_moe.oracle.unquantized import select_unquantized_moe_backend

    params = inspect.signature(select_unquantized_moe_backend).parameters
    kw = {k: False for k in ("use_ep", "use_dp") if k in params}
    out = select_unquantized_moe_backend(cfg, **kw)
    return out if isinstance(out, tuple) else (out, None)


def select_all(backend: str = "auto") -> dict:
    """vLLM's own MoE backend selection (the oracles model build runs)."""
    from vllm.model_executor.layers.fused_moe.oracle.fp8 import select_fp8_moe_backend
    from vllm.model_executor.layers.fused_moe.oracle.nvfp4 import select_nvfp4_moe_backend
    from vllm.model_executor.layers.quantization.utils.quant_utils import (
        kFp8StaticTensorSym, kNvfp4Dynamic, kNvfp4Static)

    calls = {
        "bf16": lambda: select_bf16(moe_config(backend)),
        "fp8": lambda: select_fp8_moe_backend(moe_config(backend), kFp8StaticTensorSym, kFp8StaticTensorSym),
        "nvfp4": lambda: select_nvfp4_moe_backend(moe_config(backend), kNvfp4Static, kNvfp4Dynamic),
    }
    from vllm.config import VllmConfig, set_current_vllm_config

    out = {}
    for name, call in calls.items():
        try:
            with set_current_vllm_config(VllmConfig()):  # model build runs inside one
                out[name] = call()[0].name
        except Exception as exc:  # vLLM's own error, reported to the test
            out[name] = f"raises {type(exc).__name__}"
            print(f"{name} ({backend}): {type(exc).__name__}: {exc}", file=sys.stderr)
    return out


def import_moe_modules() -> None:
    import vllm.model_executor.layers.fused_moe.oracle.fp8  # noqa: F401
    import vllm.model_executor.layers.fused_moe.oracle.nvfp4  # noqa: F401
    import vllm.model_executor.layers.fused_moe.oracle.unquantized  # noqa: F401
    import vllm.model_executor.layers.quantization.utils.quant_utils  # noqa: F401
    try:  # 0.29+: the warm-up step with the per-op autotune skip list (imported before the
        # platform is switched to the faked CUDA one, as vLLM's worker imports it on a GPU)
        import vllm.model_executor.warmup.kernel_warmup  # noqa: F401
    except Exception as exc:
        print(f"kernel_warmup: {type(exc).__name__}: {exc}", file=sys.stderr)


def mxfp4_supported() -> dict:
    import vllm.model_executor.layers.fused_moe.experts.trtllm_mxfp4_moe as m

    return {
        name: bool(obj._supports_current_device())
        for name, obj in sorted(vars(m).items())
        if isinstance(obj, type) and obj.__module__ == m.__name__ and hasattr(obj, "_supports_current_device")
    }


def engine_config(moe_backend: str | None = None, **extra):
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms import current_platform

    if not current_platform.device_type:
        # vLLM's "unspecified" platform (no GPU here) names no device; the
        # config is built for the CPU device
        type(current_platform).device_type = "cpu"

    kw = dict(model=model_dir(MOE_CONFIG), skip_tokenizer_init=True, max_model_len=4096)
    if moe_backend is not None:
        kw["moe_backend"] = moe_backend
    kw.update(extra)
    try:
        return EngineArgs(**kw).create_engine_config()
    except RuntimeError as exc:
        # vLLM 0.34's CPU platform refuses x86 without Triton (platforms/cpu.py 0.34.0:239-241,
        # check_and_update_config), which a GPU server never reaches; this host has no triton-cpu.
        # Only there, the config the scenario reads (the MoE backend chosen) is built as on a host
        # that has it (earlier lines build it unchanged: patching Triton's flag there changes what
        # their later imports see)
        if "requires Triton" not in str(exc):
            raise
    import vllm.triton_utils as tu

    had = getattr(tu, "HAS_TRITON", None)
    tu.HAS_TRITON = True
    try:
        return EngineArgs(**kw).create_engine_config()
    finally:
        tu.HAS_TRITON = had


def autotune_skip_ops():
    """What this vLLM's warm-up would skip when autotuning (0.29+: kernel_warmup's own
    ``_flashinfer_autotune_skip_ops``, called with a model that has no CuTe-DSL NVFP4
    linear layer); "absent" where the line has no such step."""
    try:
        import vllm.model_executor.warmup.kernel_warmup as kw
    except Exception as exc:
        return f"absent ({type(exc).__name__})"
    fn = getattr(kw, "_flashinfer_autotune_skip_ops", None)
    if fn is None:
        return "absent"
    import torch

    class Runner:
        # 0.34: the warm-up reads the KV cache's extensibility first (kernel_warmup.py 0.34.0:406-409)
        cache_config = __import__("types").SimpleNamespace(enable_extensible_kv_cache=False)

        def get_model(self):
            return torch.nn.Sequential(torch.nn.Linear(2, 2))

    out = fn(Runner())
    return None if out is None else sorted(out)


def sc_moe(args) -> None:
    fake_machine(args.machine)
    fake_moe_gpu(args.cc)
    fake_flashinfer(args.fi)
    if os.environ.get("FG_TEST_BREAK_MOE"):
        # fault injection: the core's MoE policy raises inside our hook
        import guard_core.decide.records

        def boom(*a, **k):
            raise RuntimeError("injected fault")

        guard_core.decide.records.decide_moe = boom
    if not args.no_plugins:
        load_plugins()
    config_backend = None
    if args.explicit:
        config_backend = engine_config(moe_backend="flashinfer_trtllm").kernel_config.moe_backend
    import_moe_modules()
    make_sm100_platform()
    from vllm.utils import flashinfer as fi

    out = dict(
        machine=platform.machine(),
        cc=list(MOE_CC),
        wrapped=bool(getattr(fi.has_flashinfer_trtllm_fused_moe, "__flashinfer_guard__", False)),
        has_trtllm=fi.has_flashinfer_trtllm_fused_moe(),
        cache_clear=callable(getattr(fi.has_flashinfer_trtllm_fused_moe, "cache_clear", None)),
        auto=select_all("auto"),
        mxfp4=mxfp4_supported(),
        skip_ops=autotune_skip_ops(),
    )
    if args.explicit:
        out["config_backend"] = config_backend
        out["explicit"] = select_all(config_backend)
        out["explicit_unrewritten"] = select_all("flashinfer_trtllm")
    # every vLLM module now holds the same function object
    holders = {
        name: mod.has_flashinfer_trtllm_fused_moe is fi.has_flashinfer_trtllm_fused_moe
        for name, mod in sys.modules.items()
        if name.startswith("vllm") and mod is not None and "has_flashinfer_trtllm_fused_moe" in vars(mod)
    }
    out["holders"] = holders
    result(**out)


def sc_moe_env_route(args) -> None:
    """VLLM_USE_FLASHINFER_MOE_FP16=1 + VLLM_FLASHINFER_MOE_BACKEND=latency."""
    fake_machine(args.machine)
    fake_moe_gpu(args.cc)
    fake_flashinfer(args.fi)
    if not args.no_plugins:
        load_plugins()
    # the MXFP4 oracle reads the model's quantization config from the current vLLM config
    vconfig = engine_config() if os.environ.get("VLLM_USE_FLASHINFER_MOE_MXFP4_BF16") else None
    import_moe_modules()
    make_sm100_platform()

    try:
        bf16 = select_bf16(moe_config("auto"))[0].name
    except Exception as exc:
        bf16 = f"raises {type(exc).__name__}"
    import vllm.envs

    route_known = "VLLM_USE_FLASHINFER_MOE_FP16" in getattr(vllm.envs, "environment_variables", {})
    mxfp4_known = "VLLM_USE_FLASHINFER_MOE_MXFP4_BF16" in getattr(vllm.envs, "environment_variables", {})
    mxfp4 = None
    if os.environ.get("VLLM_USE_FLASHINFER_MOE_MXFP4_BF16"):
        from vllm.config import set_current_vllm_config
        from vllm.model_executor.layers.fused_moe.oracle.mxfp4 import select_mxfp4_moe_backend

        try:
            with set_current_vllm_config(vconfig):
                # an MXFP4 MoE model's own activation (gpt-oss): 0.19's TRT-LLM MXFP4
                # experts take no other
                mxfp4 = select_mxfp4_moe_backend(moe_config("auto", activation="SWIGLUOAI"))[0].name
        except Exception as exc:  # vLLM's own error, reported to the test
            mxfp4 = f"raises {type(exc).__name__}"
            print(f"mxfp4: {type(exc).__name__}: {exc}", file=sys.stderr)
    result(bf16=bf16, route_known=route_known, mxfp4=mxfp4, mxfp4_known=mxfp4_known,
           envs_seen_elsewhere=mxfp4_known and bool(vllm.envs.is_set("VLLM_USE_FLASHINFER_MOE_MXFP4_BF16")))


# --- workspace ----------------------------------------------------------------

def allow_static_graphs() -> None:
    """The CPU platform, told it can capture CUDA graphs (not SM10x)."""
    from vllm.platforms import current_platform

    cls = type(current_platform)
    cls.support_static_graph_mode = classmethod(lambda c: True)
    no_pinned_memory()


def cpu_only_impl_buffers() -> None:
    """vLLM 0.33's FlashInferImpl allocates a TRT-LLM-gen counter buffer on
    device "cuda" and asks FlashInfer for the CUDA SM count in __init__: give
    it the same buffer on the CPU (no CUDA device exists here)."""
    import torch
    import vllm.v1.attention.backends.flashinfer as m

    if hasattr(m, "_get_multi_ctas_kv_counter_buffer"):
        real = m._get_multi_ctas_kv_counter_buffer
        m._get_multi_ctas_kv_counter_buffer = lambda n, device: real(n, torch.device("cpu"))
    if hasattr(m, "get_device_sm_count"):
        m.get_device_sm_count = lambda device=None: TEST_GPU[1]


def build_builder(max_num_seqs: int = 512, max_num_batched_tokens: int = 8192, capture: int | None = None,
                  shape: str = "qwen35"):
    import torch
    from vllm.config import (CompilationConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig,
                             set_current_vllm_config)
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend, FlashInferMetadataBuilder
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    try:
        from vllm.model_executor.layers.attention import Attention
    except ImportError:  # older layout
        from vllm.attention.layer import Attention

    cfg = SHAPES[shape]
    heads, kv_heads, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    mc = ModelConfig(model=model_dir(cfg), skip_tokenizer_init=True, max_model_len=32768)
    vc = VllmConfig(
        model_config=mc,
        scheduler_config=SchedulerConfig(max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                                         max_model_len=32768, is_encoder_decoder=False),
        device_config=DeviceConfig(device="cpu"),
        compilation_config=CompilationConfig(
            cudagraph_mode="FULL_AND_PIECEWISE",
            **({"max_cudagraph_capture_size": capture} if capture else {})),
    )
    spec = FullAttentionSpec(block_size=16, num_kv_heads=kv_heads, head_size=hd, dtype=torch.bfloat16)
    cpu_only_impl_buffers()
    with set_current_vllm_config(vc):
        layers = [
            Attention(num_heads=heads, head_size=hd, scale=hd ** -0.5, num_kv_heads=kv_heads,
                      attn_backend=FlashInferBackend, prefix=f"model.layers.{i}.self_attn.attn")
            for i in range(2)
        ]
        builder = FlashInferMetadataBuilder(spec, [l.layer_name for l in layers], vc, torch.device("cpu"))
    return builder, vc


def core_need(builder, vc, gpu=TEST_GPU) -> dict:
    """guard_core's answer for the same deployment, stated independently."""
    from guard_core.gpus import Gpu
    from guard_core.flashinfer.sizing import AttentionLayout, Planners, ServingLimits, compute_requirement, round_up_mib
    from guard_core.versions import flashinfer_version

    cap = builder._decode_cudagraph_max_bs
    sizes = tuple(s for s in vc.compilation_config.cudagraph_capture_sizes if s <= cap)
    req = compute_requirement(
        AttentionLayout(32, 2, 256, page_size=16),
        ServingLimits(capture_sizes=sizes, max_num_seqs=vc.scheduler_config.max_num_seqs,
                      max_num_batched_tokens=vc.scheduler_config.max_num_batched_tokens,
                      max_model_len=32768, verify_in_graph=False),
        Gpu(*gpu), flashinfer_version(), Planners(prefill="fa2", decode="fa2"), caller="vllm")
    graph512 = [s for s in req.scenarios if s.name == "cuda_graph_decode" and s.batch == 512]
    return dict(need=req.float_bytes, need_rounded=round_up_mib(req.float_bytes),
                graph512=graph512[0].float_bytes if graph512 else None, capture_sizes=list(sizes),
                dominant=req.dominant.name if req.dominant else None,
                dominant_batch=req.dominant.batch if req.dominant else None)


def sc_workspace(args) -> None:
    import importlib.metadata as md

    if args.fake_gpu:
        fake_gpu()
    if args.rename_target:
        # fault injection: a vLLM whose builder allocates through another name
        import vllm.v1.attention.backends.flashinfer as m

        cls = m.FlashInferMetadataBuilder
        cls._get_workspace_buffer_v2 = cls._get_workspace_buffer
        del cls._get_workspace_buffer
    if not args.no_plugins:
        load_plugins()
        if args.twice:
            load_plugins()
            import vllm_guard.plugin

            vllm_guard.plugin.register()
            vllm_guard.plugin.register()
    if args.break_hook:
        # fault injection: our own code raises inside the hook
        import vllm_guard.workspace_facts

        def boom(*a, **k):
            raise RuntimeError("injected fault")

        vllm_guard.workspace_facts.read_facts = boom
    allow_static_graphs()
    if args.device_memory:
        # A CPU machine has no device memory to run out of: allocations above the given size
        # raise what torch's CUDA allocator raises (torch.OutOfMemoryError)
        import torch

        def capped(real):
            def alloc(*a, **k):
                size = a[0] if a and isinstance(a[0], int) else (a[0][0] if a and isinstance(a[0], (tuple, list)) else 0)
                if int(size) > args.device_memory:
                    raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {int(size) >> 20} MiB")
                return real(*a, **k)
            return alloc

        torch.zeros, torch.empty = capped(torch.zeros), capped(torch.empty)
    if args.capture:
        builder, vc = build_builder(max_num_seqs=args.capture, capture=args.capture, shape=args.shape)
    else:
        builder, vc = build_builder(shape=args.shape)
    get = builder._get_workspace_buffer_v2 if args.rename_target else builder._get_workspace_buffer
    buf = get()
    again = get()
    import vllm.v1.attention.backends.flashinfer as m

    meth = m.FlashInferMetadataBuilder.__dict__.get("_get_workspace_buffer")
    result(
        vllm=md.version("vllm"), flashinfer=md.version("flashinfer-python"),
        allocated=int(buf.numel() * buf.element_size()), device=str(buf.device), same_buffer=again is buf,
        decode_cudagraph_max_bs=getattr(builder, "_decode_cudagraph_max_bs", None),
        use_trtllm_decode=builder.use_trtllm_decode_attention,
        capture_max=vc.compilation_config.max_cudagraph_capture_size,
        wrapped=bool(getattr(meth, "__flashinfer_guard__", False)),
        wrapped_twice=bool(getattr(getattr(meth, "__wrapped__", None), "__flashinfer_guard__", False)),
        core=core_need(builder, vc) if args.shape == "qwen35" else None,
        heads=[builder.num_qo_heads, builder.num_kv_heads, builder.head_dim],
    )


def sc_shared(args) -> None:
    """V2 model runner style: a builder handed another builder's buffer."""
    import torch

    fake_gpu()
    load_plugins()
    allow_static_graphs()
    builder, vc = build_builder()
    small = torch.zeros(394 * MIB, dtype=torch.uint8)
    other = torch.zeros(0, dtype=torch.uint8).set_(small.untyped_storage())  # another holder of the buffer
    builder.set_workspace_buffer(small)
    buf = builder._get_workspace_buffer()
    result(allocated=int(buf.numel()), kept_shared=buf is small, core=core_need(builder, vc),
           other_holder_bytes=int(other.untyped_storage().nbytes()))


# --- loading, env validation ----------------------------------------------------

def sc_discover(args) -> None:
    import importlib.metadata as md

    import vllm.plugins

    eps = [(e.name, e.value) for e in md.entry_points(group="vllm.general_plugins")]
    before = before_load = set(sys.modules)
    vllm.plugins.load_general_plugins()
    loaded_by_register = sorted(set(sys.modules) - before_load)
    import vllm_guard.plugin
    from guard_core.runtime import wrapping as patching

    result(
        entry_points=eps,
        registered=vllm_guard.plugin._registered,
        hooks=sorted(patching._hooks),
        heavy_imported_by_register=[m for m in loaded_by_register
                                    if m.split(".")[0] in ("torch", "flashinfer")
                                    or m.startswith(("vllm.utils.flashinfer", "vllm.v1.attention",
                                                     "vllm.model_executor"))],
        preloaded=[m for m in ("vllm.utils.flashinfer", "vllm.v1.attention.backends.flashinfer",
                               "vllm.engine.arg_utils") if m in before],
    )


def sc_environ(args) -> None:
    """vLLM's env validation with --fail-on-environ-validation."""
    load_plugins()
    try:
        cfg = engine_config(fail_on_environ_validation=True)
        out = dict(ok=True, moe_backend=cfg.kernel_config.moe_backend)
    except ValueError as exc:
        out = dict(ok=False, error=str(exc))
    result(**out)


SCENARIOS = {
    "moe": sc_moe, "moe_env_route": sc_moe_env_route, "workspace": sc_workspace,
    "shared": sc_shared, "discover": sc_discover, "environ": sc_environ,
}


def configure_vllm_logging() -> None:
    """Configure vLLM's logging as its engine core and workers do at start-up
    (vLLM 0.31+ no longer configures it at import)."""
    import vllm.logger as vl

    if not logging_configured():
        vl._configure_vllm_root_logger()


def logging_configured() -> bool:
    import logging

    return bool(logging.getLogger("vllm").handlers)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name", choices=sorted(SCENARIOS))
    p.add_argument("--machine")
    p.add_argument("--cc", help="MoE scenarios: the GPU's compute capability, e.g. 10.0, 10.3, 12.0")
    p.add_argument("--fi", help="MoE scenarios: the FlashInfer release flashinfer-guard reads")
    p.add_argument("--explicit", action="store_true")
    p.add_argument("--no-plugins", action="store_true")
    p.add_argument("--fake-gpu", action="store_true")
    p.add_argument("--twice", action="store_true")
    p.add_argument("--break-hook", action="store_true")
    p.add_argument("--device-memory", type=int, default=0,
                   help="the device's free memory in bytes: larger allocations raise torch.OutOfMemoryError")
    p.add_argument("--rename-target", action="store_true")
    p.add_argument("--capture", type=int)
    p.add_argument("--shape", choices=sorted(SHAPES), default="qwen35")
    args = p.parse_args(argv)
    if args.name in ("moe", "environ"):
        # EngineArgs needs a device type (the MoE scenarios switch the
        # platform to SM100 CUDA after the config is built)
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    configure_vllm_logging()
    SCENARIOS[args.name](args)


if __name__ == "__main__":
    main()
