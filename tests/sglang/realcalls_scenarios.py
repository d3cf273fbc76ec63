"""SGLang's own FlashInfer attention paths on FlashInfer's REAL Python wrappers.

    python realcalls_scenarios.py NAME [JSON-OPTIONS]

One scenario per process (forked from a warm interpreter, tests/common/forkserver.py); prints ``RESULT <json>`` as its last stdout
line (like scenarios.py, whose helpers this reuses).

What runs for real: SGLang's ``FlashInferAttnBackend`` (its ``__init__`` with the
guard loaded through SGLang's own route, ``init_cuda_graph_state``,
``init_forward_metadata_capture_cuda_graph`` over the capture sizes SGLang's own
``get_batch_sizes_to_capture`` returns, largest first as SGLang captures, and
``init_forward_metadata`` for eager batches), SGLang's indices updaters and
EAGLE verify input, FlashInfer's Python wrappers (``plan()``, its backend choice
``determine_attention_backend``, tensor-core decode), and FlashInfer's planner
code itself: the installed release's ``scheduler.cuh`` compiled for the host
(tests/realcalls/standin.py), which raises FlashInfer's own "Buffer overflow ..."
error when the real workspace tensor SGLang allocated is too small.

Replaced, because it cannot run on a CPU (each listed in ``_cpu_only()``):

* what _cpu.py replaces for every SGLang scenario (sgl_kernel, is_cuda while the
  backend module is imported, the model runner, the attention-TP group);
* FlashInfer's JIT/AOT module getters and device queries (tests/realcalls/standin.py:
  the planner is FlashInfer's code, the kernels are never built);
* device memory: ``device="cuda"`` and ``pin_memory=True`` allocations are made in
  host memory (a TorchFunctionMode; the sizes are unchanged);
* GPU kernels that only fill index buffers the planner does not read:
  SGLang's Triton ``create_flashinfer_kv_indices_triton`` and FlashInfer's CUDA
  ``segment_packbits`` get host equivalents with the same outputs;
* SGLang's ``is_sm100_supported`` in the backend module answers for the scenario GPU.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, REPO)
import _cpu  # noqa: E402
import scenarios as sc  # noqa: E402

MIB = 1 << 20

# Qwen3-VL-32B (64 q / 8 kv, head_dim 128) and Qwen3.5's full-attention shape
# (32 q / 2 kv, head_dim 256) come from scenarios.py. A GQA group of 2 with a
# BF16 KV cache takes SGLang's CUDA-core decode (should_use_tensor_core: group < 4).
GQA2_LLAMA = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "num_attention_heads": 32, "num_key_value_heads": 16, "head_dim": 128, "num_hidden_layers": 2,
    "intermediate_size": 11008, "vocab_size": 32000, "max_position_embeddings": 32768,
    "rms_norm_eps": 1e-6, "rope_theta": 10000, "torch_dtype": "bfloat16",
}
# Deterministic-inference reports (docs/deterministic.md): the GB10 report's attention shape
# (24 q / 4 kv heads, head_dim 256) and Qwen3-Next-80B-A3B's full-attention layers (16 q / 2 kv,
# head_dim 256), each as a Llama-architecture config (not on SGLang's 512 MiB list; the mode
# forces 2 GiB anyway). max_position_embeddings 131072; the scenario's --context-length decides.
GB10_REPORT = dict(GQA2_LLAMA, num_attention_heads=24, num_key_value_heads=4, head_dim=256, hidden_size=6144,
                   max_position_embeddings=131072)
QWEN3_NEXT_FULL_ATTN = dict(GQA2_LLAMA, num_attention_heads=16, num_key_value_heads=2, head_dim=256,
                            hidden_size=2048, max_position_embeddings=131072)
# Llama-3.1-8B's attention (32 q / 8 kv, head_dim 128: meta-llama/Llama-3.1-8B-Instruct config.json),
# the EAGLE report of issue 17; a 4096-token context keeps SGLang's draft index buffers small
LLAMA8B = dict(GQA2_LLAMA, num_key_value_heads=8, max_position_embeddings=4096)
MODELS = {"qwen3vl": sc.QWEN3_VL_32B, "qwen35": sc.QWEN35_SHAPED_LLAMA, "gqa2": GQA2_LLAMA, "llama8b": LLAMA8B,
          "gb10_report": GB10_REPORT, "qwen3next_full": QWEN3_NEXT_FULL_ATTN}

# (id, options): the matrix of tests/sglang/test_realcalls.py and
# benchmarks/bench_realcalls_sglang.py, the same on every SGLang line (H200).
MATRIX = [
    ("qwen3vl", {"model": "qwen3vl"}),
    ("qwen35", {"model": "qwen35"}),
    ("qwen35-fp8kv", {"model": "qwen35", "kv": "fp8"}),
    # speculative_num_draft_tokens=4: SGLang's count already includes the bonus token
    ("qwen3vl-eagle4", {"model": "qwen3vl", "draft_tokens": 4}),
    # 32 q / 16 kv, BF16 KV: GQA group 2 < 4, SGLang decodes on CUDA cores (DecodePlan)
    ("gqa2-cudacore", {"model": "gqa2"}),
]


# ---------------------------------------------------------------- CPU-only stand-ins

class _HostMemory:
    """device="cuda" / pin_memory=True allocations made in host memory (same sizes)."""

    def __init__(self):
        import torch
        from torch.overrides import TorchFunctionMode

        class Mode(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = dict(kwargs or {})
                dev = kwargs.get("device")
                if dev is not None and torch.device(dev).type == "cuda":
                    kwargs["device"] = "cpu"
                if kwargs.get("pin_memory"):
                    kwargs["pin_memory"] = False
                if func in (torch.Tensor.to, torch.Tensor.cuda) and func is torch.Tensor.cuda:
                    return args[0]
                if func is torch.Tensor.to:
                    args = tuple("cpu" if (isinstance(a, (str, torch.device)) and torch.device(a).type == "cuda")
                                 else a for a in args)
                return func(*args, **kwargs)

        self.mode = Mode()

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _single_rank_groups():
    """Process groups SGLang creates while initialising torch.distributed (no GPU here):
    the attention context-parallel group of 0.5.11+ answers one rank, like _cpu's TP group."""
    import types

    try:
        import sglang.srt.distributed.parallel_state as ps
    except ImportError:
        return
    for name in ("_ATTN_CP",):
        if hasattr(ps, name) and getattr(ps, name) is None:
            setattr(ps, name, types.SimpleNamespace(world_size=1, rank_in_group=0, rank=0))


