"""Scenarios run one per process against the installed SGLang (forked from a warm interpreter that
preloaded only third-party modules, tests/common/forkserver.py; a fresh one where start-up is tested).

    python scenarios.py NAME [JSON-OPTIONS]

Prints ``RESULT <json>`` as its last stdout line; SGLang's and our log lines go to
stderr through SGLang's own logging set-up. See _cpu.py for the CPU stand-ins.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _cpu  # noqa: E402

MIB = 1 << 20

QWEN3_VL_32B = {  # text shape of Qwen/Qwen3-VL-32B-Instruct: 64 q / 8 kv heads, head_dim 128
    "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
    "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 5120, "num_attention_heads": 64,
                    "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 64,
                    "intermediate_size": 25600, "vocab_size": 151936, "max_position_embeddings": 262144,
                    "rms_norm_eps": 1e-6, "rope_theta": 5000000, "torch_dtype": "bfloat16",
                    "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                     "rope_type": "default"}},
    "vision_config": {"model_type": "qwen3_vl", "depth": 27, "hidden_size": 1152, "num_heads": 16,
                      "out_hidden_size": 5120, "patch_size": 16, "spatial_merge_size": 2,
                      "temporal_patch_size": 2, "intermediate_size": 4304, "in_channels": 3,
                      "num_position_embeddings": 2304, "deepstack_visual_indexes": [8, 16, 24]},
    "image_token_id": 151655, "video_token_id": 151656, "vision_start_token_id": 151652,
    "vision_end_token_id": 151653, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
}

# Qwen3.5's full-attention layer shape (32 q / 2 kv heads, head_dim 256) under an
# architecture that is NOT on SGLang's 512 MiB list (Qwen2/Qwen3 are; no Qwen3.5
# class exists before SGLang 0.5.10).
QWEN35_SHAPED_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256, "num_hidden_layers": 2,
    "intermediate_size": 12288, "vocab_size": 151936, "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6, "rope_theta": 10000000, "torch_dtype": "bfloat16",
}

DEEPSEEK_V3_FP8 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
    "num_attention_heads": 128, "num_key_value_heads": 128, "num_hidden_layers": 2,
    "intermediate_size": 18432, "moe_intermediate_size": 2048, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 1, "kv_lora_rank": 512,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 129280, "max_position_embeddings": 163840, "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                            "weight_block_size": [128, 128]},
}


# The decode CUDA-graph batch sizes SGLang captured in the seed crash (H200, max bs 512).
SEED_CAPTURE = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 513, 16))


def gpu_resolved(sa):
    """ServerArgs resolved with device="cpu" take SGLang's CPU defaults (0.5.11+ caps CUDA
    graphs at batch 32 and chunked prefill at 2048); put back what the same launch resolves
    to on the seed's GPU, as printed in its server_args log line."""
    sa.cuda_graph_max_bs = 512
    sa.cuda_graph_bs = list(SEED_CAPTURE)
    sa.disable_cuda_graph = False
    sa.chunked_prefill_size = 16384
    return sa


def setup_logging(server_args=None):
    """SGLang's own logger set-up, as its processes do after loading plugins."""
    try:
        from sglang.srt.utils import configure_logger

        if server_args is not None:
            configure_logger(server_args)
            return
    except Exception:
        pass
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s", force=True)


def load_guard():
    """Load the guard the way this SGLang does: its load_plugins() (>= 0.5.11), or
    nothing at all - the .pth bootstrap acted when sglang was imported."""
    import sglang  # noqa: F401  (the .pth watcher fires here on old lines)

    try:
        from sglang.srt.plugins import load_plugins
    except ImportError:
        load_plugins = None
    if load_plugins is not None:
        load_plugins()
    mod = sys.modules.get("sglang_guard.plugin")
    return {
        "plugin_system": load_plugins is not None,
        "registered": bool(mod and mod.is_registered()),
        "loaded_by": mod.loaded_by() if mod else None,
    }


