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
- **no network**: ``vllm.utils.flashinfer.has_nvidia_artifactory`` answers False (an
  offline host without ``flashinfer-cubin``: its real probe waits on DNS here);
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
                      activation=128 * MIB, max_num_seqs=512, mbt=8192, capture=512, server_bytes=394 * MIB),
    # vLLM 0.33 / B300 (FlashInfer 0.7.2.post1): exact gives back vLLM's 2 GiB heuristic minus the need
    "seed-b300": dict(shape=QWEN35, gpu=("NVIDIA B300", 160, (10, 3)), total=268 * GIB, weights=96 * GIB,
                      activation=128 * MIB, max_num_seqs=1024, mbt=16384, capture=1024, server_bytes=2 * GIB),
}


class Ledger:
    """Stands in for the device's memory and torch's caching allocator (see the module docstring)."""

    def __init__(self, total: int):
        self.total = int(total)
        self.used = 0
        self.peak = 0
        self.events: list[tuple[str, str, int]] = []  # (what, name, bytes) in order
        self.label = None  # names the scenario's own allocations (the KV cache)
        self.refuse = None  # fault injection: the allocation of this name fails as out of memory

    def book(self, n: int, name: str) -> None:
        import torch

        n = int(n)
        if self.used + n > self.total or name == self.refuse:
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


# "ask": the throwaway FlashInfer wrapper of the guard's workspace_size() cross-check
# (vllm_guard.workspace_facts._flashinfer_asker, FlashInfer >= 0.6.15): its constructor's 8 MiB
# int buffer, freed when the decision is made; not a second workspace
_caller_names = {"_get_workspace_buffer": "vLLM _get_workspace_buffer", "_allocate": "guard reservation",
                 "ask": "FlashInfer workspace_size() cross-check"}


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


_current: list = [None]


def install_ledger(ledger: Ledger) -> None:
    """Point torch's memory answers at ``ledger`` (the allocators are wrapped once per process)."""
    import torch

    first = _current[0] is None
    _current[0] = ledger
    if first:
        _wrap_allocators()

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



def _wrap_allocators() -> None:
    import torch

    inside = [0]

    def booked(real):
        def alloc(*a, **k):
            inside[0] += 1  # torch.zeros on meta calls torch.empty: booked once
            try:
                t = real(*a, **k)
            finally:
                inside[0] -= 1
            ledger = _current[0]
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
        self.full_graph_profile = None  # a builder factory: the profile run plans as V1 FULL graphs do
        self.profile_builder = None

    def load_model(self):  # after the worker's init snapshot, as in Worker.load_model
        self.weights = self.ledger.hold(self.weight_bytes, "weights")
        self.model_memory_usage = self.weight_bytes

    def profile_run(self, *a, **k):
        self.profiled += 1
        if self.full_graph_profile is not None:
            # V1 with FULL CUDA graphs: the profile run builds attention metadata, so the builder's
            # workspace is allocated (and kept) inside vLLM's measurement (gpu_model_runner.py
            # 0.33.0:5635-5637; the builder here is the real FlashInferMetadataBuilder)
            self.profile_builder = self.full_graph_profile()
            self.profile_builder._get_workspace_buffer()
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
    if not isinstance(getattr(type(w), "randomize_dummy_inputs", None), property):
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
    """vLLM's own KV sizing (the engine core's ``get_kv_cache_configs``, ``v1/engine/core.py``
    0.23.0 ``kv_cache_utils``, 0.33.0 ``kv_cache_planning`` with the global groups): blocks and tokens."""
    try:
        from vllm.v1.core.kv_cache_planning import get_global_kv_cache_groups, get_kv_cache_configs

        cfg = get_kv_cache_configs(vc, [specs], [int(available)], get_global_kv_cache_groups(vc, [specs]))[0]
    except ImportError:
        from vllm.v1.core.kv_cache_utils import get_kv_cache_configs

        cfg = get_kv_cache_configs(vc, [specs], [int(available)])[0]
    block = next(iter(specs.values())).block_size
    return cfg, int(cfg.num_blocks), int(cfg.num_blocks) * block


OURS = ("FLASHINFER_GUARD_RESERVE", "FLASHINFER_GUARD_WORKSPACE", "FLASHINFER_GUARD")


def setup(case_name: str) -> None:
    """Once per process: the plugin loader, the CPU host, no network."""
    from scenarios import allow_static_graphs, fake_gpu

    fake_gpu(CASES[case_name]["gpu"])
    from vllm.plugins import load_general_plugins

    load_general_plugins()  # vLLM's own loader (the guard's entry point)
    allow_static_graphs()
    no_pinned_memory()
    import vllm.utils.flashinfer as vuf

    if hasattr(vuf, "has_nvidia_artifactory"):
        vuf.has_nvidia_artifactory = lambda: False
    from scenarios import cpu_only_impl_buffers

    cpu_only_impl_buffers()


