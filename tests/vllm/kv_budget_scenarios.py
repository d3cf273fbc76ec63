"""vLLM's own memory profiling and KV sizing on a CPU ledger (issue 28).

    python tests/vllm/kv_budget_scenarios.py CASE [--util U] [--no-plugins] [--kv-cache-memory BYTES]

Prints one ``RESULT: {json}``. vLLM's own code that runs: ``Worker.determine_available_memory``
(the real method of the real ``Worker`` class, with the guard's wrapper when the plugin is
loaded), ``memory_profiling`` and ``MemorySnapshot`` (``utils/mem_utils.py``),
``request_memory``, ``get_kv_cache_configs`` (the KV sizing the engine core runs), the real
``FlashInferMetadataBuilder`` and its ``_get_workspace_buffer``, vLLM's plugin loader.

Stand-ins, named (nothing else is faked):

- **the device is torch's ``meta`` device**: tensors have sizes and no storage, so
  a 2 GiB workspace costs nothing on this host;
- **the ledger** (``Ledger``) stands in for the device's memory and torch's
  caching allocator: ``torch.accelerator.get_memory_info`` / ``memory_stats`` /
  ``memory_reserved`` / ``memory_allocated`` / ``reset_peak_memory_stats`` /
  ``empty_cache`` / ``synchronize``, ``torch.cuda.mem_get_info`` /
  ``max_memory_allocated`` and the platform's ``mem_get_info`` answer from it;
  every ``torch.zeros`` / ``torch.empty`` on the stand-in device is booked on it
  (freed when the tensor dies) and fails with ``torch.OutOfMemoryError`` (what the
  CUDA caching allocator raises) when it does not fit;
- **the model**: weights and the profile run's activation peak are ledger
  entries (``StandinRunner``: ``model_memory_usage``, ``profile_run``,
  ``get_kv_cache_spec``); the model's real attention layers (vLLM ``Attention``
  with the FlashInfer backend) are built, so the KV specs and the builder are vLLM's;
- **the worker object**: the real ``Worker`` class, created without ``__init__``
  (which needs CUDA), its fields set as ``init_device`` sets them
  (``init_snapshot`` measured on the ledger, ``requested_memory`` from vLLM's own
  ``request_memory``);
- **GPU properties** (SM count, compute capability) through flashinfer-guard's seam
  ``guard_core.gpus.detect_gpu``, as in tests/vllm/scenarios.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cpu_host import no_pinned_memory  # noqa: E402

MIB, GIB = 1 << 20, 1 << 30
DEVICE = "meta"

# name -> (shape, GPU (name, SMs, cc), total device bytes, weights, activation peak, scheduler, layers)
QWEN35 = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
    "num_hidden_layers": 15, "intermediate_size": 8192, "vocab_size": 151936,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6, "rope_theta": 10000000,
}
# The seeds: Qwen3.5-397B-A17B's full-attention layers per rank (15 of 60 layers; 32 q / 2 KV heads at
# TP8 as in guard_core's preset), as a dense config vLLM can parse.
CASES = {
    # vLLM seed line (FlashInfer 0.6.12): the guard raises 394 MiB to the capture-512 need
    "seed-h200": dict(shape=QWEN35, gpu=("NVIDIA H200", 132, (9, 0)), total=141 * GIB, weights=48 * GIB,
                      activation=2 * GIB, max_num_seqs=512, mbt=8192, capture=512),
    # vLLM 0.33 / B300 (FlashInfer 0.7.2.post1): exact gives back vLLM's 2 GiB heuristic minus the need
    "seed-b300": dict(shape=QWEN35, gpu=("NVIDIA B300", 160, (10, 3)), total=268 * GIB, weights=96 * GIB,
                      activation=4 * GIB, max_num_seqs=1024, mbt=16384, capture=1024),
}


class Ledger:
    """Stands in for the device's memory and torch's caching allocator (see the module docstring)."""

    def __init__(self, total: int):
        self.total = int(total)
        self.used = 0
        self.peak = 0
        self.events: list[tuple[str, str, int]] = []  # (what, name, bytes) in order
        self.label = None  # names the scenario's own allocations (the KV cache)

    def book(self, n: int, name: str) -> None:
        import torch

        n = int(n)
        if self.used + n > self.total:
            free = self.total - self.used
            self.events.append(("oom", name, n))
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {n / MIB:.2f} MiB. GPU 0 has a total capacity of "
                f"{self.total / GIB:.2f} GiB of which {free / MIB:.2f} MiB is free. (ledger stand-in)")
        self.used += n
        self.peak = max(self.peak, self.used)
        self.events.append(("alloc", name, n))

    def release(self, n: int, name: str) -> None:
        self.used -= int(n)
        self.events.append(("free", name, int(n)))

    def hold(self, n: int, name: str):
        """A ledger entry without a tensor (weights, activations): released by ``.free()``."""
        self.book(n, name)
        led = self

        class _Held:
            def free(self):
                led.release(n, name)

        return _Held()

    # torch.accelerator / torch.cuda answers
    def stats(self, *a, **k):
        return {"allocated_bytes.all.peak": self.peak, "allocated_bytes.all.current": self.used}

    def info(self, *a, **k):
        return (self.total - self.used, self.total)


_caller_names = {"_get_workspace_buffer": "vLLM _get_workspace_buffer", "_allocate": "guard reservation"}


def _caller() -> str:
    f = sys._getframe(2)
    for _ in range(6):
        if f is None:
            break
        name = _caller_names.get(f.f_code.co_name)
        if name:
            return name
        f = f.f_back
    return "other"


def install_ledger(ledger: Ledger) -> None:
    import torch

    acc = torch.accelerator
    acc.memory_stats = ledger.stats
    acc.get_memory_info = ledger.info
    acc.memory_reserved = lambda *a, **k: ledger.used
    acc.memory_allocated = lambda *a, **k: ledger.used
    acc.reset_peak_memory_stats = lambda *a, **k: setattr(ledger, "peak", ledger.used)
    acc.empty_cache = lambda *a, **k: None
    acc.synchronize = lambda *a, **k: None
    torch.cuda.mem_get_info = ledger.info
    torch.cuda.max_memory_allocated = lambda *a, **k: ledger.peak
    torch.cuda.memory_stats = ledger.stats
    torch.cuda.reset_peak_memory_stats = lambda *a, **k: setattr(ledger, "peak", ledger.used)
    torch.cuda.empty_cache = lambda *a, **k: None
    from vllm.platforms import current_platform

    cls = type(current_platform)
    cls.mem_get_info = classmethod(lambda c, *a, **k: ledger.info())
    cls.is_integrated_gpu = classmethod(lambda c, *a, **k: False)
    cls.current_device = classmethod(lambda c: 0)

    inside = [0]

    def booked(real):
        def alloc(*a, **k):
            inside[0] += 1  # torch.zeros on meta calls torch.empty: booked once
            try:
                t = real(*a, **k)
            finally:
                inside[0] -= 1
            if t.device.type == DEVICE and not inside[0]:
                n = t.numel() * t.element_size()
                if n >= MIB:
                    name = _caller()
                    if name == "other" and ledger.label:
                        name = ledger.label
                    ledger.book(n, name)
                    weakref.finalize(t, ledger.release, n, name)
            return t

        return alloc

    torch.zeros, torch.empty = booked(torch.zeros), booked(torch.empty)


class StandinRunner:
    """The model runner's memory behaviour (a stand-in, see the module docstring)."""

    def __init__(self, ledger: Ledger, weights: int, activation: int, specs: dict):
        self.ledger, self.activation, self.specs, self.weight_bytes = ledger, activation, specs, weights
        self.model_memory_usage = 0
        self.profiled = 0

    def load_model(self):  # after the worker's init snapshot, as in Worker.load_model
        self.weights = self.ledger.hold(self.weight_bytes, "weights")
        self.model_memory_usage = self.weight_bytes

    def profile_run(self, *a, **k):
        self.profiled += 1
        act = self.ledger.hold(self.activation, "profile activations")
        act.free()

    def get_kv_cache_spec(self):
        return dict(self.specs)