class _KvIndicesOnHost:
    """Host version of SGLang's Triton create_flashinfer_kv_indices_triton: for each
    request i, kv_indices[kv_indptr[i]:...] = req_to_token[req_pool_indices[i], start:start+len]."""

    def __getitem__(self, grid):
        def launch(req_to_token, req_pool_indices, page_kernel_lens, kv_indptr, kv_start_idx, kv_indices,
                   stride=None):
            rows = req_pool_indices.tolist()
            lens = page_kernel_lens.tolist()
            starts = kv_start_idx.tolist() if kv_start_idx is not None else [0] * len(rows)
            ptr = kv_indptr.tolist()
            for i in range(int(grid[0])):
                n = int(lens[i])
                s = int(starts[i])
                kv_indices[ptr[i]:ptr[i] + n] = req_to_token[rows[i], s:s + n]

        return launch


class _HostKvTranslator:
    """SGLang >= 0.5.20 packs the KV read ids through its KVIndexTranslator, which launches
    Triton gathers on the GPU; this host one packs the same ids (plain full-attention pool:
    no SWA, no DCP, ids not translated), the way _KvIndicesOnHost does for older lines.
    0.5.20-0.5.22 call it fill_packed_read_stream, 0.5.23 pack_read_stream."""

    reads_are_translated = False

    def __init__(self, req_to_token):
        self.req_to_token = req_to_token

    def pack_read_stream(self, plan, *, req_pool_indices, seq_lens, indptr, out, kv_start_idx=None, kind=None,
                         token_mapping=None, num_token_blocks=1, kv_lens_sum=None):
        bs = int(seq_lens.numel())
        _KvIndicesOnHost()[(bs,)](self.req_to_token, req_pool_indices[:bs], seq_lens, indptr, kv_start_idx, out)
        return False

    def fill_packed_read_stream(self, *, req_pool_indices, seq_lens, indptr, out, total_tokens=None,
                                kv_start_idx=None, sliding_window=False):
        """0.5.20-0.5.22's name and arguments for the same fill (non-unified pool)."""
        bs = int(seq_lens.numel())
        _KvIndicesOnHost()[(bs,)](self.req_to_token, req_pool_indices[:bs], seq_lens, indptr, kv_start_idx, out)
        return False

    def bind_runner_slots(self, forward_batch):
        return None

    def read_source(self, plan=None, *, req_pool_indices=None, bs=None):
        """0.5.23's EAGLE draft path reads its index source here (ids untranslated)."""
        import types

        return types.SimpleNamespace(row_ids=req_pool_indices, ids=self.req_to_token,
                                     row_stride=int(self.req_to_token.shape[1]), entry_page_size=1, v2p=None)


def _segment_packbits_on_host(x, indptr, bitorder="big"):
    """Host version of FlashInfer's CUDA segment_packbits: each segment's bools packed
    into ceil(len/8) bytes; returns (packed, packed_indptr)."""
    import numpy as np
    import torch

    bits = x.to("cpu").numpy().astype(bool)
    ptr = indptr.to("cpu").tolist()
    out, optr = [], [0]
    for a, b in zip(ptr[:-1], ptr[1:]):
        seg = np.packbits(bits[a:b], bitorder=bitorder)
        out.append(seg)
        optr.append(optr[-1] + len(seg))
    packed = torch.from_numpy(np.concatenate(out) if out else np.zeros(0, np.uint8))
    return packed, torch.tensor(optr, dtype=torch.int32)


def _cpu_only(fb, gpu):
    """Install the stand-ins above; returns their names (reported in the result)."""
    import flashinfer.prefill as fprefill

    names = ["host memory for device allocations"]
    kv = _KvIndicesOnHost()
    for modname in ("sglang.srt.layers.attention.flashinfer_backend", "sglang.srt.speculative.eagle_info",
                    "sglang.srt.model_executor.forward_batch_info", "sglang.srt.speculative.ngram_info"):
        m = sys.modules.get(modname)
        if m is None:
            try:
                m = __import__(modname, fromlist=["x"])
            except Exception:
                continue
        if hasattr(m, "create_flashinfer_kv_indices_triton"):
            m.create_flashinfer_kv_indices_triton = kv
            names.append(f"{modname}.create_flashinfer_kv_indices_triton")
    if hasattr(fprefill, "segment_packbits"):
        fprefill.segment_packbits = _segment_packbits_on_host
        names.append("flashinfer.prefill.segment_packbits")
    sm100 = gpu.cc[0] == 10
    if hasattr(fb, "is_sm100_supported"):
        fb.is_sm100_supported = lambda *a, **k: sm100
        names.append("flashinfer_backend.is_sm100_supported")
    return names


# ---------------------------------------------------------------- the planner stand-in

def _install_standin(gpu):
    from tests.realcalls import standin

    # The CUDA-core decode kernel's occupancy is a driver answer for the compiled kernel. Issue 27:
    # not the guard's bound: FlashInfer's DecodePlan asks cudaOccupancyMaxActiveBlocksPerMultiprocessor
    # about its own launch (block size, dynamic shared memory from its kernel configuration) and
    # the planner library answers with the occupancy calculator's threads/blocks/shared-memory
    # limits for the GPU (NVIDIA's CCCL arch_traits table; registers unknown, so an upper bound).
    # guard_seam=False: guard_core.gpus.detect_gpu already answers the table GPU (_table_gpu)
    return standin.install(gpu.name, gpu.num_sms, gpu.cc, kernel_occupancy="launch", guard_seam=False)


def _table_gpu(key):
    """The scenario GPU from the tests' own table (tests/realcalls/gpus.py, not guard_core.gpus),
    answered at the guard's device seam (``guard_core.gpus.detect_gpu``, which in a server asks
    torch for the device's name, SM count, capability and shared memory)."""
    import guard_core.gpus as gpus
    from tests.realcalls import gpus as table

    name, sms, cc, smem = table.gpu(key)
    gpu = gpus.Gpu(name, sms, cc, smem)
    gpus.detect_gpu = lambda device=None: gpu
    return gpu


_KEEP = ("wrapper", "backend", "planner", "batch_size", "total_num_rows", "qo", "kv", "num_qo_heads",
         "num_kv_heads", "head_dim_qk", "head_dim_vo", "cuda_graph", "q_dtype", "kv_dtype",
         "float_workspace_bytes", "int_workspace_bytes", "float_bytes", "int_bytes", "split_kv",
         "padded_batch_size", "cta_tile_q", "ok", "error", "planner_error")


def _calls_since(rec, n0):
    """The stand-in's records since index n0, without the allocation lists."""
    out = []
    for c in list(rec.calls)[n0:]:
        o = {k: c.get(k) for k in _KEEP}
        floats = [a for a in c.get("allocations") or [] if a.get("buffer") == "float"]
        o["largest_float_allocation"] = max(floats, key=lambda a: a["bytes"])["name"] if floats else None
        out.append(o)
    return out


# ---------------------------------------------------------------- building SGLang

