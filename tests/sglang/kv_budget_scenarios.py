"""SGLang's own KV sizing and its FlashInfer backend on a CPU ledger of device memory (issue 28).

    python kv_budget_scenarios.py NAME [JSON-OPTIONS]

One scenario per process (forked from a warm interpreter, tests/common/forkserver.py);
prints ``RESULT <json>`` as its last stdout line.

What runs for real: SGLang's KV budget function of the installed line
(0.5.2x ``KVCacheConfigurator._profile_available_bytes`` and ``config_from_budget``,
0.5.11 ``ModelRunnerKVCacheMixin._profile_available_bytes`` and its pool configurator,
0.5.5 ``ModelRunner.profile_max_num_token``), SGLang's ``get_available_gpu_memory``,
SGLang's ``FlashInferAttnBackend.__init__`` (which allocates the workspace), and the
guard loaded through SGLang's own route (scenarios.load_guard).

Stand-ins, because a CPU has no device memory (each listed in ``STAND_INS``):

* ``DeviceLedger``: the device's memory. Every tensor made with ``device="cuda"``
  (a TorchFunctionMode over torch's factory functions) is made in host memory and
  charged to the ledger; its finalizer credits it back; a charge above the free
  bytes raises what torch's CUDA caching allocator raises (``torch.OutOfMemoryError``,
  "CUDA out of memory. Tried to allocate ...").
* ``torch.cuda.mem_get_info``, ``device_count``, ``current_device``, ``empty_cache``,
  ``get_device_properties`` (0.5.2x reads ``is_integrated``) and SGLang's
  ``get_device_sm`` (0.5.5) answer from the ledger / the table GPU.
* the weights and the KV pool are ledger charges, not host tensors (tens of GB):
  ``DeviceLedger.hold`` stands in for ``ModelRunner.load_model`` and the pool's
  ``torch.zeros`` (its size is SGLang's own token count x SGLang's own cell size).
* the world group (one rank, no collective) and what _cpu.py replaces for every SGLang
  scenario (sgl_kernel, FlashInfer's wrapper classes, the model runner as a namespace
  built from a real ServerArgs and ModelConfig, the attention-TP size).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import types
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _cpu  # noqa: E402
import realcalls_scenarios as rs  # noqa: E402
import scenarios as sc  # noqa: E402

MIB = 1 << 20
GIB = 1 << 30
STAND_INS = ("DeviceLedger (device memory)", "torch.cuda.mem_get_info/device_count/current_device/empty_cache/"
             "get_device_properties", "sglang get_device_sm (0.5.5)", "weights and KV pool as ledger holds",
             "world group (one rank)", "_cpu.py: sgl_kernel, FlashInfer wrapper classes, model runner namespace, "
             "attention-TP size", "guard_core.gpus.detect_gpu (table GPU)")

# deployments: (model config, weights in bytes per GPU, gpu)
DEPLOYMENTS = {
    # the seed: Qwen3-VL-32B on one H200 (64 q / 8 kv heads, head_dim 128, 64 layers); ~66.8 GB of BF16 weights
    "qwen3vl-h200": (sc.QWEN3_VL_32B, 66_800_000_000, "h200"),
    # Qwen3.5's full-attention shape (32 q / 2 kv, head_dim 256), 2 layers; 20 GB of weights
    "qwen35-h200": (sc.QWEN35_SHAPED_LLAMA, 20_000_000_000, "h200"),
}


class DeviceLedger:
    """Stand-in for the GPU's memory: bytes in use, every charge and credit in order."""

    def __init__(self, total: int):
        self.total = int(total)
        self.used = 0
        self.events: list = []  # (what, label, bytes)
        self.largest_live_buffers: list = []

    def free(self) -> int:
        return self.total - self.used

    def charge(self, n: int, label: str):
        import torch

        if n > self.free():
            self.events.append(("oom", label, n))
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {n / MIB:.2f} MiB. GPU 0 has a total capacity of "
                f"{self.total / GIB:.2f} GiB of which {self.free() / MIB:.2f} MiB is free. (CPU ledger stand-in)")
        self.used += n
        self.events.append(("alloc", label, n))

    def credit(self, n: int, label: str):
        self.used -= n
        self.events.append(("free", label, n))

    def hold(self, n: int, label: str):
        self.charge(int(n), label)

    def measured(self, label):
        self.events.append(("measure", label, self.free()))