def server_args(model_dir, **kw):
    from sglang.srt.server_args import ServerArgs

    kw.setdefault("attention_backend", "flashinfer")
    common = dict(model_path=model_dir, load_format="dummy", device="cpu", skip_tokenizer_init=True)
    try:  # later lines renamed the decode CUDA-graph arguments
        return ServerArgs(**common, **dict({"cuda_graph_max_bs_decode": 512,
                                            "cuda_graph_bs_decode": list(SEED_CAPTURE)}, **kw))
    except TypeError as e:
        if "cuda_graph" not in str(e):
            raise
    return ServerArgs(**common, **dict({"cuda_graph_max_bs": 512}, **kw))


def build_backend(model, opts):
    """A real FlashInferAttnBackend for ``model``; returns facts about its buffer."""
    import torch
    from sglang.srt.configs.model_config import ModelConfig

    gpu = _cpu.use_table_gpu(opts.get("gpu", "h200"))
    tmp = tempfile.mkdtemp()
    sa = gpu_resolved(server_args(_cpu.write_model(tmp, "model", model), **opts.get("server_args", {})))
    setup_logging(sa)
    mc = ModelConfig.from_server_args(sa)
    fb = _cpu.import_backend_module()
    _cpu.replace_flashinfer_wrappers(fb)
    _cpu.set_attention_tp_size(1)
    kv = {"fp8": torch.float8_e4m3fn}.get(opts.get("kv_dtype"), torch.bfloat16)
    runner = _cpu.model_runner(sa, mc, kv_cache_dtype=kv)
    if opts.get("device_memory"):
        # A CPU machine has no device memory to run out of: allocations above the given size
        # raise what torch's CUDA allocator raises (torch.OutOfMemoryError)
        cap = int(opts["device_memory"])

        def capped(real):
            def alloc(*a, **k):
                size = a[0] if a and isinstance(a[0], int) else (a[0][0] if a and isinstance(a[0], (tuple, list)) else 0)
                if int(size) > cap:
                    raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {int(size) >> 20} MiB")
                return real(*a, **k)
            return alloc

        torch.zeros, torch.empty = capped(torch.zeros), capped(torch.empty)
    backends = []
    for _ in range(opts.get("backends", 1)):
        backends.append(fb.FlashInferAttnBackend(runner))
    b = backends[-1]
    wrapped = getattr(fb.FlashInferAttnBackend.__init__, "__flashinfer_guard__", False)
    wrappers = [w for w in _cpu.RecordingWrapper.made]
    return {
        "workspace_bytes": int(b.workspace_buffer.numel() * b.workspace_buffer.element_size()),
        "wrappers_share_buffer": all(w.float_workspace_buffer is b.workspace_buffer for w in wrappers[-3:]),
        "n_wrappers": len(wrappers),
        "decode_use_tensor_cores": bool(b.decode_use_tensor_cores),
        "init_wrapped": bool(wrapped),
        "init_wrapped_twice": bool(getattr(getattr(fb.FlashInferAttnBackend.__init__, "__wrapped__", None),
                                           "__flashinfer_guard__", False)),
        "env_after": os.environ.get("SGLANG_FLASHINFER_WORKSPACE_SIZE"),
        "gpu_sms": gpu.num_sms,
    }


def need(model_shape, opts):
    """The core's number for the same inputs (what the test compares against)."""
    from guard_core.gpus import lookup_gpu
    from guard_core.flashinfer.sizing import AttentionLayout, Planners, ServingLimits, compute_requirement
    from guard_core.versions import flashinfer_version

    q, kv, hd = model_shape
    req = compute_requirement(AttentionLayout(q, kv, hd), ServingLimits(
        capture_sizes=tuple(SEED_CAPTURE), max_num_seqs=4096, max_num_batched_tokens=16384), lookup_gpu(opts.get("gpu", "h200")),
        flashinfer_version(), Planners("fa2", "fa2"), caller="sglang")
    return {"need": req.float_bytes, "dominant": req.dominant.dominant_allocation.name,
            "flashinfer": flashinfer_version()}


# ---------------------------------------------------------------- scenarios

def sc_qwen3vl(opts):
    out = load_guard()
    out.update(build_backend(QWEN3_VL_32B, opts))
    out.update(need((64, 8, 128), opts))
    return out