def _server_args(model_dir, opts):
    kw = dict(opts.get("server_args", {}))
    if opts.get("kv") == "fp8":
        kw["kv_cache_dtype"] = "fp8_e4m3"
    draft = int(opts.get("draft_tokens", 0) or 0)
    if draft:
        kw.update(speculative_algorithm="EAGLE", speculative_draft_model_path=model_dir,
                  speculative_num_steps=int(opts.get("draft_steps", max(1, draft - 1))),
                  speculative_eagle_topk=int(opts.get("topk", 1)),
                  speculative_num_draft_tokens=draft)
    if opts.get("resolve"):  # issue 27: SGLang resolves the deployment on the table GPU itself
        import realcalls_wide as wide

        if opts.get("ngram"):  # --speculative-algorithm NGRAM (no draft model; SGLang checks device cuda)
            kw.update(speculative_algorithm="NGRAM", speculative_num_draft_tokens=int(opts["ngram"]))

        for k in ("tp_size", "dp_size", "enable_dp_attention", "chunked_prefill_size", "max_running_requests",
                  "disable_cuda_graph", "page_size"):
            if opts.get(k) is not None:
                kw[k] = opts[k]
        if opts.get("max_bs"):
            try:
                return wide.resolved_server_args(model_dir, dict(kw, cuda_graph_max_bs_decode=int(opts["max_bs"])),
                                                 opts.get("gpu", "h200"))
            except TypeError as e:
                if "cuda_graph" not in str(e):
                    raise
            kw["cuda_graph_max_bs"] = int(opts["max_bs"])
        return wide.resolved_server_args(model_dir, kw, opts.get("gpu", "h200"))
    sa = sc.gpu_resolved(sc.server_args(model_dir, **kw))
    if opts.get("max_bs"):  # --cuda-graph-max-bs as the user passed it
        sa.cuda_graph_max_bs = int(opts["max_bs"])
        sa.cuda_graph_bs = [b for b in sc.SEED_CAPTURE if b <= int(opts["max_bs"])]
    return sa


def _gpu_graph_config(max_bs=512):
    """0.5.2x resolves the CUDA-graph config into the runtime context; with device="cpu"
    it stays None. Put back what the same launch resolves to on the seed's GPU (decode
    graphs for sc.SEED_CAPTURE, max 512), as sc.gpu_resolved does on the ServerArgs."""
    try:
        from sglang.srt.model_executor.cuda_graph_config import Phase, default_cuda_graph_config, with_phase
        from sglang.srt.runtime_context import get_exec
    except ImportError:
        return
    graph = get_exec().graph
    cfg = with_phase(default_cuda_graph_config(), Phase.DECODE, bs=[b for b in sc.SEED_CAPTURE if b <= max_bs],
                     max_bs=max_bs)
    object.__setattr__(graph, "cuda_graph_config", cfg)
    fields = graph.__dict__.get("_fields")
    if isinstance(fields, dict):
        fields["cuda_graph_config"] = cfg


def _runner(sa, mc, kv_dtype, *, pool_size, width, resolved=False):
    max_bs = int(getattr(sa, "cuda_graph_max_bs", None) or 512)
    import torch

    runner = _cpu.model_runner(sa, mc, kv_cache_dtype=kv_dtype, pool_size=pool_size)
    # the real pool's req_to_token is (size, max context); only rows/columns a batch touches
    # are read, so an uninitialised host tensor serves. Never narrower than the context: an
    # eager batch with a request at the longest context the server accepts (the guard's
    # witness) reads that whole row.
    width = max(int(width), int(mc.context_len) + 4)
    runner.req_to_token_pool.req_to_token = torch.empty((pool_size, width), dtype=torch.int32)
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner.spec_algorithm = SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    if not resolved:  # a resolved record keeps what SGLang resolved
        _gpu_graph_config(max_bs)
    if hasattr(runner, "kv_index_translator"):  # 0.5.2x: set to None by _cpu.model_runner
        runner.kv_index_translator = _HostKvTranslator(runner.req_to_token_pool.req_to_token)
    return runner


def _getter_calls():
    from tests.realcalls import standin

    return getattr(standin.installed(), "getter_calls", 0)


def _ws_fault(scale):
    """Fault injection (issue 27 item 5): FlashInfer's workspace_size() answers ``scale`` times
    what its planner says, so the guard's figure and FlashInfer's disagree."""
    from tests.realcalls import standin

    s = standin.installed()
    real = s._workspace_size

    def scaled(module, args, kwargs):
        f, i = real(module, args, kwargs)
        return [int(f * scale), i]

    s._workspace_size = scaled


def _wide():
    import realcalls_wide

    return realcalls_wide


def _guard_records(since=0):
    """What the guard's SGLang adapter gathered and decided for each backend it sized in this
    process, from the ``since``-th on: its public record, sglang_guard.workspace.decisions()
    (facts, need, the sizes SGLang asked with, the decision applied)."""
    try:
        import sglang_guard.workspace as ws
    except Exception:
        return []
    return list(ws.decisions())[since:]


def _prediction_dict(records):
    if not records:
        return None
    s = records[-1]
    req = s.need.requirement if s.need is not None else None
    out = {"decode_tc": s.facts.planner_facts.tensor_core_decode, "fi_version": s.facts.flashinfer_version,
           "flashinfer_asked": getattr(s, "flashinfer_asked", None)}
    if req is None:
        return out
    out.update(float_bytes=req.float_bytes, int_bytes=req.int_bytes,
               planners={"prefill": req.planners.prefill, "decode": req.planners.decode},
               notes=list(req.notes),
               scenarios=[{"name": x.name, "batch": x.batch, "q_len": x.q_len, "planner": x.planner,
                           "float_bytes": x.float_bytes,
                           "witness": [list(g) for g in getattr(x, "witness", ()) or ()]} for x in req.scenarios],
               dominant=None if req.dominant is None else {
                   "name": req.dominant.name, "batch": req.dominant.batch, "q_len": req.dominant.q_len,
                   "float_bytes": req.dominant.float_bytes})
    if s.outcome is not None:
        out["decision"] = {"action": s.outcome.action, "allocate_bytes": int(s.outcome.allocate_bytes),
                           "text": s.outcome.text}
    return out


# ---------------------------------------------------------------- the scenario

def _spec_field(sa, name):
    try:
        from sglang.srt.runtime_context import get_spec

        return getattr(get_spec(), name)
    except Exception:
        return getattr(sa, name)