def build(case: dict, util: float, kv_cache_memory: int | None, v2: bool):
    import torch
    from vllm.config import (CacheConfig, CompilationConfig, DeviceConfig, ModelConfig, SchedulerConfig,
                             VllmConfig, set_current_vllm_config)
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend
    from vllm.v1.kv_cache_interface import FullAttentionSpec

    try:
        from vllm.model_executor.layers.attention import Attention
    except ImportError:
        from vllm.attention.layer import Attention
    from scenarios import model_dir

    cfg = case["shape"]
    heads, kvh, hd, n = (cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"],
                         cfg["num_hidden_layers"])
    mc = ModelConfig(model=model_dir(cfg), skip_tokenizer_init=True, max_model_len=32768)
    cc = CacheConfig(gpu_memory_utilization=util, block_size=16)
    if kv_cache_memory:
        cc.kv_cache_memory_bytes = kv_cache_memory
    vc = VllmConfig(
        model_config=mc, cache_config=cc,
        scheduler_config=SchedulerConfig(max_num_seqs=case["max_num_seqs"], max_num_batched_tokens=case["mbt"],
                                         max_model_len=32768, is_encoder_decoder=False),
        device_config=DeviceConfig(device="cpu"),
        compilation_config=CompilationConfig(cudagraph_mode="FULL_AND_PIECEWISE",
                                             max_cudagraph_capture_size=case["capture"]),
    )
    specs = {}
    with set_current_vllm_config(vc):
        for i in range(n):
            layer = Attention(num_heads=heads, head_size=hd, scale=hd ** -0.5, num_kv_heads=kvh,
                              attn_backend=FlashInferBackend, prefix=f"model.layers.{i}.self_attn.attn")
            specs[layer.layer_name] = FullAttentionSpec(block_size=16, num_kv_heads=kvh, head_size=hd,
                                                        dtype=torch.bfloat16)
    return vc, specs