def sc_qwen35(opts):
    out = load_guard()
    out.update(build_backend(QWEN35_SHAPED_LLAMA, opts))
    out.update(need((32, 2, 256), opts))
    return out


def sc_twice(opts):
    """Loading twice (entry point + .pth + explicit register) and two backends."""
    out = load_guard()
    import sglang_guard.plugin as plugin

    out["register_again"] = plugin.register()
    try:
        from sglang.srt.plugins import load_plugins

        load_plugins()
    except ImportError:
        pass
    opts = dict(opts, backends=2)
    out.update(build_backend(QWEN3_VL_32B, opts))
    return out


def sc_hook_raises(opts):
    """Our sizing raises inside the hook: SGLang must build its own buffer."""
    out = load_guard()
    import guard_core.flashinfer.sizing as sizing

    def boom(*a, **k):
        raise RuntimeError("injected fault")

    sizing.compute_requirement = boom
    out.update(build_backend(QWEN3_VL_32B, opts))
    return out


def sc_missing_targets(opts):
    """Targets gone (other SGLang versions): nothing patched, nothing raised."""
    import types

    out = load_guard()
    setup_logging()
    from sglang_guard import moe, workspace

    workspace.on_backend_module(types.ModuleType("sglang.srt.layers.attention.flashinfer_backend"))
    moe.on_moe_utils_module(types.ModuleType("sglang.srt.layers.moe.utils"))
    moe.on_server_args_module(types.ModuleType("sglang.srt.server_args"))
    broken = types.ModuleType("x")
    broken.FlashInferAttnBackend = type("FlashInferAttnBackend", (), {})  # no envs field
    workspace.on_backend_module(broken)
    out["patched_broken"] = hasattr(broken.FlashInferAttnBackend.__init__, "__flashinfer_guard__")
    return out


def sc_spawn_child(opts):
    """SGLang starts schedulers with spawn: is the guard active in such a child?"""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    import queue

    res = None
    while res is None and (p.is_alive() or not q.empty()):
        try:
            res = q.get(timeout=5)
        except queue.Empty:
            pass
    p.join(60)
    if res is None:
        raise SystemExit(f"spawned child died (exit code {p.exitcode})")
    return {"child": res, "parent_has_sglang": "sglang" in sys.modules}


def _child(q):
    # What run_scheduler_process does first on 0.5.11+: load_plugins(); on older
    # lines nothing - the .pth bootstrap ran when this interpreter started.
    _cpu.install_cuda_only_stand_ins()
    out = load_guard()
    fb = _cpu.import_backend_module()
    out["init_wrapped"] = bool(getattr(fb.FlashInferAttnBackend.__init__, "__flashinfer_guard__", False))
    out["pid"] = os.getpid()
    q.put(out)


def fake_machine(machine):
    """platform.machine() answers ``machine`` from now on. Libraries that pick a bundled
    native library by architecture at import (soundfile, through transformers) are
    imported first, so only the architecture checks see the fake."""
    import platform

    try:
        import transformers.audio_utils  # noqa: F401
        import transformers.processing_utils  # noqa: F401
    except Exception:
        pass
    platform.machine = lambda: machine


GPU_NAMES = {(10, 0): "NVIDIA B200", (10, 3): "NVIDIA B300", (12, 0): "NVIDIA RTX PRO 6000 Blackwell",
             (9, 0): "NVIDIA H100 80GB HBM3"}


def fake_moe_inputs(opts):
    """What flashinfer-guard's MoE decision reads, simulated: the GPU (``cc``: "10.0", its
    seam guard_core.gpus.detect_gpu) and the FlashInfer release (``fi``:
    guard_core.versions.flashinfer_version). SGLang's own code sees neither."""
    cc = opts.get("cc")
    if cc:
        import guard_core.gpus as gpus

        major, minor = (int(x) for x in cc.split("."))
        gpu = gpus.Gpu(GPU_NAMES.get((major, minor), "NVIDIA GPU"), 148, (major, minor))
        gpus.detect_gpu = lambda device=None: gpu
    fi = opts.get("fi")
    if fi:
        import guard_core.versions as gv

        gv.flashinfer_version = lambda: fi