def _capture(fb, backend, runner, sa, rec, calls, errors):
    """What SGLang's decode CUDA-graph runner does with the attention backend at capture:
    init_cuda_graph_state(max_bs, max tokens), then for each capture size, largest first,
    the capture metadata call with its dummy batch (seq_lens filled with the backend's fill
    value, request rows 0, the EAGLE verify input with the runner's all-ones mask)."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    try:  # <= 0.5.1x
        from sglang.srt.model_executor import cuda_graph_runner as cgr

        get_sizes, runner_cls = cgr.get_batch_sizes_to_capture, cgr.CudaGraphRunner
    except ImportError:  # 0.5.2x: runner/ package
        from sglang.srt.model_executor.runner import base_cuda_graph_runner as bcgr
        from sglang.srt.model_executor.runner import decode_cuda_graph_runner as dcgr

        get_sizes, runner_cls = bcgr.get_batch_sizes_to_capture, dcgr.DecodeCudaGraphRunner
    capture_bs, _ = get_sizes(runner)
    spec = runner.spec_algorithm
    verify = spec.is_eagle() or spec.is_standalone() or (hasattr(spec, "is_ngram") and spec.is_ngram())
    per_bs = int(_spec_field(sa, "speculative_num_draft_tokens")) if verify else 1
    mode = ForwardMode.TARGET_VERIFY if verify else ForwardMode.DECODE
    max_bs = max(capture_bs)
    backend.init_cuda_graph_state(max_bs, max_bs * per_bs)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    # as the runner sizes it: (sum of the filled seq_lens + max tokens) * tokens per request
    custom_mask = (torch.ones(((max_bs * fill + max_bs * per_bs) * per_bs,), dtype=torch.bool)
                   if verify else None)
    shim = type("RunnerShim", (), {})()
    shim.model_runner = runner
    shim.custom_mask = custom_mask
    shim.buffers = type("Buffers", (), {"custom_mask": custom_mask})()
    shim.num_tokens_per_bs = per_bs
    shim.captured_req_width = per_bs  # 0.5.2x's name (NGRAM's verify input reads it)
    shim.speculative_num_draft_tokens = per_bs
    shim.speculative_num_steps = _spec_field(sa, "speculative_num_steps")
    new_api = not hasattr(backend, "init_forward_metadata_capture_cuda_graph")
    for bs in reversed(capture_bs):  # SGLang captures the largest batch first
        num_tokens = bs * per_bs
        spec_info = runner_cls.get_spec_info(shim, num_tokens) if verify else None
        req_pool_indices = torch.zeros((bs,), dtype=torch.int32)
        seq_lens = torch.full((bs,), fill, dtype=torch.int32)
        n0 = len(rec.calls)
        rec.tag = "capture"
        try:
            if new_api:  # 0.5.2x: one metadata entry point, in_capture=True
                fwd = ForwardBatch(forward_mode=mode, batch_size=bs,
                                   input_ids=torch.zeros((num_tokens,), dtype=torch.int64),
                                   req_pool_indices=req_pool_indices, seq_lens=seq_lens,
                                   seq_lens_cpu=seq_lens.clone(), orig_seq_lens=seq_lens,
                                   out_cache_loc=torch.zeros((num_tokens,), dtype=torch.int64),
                                   seq_lens_sum=int(seq_lens.sum()), positions=torch.zeros((num_tokens,),
                                                                                           dtype=torch.int64),
                                   spec_algorithm=spec, spec_info=spec_info, global_forward_mode=mode)
                backend.init_forward_metadata_out_graph(fwd, in_capture=True)
            else:
                backend.init_forward_metadata_capture_cuda_graph(
                    bs, num_tokens, req_pool_indices, seq_lens, None, mode, spec_info)
        except Exception as e:  # FlashInfer's overflow error, or anything else
            errors.append({"phase": "capture", "batch": bs, "error": f"{type(e).__name__}: {e}"})
        for c in _calls_since(rec, n0):
            calls.append(dict(c, phase="cuda_graph_verify" if verify else "cuda_graph_decode", batch=bs,
                              q_len=per_bs))
    return capture_bs


def _eager(backend, runner, batches, rec, calls, errors, kind, origin="fixed"):
    """Each batch through SGLang's init_forward_metadata: ``kv_pages`` (page size 1: tokens)
    per request, ``q_len`` (one query length) or ``q_lens`` (one per request, an extend batch).
    Calls carry ``origin``: where the batch came from (``guard``: a guard_core witness; ``search``:
    tests/differential/search.py; ``fixed``)."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    for b in batches:
        kv = [int(p) for p in b["kv_pages"]]  # page size 1: pages are tokens
        n = len(kv)
        qs = [int(x) for x in b["q_lens"]] if b.get("q_lens") else [int(b["q_len"])] * n
        q = max(qs)
        if kind == "eager_decode":
            seq = kv
            fb = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=n,
                              input_ids=torch.zeros((n,), dtype=torch.int64),
                              req_pool_indices=torch.arange(n, dtype=torch.int32),
                              seq_lens=torch.tensor(seq, dtype=torch.int32),
                              out_cache_loc=torch.zeros((n,), dtype=torch.int64),
                              seq_lens_sum=sum(seq), seq_lens_cpu=torch.tensor(seq, dtype=torch.int32))
        else:
            # the paged wrapper sees the whole KV when SGLang does not use the ragged
            # wrapper (multimodal models), else the cached prefix only
            prefix = [p - x for p, x in zip(kv, qs)] if backend.is_multimodal else kv
            seq = [p + x for p, x in zip(prefix, qs)]
            tok = sum(qs)
            fb = ForwardBatch(forward_mode=ForwardMode.EXTEND, batch_size=n,
                              input_ids=torch.zeros((tok,), dtype=torch.int64),
                              req_pool_indices=torch.arange(n, dtype=torch.int32),
                              seq_lens=torch.tensor(seq, dtype=torch.int32),
                              out_cache_loc=torch.zeros((tok,), dtype=torch.int64),
                              seq_lens_sum=sum(seq), seq_lens_cpu=torch.tensor(seq, dtype=torch.int32),
                              extend_num_tokens=tok,
                              extend_seq_lens=torch.tensor(qs, dtype=torch.int32),
                              extend_prefix_lens=torch.tensor(prefix, dtype=torch.int32),
                              extend_prefix_lens_cpu=list(prefix), extend_seq_lens_cpu=list(qs))
        n0 = len(rec.calls)
        rec.tag = kind
        try:
            backend.init_forward_metadata(fb)
        except Exception as e:
            errors.append({"phase": kind, "batch": n, "error": f"{type(e).__name__}: {e}"})
        for c in _calls_since(rec, n0):
            calls.append(dict(c, phase=kind, batch=n, q_len=q, origin=origin))