def make_worker(vc, runner, ledger: Ledger, v2: bool):
    """The real Worker class, its fields as ``init_device`` sets them (the snapshot on the ledger)."""
    from vllm.utils.mem_utils import MemorySnapshot
    from vllm.v1.worker import gpu_worker
    from vllm.v1.worker.utils import request_memory

    w = gpu_worker.Worker.__new__(gpu_worker.Worker)
    w.vllm_config = vc
    for name in ("cache_config", "model_config", "parallel_config", "scheduler_config", "compilation_config",
                 "device_config", "speculative_config", "lora_config", "load_config"):
        if hasattr(vc, name):
            setattr(w, name, getattr(vc, name))
    w.device = _device()
    w.rank = w.local_rank = 0
    w.randomize_dummy_inputs = False
    w.use_v2_model_runner = v2
    w.init_snapshot = MemorySnapshot(device=w.device)
    w.requested_memory = request_memory(w.init_snapshot, vc.cache_config)
    w.model_runner = runner
    return w


def _device():
    import torch

    return torch.device(DEVICE)


def kv_sizing(vc, specs, available: int):
    """vLLM's own KV sizing (the engine core's ``get_kv_cache_configs``): blocks and tokens."""
    from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

    cfg = get_kv_cache_configs(vc, [specs], [int(available)])[0]
    block = next(iter(specs.values())).block_size
    return cfg, int(cfg.num_blocks), int(cfg.num_blocks) * block