_FACTORIES = ("empty", "zeros", "ones", "full", "empty_like", "zeros_like", "ones_like", "full_like", "arange",
              "tensor", "randn", "rand", "randint", "empty_strided", "as_tensor")


def install_ledger(ledger: DeviceLedger, gpu):
    """device="cuda" tensors made in host memory and charged to ``ledger``; torch.cuda's
    memory queries answered from it."""
    import torch
    from torch.overrides import TorchFunctionMode

    factories = {getattr(torch, n) for n in _FACTORIES if hasattr(torch, n)}

    def is_cuda(dev):
        try:
            return dev is not None and torch.device(dev).type == "cuda"
        except Exception:
            return False

    def label_of():
        f = sys._getframe(2)
        for _ in range(6):
            if f is None:
                break
            name = f.f_code.co_filename
            if "site-packages" in name or "sglang_guard" in name:
                return f"{os.path.basename(name)}:{f.f_lineno} {f.f_code.co_name}"
            f = f.f_back
        return "?"

    class Mode(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            on_device = False
            if is_cuda(kwargs.get("device")):
                kwargs["device"] = "cpu"
                on_device = func in factories
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.to:
                args = tuple("cpu" if (isinstance(a, (str, torch.device)) and is_cuda(a)) else a for a in args)
            out = func(*args, **kwargs)
            if on_device and isinstance(out, torch.Tensor):
                n = out.untyped_storage().nbytes()
                label = label_of()
                ledger.charge(n, label)  # raises the allocator's OOM; ``out`` is dropped
                weakref.finalize(out, ledger.credit, n, label)
            return out

    mode = Mode()
    mode.__enter__()

    props = types.SimpleNamespace(total_memory=ledger.total, is_integrated=False, multi_processor_count=gpu.num_sms,
                                  major=gpu.cc[0], minor=gpu.cc[1], name=f"{gpu.name} (CPU ledger stand-in)")

    def mem_get_info(device=None):
        ledger.measured("torch.cuda.mem_get_info")
        return ledger.free(), ledger.total

    torch.cuda.mem_get_info = mem_get_info
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.empty_cache = lambda: None
    torch.cuda.get_device_properties = lambda *a, **k: props
    torch.cuda.is_available = lambda: True
    import sglang.srt.utils.common as common

    if hasattr(common, "get_device_sm"):
        common.get_device_sm = lambda: gpu.cc[0] * 10 + gpu.cc[1]
    return mode


def _world_one_rank(module):
    one = types.SimpleNamespace(world_size=1, cpu_group=None, rank=0, rank_in_group=0)
    if hasattr(module, "get_world_group"):
        module.get_world_group = lambda: one


# ---------------------------------------------------------------- SGLang's own sizing, per line

def _size_kv(runner, pre_gib: float, opts) -> dict:
    """SGLang's budget function of this line, then its token count: {"budget_bytes", "tokens", "cell"}."""
    try:
        from sglang.srt.mem_cache import kv_cache_configurator as kcc  # 0.5.2x
    except ImportError:
        kcc = None
    if kcc is not None and hasattr(kcc, "KVCacheConfigurator"):
        return _size_configurator(kcc, runner, pre_gib, opts)
    try:
        from sglang.srt.model_executor import model_runner_kv_cache_mixin as mix  # 0.5.11
    except ImportError:
        mix = None
    if mix is not None:
        return _size_mixin(mix, runner, pre_gib)
    return _size_profile_tokens(runner, pre_gib)


def _size_configurator(kcc, runner, pre_gib, opts):
    """0.5.2x: a KVCacheConfigurator as ModelRunner.init_kv_cache_configurator builds it
    (model_runner.py:650-688), fields that need a loaded model or a process group from the namespace."""
    import dataclasses

    from sglang.srt.model_executor import pool_configurator as pc
    from sglang.srt.runtime_context import get_parallel

    # the WORLD group SGLang builds with torch.distributed: one rank, no collective (stand-in)
    get_parallel().override_permanently(world_group=types.SimpleNamespace(world_size=1, cpu_group=None))

    kvc = object.__new__(kcc.KVCacheConfigurator)
    fields = {f.name for f in dataclasses.fields(kcc.KVCacheConfigurator)}
    for name in fields:
        if hasattr(runner, name):
            object.__setattr__(kvc, name, getattr(runner, name))
    for name, value in dict(post_capture_kv_active=bool(opts.get("post_capture")), mambaish_config=None,
                            hybrid_gdn_config=None, hybrid_kda_config=None, is_hybrid_swa=False,
                            is_hybrid_swa_compress=False, use_mla_backend=False, pp_size=1, attn_dp_size=1,
                            model_dtype=runner.dtype, kv_shard_rank=None, kv_shard_size=1, kv_shard_spec=None,
                            kv_shard_group=None, is_hybrid_swa_mtp_draft=False, draft_swa_full_capacity=False,
                            draft_parallel_layout=None, dflash_draft_cell_size_per_token=None,
                            layer_info=runner.layer_info, spec_algorithm=runner.spec_algorithm,
                            kv_cache_dtype_str="auto", extra_mamba_cache_bytes_per_req=0,
                            draft_model_idx=None, memory_pool_config=None).items():
        object.__setattr__(kvc, name, value)
    budget = kvc._profile_available_bytes(pre_gib)
    config = kvc.config_from_budget(budget)
    cell = pc.create_memory_pool_configurator(kvc)._cell_size
    return {"budget_bytes": int(budget), "tokens": int(config.max_total_num_tokens), "cell": int(cell),
            "kv_bytes": int(config.max_total_num_tokens) * int(cell), "sizer": "KVCacheConfigurator"}


def _size_mixin(mix, runner, pre_gib):
    from sglang.srt.model_executor import model_runner as mr
    from sglang.srt.model_executor import pool_configurator as pc

    _world_one_rank(mix)
    budget = mr.ModelRunner._profile_available_bytes(runner, pre_gib)
    cfg = pc.create_memory_pool_configurator(runner)
    sizes = cfg.calculate_pool_sizes(budget, runner.page_size)
    cell = cfg._cell_size
    return {"budget_bytes": int(budget), "tokens": int(sizes.max_total_num_tokens), "cell": int(cell),
            "kv_bytes": int(sizes.max_total_num_tokens) * int(cell), "sizer": "ModelRunner._profile_available_bytes"}


def _size_profile_tokens(runner, pre_gib):
    from sglang.srt.model_executor import model_runner as mr

    _world_one_rank(mr)
    tokens = mr.ModelRunner.profile_max_num_token(runner, pre_gib)
    # SGLang 0.5.5's own cell size (model_runner.py:1310-1316), the same expression
    cell = runner.model_config.get_num_kv_heads(1) * runner.model_config.head_dim * runner.num_effective_layers * 2 * 2
    return {"budget_bytes": None, "tokens": int(tokens), "cell": int(cell), "kv_bytes": int(tokens) * int(cell),
            "sizer": "ModelRunner.profile_max_num_token"}


# ---------------------------------------------------------------- the scenario

def sc_start(opts):
    """A process of one SGLang scheduler on the ledger: weights, SGLang's KV sizing, the
    KV pool, then SGLang's FlashInferAttnBackend (the workspace). Options: deployment,
    mem_fraction_static or slack_mib (slack = pre-load free x (1 - mfs)), post_capture; a generated
    deployment gives model (a config.json dict), weights (bytes) and gpu (a table name) instead."""
    import torch
    from sglang.srt.configs.model_config import ModelConfig

    from guard_core.deployment.server_defaults import GPU_MEMORY

    out = sc.load_guard()
    import sglang_guard

    out["guard_from"] = os.path.dirname(sglang_guard.__file__)
    model, weights, gpu_name = DEPLOYMENTS[opts.get("deployment", "qwen3vl-h200")]
    # a generated deployment (test_kv_budget's sample): its own model config, weights and GPU
    model, weights, gpu_name = opts.get("model", model), int(opts.get("weights", weights)), opts.get("gpu", gpu_name)
    gpu = _cpu.use_table_gpu(gpu_name)
    ledger = DeviceLedger(GPU_MEMORY[gpu_name][0])
    pre_free = ledger.total - int(opts.get("context_bytes", 512 * MIB))
    pre_gib = pre_free / GIB
    if "slack_mib" in opts:
        mfs = 1 - (opts["slack_mib"] * MIB) / pre_free
    else:
        mfs = float(opts.get("mem_fraction_static", 0.88))
    tmp = tempfile.mkdtemp()
    out["model_path"] = _cpu.write_model(tmp, "model", model)  # `plan` reads the same deployment (test)
    sa = sc.gpu_resolved(sc.server_args(out["model_path"], mem_fraction_static=mfs, page_size=1,
                                        **opts.get("server_args", {})))
    sc.setup_logging(sa)
    mc = ModelConfig.from_server_args(sa)
    fb = _cpu.import_backend_module()
    _cpu.replace_flashinfer_wrappers(fb)
    _cpu.set_attention_tp_size(1)
    runner = _cpu.model_runner(sa, mc, kv_cache_dtype=torch.bfloat16)
    rs._gpu_graph_config(512)
    _enrich_runner(runner, sa, mc, mfs)
    runner.device = "cuda"
    install_ledger(ledger, gpu)  # from here on, device="cuda" is the ledger
    ledger.hold(ledger.total - pre_free, "CUDA context and NCCL (stand-in)")
    ledger.hold(weights, "weights (ModelRunner.load_model stand-in)")
    out["mem_fraction_static"] = mfs
    out["pre_free"] = pre_free
    out["weights"] = weights
    out["slack_bytes"] = pre_free * (1 - mfs)
    if opts.get("break"):  # fail-open check: the guard's budget code raises
        from sglang_guard import kv_reserve as _kr

        def _injected(*a, **k):
            raise RuntimeError("injected failure (test)")

        _kr._server_bytes = _injected
    kv = _size_kv(runner, pre_gib, opts)
    out.update(kv)
    runner.max_total_num_tokens = kv["tokens"]
    ledger.hold(kv["kv_bytes"], "KV pool (init_memory_pool stand-in)")
    try:
        from sglang_guard import kv_reserve

        res = kv_reserve.reservation()
    except ImportError:  # a guard without issue 28 (today's main)
        res = None
    out["reservation"] = None if res is None else {
        "mode": res.move.mode, "buffer": res.move.buffer_bytes, "server": res.move.server_bytes,
        "charge": res.move.charge, "per_token": res.per_token_bytes, "line": res.line,
        "buffer_id": id(res.buffer) if res.buffer is not None else None}
    out["oom"] = None
    try:
        backend = fb.FlashInferAttnBackend(runner)
    except torch.OutOfMemoryError as exc:
        out["oom"] = str(exc).splitlines()[0]
        backend = None
    if backend is not None:
        buf = backend.workspace_buffer
        out["workspace_bytes"] = buf.untyped_storage().nbytes()
        out["workspace_is_reserved"] = res is not None and res.buffer is not None and buf is res.buffer
        out["wrappers_plan_in_it"] = all(w.float_workspace_buffer is buf for w in _cpu.RecordingWrapper.made)
    out["events"] = [(w, lbl, n) for (w, lbl, n) in ledger.events]
    out["workspace_allocs"] = [n for (w, lbl, n) in ledger.events if w in ("alloc", "oom") and n >= 64 * MIB
                               and "hold" not in lbl and "stand-in" not in lbl]
    out["free_after"] = ledger.free()
    out["stand_ins"] = list(STAND_INS)
    return out


def _enrich_runner(runner, sa, mc, mfs):
    """The fields SGLang's sizing reads from a ModelRunner, as its __init__ sets them."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    n_layers = int(mc.num_hidden_layers)
    runner.mem_fraction_static = mfs
    runner.num_effective_layers = n_layers
    runner.start_layer, runner.end_layer = 0, n_layers
    runner.use_mla_backend = False
    runner.mambaish_config = None
    runner.is_hybrid_swa = False
    runner.is_hybrid_swa_compress = False
    runner.spec_algorithm = SpeculativeAlgorithm.NONE
    runner.dp_size = 1
    runner.pp_size = 1
    runner.kv_cache_dtype_str = "auto"
    runner.layer_info = types.SimpleNamespace(num_effective_layers=n_layers, start_layer=0, end_layer=n_layers,
                                              is_hybrid_swa_mtp_draft=False, swa_attention_layer_ids=[],
                                              full_attention_layer_ids=list(range(n_layers)))


def main():
    name = sys.argv[1]
    opts = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    _cpu.install_cuda_only_stand_ins()
    result = globals()["sc_" + name](opts)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