def _deterministic(backend, runner, sa, mc, rec, calls, errors, opts):
    """SGLang --enable-deterministic-inference, eager: each prompt of ``det_prompts`` as the
    chunk that ends it (``min(chunk, P)`` query tokens, the rest already in the KV, which the
    paged wrapper sees whole: no ragged wrapper in this mode), then one decode batch of
    ``det_decode`` requests (KV lengths in tokens). Calls are tagged fixed_split_prefill /
    fixed_split_decode, the core's scenario names."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    chunk = int(opts.get("chunk") or sa.chunked_prefill_size)
    for P in opts.get("det_prompts", []):
        q = min(chunk, int(P))
        prefix = int(P) - q
        fwd = ForwardBatch(forward_mode=ForwardMode.EXTEND, batch_size=1,
                           input_ids=torch.zeros((q,), dtype=torch.int64),
                           req_pool_indices=torch.zeros((1,), dtype=torch.int32),
                           seq_lens=torch.tensor([int(P)], dtype=torch.int32),
                           out_cache_loc=torch.zeros((q,), dtype=torch.int64),
                           seq_lens_sum=int(P), seq_lens_cpu=torch.tensor([int(P)], dtype=torch.int32),
                           extend_num_tokens=q, extend_seq_lens=torch.tensor([q], dtype=torch.int32),
                           extend_prefix_lens=torch.tensor([prefix], dtype=torch.int32),
                           extend_prefix_lens_cpu=[prefix], extend_seq_lens_cpu=[q])
        n0 = len(rec.calls)
        rec.tag = "fixed_split_prefill"
        try:
            backend.init_forward_metadata(fwd)
        except Exception as e:
            errors.append({"phase": "fixed_split_prefill", "batch": 1, "prompt": int(P),
                           "error": f"{type(e).__name__}: {e}"})
        for c in _calls_since(rec, n0):
            calls.append(dict(c, phase="fixed_split_prefill", batch=1, q_len=q, prompt=int(P)))
    kv = [int(k) for k in opts.get("det_decode", [])]
    if kv:
        n = len(kv)
        fwd = ForwardBatch(forward_mode=ForwardMode.DECODE, batch_size=n,
                           input_ids=torch.zeros((n,), dtype=torch.int64),
                           req_pool_indices=torch.arange(n, dtype=torch.int32),
                           seq_lens=torch.tensor(kv, dtype=torch.int32),
                           out_cache_loc=torch.zeros((n,), dtype=torch.int64),
                           seq_lens_sum=sum(kv), seq_lens_cpu=torch.tensor(kv, dtype=torch.int32))
        n0 = len(rec.calls)
        rec.tag = "fixed_split_decode"
        try:
            backend.init_forward_metadata(fwd)
        except Exception as e:
            errors.append({"phase": "fixed_split_decode", "batch": n, "error": f"{type(e).__name__}: {e}"})
        for c in _calls_since(rec, n0):
            calls.append(dict(c, phase="fixed_split_decode", batch=n, q_len=1))


class _DraftIndicesOnHost:
    """Host version of SGLang's Triton ``generate_draft_decode_kv_indices`` (spec_utils.py
    0.5.5:219-296; 0.5.23 keeps the arguments the planner depends on in the same places):
    launched on the grid (steps[, x token blocks], num_seqs, topk), it writes, for every draft
    step i, ``kv_indptr[i, z] = sum(positions[:z]) + z * (i + 1)`` for z = 1 .. num_seqs * topk
    (each branch attends its sequence plus the i + 1 draft tokens so far). The KV index
    values themselves are never read by the planner and are left as they are."""

    def __init__(self, steps: int):
        self.steps = steps

    def __getitem__(self, grid):
        num_seqs, topk = int(grid[1]), int(grid[2])

        def launch(*args, **kwargs):
            import torch

            kv_indptr, positions = args[4], args[5]
            pos = positions.to("cpu").to(torch.int64)[: num_seqs * topk]
            cum = torch.zeros(num_seqs * topk + 1, dtype=torch.int64)
            cum[1:] = torch.cumsum(pos, 0)
            z = torch.arange(num_seqs * topk + 1, dtype=torch.int64)
            for i in range(self.steps):
                kv_indptr[i, : num_seqs * topk + 1] = (cum + z * (i + 1)).to(kv_indptr.dtype)
        return launch


def _draft_pass(fb, sa, mc, gpu, rec, kv_dtype, opts):
    """SGLang's multi-step EAGLE draft backend on a draft-worker runner: its own __init__
    (steps - 1 FlashInferAttnBackend(skip_prefill=True), each sized by the guard), its CUDA-graph
    state, and the capture-time metadata call of each capture size (largest first), which plans
    topk x bs decode requests per step through SGLang's own begin_forward / fast_decode_plan."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    try:
        from sglang.srt.speculative.eagle_info import EagleDraftInput
    except ImportError:  # older layout
        from sglang.srt.speculative.eagle_utils import EagleDraftInput

    topk, steps = int(opts["topk"]), int(opts.get("draft_steps", 3))
    pool = int(opts.get("pool_size", 4096))
    runner = _runner(sa, mc, kv_dtype, pool_size=pool, width=int(opts.get("kv_width", 40000)))
    runner.is_draft_worker = True
    n_sized = len(_guard_records())
    draft = fb.FlashInferMultiStepDraftBackend(runner, topk, steps)
    draft.generate_draft_decode_kv_indices = _DraftIndicesOnHost(steps)
    out = {"calls": [], "errors": [], "backends": len(draft.attn_backends)}
    out["prediction"] = _prediction_dict(_guard_records(n_sized))
    ws = draft.attn_backends[0].workspace_buffer
    out["workspace_bytes"] = int(ws.numel() * ws.element_size())
    try:  # <= 0.5.1x
        from sglang.srt.model_executor import cuda_graph_runner as cgr

        get_sizes = cgr.get_batch_sizes_to_capture
    except ImportError:
        from sglang.srt.model_executor.runner import base_cuda_graph_runner as bcgr

        get_sizes = bcgr.get_batch_sizes_to_capture
    capture_bs, _ = get_sizes(runner)
    if opts.get("resolve") and _wide().graphs_disabled(sa):  # --disable-cuda-graph: no draft graphs either
        capture_bs = []
    max_bs = max(capture_bs or [1])
    draft.init_cuda_graph_state(max_bs, max_bs * topk)
    fill = draft.attn_backends[0].get_cuda_graph_seq_len_fill_value()
    for bs in reversed(capture_bs):
        n = bs * topk
        spec_info = EagleDraftInput(topk_p=torch.zeros((bs, topk)), topk_index=torch.zeros((bs, topk), dtype=torch.int64),
                                    hidden_states=torch.zeros((bs, 8)))
        seq_lens = torch.full((bs,), fill, dtype=torch.int32)
        kw = dict(forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=torch.zeros((n,), dtype=torch.int64),
                  req_pool_indices=torch.zeros((bs,), dtype=torch.int32), seq_lens=seq_lens,
                  seq_lens_cpu=seq_lens.clone(), seq_lens_sum=int(seq_lens.sum()),
                  out_cache_loc=torch.zeros((n * steps,), dtype=torch.int64),
                  positions=torch.full((n,), fill, dtype=torch.int64), spec_info=spec_info,
                  spec_algorithm=runner.spec_algorithm, req_to_token_pool=runner.req_to_token_pool)
        fields = set(getattr(ForwardBatch, "__dataclass_fields__", {}))
        fwd = ForwardBatch(**{k: v for k, v in kw.items() if not fields or k in fields})
        n0 = len(rec.calls)
        rec.tag = "draft_capture"
        try:
            if hasattr(draft, "init_forward_metadata_capture_cuda_graph"):
                draft.init_forward_metadata_capture_cuda_graph(fwd)
            else:
                draft.init_forward_metadata_out_graph(fwd, in_capture=True)
        except Exception as e:
            out["errors"].append({"phase": "draft_capture", "batch": bs, "error": f"{type(e).__name__}: {e}"})
        for c in _calls_since(rec, n0):
            out["calls"].append(dict(c, phase="cuda_graph_draft_decode", batch=bs, q_len=1))
    out["capture_bs"] = list(capture_bs)
    if opts.get("draft_eager"):
        _draft_eager(draft, runner, rec, out, topk, steps, int(sa.max_running_requests or pool),
                     int(opts.get("context", 8192)))
        _draft_extend(fb, sa, mc, runner, rec, out, opts, pool)
    return out