def autotune_skip_ops():
    """What this SGLang's FlashInfer autotune would skip (its own
    get_flashinfer_autotune_skip_ops, 0.5.23), or "absent"."""
    try:
        from sglang.srt.model_executor.runner.flashinfer_autotune import get_flashinfer_autotune_skip_ops
    except Exception as exc:
        return f"absent ({type(exc).__name__})"
    return sorted(get_flashinfer_autotune_skip_ops(None))


def _sm100(monkey_machine):
    """aarch64 (platform.machine) and an SM100 GPU as SGLang's server_args sees it."""
    import sglang.srt.server_args as sam

    fake_machine(monkey_machine)
    mods = [sam]
    try:  # 0.5.15: the model rules (DeepSeek FP8 -> flashinfer_trtllm on SM100) live here
        import sglang.srt.arg_groups.overrides as ovr

        mods.append(ovr)
    except ImportError:
        pass
    for mod in mods:
        for name in ("is_sm100_supported", "is_cuda"):
            if hasattr(mod, name):
                setattr(mod, name, lambda *a, **k: True)
    return sam


def sc_moe_server_args(opts):
    fake_moe_inputs(opts)
    out = load_guard()
    setup_logging()
    _sm100(opts.get("machine", "aarch64"))
    tmp = tempfile.mkdtemp()
    kw = {"attention_backend": "triton"}
    if opts.get("explicit"):
        kw["moe_runner_backend"] = "flashinfer_trtllm"
    sa = server_args(_cpu.write_model(tmp, "ds", DEEPSEEK_V3_FP8), **kw)
    out["moe_runner_backend"] = sa.moe_runner_backend
    out["speculative_moe_runner_backend"] = sa.speculative_moe_runner_backend
    out["quantization"] = sa.quantization
    return out


def sc_moe_runtime(opts):
    """initialize_moe_config in a scheduler: NVFP4 auto (or an explicit backend)."""
    fake_moe_inputs(opts)
    out = load_guard()
    setup_logging()
    from sglang.srt.layers.moe import utils as mu

    import sglang.srt.server_args as sam

    fake_machine(opts.get("machine", "aarch64"))

    quant, backend = opts.get("quantization", "modelopt_fp4"), opts.get("backend", "auto")
    import inspect

    if inspect.signature(mu.initialize_moe_config).parameters:  # (server_args): <= 0.5.21
        import dataclasses

        base = sam.ServerArgs.__new__(sam.ServerArgs)  # every field at its default, no resolution
        for f in dataclasses.fields(sam.ServerArgs):
            if f.default is not dataclasses.MISSING:
                object.__setattr__(base, f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                object.__setattr__(base, f.name, f.default_factory())
        base.quantization = quant
        base.moe_runner_backend = backend
        base.model_path = "unused"
        mu.initialize_moe_config(base)
    else:  # reads the process runtime context, as a scheduler fills it from real ServerArgs
        sa = server_args(_cpu.write_model(tempfile.mkdtemp(), "m", QWEN35_SHAPED_LLAMA),
                         attention_backend="triton", moe_runner_backend=backend, quantization=quant)
        _cpu.runtime_context(sa)
        mu.initialize_moe_config()
    out["runner_backend"] = mu.get_moe_runner_backend().value
    spec = getattr(mu, "get_speculative_moe_runner_backend", None)
    out["speculative_runner_backend"] = spec().value if spec else None
    out["skip_ops"] = autotune_skip_ops()
    return out


def sc_no_sglang(opts):
    """A Python process of this environment that never imports SGLang."""
    import json as _j  # noqa: F401

    return {
        "sglang_imported": "sglang" in sys.modules,
        "guard_modules": sorted(m for m in sys.modules if m.startswith(("sglang_guard", "guard_core"))),
        "heavy": sorted(m for m in ("torch", "flashinfer", "sglang") if m in sys.modules),
        "watchers": [type(f).__name__ for f in sys.meta_path if "Watcher" in type(f).__name__
                     or "PostImport" in type(f).__name__],
    }


def main():
    name = sys.argv[1]
    opts = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    if name != "no_sglang":
        _cpu.install_cuda_only_stand_ins()
    result = globals()["sc_" + name](opts)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