def switch(plugins: bool, env: dict) -> None:
    """The guard as a fresh process with ``env`` would have it (or absent)."""
    import vllm_guard.plugin
    from guard_core.runtime.settings import reset_settings_cache

    vllm_guard.plugin.uninstall()
    for k in [k for k in os.environ if k.startswith(OURS)]:
        del os.environ[k]
    os.environ.update(env)
    reset_settings_cache()
    if plugins:
        vllm_guard.plugin.register()


def run(args) -> dict:
    import importlib.metadata as md

    import torch
    case = dict(CASES[args.case])
    case.update(getattr(args, "override", None) or {})
    if getattr(args, "override", None):  # a generated deployment (tests/vllm/test_kv_budget.py): its GPU
        from scenarios import fake_gpu

        fake_gpu(case["gpu"])
    ledger = Ledger(case["total"])
    import logging

    said: list[str] = []  # the guard's start-up lines of this variant (vLLM's logger, as served)

    class _Said(logging.Handler):
        def emit(self, record):
            said.append(record.getMessage())

    catch = _Said()
    logging.getLogger("vllm.flashinfer_guard").addHandler(catch)
    ledger.refuse = getattr(args, "refuse", None)
    install_ledger(ledger)
    vc, specs = build(case, args.util, args.kv_cache_memory, args.v2)
    runner = StandinRunner(ledger, case["weights"], case["activation"], specs)
    try:  # 0.33: the engine core resolves the layout before memory profiling (v1/engine/core.py:286)
        from vllm.v1.attention.backends.utils import resolve_kv_cache_layout

        import inspect
        if "supported_layouts" in inspect.signature(resolve_kv_cache_layout).parameters:
            resolve_kv_cache_layout(vc, [["HND", "NHD"]], list(specs.values()))
    except ImportError:
        pass
    worker = make_worker(vc, runner, ledger, args.v2)
    runner.load_model()
    if getattr(args, "full_graph_profile", False):
        from vllm.config import set_current_vllm_config
        from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder

        def make_builder():
            with set_current_vllm_config(vc):
                return FlashInferMetadataBuilder(next(iter(specs.values())), list(specs), vc, _device())

        runner.full_graph_profile = make_builder
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
    if runner.profile_builder is not None:  # V1 FULL-graph profiling: the builder that planned in the profile
        builder = runner.profile_builder
    else:
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
    out["budget_lines"] = [m for m in said if "KV budget" in m]
    logging.getLogger("vllm.flashinfer_guard").removeHandler(catch)
    del kv
    return out


def low_util(case: dict) -> float:
    """A --gpu-memory-utilization whose slack is half vLLM's own workspace, less the profile's
    activation peak that the KV budget already leaves free (vLLM #46883's situation)."""
    return 1 - (case["server_bytes"] // 2 - case["activation"]) / case["total"]


def _generated(spec: str) -> dict:
    """``gen=GPU/Q/KV/HD/LAYERS/SEQS/CAPTURE``: a generated deployment (tests/vllm/test_kv_budget.py's
    sample): the GPU, device size and weights of the seed case named GPU, an attention shape per rank
    (q heads, KV heads, head dim, full-attention layers), max_num_seqs and the CUDA-graph capture ceiling."""
    gpu, q, kvh, hd, layers, seqs, capture = spec.split("/")
    q, kvh, hd, layers, seqs, capture = (int(x) for x in (q, kvh, hd, layers, seqs, capture))
    seed = CASES[gpu]
    shape = dict(QWEN35, num_attention_heads=q, num_key_value_heads=kvh, head_dim=hd, hidden_size=q * hd,
                 num_hidden_layers=layers)
    return dict(shape=shape, gpu=seed["gpu"], total=seed["total"], weights=seed["weights"],
                max_num_seqs=seqs, capture=capture)


def main(argv=None) -> None:
    """``CASE VARIANT...``; a variant is ``name:util:KEY=VAL,KEY=VAL`` (util ``low`` or a number;
    ``plugins=0``, ``v2=1``, ``kv=BYTES`` are the scenario's own keys, the rest environment)."""
    p = argparse.ArgumentParser()
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("variants", nargs="+")
    args = p.parse_args(argv)
    import scenarios

    scenarios.configure_vllm_logging()
    setup(args.case)
    for v in args.variants:
        name, util, *rest = v.split(":")
        kv = dict(x.split("=", 1) for x in (rest[0].split(",") if rest and rest[0] else []))
        own = {k: kv.pop(k) for k in ("plugins", "v2", "kv", "refuse", "fullprofile", "gen") if k in kv}
        switch(own.get("plugins", "1") == "1", kv)
        ns = argparse.Namespace(case=args.case, util=low_util(CASES[args.case]) if util == "low" else float(util),
                                v2=own.get("v2") == "1", kv_cache_memory=int(own.get("kv", 0)),
                                refuse={"guard": "guard reservation"}.get(own.get("refuse")),
                                full_graph_profile=own.get("fullprofile") == "1",
                                override=_generated(own["gen"]) if "gen" in own else None)
        try:
            out = run(ns)
        except Exception as exc:  # reported, the next variant runs
            out = {"error": f"{type(exc).__name__}: {exc}"}
        out["variant"] = name
        print("RESULT: " + json.dumps(out, default=str), flush=True)


if __name__ == "__main__":
    main()