def _draft_extend(fb, sa, mc, runner, rec, out, opts, pool):
    """Issue 27: the draft model's eager extends through SGLang's own draft-extend backend, built
    as SGLang builds it for the draft runner (``FlashInferAttnBackend(draft_model_runner,
    skip_prefill=False)``: speculative/draft_utils.py 0.5.11:208-214, 0.5.23:436-445; 0.5.23 makes
    it the draft runner's attn_backend, eagle_worker_v2.py:408-414): the draft's prompt prefill
    after the target's (ForwardMode.EXTEND, up to the chunk) and the draft-extend-after-verify
    shapes (speculative_num_draft_tokens new tokens per request over the whole KV; 0.5.23
    ``num_tokens_per_req=self.speculative_num_draft_tokens``, eagle_worker_v2.py:1150-1157) on the
    independent search's grid (Limits.draft), each planned by FlashInfer's real planner. These
    run through the backend's EXTEND path (ragged new tokens + paged prefix), not its
    DRAFT_EXTEND branch (paged over the whole KV; its inputs come from the verify result).
    Calls are phase ``eager_draft_extend``."""
    n_sized = len(_guard_records())
    ext = fb.FlashInferAttnBackend(runner, skip_prefill=False)
    recs = _guard_records(n_sized)
    out["extend_prediction"] = _prediction_dict(recs) if recs else None
    verify_q = int(_spec_field(sa, "speculative_num_draft_tokens") or 1)
    limits = {"max_num_seqs": min(int(sa.max_running_requests or pool), pool), "max_model_len": mc.context_len,
              "max_num_batched_tokens": int(sa.chunked_prefill_size or 0)}
    if opts.get("resolve"):
        tok, one = _wide().chunk_limits(sa, mc.context_len)
        limits.update(max_num_batched_tokens=tok, one_request_tokens=one)
    calls, errors = [], []
    out["extend_search"] = _search(ext, runner, rec, calls, errors, limits, max(40, int(opts.get("search", 16)) // 2),
                                   int(opts.get("seed", 0)) + 1, draft=max(0, verify_q - 1), extend_only=True)
    out["calls"] += [dict(c, phase="eager_draft_extend") for c in calls]
    out["errors"] += [dict(e, phase="draft_extend") for e in errors]


def _draft_eager(draft, runner, rec, out, topk, steps, max_running, context):
    """Issue 27: the draft's eager batches through SGLang's own draft path
    (``FlashInferMultiStepDraftBackend.init_forward_metadata``, each step's backend planning its
    decode): batch sizes 1, 2, 4, ... up to the running-request limit, each with every request at
    a quarter, half and all of the context (what the server's limits allow; nothing from
    guard_core). Calls are phase ``eager_draft_decode``."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    try:
        from sglang.srt.speculative.eagle_info import EagleDraftInput
    except ImportError:  # older layout
        from sglang.srt.speculative.eagle_utils import EagleDraftInput

    sizes = sorted({min(max_running, 1 << k) for k in range(0, 12)} | {max_running})
    for bs in sizes:
        for seq in sorted({max(steps + 2, context // 4), max(steps + 2, context // 2), context - steps - 1}):
            n = bs * topk
            spec_info = EagleDraftInput(topk_p=torch.zeros((bs, topk)),
                                        topk_index=torch.zeros((bs, topk), dtype=torch.int64),
                                        hidden_states=torch.zeros((bs, 8)))
            seq_lens = torch.full((bs,), seq, dtype=torch.int32)
            kw = dict(forward_mode=ForwardMode.DECODE, batch_size=bs, input_ids=torch.zeros((n,), dtype=torch.int64),
                      req_pool_indices=torch.arange(bs, dtype=torch.int32), seq_lens=seq_lens,
                      seq_lens_cpu=seq_lens.clone(), seq_lens_sum=int(seq_lens.sum()),
                      out_cache_loc=torch.zeros((n * steps,), dtype=torch.int64),
                      positions=torch.full((n,), seq, dtype=torch.int64), spec_info=spec_info,
                      spec_algorithm=runner.spec_algorithm, req_to_token_pool=runner.req_to_token_pool)
            fields = set(getattr(ForwardBatch, "__dataclass_fields__", {}))
            fwd = ForwardBatch(**{k: v for k, v in kw.items() if not fields or k in fields})
            n0 = len(rec.calls)
            rec.tag = "draft_eager"
            try:
                draft.init_forward_metadata(fwd)
            except Exception as e:
                out["errors"].append({"phase": "draft_eager", "batch": bs, "error": f"{type(e).__name__}: {e}"})
            for c in _calls_since(rec, n0):
                out["calls"].append(dict(c, phase="eager_draft_decode", batch=bs, q_len=1, seq=seq))


def _search(backend, runner, rec, calls, errors, limits, budget, seed, draft=0, extend_only=False):
    """The independent worst-case search (tests/differential/search.py): the grid of uniform
    batches, then random restarts and hill-climbing, each batch SGLang's scheduler could send
    (at most max running requests, at most the chunked-prefill size of new tokens, no request
    past the context length; all decode or all extend) run through SGLang's backend and
    FlashInfer's real planner. The objective is the planner's own float bytes; nothing here
    comes from guard_core. Calls carry origin ``search``."""
    from tests.differential.search import Limits, expand, search

    lim = Limits(limits["max_num_seqs"], limits["max_num_batched_tokens"], int(limits["max_model_len"]),
                 single_kind=True, one_request=int(limits.get("one_request_tokens") or 0), draft=int(draft))

    def evaluate(batch):
        qs, kv = expand(batch)
        n0 = len(calls)
        decode = max(qs) == 1 and not extend_only  # extend_only: a draft-extend backend plans extends only
        # _eager's extend batches take the cached prefix (the whole KV for multimodal models)
        pages = kv if decode or backend.is_multimodal else [k - q for q, k in zip(qs, kv)]
        _eager(backend, runner, [{"q_lens": qs, "kv_pages": pages}], rec, calls, errors,
               "eager_decode" if decode else "eager_prefill", origin="search")
        return max((c["float_bytes"] or 0 for c in calls[n0:]), default=0)

    t = time.time()
    r = search(lim, evaluate, budget, seed=seed * 7919 + 5)
    r["seconds"] = round(time.time() - t, 2)
    return r


def _search_legacy(backend, runner, rec, calls, errors, limits, budget, seed):
    """The search before issue 27 (kept to measure the new one against): random eager batches,
    then greedy mutations of the best one; calls carry origin ``legacy``."""
    import random

    rng = random.Random(seed * 7919 + 5)
    mns, mbt, mml = limits["max_num_seqs"], limits["max_num_batched_tokens"], int(limits["max_model_len"])
    best = (-1, None)
    tried = 0

    def draw():
        n = max(1, min(mns, int(rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256]) * rng.uniform(0.5, 1.5))))
        q = rng.choice([1, 1, rng.randint(2, 16), rng.randint(17, 128)])
        q = max(1, min(q, mbt // n))
        kv = rng.choice([256, 2048, 8192, mml])
        return q, [max(q + 1, min(mml, int(rng.uniform(q + 1, max(q + 1, kv))))) for _ in range(n)]

    def mutate(q, kv):
        n = max(1, min(mns, int(len(kv) * rng.choice([0.5, 0.8, 1.25, 2])) + rng.choice([-1, 0, 1])))
        q2 = max(1, min(mbt // n, int(q * rng.choice([0.5, 1, 1, 2])) + rng.choice([-1, 0, 1])))
        k = max(q2 + 1, min(mml, int(kv[0] * rng.choice([0.5, 0.9, 1, 1.1, 2])) + rng.choice([-128, 0, 128])))
        return q2, [k] * n

    for i in range(budget):
        q, kv = draw() if (best[1] is None or i < budget // 2) else mutate(*best[1])
        n0 = len(calls)
        _eager(backend, runner, [{"q_len": q, "kv_pages": kv}], rec, calls, errors,
               "eager_decode" if q == 1 else "eager_prefill", origin="legacy")
        tried += 1
        f = max((c["float_bytes"] or 0 for c in calls[n0:]), default=0)
        if f > best[0]:
            best = (f, (q, kv))
    return {"batches": tried, "best_float_bytes": best[0],
            "best": None if best[1] is None else {"n": len(best[1][1]), "q": best[1][0], "kv": max(best[1][1])}}


def _one_pass(fb, sa, mc, gpu, rec, kv_dtype, opts):
    """Build SGLang's backend and make its plan() calls: capture, then the eager batches."""

    pool = int(opts.get("pool_size", 4096))
    width = int(opts.get("kv_width", 40000))
    out, calls, errors = {}, [], []
    t = [time.time()]
    runner = _runner(sa, mc, kv_dtype, pool_size=pool, width=width, resolved=bool(opts.get("resolve")))
    if opts.get("early"):
        # what the guard's pre-check (wrapped around ModelRunner.load_model, before the weights
        # load: no KV pool yet) says for this runner
        try:
            import sglang_guard.workspace as gws

            a = gws.early_fixed_split_check(runner)
            out["early"] = a.as_dict() if a is not None else None
        except ImportError:
            out["early"] = None
    if opts.get("kv_pool_tokens"):  # a real runner has it once its KV pool exists
        runner.max_total_num_tokens = int(opts["kv_pool_tokens"])
    backend = fb.FlashInferAttnBackend(runner)
    if opts.get("_seen") is not None:
        opts = dict(opts, _prediction=_prediction_dict(_guard_records(opts["_seen"])))
    ws = backend.workspace_buffer
    out["workspace_bytes"] = int(ws.numel() * ws.element_size())
    out["getter_calls_after_init"] = _getter_calls()  # FlashInfer module getters called so far
    out["decode_use_tensor_cores"] = bool(backend.decode_use_tensor_cores)
    out["is_multimodal"] = bool(backend.is_multimodal)
    t.append(time.time())
    phases = opts.get("phases", ["capture", "eager"])
    graphs_off = bool(opts.get("resolve")) and _wide().graphs_disabled(sa)
    if "capture" in phases and not graphs_off:  # --disable-cuda-graph: SGLang captures nothing
        out["capture_bs"] = _capture(fb, backend, runner, sa, rec, calls, errors)
    t.append(time.time())
    if "eager" in phases:
        limits = {"max_num_seqs": min(int(sa.max_running_requests or pool), pool), "max_model_len": mc.context_len,
                  "max_num_batched_tokens": int(sa.chunked_prefill_size or 0)}
        if opts.get("resolve"):  # SGLang's resolved chunk; without chunked prefill one request may bring more
            tok, one = _wide().chunk_limits(sa, mc.context_len)
            limits.update(max_num_batched_tokens=tok, one_request_tokens=one)
            out["resolved"] = {"chunk": tok, "one_request_tokens": one, "graphs_off": graphs_off,
                               "attn_tp": _wide().attention_tp_size(sa)}
        # the guard's own witness batches (inputs only: their bytes come from the real planner) ...
        pred = opts.get("_prediction") or {}
        for sc_ in pred.get("scenarios") or []:
            w = sc_.get("witness") or []
            if sc_["name"] in ("eager_decode", "eager_prefill") and w:
                batch = {"q_len": int(w[0][0]), "kv_pages": [int(p) for _q, p, c in w for _ in range(int(c))]}
                _eager(backend, runner, [batch], rec, calls, errors, sc_["name"], origin="guard")
                if opts.get("inject"):  # fault injection: shrunk copies of the witness (compare.injected_gap)
                    for f in (0.95, 0.9, 0.8, 0.7, 0.5):
                        pages = batch["kv_pages"]
                        n = max(1, int(len(pages) * f))
                        for shrunk in ({"q_len": batch["q_len"], "kv_pages": pages[:n]},
                                       {"q_len": batch["q_len"], "kv_pages": [max(1, int(p * f)) for p in pages]}):
                            _eager(backend, runner, [shrunk], rec, calls, errors, sc_["name"], origin="inject")
        # ... and an independent random + greedy search for the largest eager plan
        out["search"] = _search(backend, runner, rec, calls, errors, limits, int(opts.get("search", 16)),
                                int(opts.get("seed", 0)))
        if opts.get("legacy_search"):
            out["legacy_search"] = _search_legacy(backend, runner, rec, calls, errors, limits,
                                                  int(opts["legacy_search"]), int(opts.get("seed", 0)))
    if "det" in phases:
        out["deterministic"] = {k: getattr(backend, k, None) for k in (
            "enable_deterministic", "prefill_split_tile_size", "decode_split_tile_size",
            "disable_cuda_graph_kv_split")}
        _deterministic(backend, runner, sa, mc, rec, calls, errors, opts)
    t.append(time.time())
    out["workspace_bytes_after"] = int(backend.workspace_buffer.numel() * backend.workspace_buffer.element_size())
    out["calls"] = calls
    out["errors"] = errors
    out["first_error"] = errors[0]["error"] if errors else None
    out["timing"] = {"backend": round(t[1] - t[0], 1), "capture": round(t[2] - t[1], 1),
                     "eager": round(t[3] - t[2], 1)}
    return out


def _forget_process_buffer(fb):
    """What a fresh SGLang process starts from: no cached workspace buffer, no size
    written into the environment by an earlier backend's .set()."""
    if hasattr(fb, "global_workspace_buffer"):
        fb.global_workspace_buffer = None
    try:
        from sglang.srt.runtime_context import get_context

        get_context().resources.buffers.pop("flashinfer_workspace", None)
    except Exception:
        pass
    os.environ.pop("SGLANG_FLASHINFER_WORKSPACE_SIZE", None)


def _understate():
    """Fault injection (the safety net's test): every requirement the SGLang adapter gets is
    short by its dominant plan's largest allocation, so the buffer it sizes is too small and
    FlashInfer's real planner overflows inside SGLang's own begin_forward."""
    import dataclasses

    import guard_core.flashinfer.planner_choice as d

    real = d.size_choice

    def short(*a, **k):
        r = real(*a, **k)
        dom = r.dominant.dominant_allocation if r.dominant else None
        return dataclasses.replace(r, float_bytes=max(0, r.float_bytes - (dom.bytes if dom else 0)))

    d.size_choice = short


def _net_state():
    try:
        from guard_core.runtime import safety_net

        return {"entry_points": safety_net.patched_entry_points()}
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"}


def run(opts):
    t0 = time.time()
    import torch

    out = sc.load_guard()
    seen = len(_guard_records())  # the guard's records of this run's backends start here
    if opts.get("understate"):
        _understate()
    gpu = _table_gpu(opts.get("gpu", "h200"))
    tmp = tempfile.mkdtemp()
    if opts.get("model_cfg"):  # a deployment of tests/sglang/test_deterministic.py
        model = opts["model_cfg"]
    elif opts.get("model_shape"):  # issue 27: the whole model; SGLang divides the heads itself
        q, kv, hd = (int(x) for x in opts["model_shape"])
        model = dict(GQA2_LLAMA, num_attention_heads=q, num_key_value_heads=kv, head_dim=hd, hidden_size=q * hd,
                     max_position_embeddings=int(opts.get("context", 8192)))
    elif opts.get("shape"):  # a generated deployment (tests/differential): per-rank heads, head dim
        q, kv, hd = (int(x) for x in opts["shape"])
        model = dict(GQA2_LLAMA, num_attention_heads=q, num_key_value_heads=kv, head_dim=hd, hidden_size=q * hd,
                     max_position_embeddings=int(opts.get("context", 8192)))
    else:
        model = MODELS[opts.get("model", "qwen3vl")]
    try:
        sa = _server_args(_cpu.write_model(tmp, "model", model), opts)
    except ValueError as exc:
        if not opts.get("resolve"):
            raise
        # SGLang's own resolution refuses the launch (e.g. 0.5.23 speculative_hook.py _handle_ngram:
        # "ngram speculative decoding does not support dp attention"): no server starts, nothing to
        # compare; the generated draw is reported as refused, not as a finding
        return {"refused": f"{type(exc).__name__}: {exc}".splitlines()[0][:300], "seconds": round(time.time() - t0, 1)}
    if opts.get("chunk"):  # after sc.gpu_resolved, which puts back the seed GPU's 16384
        sa.chunked_prefill_size = int(opts["chunk"])
    sc.setup_logging(sa)
    from sglang.srt.configs.model_config import ModelConfig

    mc = ModelConfig.from_server_args(sa)
    fb = _cpu.import_backend_module()
    t_import = time.time()
    rec = _install_standin(gpu)
    if opts.get("ws_fault"):
        _ws_fault(float(opts["ws_fault"]))
    out["stand_ins"] = _cpu_only(fb, gpu)
    _cpu.set_attention_tp_size(_wide().attention_tp_size(sa) if opts.get("resolve") else 1)
    _single_rank_groups()
    kv_dtype = {"fp8": torch.float8_e4m3fn}.get(opts.get("kv"), torch.bfloat16)
    with _HostMemory():
        out.update(_one_pass(fb, sa, mc, gpu, rec, kv_dtype, dict(opts, _seen=seen)))
        out["prediction"] = _prediction_dict(_guard_records(seen))
        asked = [b for r in _guard_records(seen) for b in r.server_bytes]  # each size SGLang asked with
        out["sglang_server_bytes"] = asked[-1] if asked else None
        if opts.get("topk"):
            out["draft"] = _draft_pass(fb, sa, mc, gpu, rec, kv_dtype, opts)
        out["safety_net"] = _net_state()  # what the guard installed, before any undo below
        if opts.get("also_without_guard") and out["registered"]:
            # The same process with the guard's wrapper and its safety net taken off again
            # (their undo) and SGLang's per-process buffer forgotten: SGLang's own sizing and
            # calls. The net wraps begin_forward / fast_decode_plan since issue 17: left on, it
            # recovered the very overflow this pass is there to show.
            import sglang_guard.workspace as gws
            from guard_core.runtime import safety_net

            out["unpatched"] = bool(gws.unpatch(fb))
            safety_net.uninstall()
            out["net_after_undo"] = safety_net.patched_entry_points()
            _forget_process_buffer(fb)
            out["without_guard"] = _one_pass(fb, sa, mc, gpu, rec, kv_dtype,
                                             dict(opts, _prediction=out["prediction"], early=False))
    out.setdefault("safety_net", _net_state())
    out["gpu"] = {"name": gpu.name, "sms": gpu.num_sms, "cc": list(gpu.cc)}
    out["seconds"] = round(time.time() - t0, 1)
    out["timing"]["import"] = round(t_import - t0, 1)
    return out


def main():
    name = sys.argv[1]
    opts = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    _cpu.install_cuda_only_stand_ins()
    result = {"run": run}[name](opts)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