def run(args) -> dict:
    import importlib.metadata as md

    import torch
    from scenarios import fake_gpu

    case = CASES[args.case]
    fake_gpu(case["gpu"])
    if not args.no_plugins:
        from vllm.plugins import load_general_plugins

        load_general_plugins()
    from scenarios import allow_static_graphs, cpu_only_impl_buffers

    allow_static_graphs()
    no_pinned_memory()
    ledger = Ledger(case["total"])
    install_ledger(ledger)
    cpu_only_impl_buffers()
    vc, specs = build(case, args.util, args.kv_cache_memory, args.v2)
    runner = StandinRunner(ledger, case["weights"], case["activation"], specs)
    worker = make_worker(vc, runner, ledger, args.v2)
    runner.load_model()
    n0 = len(ledger.events)
    out: dict = dict(vllm=md.version("vllm"), flashinfer=md.version("flashinfer-python"), util=args.util,
                     total=ledger.total)
    import vllm.v1.worker.gpu_worker as gw

    meth = gw.Worker.__dict__["determine_available_memory"]
    out["hooked"] = bool(getattr(meth, "__flashinfer_guard__", False))
    available = worker.determine_available_memory()
    out["available"] = int(available)
    out["requested"] = int(worker.requested_memory)
    cfg, blocks, tokens = kv_sizing(vc, specs, available)
    out.update(kv_blocks=blocks, kv_tokens=tokens)
    page = next(iter(specs.values())).page_size_bytes
    out["per_token_bytes"] = sum(s.page_size_bytes for s in specs.values()) // 16
    # the KV cache, allocated as the runner does after sizing (one tensor per kv_cache_tensors entry)
    ledger.label = "KV cache"
    kv = [torch.zeros(int(t.size), dtype=torch.int8, device=DEVICE) for t in cfg.kv_cache_tensors]
    ledger.label = None
    out["kv_bytes"] = sum(int(t.size) for t in cfg.kv_cache_tensors)
    del page
    # the attention backend after the budget (V1: initialize_attn_backend; V2: init_attn_backend)
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder

    spec = next(iter(specs.values()))
    with set_current_vllm_config(vc):
        builder = FlashInferMetadataBuilder(spec, list(specs), vc, _device())
    try:
        buf = builder._get_workspace_buffer()  # the first planning call's allocation
        out["workspace_bytes"] = int(buf.numel() * buf.element_size())
        out["first_plan"] = "ok"
        # serving: the first forward's activations, in what is left
        act = ledger.hold(case["activation"], "serving activations")
        act.free()
        out["served"] = True
    except torch.OutOfMemoryError as exc:
        out["first_plan"] = f"OutOfMemoryError: {exc}"
        out["served"] = False
        buf = None
    try:
        from vllm_guard import kv_reserve

        r = kv_reserve.state()
    except Exception:
        r = None
    if r is not None and r.buffers:
        out["same_tensor"] = buf is r.buffers[0]
        out["reserved_bytes"] = r.buffer_bytes
        out["server_bytes"] = r.server_bytes
        out["counted_bytes"] = r.counted
        out["charge"] = r.move.charge if r.move is not None else None
    out["events"] = [(w, n, b) for w, n, b in ledger.events[n0:] if n not in ("other",)]
    out["workspace_allocs"] = [b for w, n, b in ledger.events[n0:]
                               if w == "alloc" and n in ("vLLM _get_workspace_buffer", "guard reservation")]
    out["profiled"] = runner.profiled
    del kv
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--util", type=float, default=0.9)
    p.add_argument("--no-plugins", action="store_true")
    p.add_argument("--kv-cache-memory", type=int, default=0)
    p.add_argument("--v2", action="store_true", help="the worker runs the V2 model runner (one shared buffer)")
    args = p.parse_args(argv)
    import scenarios

    scenarios.configure_vllm_logging()
    print("RESULT: " + json.dumps(run(args), default=str), flush=True)


if __name__ == "__main__":
    main()
