"""Real-calls scenarios: vLLM's own FlashInfer code paths with FlashInfer's real planner.

    python tests/vllm/realcalls_scenarios.py GROUP [--cases a,b] [--phases baseline,guard]

One process per GPU group (vLLM and FlashInfer cache device capability checks per process); each
group runs several cases, each with fresh configs and builders. Every case prints one
``RESULT: {json}`` line.

Per case: vLLM's config objects (ModelConfig, ParallelConfig, CacheConfig, SchedulerConfig,
SpeculativeConfig, CompilationConfig), the model's real ``Attention`` layers and their KV-cache
specs, vLLM's own CUDA-graph mode resolution (``resolve_cudagraph_mode_and_sizes`` with the
builder's ``get_cudagraph_support``), the real ``FlashInferMetadataBuilder`` (or, for attention
groups sharing one buffer, the V2 model runner's ``init_attn_backend``), and vLLM's own
``CudagraphDispatcher`` for the capture list, replayed largest first as ``capture_model`` does:
warm-up ``build()`` then ``build_for_cudagraph_capture()`` with the dummy batch
``_dummy_run`` makes (uniform decode, ``seq_lens = max_query_len``); where a GPU host would run
Model Runner V2 (the default on 0.32+, and on 0.23 for Llama/Mistral/Qwen3 without n-gram:
``gpu_host_runner``), V2's own capture instead (``capture_v2``: its ``CudaGraphManager``
descriptors and ``InputBatch.make_dummy`` batches). Each record names its ``runner``. Then eager batches through
``build()``: the batches guard_core names as the worst (long KV, short query), and a few more.

Each process first runs its cases with vLLM alone (phase "baseline", no plugin loaded), then
loads the plugins through vLLM's own ``vllm.plugins.load_general_plugins`` (the guard's entry
point) and runs them again with fresh configs and builders (phase "guard"). The guard's prediction (planners, need) comes from
``vllm_guard.workspace_facts.decide`` on the same builder (the adapter's public seam).

What is faked, and why (nothing else is):
- FlashInfer's compiled modules and the device queries: tests/realcalls/standin.py (GPU kernels
  and a GPU do not exist here; the planner itself is FlashInfer's own code).
- vLLM's platform: the CPU-less "unspecified" platform reports the scenario GPU's compute
  capability and name, supports static CUDA graphs, has no pinned memory.
- vLLM 0.33's ``FlashInferImpl`` allocates a TRT-LLM-gen counter buffer on device "cuda": on the
  CPU instead (scenarios.cpu_only_impl_buffers).
- vLLM's Triton kernel that copies block-table rows into ``paged_kv_indices`` (a GPU kernel):
  the same copy in torch on the CPU.
- For decode context parallel: the DCP process group (``get_dcp_group``) reports world size 2,
  rank 0; one process cannot hold two ranks of a real group. The config says DCP 2 as well.
- TRT-LLM decode unavailable: ``flashinfer_cubin`` is made unimportable (as if not installed), so vLLM's
  real ``has_nvidia_artifactory`` goes on to its network probe, which fails offline.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
for p in (REPO, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

from cpu_host import no_pinned_memory  # noqa: E402
from scenarios import configure_vllm_logging, cpu_only_impl_buffers, model_dir  # noqa: E402

MIB = 1 << 20

# models: (num_attention_heads, num_key_value_heads, head_dim) of the full config
QWEN35 = dict(heads=32, kv_heads=2, head_dim=256)  # Qwen3.5-397B-A17B full attention
GPUS = {
    "a100": ("NVIDIA A100-SXM4-80GB", 108, (8, 0)),
    "l40s": ("NVIDIA L40S", 142, (8, 9)),
    "h100": ("NVIDIA H100 80GB HBM3", 132, (9, 0)),
    "rtx6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 188, (12, 0)),
    "h200": ("NVIDIA H200", 132, (9, 0)),
    "b200": ("NVIDIA B200", 148, (10, 0)),
    "b300": ("NVIDIA B300", 160, (10, 3)),
}


@dataclasses.dataclass
class Case:
    name: str
    model: dict = dataclasses.field(default_factory=lambda: dict(QWEN35))
    tp: int = 1
    dcp: int = 1
    kv_cache_dtype: str = "auto"
    draft: int = 0
    max_num_seqs: int = 512
    max_num_batched_tokens: int = 8192
    capture: int | None = None  # max_cudagraph_capture_size (None: vLLM's default)
    max_model_len: int = 32768
    layout: str = "full"  # "full" | "swa+full" (two KV-cache groups sharing one buffer, V2 runner)
    sliding_window: int = 4096
    soft_cap: float | None = None  # the layers' logits soft-cap (gemma-2 style)
    eager: bool = True
    cudagraphs: bool = True  # False: --enforce-eager (cudagraph_mode NONE)
    disable_q_quant: bool = False  # --attention-config.disable_flashinfer_q_quantization
    trtllm: bool | None = None  # --attention-config.use_trtllm_attention
    search: int = 0  # evaluations of the independent worst-case search (tests/differential/search.py)
    seed: int = 0
    legacy_search: int = 0  # batches of the earlier random + greedy search (tag eager:legacy:, for before/after)
    inject: bool = False  # replay shrunk copies of the guard's worst eager batch (tag eager:inject:)
    # issue 27 item 4 (tests/differential/vllm_space.py): a published model built by vLLM itself
    # (tests/vllm/realcalls_models.py; ``alternates``: the next draws where vLLM cannot build it on
    # the CPU), the KV-cache block size, chunked prefill, the CUDA-graph mode (None: FULL_AND_PIECEWISE,
    # or NONE when ``cudagraphs`` is False) and the speculative method
    config: str | None = None
    alternates: list = dataclasses.field(default_factory=list)
    block_size: int = 16
    chunked_prefill: bool = True
    cudagraph_mode: str | None = None
    spec_method: str = "ngram"
    runner: str | None = None  # set by resolve_cudagraphs: the model runner a GPU host builds ("v1" | "v2")


# GPU group -> (gpu key, trtllm cubins visible, cases)
GROUPS: dict[str, tuple[str, bool, list[Case]]] = {
    "l40s": ("l40s", True, [
        Case("seed"),
        Case("tp2", tp=2),
        Case("spec1", draft=1),
        Case("spec3", draft=3),
        Case("swa_shared", layout="swa+full"),
        # issue 27: google/gemma-3-27b-it (32 q / 16 kv heads, head dim 128, window 1024) at TP 8,
        # --max-model-len 131072, vLLM's API-server defaults on a 44 GiB GPU (256 seqs, 2048
        # tokens): FlashInfer clips each request's KV to the window before its split search, so
        # many window-length requests are the windowed group's worst batch (guard 9,477,888 B
        # where the real builder planned 36,986,880 B)
        Case("gemma3_swa_tp8", model=dict(heads=32, kv_heads=16, head_dim=128), tp=8, layout="swa+full",
             sliding_window=1024, max_model_len=131072, max_num_seqs=256, max_num_batched_tokens=2048),
        # google/gemma-2-27b-it (32 q / 16 kv heads, head dim 128, window 4096, attention logits
        # soft-cap 50.0): FlashInfer's prefill module is keyed on the soft-cap flag, so asking
        # workspace_size() must use the server's own (flashinfer/prefill.py 0.7.2.post1
        # get_batch_prefill_module, a functools.cache keyed on backend, dtypes, head dims, window,
        # soft-cap)
        Case("gemma2_softcap", model=dict(heads=32, kv_heads=16, head_dim=128), layout="swa+full",
             soft_cap=50.0, max_num_seqs=256, max_num_batched_tokens=4096),
    ]),
    # issue 27: meta-llama/Llama-3.1-8B-Instruct, n-gram speculation (3 tokens), --max-model-len
    # 32768 on A100 (vLLM 0.33's API-server defaults there: 256 seqs, 2048 tokens): below SM90
    # vLLM 0.33 verifies through its fa2-native decode wrapper, and a step without drafts plans
    # one-token batches through the CUDA-graph wrapper (flashinfer.py 0.33.0:1938-1951)
    "a100_issue27": ("a100", True, [
        Case("a100_llama8b_ngram3", model=dict(heads=32, kv_heads=8, head_dim=128), draft=3,
             max_model_len=32768, max_num_seqs=256, max_num_batched_tokens=2048),
    ]),
    "h200": ("h200", True, [
        Case("h200_bf16"),
        Case("h200_fp8kv", kv_cache_dtype="fp8"),
    ]),
    "b200_trtllm": ("b200", True, [
        Case("b200_trtllm"),
        Case("b200_dcp2", tp=4, dcp=2),  # DCP needs TP > KV heads (vLLM checks it)
    ]),
    "b200_no_trtllm": ("b200", False, [
        Case("b200_no_trtllm"),
    ]),
    # vLLM 0.32.0: B200 without TRT-LLM decode, 8192 batched tokens, the line's default ceiling
    "b200_no_trtllm_1024": ("b200", False, [
        Case("b200_no_trtllm_1024", max_num_seqs=1024, max_num_batched_tokens=8192),
    ]),
    # issue 17's reports, each a deployment the guard mis-predicted before:
    # - FA3's head-dim gate: head dim 512 (gemma-4's full-attention layers), --enforce-eager on
    #   H100: FlashInfer >= 0.6.15 prefills with FA2 (float scratch), not FA3 (int only);
    # - SM90 with the TRT-LLM cubins and an FP8 KV cache: vLLM >= 0.32 decodes with XQA,
    #   nothing planned in this buffer (the guard sized FA2 decode graphs that never run);
    "h100_issue17": ("h100", "installed", [
        Case("h100_hd512_eager", model=dict(heads=16, kv_heads=2, head_dim=512), cudagraphs=False),
        Case("h100_fp8kv_xqa", kv_cache_dtype="fp8"),
    ]),
    # - SM10x, FP8 KV cache with a BF16 query (disable_flashinfer_q_quantization): vLLM's
    #   use_trtllm_attention(is_prefill=True) refuses TRT-LLM, prefill runs FA2 (the guard said
    #   TRT-LLM: 1 MiB in exact where eager prefill plans ~20 MiB); TRT-LLM forced off likewise
    "b300_issue17": ("b300", "installed", [
        Case("b300_fp8kv_bf16q", kv_cache_dtype="fp8", disable_q_quant=True),
        Case("b300_trtllm_off", trtllm=False, max_num_seqs=256),
    ]),
}


# vLLM line -> the groups run there (tests/vllm/test_realcalls.py, benchmarks/bench_realcalls.py)
LINES = {
    "0.23.0": ["l40s", "h200", "b200_trtllm", "b200_no_trtllm"],
    "0.32.0": ["h200", "b200_no_trtllm_1024"],
    "0.33.0": ["l40s", "b200_no_trtllm_1024", "h100_issue17", "b300_issue17", "a100_issue27"],
    # 0.34.0 (FlashInfer 0.7.4: the >=0.7.4 sizing family, Model Runner V2 alone): 0.33.0's groups
    "0.34.0": ["l40s", "b200_no_trtllm_1024", "h100_issue17", "b300_issue17", "a100_issue27"],
}

# generated case name -> the published model its shape comes from
SOURCES: dict[str, str] = {}
# case name -> its group's GPU key
GROUP_GPU = {c.name: g for g, cs in ((v[0], v[2]) for v in GROUPS.values()) for c in cs}


def result(**kw) -> None:
    print("RESULT: " + json.dumps(kw, default=str), flush=True)


# --- what cannot run here ---------------------------------------------------------------------

def hide_cubins() -> None:
    """flashinfer-cubin as if not installed: ``importlib.util.find_spec`` answers None and an import
    raises ImportError (a ``None`` entry in sys.modules does both)."""
    os.environ.pop("VLLM_HAS_FLASHINFER_CUBIN", None)
    for k in [k for k in sys.modules if k.startswith("flashinfer_cubin.")]:
        del sys.modules[k]
    sys.modules["flashinfer_cubin"] = None


def gpu_platform(name: str, cc: tuple[int, int]) -> None:
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    cls = type(current_platform)
    cls.support_static_graph_mode = classmethod(lambda c: True)
    no_pinned_memory()
    cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(*cc))
    cls.get_device_name = classmethod(lambda c, device_id=0: name)


class _CopyPageIndices:
    """vLLM's ``_copy_page_indices_kernel`` (Triton, GPU) as a CPU copy: row i of the block table,
    its first ``indptr[i+1]-indptr[i]`` entries, into ``page_indices[indptr[i]:indptr[i+1]]``."""

    def __getitem__(self, grid):
        def launch(page_indices, block_table, block_table_stride, indptr, BLOCK_SIZE=1024):
            ip = indptr.tolist()
            for i in range(int(grid[0])):
                n = ip[i + 1] - ip[i]
                if n > 0:
                    page_indices[ip[i]:ip[i + 1]] = block_table[i, :n]

        return launch


def cpu_kernels(module) -> None:
    if hasattr(module, "_copy_page_indices_kernel"):
        module._copy_page_indices_kernel = _CopyPageIndices()


@contextlib.contextmanager
def dcp_group(world_size: int):
    if world_size <= 1:
        yield
        return
    import types

    import vllm.distributed.parallel_state as ps
    import vllm.v1.attention.backends.flashinfer as m

    group = types.SimpleNamespace(world_size=world_size, rank_in_group=0, device_group=None)
    saved = {mod: mod.get_dcp_group for mod in (ps, m) if hasattr(mod, "get_dcp_group")}
    for mod in saved:
        mod.get_dcp_group = lambda: group
    try:
        yield
    finally:
        for mod, fn in saved.items():
            mod.get_dcp_group = fn


# --- vLLM objects -------------------------------------------------------------------------------

def model_config_dict(case: Case) -> dict:
    m = case.model
    cfg = {
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "hidden_size": 4096, "num_attention_heads": m["heads"], "num_key_value_heads": m["kv_heads"],
        "head_dim": m["head_dim"], "num_hidden_layers": 2, "intermediate_size": 8192, "vocab_size": 151936,
        "max_position_embeddings": 131072, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
        "rope_theta": 10000000,
    }
    return cfg


def make_vllm_config(case: Case):
    import torch  # noqa: F401
    from vllm.config import (CacheConfig, CompilationConfig, DeviceConfig, ModelConfig, ParallelConfig,
                             SchedulerConfig, VllmConfig)

    if case.config:  # a published config.json (tests/vllm/realcalls_models.py)
        from realcalls_models import config_dict

        path = model_dir(config_dict(case.config))
        longest = ModelConfig(model=path, skip_tokenizer_init=True).max_model_len
        case.max_model_len = min(case.max_model_len, int(longest))  # vLLM refuses longer
        if not case.chunked_prefill:  # vLLM refuses fewer (SchedulerConfig.verify_max_model_len)
            case.max_num_batched_tokens = max(case.max_num_batched_tokens, case.max_model_len)
    else:
        path = model_dir(model_config_dict(case))
    mc = ModelConfig(model=path, skip_tokenizer_init=True, max_model_len=case.max_model_len)
    pc_kw = dict(tensor_parallel_size=case.tp)
    if case.dcp > 1:
        pc_kw["decode_context_parallel_size"] = case.dcp
    pc = ParallelConfig(**pc_kw)
    cc_kw = {"cache_dtype": case.kv_cache_dtype}
    cache = CacheConfig(block_size=case.block_size, **cc_kw)
    sched = SchedulerConfig(max_num_seqs=case.max_num_seqs, max_num_batched_tokens=case.max_num_batched_tokens,
                            max_model_len=case.max_model_len, is_encoder_decoder=False,
                            enable_chunked_prefill=case.chunked_prefill)
    comp_kw = dict(cudagraph_mode=case.cudagraph_mode or ("FULL_AND_PIECEWISE" if case.cudagraphs else "NONE"))
    if case.capture:
        comp_kw["max_cudagraph_capture_size"] = case.capture
    kw = dict(model_config=mc, parallel_config=pc, cache_config=cache, scheduler_config=sched,
              device_config=DeviceConfig(device="cpu"), compilation_config=CompilationConfig(**comp_kw))
    if case.disable_q_quant or case.trtllm is not None:
        from vllm.config import AttentionConfig

        kw["attention_config"] = AttentionConfig(disable_flashinfer_q_quantization=case.disable_q_quant,
                                                 use_trtllm_attention=case.trtllm)
    if case.draft:
        from vllm.config import SpeculativeConfig

        if case.spec_method in ("eagle", "eagle3") and case.config:  # the drafter: realcalls_models
            from realcalls_models import eagle_head_config

            # the head from the target's text config as vLLM resolved it (a defaults-only file such
            # as qwen2_5_omni-defaults states no heads: its transformers class does)
            head = model_dir(eagle_head_config(mc.hf_text_config, case.spec_method))
            kw["speculative_config"] = SpeculativeConfig(
                method=case.spec_method, model=head, num_speculative_tokens=case.draft,
                target_model_config=mc, target_parallel_config=pc)
        else:
            kw["speculative_config"] = SpeculativeConfig(
                method="ngram", num_speculative_tokens=case.draft, prompt_lookup_max=4, prompt_lookup_min=2,
                target_model_config=mc, target_parallel_config=pc)
    return VllmConfig(**kw)


def make_layers(case: Case, vc):
    """The model's attention layers (per rank) and their KV-cache groups [(layer names, spec)]."""
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend

    try:
        from vllm.model_executor.layers.attention import Attention
    except ImportError:  # older layout
        from vllm.attention.layer import Attention

    if case.config:  # the model's own layers, grouped by vLLM (tests/vllm/realcalls_models.py)
        from realcalls_models import model_groups

        groups, case.model_info = model_groups(vc, case.tp, resolve_layout)
        return None, groups
    m = case.model
    heads, kv = m["heads"] // case.tp, max(1, m["kv_heads"] // case.tp)
    kinds = ["full", "full"] if case.layout == "full" else ["swa", "full", "swa", "full"]
    layers = []
    with set_current_vllm_config(vc):
        for i, kind in enumerate(kinds):
            layers.append(Attention(
                num_heads=heads, head_size=m["head_dim"], scale=m["head_dim"] ** -0.5, num_kv_heads=kv,
                cache_config=vc.cache_config, per_layer_sliding_window=case.sliding_window if kind == "swa" else None,
                logits_soft_cap=case.soft_cap, attn_backend=FlashInferBackend,
                prefix=f"model.layers.{i}.self_attn.attn"))
        groups: dict = {}
        for layer in layers:
            spec = layer.get_kv_cache_spec(vc)
            groups.setdefault(spec, []).append(layer.layer_name)
    return layers, [(names, spec) for spec, names in groups.items()]


def resolve_layout(vc, specs) -> None:
    """vLLM 0.32+: the engine core resolves one KV-cache layout from what the workers' backends
    support before any builder builds (``resolve_kv_cache_layout``); older lines read an env var."""
    try:
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    except ImportError:
        return
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend

    if getattr(vc.cache_config, "kv_cache_layout", None) is None:
        names = [layout.name for layout in get_supported_kv_cache_layouts([FlashInferBackend])]
        resolve_kv_cache_layout(vc, [names], specs)


def gpu_host_triton() -> None:
    """A GPU host has Triton (vLLM's CUDA wheels depend on it); this CPU host may not. vLLM picks
    its model runner with it (``VllmConfig.use_v2_model_runner``, config/vllm.py 0.23.0:527,
    0.32.0:724, 0.33.0:752: V1 when ``HAS_TRITON`` is False), and ``VllmConfig.__post_init__``
    reads the same property (0.32.0:2016-2020). The property reads ``HAS_TRITON`` from its module's
    globals, so the harness answers it there, as a GPU host does; nothing else reads that name.
    ``VLLM_USE_V2_MODEL_RUNNER`` stays whatever the caller's environment says (unset by default),
    which vLLM's own property honours first."""
    try:
        import vllm.config.vllm as cv
    except ImportError:
        return
    if hasattr(cv, "HAS_TRITON"):
        cv.HAS_TRITON = True


def gpu_host_runner(vc) -> str:
    """"v2" or "v1": the model runner a GPU host's worker builds for ``vc`` (v1/worker/gpu_worker.py
    picks by ``vllm_config.use_v2_model_runner`` up to 0.33; 0.34.0 has V2 alone, gpu_worker.py
    0.34.0:583-590: ``vllm_guard.runner.uses_v2_runner``), asked with Triton present (``gpu_host_triton``)."""
    import vllm.config.vllm as cv

    from vllm_guard.runner import uses_v2_runner

    had = getattr(cv, "HAS_TRITON", None)
    if had is not None:
        cv.HAS_TRITON = True
    try:
        return "v2" if uses_v2_runner(vc) else "v1"
    finally:
        if had is not None:
            cv.HAS_TRITON = had


def resolve_cudagraphs(case: Case, vc, specs):
    """vLLM's CUDA-graph mode and capture sizes, resolved as the runner a GPU host would build
    calls ``resolve_cudagraph_mode_and_sizes`` (records ``case.runner``):

    - 0.20-0.2x (4th parameter ``tensor_parallel_size``): V1 positional with the TP size
      (v1/worker/gpu_model_runner.py 0.23.0:6845-6853), V2 the same (v1/worker/gpu/model_runner.py
      0.23.0:443-450);
    - 0.32+ (4th parameter ``use_v2_model_runner``): V1 with ``use_v2_model_runner=False``
      (gpu_model_runner.py 0.32.0:6851-6859, 0.33.0:6786-6794), V2 with True and
      ``piecewise_capture_available`` (gpu/model_runner.py 0.32.0:727-744, 0.33.0:748-765: breakable
      graphs on, or the model compiled, which ``CompilationMode.VLLM_COMPILE`` does on a GPU host).
    - 0.34.0 (V2 alone; no ``use_v2_model_runner`` parameter: config/compilation.py 0.34.0:1535-1544):
      as V2 on 0.33, everything after the query length by keyword (gpu/model_runner.py 0.34.0:783-800,
      ``piecewise_capture_available`` from ``is_breakable_cudagraph_enabled`` or the model compiled).
    Both take ``decode_query_len`` / ``uniform_decode_query_len`` = 1 + draft tokens, the
    scheduler's ``max_num_seqs`` and no KV-cache config (it only checks Mamba blocks)."""
    import inspect

    from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder

    supports = [FlashInferMetadataBuilder.get_cudagraph_support(vc, spec) for spec in specs]
    least = min(supports, key=lambda s: s.value)
    cc = vc.compilation_config
    case.runner = gpu_host_runner(vc)
    q = 1 + case.draft
    if hasattr(cc, "resolve_cudagraph_mode_and_sizes"):  # vLLM 0.20+
        params = inspect.signature(cc.resolve_cudagraph_mode_and_sizes).parameters
        if "use_v2_model_runner" in params or "tensor_parallel_size" not in params:
            kw = dict(use_v2_model_runner=case.runner == "v2", kv_cache_config=None,
                      max_num_reqs=case.max_num_seqs, is_profiling=False)
            if case.runner == "v2" and "piecewise_capture_available" in params:
                import vllm.envs as envs
                from vllm.config import CompilationMode

                # 0.34.0 is_breakable_cudagraph_enabled (compilation/breakable_cudagraph.py 0.34.0:53-63):
                # the config's own use_breakable_cudagraph where resolved, else the environment
                # variable (0.32-0.33 read the variable alone: that config field is absent there)
                breakable = getattr(cc, "use_breakable_cudagraph", None)
                if breakable is None:
                    breakable = getattr(envs, "VLLM_USE_BREAKABLE_CUDAGRAPH", False)
                kw["piecewise_capture_available"] = bool(breakable or cc.mode == CompilationMode.VLLM_COMPILE)
            kw = {k: v for k, v in kw.items() if k in params}
            mode = cc.resolve_cudagraph_mode_and_sizes(least, "FlashInferBackend", q, **kw)
        elif case.runner == "v2":
            mode = cc.resolve_cudagraph_mode_and_sizes(
                least, "FlashInferBackend", q, vc.parallel_config.tensor_parallel_size, None, case.max_num_seqs)
        else:
            mode = cc.resolve_cudagraph_mode_and_sizes(
                least, "FlashInferBackend", q, vc.parallel_config.tensor_parallel_size, None, case.max_num_seqs,
                is_profiling=False)
        return mode, least
    # vLLM 0.19: the model runner resolves it itself; run its own method on a runner
    # that holds only what that method reads (no drafter: the spec draft is not EAGLE)
    import types

    from vllm.v1.attention.backends.flashinfer import FlashInferBackend
    from vllm.v1.kv_cache_interface import KVCacheGroupSpec
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    runner = types.SimpleNamespace(
        vllm_config=vc, compilation_config=cc, parallel_config=vc.parallel_config,
        uniform_decode_query_len=1 + case.draft, kv_cache_config=None, speculative_config=None,
        cudagraph_dispatcher=types.SimpleNamespace(initialize_cudagraph_keys=lambda *a, **k: None))
    GPUModelRunner._check_and_update_cudagraph_mode(
        runner, [{FlashInferBackend} for _ in specs],
        [KVCacheGroupSpec([f"layer.{i}"], spec) for i, spec in enumerate(specs)])
    return cc.cudagraph_mode, least


def make_builders(case: Case, vc, groups):
    import torch
    from vllm.v1.attention.backends.flashinfer import FlashInferMetadataBuilder

    dev = torch.device("cpu")
    if case.layout == "full" and not case.config:
        return [FlashInferMetadataBuilder(spec, names, vc, dev) for names, spec in groups]
    # attention groups sharing one workspace: the V2 model runner's own set-up
    from vllm.v1.kv_cache_interface import KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.worker.gpu.attn_utils import init_attn_backend

    kcc = KVCacheConfig(num_blocks=4096, kv_cache_tensors=[],
                        kv_cache_groups=[KVCacheGroupSpec(names, spec) for names, spec in groups])
    # 0.19 returns (backends by layer, groups), later lines (groups, ...)
    attn_groups = next(x for x in init_attn_backend(kcc, vc, dev) if isinstance(x, list))
    return [g.get_metadata_builder(0) for gs in attn_groups for g in gs]


def common_metadata(query_lens: list[int], seq_lens: list[int], block_size: int, max_model_len: int,
                    dcp: int = 1):
    """A CommonAttentionMetadata as vLLM's model runner fills it (CPU tensors)."""
    import torch
    from vllm.v1.attention.backend import CommonAttentionMetadata

    n = len(query_lens)
    qsl = torch.zeros(n + 1, dtype=torch.int32)
    qsl[1:] = torch.cumsum(torch.tensor(query_lens, dtype=torch.int32), 0)
    sl = torch.tensor(seq_lens, dtype=torch.int32)
    max_blocks = max(1, -(-max(seq_lens) // block_size))
    bt = torch.arange(n * max_blocks, dtype=torch.int32).reshape(n, max_blocks)
    tokens = int(qsl[-1])
    fields = {f.name for f in dataclasses.fields(CommonAttentionMetadata)}
    kw = dict(query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=sl, num_reqs=n,
              num_actual_tokens=tokens, max_query_len=max(query_lens), max_seq_len=max(seq_lens),
              block_table_tensor=bt, slot_mapping=torch.zeros(tokens, dtype=torch.int64), causal=True)
    if "_seq_lens_cpu" in fields:
        kw["_seq_lens_cpu"] = sl.clone()
        kw["_num_computed_tokens_cpu"] = sl - torch.tensor(query_lens, dtype=torch.int32)
    if "seq_lens_cpu" in fields:
        kw["seq_lens_cpu"] = sl.clone()
    if "num_computed_tokens_cpu" in fields:
        kw["num_computed_tokens_cpu"] = sl - torch.tensor(query_lens, dtype=torch.int32)
    if "is_prefilling" in fields:
        kw["is_prefilling"] = torch.tensor([q > 1 for q in query_lens])
    if "positions" in fields:
        kw["positions"] = torch.zeros(tokens, dtype=torch.int64)
    kw = {k: v for k, v in kw.items() if k in fields}
    return CommonAttentionMetadata(**kw)


# --- the guard's prediction ---------------------------------------------------------------------

def prediction(builder, module) -> dict:
    """What the adapter predicts for this builder: planners per phase, the need, the scenarios
    (``vllm_guard.workspace_facts``: the facts it reads, its one decision)."""
    out: dict = {}
    decided = None
    try:
        import vllm_guard.workspace_facts as wf
        from guard_core import gpus

        from guard_core.versions import flashinfer_version

        gpu = gpus.detect_gpu(getattr(builder, "device", None))
        facts = wf.read_facts(builder, gpu, flashinfer_version())
        limits = facts.limits
        from tests.realcalls import standin as _st

        asked0 = getattr(_st.installed(), "workspace_size_calls", 0)
        keys0 = len(getattr(_st.installed(), "prefill_module_keys", []))
        try:
            decided = wf.decide(builder, module)
        except Exception as exc:
            out["decide_error"] = f"{type(exc).__name__}: {exc}"
            traceback.print_exc()
        # issue 27 item 5: FlashInfer's own workspace_size() asked on the envelope's eager witnesses
        out["fi_asked"] = getattr(_st.installed(), "workspace_size_calls", 0) - asked0
        # the FlashInfer modules the guard's asking loaded (compared with the server's own below)
        out["fi_modules"] = list(getattr(_st.installed(), "prefill_module_keys", [])[keys0:])
        out["fi_disagree"] = [t for k, t in (decided.outcome.warnings if decided is not None else ())
                              if k == "workspace-fi-size"]
        req = decided.outcome.requirement if decided is not None else None
        if req is None:  # the adapter stood down or did not size: the need for the same facts
            from guard_core.decide.workspace import need

            req = need(facts).requirement
        planners = req.planners
        out["planners"] = {"prefill": planners.prefill, "decode": planners.decode}
        out["layout"] = dataclasses.asdict(req.layout) if dataclasses.is_dataclass(req.layout) else str(req.layout)
        out["limits"] = {k: (list(v) if isinstance(v, tuple) else v)
                         for k, v in (dataclasses.asdict(limits) if dataclasses.is_dataclass(limits) else {}).items()}
        out["need_bytes"] = req.float_bytes
        out["notes"] = list(req.notes)
        out["scenarios"] = [{"name": s.name, "batch": s.batch, "q_len": s.q_len, "planner": s.planner,
                             "float_bytes": s.float_bytes, "int_bytes": s.int_bytes,
                             "witness": [list(g) for g in getattr(s, "witness", ()) or ()]}
                            for s in req.scenarios]
        out["dominant"] = ({"name": req.dominant.name, "batch": req.dominant.batch, "q_len": req.dominant.q_len}
                           if req.dominant else None)
        out["server_bytes"] = decided.server_bytes if decided is not None else wf.server_bytes(builder, module)[0]
        dec = decided.decision if decided is not None else None
        if dec is not None:
            out["decision"] = {"action": getattr(dec, "action", None), "line": getattr(dec, "line", None),
                               "allocate_bytes": getattr(dec, "allocate_bytes", None),
                               "numbers": dict(getattr(dec, "numbers", {}) or {})}
    except Exception as exc:  # reported to the test, which fails on it
        out["error"] = f"{type(exc).__name__}: {exc}"
        traceback.print_exc()
    return out


# --- replay ---------------------------------------------------------------------------------------

def capture(case: Case, vc, mode, builders, rec, log) -> None:
    """vLLM's capture_model order: the dispatcher's FULL descriptors, largest first; per
    descriptor the warm-up runs (build) and the capture run (build_for_cudagraph_capture).
    Model Runner V2 (``case.runner == "v2"``) captures its own way: ``capture_v2``."""
    if case.runner == "v2":
        return capture_v2(case, vc, mode, builders, rec, log)
    from vllm.config import CUDAGraphMode
    from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher

    disp = CudagraphDispatcher(vc)
    disp.initialize_cudagraph_keys(mode, 1 + case.draft)
    warmups = int(getattr(vc.compilation_config, "cudagraph_num_of_warmups", 1) or 0)
    q = 1 + case.draft
    for rmode, descs in disp.get_capture_descs():
        if rmode != CUDAGraphMode.FULL:
            continue  # piecewise graphs do not capture attention metadata
        for desc in descs:
            qlens, seq = dummy_run_batch(desc.num_tokens, bool(desc.uniform), q, case.max_num_seqs, desc.num_reqs)
            for bi, b in enumerate(builders):
                cm = common_metadata(qlens, seq, b.page_size, case.max_model_len)
                for _ in range(warmups):
                    rec.tag = f"capture_warmup:{desc.num_tokens}:b{bi}"
                    b.build(common_prefix_len=0, common_attn_metadata=cm)
                rec.tag = f"capture:{desc.num_tokens}:b{bi}"
                b.build_for_cudagraph_capture(cm)
            log.append(desc.num_tokens)


def v2_graph_manager(vc, mode, decode_query_len: int):
    """Model Runner V2's own ``CudaGraphManager`` for ``mode`` (v1/worker/gpu/cudagraph_utils.py),
    built as the runner builds its ``ModelCudaGraphManager`` (gpu/model_runner.py 0.23.0:451-456,
    0.32.0:745-753, 0.33.0:766-774: no LoRA, no adaptive verification so no varlen decode, no
    micro-batching); its real ``_init_candidates`` makes the capture descriptors. Faked, for the CPU:
    the pipeline-parallel group (one process, first and last rank) and the CUDA-graph memory pool."""
    import inspect
    import types

    import vllm.v1.worker.gpu.cudagraph_utils as cu

    saved = cu.get_pp_group, cu.current_platform
    cu.get_pp_group = lambda: types.SimpleNamespace(is_first_rank=True, is_last_rank=True)

    class _Platform:  # the scenario's platform, without a CUDA graph pool
        def __getattr__(self, name):
            return getattr(saved[1], name)

        def get_global_graph_pool(self):
            return None

    cu.current_platform = _Platform()
    try:
        if "decode_query_lens" in inspect.signature(cu.CudaGraphManager.__init__).parameters:
            # 0.34.0: each uniform decode query length -> its most requests, as the runner passes it
            # (gpu/model_runner.py 0.34.0:802-808, config/vllm.py 0.34.0:677-705)
            return cu.CudaGraphManager(vc, None, mode, vc.get_decode_cudagraph_query_lens(decode_query_len))
        return cu.CudaGraphManager(vc, None, mode, decode_query_len)
    finally:
        cu.get_pp_group, cu.current_platform = saved


def v2_capture_batches(vc, mode, decode_query_len: int, max_model_len: int) -> list[dict]:
    """What Model Runner V2 hands each attention builder while it captures, in order
    (``CudaGraphManager.capture``, 0.23.0:216-285, 0.33.0:424-515): PIECEWISE descriptors, then
    FULL, each largest first; per descriptor ``create_forward_fn(desc, warmup=True)`` and, for FULL
    (and breakable PIECEWISE graphs on 0.32+), ``create_forward_fn(desc, warmup=False)`` again. Each
    call prepares inputs (``ModelCudaGraphManager.capture.create_forward_fn`` 0.23.0:366-402,
    0.33.0:672-788): ``num_reqs = desc.num_reqs or min(num_tokens, max_num_reqs)``, then
    ``prepare_inputs_to_capture`` (0.23.0:479-519: attention skipped for PIECEWISE; 0.32+:
    ``full_cudagraph = cg_mode is FULL``, ``max_query_len = desc.max_query_len or
    desc.uniform_token_count``, a FULL graph without one takes ``num_tokens``, 0.33.0:827-840), which
    makes V2's own dummy batch (``InputBatch.make_dummy``, called here, on CPU buffers) and builds
    metadata through ``model_state.prepare_attn(..., CUDAGraphMode.NONE, ..., for_capture=full)``
    (model_states/default.py 0.23.0:156-195, 0.33.0:167-240: unpadded counts, ``max_query_len`` the
    batch's promise or its largest query, ``max_seq_len = max_model_len`` when for capture, else the
    largest seq len; ``build_for_cudagraph_capture`` when for capture, else ``build``; attn_utils.py
    0.33.0:550-575). tests/vllm/test_capture_replica.py holds the AST of each cited function."""
    import inspect

    import torch
    from vllm.config import CUDAGraphMode
    from vllm.v1.worker.gpu import cudagraph_utils as cu
    from vllm.v1.worker.gpu.input_batch import InputBatch, InputBuffers

    mgr = v2_graph_manager(vc, mode, decode_query_len)
    skip_attn_style = "skip_attn" in inspect.signature(cu.prepare_inputs_to_capture).parameters  # 0.23
    breakable = bool(getattr(mgr, "use_breakable_cg", False))
    descs = mgr._capture_descs
    max_tokens = max([vc.scheduler_config.max_num_batched_tokens]
                     + [d.num_tokens for ds in descs.values() for d in ds])
    bufs = InputBuffers(mgr.max_num_reqs, max_tokens, torch.device("cpu"))
    out = []
    for cg in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL):
        for desc in descs.get(cg, []):
            full = desc.cg_mode == CUDAGraphMode.FULL
            passes = 2 if (full or (breakable and not skip_attn_style)) else 1
            if skip_attn_style and not full:
                continue  # 0.23: PIECEWISE capture builds no attention metadata
            num_tokens = desc.num_tokens
            num_reqs = desc.num_reqs or min(num_tokens, mgr.max_num_reqs)
            if skip_attn_style:
                batch = InputBatch.make_dummy(num_reqs, num_tokens, bufs)
                promised = None
            else:
                promised = getattr(desc, "max_query_len", None) or desc.uniform_token_count
                if full and promised is None:
                    promised = num_tokens
                batch = InputBatch.make_dummy(num_reqs, num_tokens, bufs, max_query_len=promised)
            qlens = [int(x) for x in batch.num_scheduled_tokens[:num_reqs]]
            seqs = [int(x) for x in batch.seq_lens[:num_reqs]]
            max_q = getattr(batch, "max_query_len", None) or max(qlens)
            out.append({"num_tokens": num_tokens, "num_reqs": num_reqs, "cg_mode": cg.name, "passes": passes,
                        "for_capture": full, "qlens": qlens, "seqs": seqs, "max_query_len": int(max_q),
                        "max_seq_len": max_model_len if full else max(seqs),
                        "uniform": desc.uniform_token_count})
    return out


def capture_v2(case: Case, vc, mode, builders, rec, log) -> None:
    """Model Runner V2's capture (``v2_capture_batches``) through the real builders."""
    import torch

    for cap in v2_capture_batches(vc, mode, 1 + case.draft, case.max_model_len):
        for p in range(cap["passes"]):
            for bi, b in enumerate(builders):
                cm = common_metadata(cap["qlens"], cap["seqs"], b.page_size, case.max_model_len)
                fields = {f.name for f in dataclasses.fields(cm)}
                kw = {"max_query_len": cap["max_query_len"], "max_seq_len": cap["max_seq_len"]}
                if "seq_lens_cpu_upper_bound" in fields:  # V2 hands the dummy's seq lens (default.py)
                    kw["seq_lens_cpu_upper_bound"] = torch.tensor(cap["seqs"], dtype=torch.int32)
                if "is_prefilling" in fields:  # make_dummy: no request prefilling
                    kw["is_prefilling"] = torch.zeros(len(cap["qlens"]), dtype=torch.bool)
                cm = dataclasses.replace(cm, **kw)
                if cap["for_capture"]:
                    stage = "capture" if p == cap["passes"] - 1 else "capture_warmup"
                    rec.tag = f"{stage}:{cap['num_tokens']}:b{bi}"
                    b.build_for_cudagraph_capture(cm)
                else:  # a PIECEWISE graph's capture runs attention eagerly: build()
                    rec.tag = f"capture_piecewise:{cap['num_tokens']}:b{bi}"
                    b.build(common_prefix_len=0, common_attn_metadata=cm)
        if cap["for_capture"]:  # the FULL graphs captured, as V1's log
            log.append(cap["num_tokens"])


def dummy_run_batch(num_tokens: int, uniform: bool, q: int, max_num_seqs: int, desc_reqs: int | None):
    """(query lens, seq lens) of the batch ``GPUModelRunner._dummy_run`` hands the builders for one
    capture descriptor, counted as the line's code counts (tests/vllm/test_capture_replica.py holds
    that code's AST hash per line): max_query_len = q for a uniform decode, else num_tokens
    (0.23.0:5665, 0.33.0:5519); uniform: min(max_num_seqs, cdiv(num_tokens, q)) requests of q, the
    last one the remainder (0.23.0:5686-5690, 0.33.0:5540-5543); else min(num_tokens, max_num_seqs)
    requests of num_tokens // n, the last one the remainder (0.23.0:5691-5694, 0.33.0:5545-5548);
    every request's seq len is max_query_len (0.23.0:5787, 0.33.0:5658); padded up to the
    descriptor's num_reqs (0.23.0:5737-5739, 0.33.0:5591-5593) with empty requests, seq len 0 and
    no query tokens (0.23.0:5789-5798, 0.33.0:5660-5669), and the builder is given the padded count
    (0.23.0:5811, 0.33.0:5693)."""
    max_q = q if uniform else num_tokens
    if uniform:
        n = min(max_num_seqs, -(-num_tokens // q))
        qlens = [q] * n
        if num_tokens % q:
            qlens[-1] = num_tokens % q
    else:
        n = min(num_tokens, max_num_seqs)
        qlens = [num_tokens // n] * n
        qlens[-1] += num_tokens % n
    seq = [max_q] * n
    pad = (desc_reqs if desc_reqs is not None else n) - n
    return qlens + [0] * pad, seq + [0] * pad


def eager_batches(case: Case, preds: list[dict], graph_tokens: int | None = None) -> list[tuple[str, list[int], list[int]]]:
    """(label, query lens, seq lens): the core's worst eager batches (short query, long KV), and a
    few ordinary ones."""
    out = []
    mml, mbt, mns = case.max_model_len, case.max_num_batched_tokens, case.max_num_seqs
    # FlashInfer's split-KV cap (scheduler.cuh: 2 CTAs per SM over KV heads) and the minimum
    # chunk of 128 tokens: KV lengths whose chunk count lands on cap / t for a few query-tile
    # counts t, where the planner's split batch (and its scratch) is largest
    gpu = GPUS[GROUP_GPU[case.name]] if case.name in GROUP_GPU else None
    kv_heads = max(1, case.model["kv_heads"] // case.tp)
    cap = 2 * gpu[1] // kv_heads if gpu else 256
    shapes = []
    for pred in preds:
        for s in pred.get("scenarios", []):
            if s["name"] in ("eager_decode", "eager_prefill") and (s["name"], s["batch"], s["q_len"]) not in shapes:
                shapes.append((s["name"], s["batch"], s["q_len"]))
    # the guard's own witness batches (inputs only: the bytes they need come from the real planner)
    for pred in preds:
        page = int((pred.get("layout") or {}).get("page_size") or 16) if isinstance(pred.get("layout"), dict) else 16
        for s in pred.get("scenarios", []):
            w = s.get("witness") or []
            if s["name"] in ("eager_decode", "eager_prefill") and w:
                qlens = [int(q) for q, _p, c in w for _ in range(int(c))]
                seqs = [min(mml, int(p) * page) for q, p, c in w for _ in range(int(c))]
                out.append((f"witness_{s['name']}:{len(qlens)}x{qlens[0]}", qlens, seqs))
    for name, n, q in shapes:
        n, q = int(n), int(q)
        n = max(1, min(n, mns, mbt // max(q, 1)))
        for chunks in sorted({max(2, cap // t) for t in range(1, 9)}, reverse=True):
            kv = min(mml, -(-chunks // n) * 128)
            out.append((f"core_{name}:{n}x{q}:kv{kv}", [q] * n, [kv] * n))
        out.append((f"core_{name}:{n}x{q}:kv{mml}", [q] * n, [mml] * n))
    # short queries against long KV caches, the planner's split-KV worst case, at a few batch sizes
    # (max seqs too: one-token decodes of a full batch, which vLLM plans through its CUDA-graph
    # decode wrapper when they fit _decode_cudagraph_max_bs, also under speculation)
    for n in sorted({1, 2, 4, 8, 16, 64, 142, 284, mns, min(mns, graph_tokens or mns)}):
        if n <= mns:
            out.append((f"decode_long_kv:{n}", [1] * n, [mml] * n))
    for q in (8, 16, 64):
        for n in (1, 4, 16):
            if n * q <= mbt and n <= mns:
                out.append((f"prefill_long_kv:{n}x{q}", [q] * n, [mml] * n))
    if case.draft:  # speculative verify: 1 + k query tokens per request against long KV
        q = 1 + case.draft
        for n in sorted({1, 16, 64, 142, min(mns, mbt // q)}):
            if n * q <= mbt and n <= mns:
                out.append((f"verify_long_kv:{n}x{q}", [q] * n, [mml] * n))
        # n-gram drafts of uneven length: some requests verify 1 + k tokens, others decode one
        for n in (64, 128, mns):
            for every in (2, 4):
                qs = [q if i % every == 0 else 1 for i in range(n)]
                if sum(qs) <= mbt and n <= mns:
                    out.append((f"verify_ragged:{n}/{every}x{q}", qs, [mml] * n))
        # ... and, every request with the same shorter draft (n-gram proposes up to k), the
        # fullest pure-decode batch vLLM still plans through its CUDA-graph decode wrapper
        # (num_decode_tokens <= _decode_cudagraph_max_bs, flashinfer.py 0.33.0:1938-1948;
        # split_decodes_and_prefills(require_uniform=True) keeps a decode run uniform)
        for m in range(2, q + 1):
            n = min(mns, (graph_tokens or 0) // m)
            if n and n * m <= mbt:
                out.append((f"verify_short_full:{n}x{m}", [m] * n, [mml] * n))
    if case.layout != "full":
        # sliding-window layers: FlashInfer clips each request's KV to
        # ceil((window_left + cta_tile_q) / page_size) pages before its split search
        # (scheduler.cuh 0.6.12:558-563), so many requests of about a window's KV each
        for q in (16, 33, 64, 128):
            for n in (4, 8, 16, 32, 64):
                if n * q <= mbt and n <= mns:
                    kv = min(mml, case.sliding_window + 128)
                    out.append((f"window_short_kv:{n}x{q}:kv{kv}", [q] * n, [kv] * n))
    out.append((f"prefill_full:{min(mbt, mml)}", [min(mbt, mml)], [min(mbt, mml)]))
    out.append(("mixed", [1] * 64 + [mbt - 64], [mml] * 64 + [mbt - 64]))
    # only what vLLM's scheduler can send: at most max seqs requests and max batched tokens,
    # no request longer than max_model_len
    return [(lab, q, k) for lab, q, k in out
            if len(q) <= mns and sum(q) <= mbt and max(k) <= mml and min(k) >= 1 and all(a <= b for a, b in zip(q, k))]


def _random_batch(rng, case: Case):
    """One eager batch vLLM's scheduler could send: up to max seqs requests, at most max
    batched tokens of new queries, KV lengths up to max_model_len (decodes of one token,
    speculative verifies of 1 + draft, prefill chunks)."""
    mns, mbt, mml = case.max_num_seqs, case.max_num_batched_tokens, case.max_model_len
    n = max(1, min(mns, mbt, int(rng.choice([1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024])
                             * rng.uniform(0.5, 1.5))))
    kinds = [1] if not case.draft else [1, 1 + case.draft]
    q = rng.choice(kinds + [rng.randint(2, 64), rng.randint(65, max(65, mbt // n))])
    q = max(1, min(q, mbt // n))
    kv_hi = rng.choice([128, 1024, 4096, mml])
    seqs = [max(q, min(mml, int(rng.uniform(q, max(q, kv_hi))))) for _ in range(n)]
    return [q] * n, seqs


def _mutate(rng, case: Case, qlens, seqs):
    n, q = len(qlens), qlens[0]
    mns, mbt, mml = case.max_num_seqs, case.max_num_batched_tokens, case.max_model_len
    n2 = max(1, min(mns, mbt // max(q, 1), int(n * rng.choice([0.5, 0.8, 1.25, 2]) + rng.choice([-1, 0, 1]))))
    q2 = max(1, min(mbt // n2, int(q * rng.choice([0.5, 1, 1, 2])) + rng.choice([-1, 0, 1])))
    base = seqs[0] if seqs else q2
    kv = max(q2, min(mml, int(base * rng.choice([0.5, 0.9, 1, 1.1, 2])) + rng.choice([-128, 0, 128])))
    return [q2] * n2, [kv] * n2


def search_eager(case: Case, builders, rec, out) -> list[dict]:
    """The independent worst-case search (tests/differential/search.py), once per builder: the
    grid of uniform batches, then random restarts and hill-climbing, each batch run through
    the real builder and FlashInfer's real planner; the objective is the planner's own float
    bytes for that builder. It knows the server's limits and the layer's window and page size
    only (nothing from guard_core). Calls are tagged eager:search:."""
    from tests.differential.search import Limits, expand, label, search

    res = []
    done: dict = {}  # builders vLLM made alike (same class and planner inputs): searched once
    for bi, b in enumerate(builders):
        key = (type(b).__name__, b.num_qo_heads, b.num_kv_heads, b.head_dim, b.page_size,
               getattr(b, "window_left", -1), str(getattr(b, "logits_soft_cap", None)),
               str(getattr(b, "kv_cache_dtype", None)), str(getattr(b, "q_data_type", None)))
        if key in done:  # replay the first one's best batches through this builder
            first, seen = done[key]
            for lab, batch in seen:
                rec.tag = f"eager:search:{lab}:b{bi}"
                qlens, seqs = expand(batch)
                b.build(common_prefix_len=0, common_attn_metadata=common_metadata(qlens, seqs, b.page_size,
                                                                                 case.max_model_len))
            res.append(dict(res[first], same_as=first))
            continue
        tried: dict = {}
        wl = getattr(b, "window_left", -1)
        lim = Limits(case.max_num_seqs, case.max_num_batched_tokens, case.max_model_len, draft=case.draft,
                     window=wl if wl is not None and wl >= 0 else None, page=int(b.page_size))

        def evaluate(batch, b=b, bi=bi, tried=tried):
            if out.get("crash"):
                return 0
            qlens, seqs = expand(batch)
            n0 = len(rec.calls)
            rec.tag = f"eager:search:{label(batch)}:b{bi}"
            try:
                b.build(common_prefix_len=0, common_attn_metadata=common_metadata(qlens, seqs, b.page_size,
                                                                                 case.max_model_len))
            except RuntimeError as exc:
                out["crash"] = {"phase": f"eager search {label(batch)}", "error": str(exc)}
                return 0
            tried[batch] = max((c.get("float_bytes") or 0 for c in rec.calls[n0:]), default=0)
            return tried[batch]

        t = time.time()
        r = search(lim, evaluate, int(case.search), seed=case.seed * 31 + bi)
        r["seconds"] = round(time.time() - t, 2)
        res.append(r)
        done[key] = (bi, [(label(bt), bt) for bt in sorted(tried, key=lambda x: -tried[x])[:8]])
    return res


def inject_variants(case: Case, builders, rec, out, batches: dict) -> None:
    """Fault injection for the search's own test (issue 27): the guard's worst eager batch per
    builder (its witness or core shape with the largest real plan), shrunk (fewer requests, or
    shorter KV, by 5-50 %), replayed; a guard that named one of these as its witness would be
    right about it and blind to the worse batches above (tests/differential/compare.py
    injected_gap)."""
    for bi, b in enumerate(builders):
        mine = [c for c in rec.calls if (c.get("tag") or "").startswith(("eager:witness_", "eager:core_"))
                and (c.get("tag") or "").endswith(f":b{bi}")]
        if not mine:
            continue
        top = max(mine, key=lambda c: c.get("float_bytes") or 0)
        lab = top["tag"][len("eager:"):-len(f":b{bi}")]
        if lab not in batches:
            continue
        qlens, seqs = batches[lab]
        for f in (0.95, 0.9, 0.8, 0.7, 0.5):
            n = max(1, int(len(qlens) * f))
            for kind, (q2, s2) in (("n", (qlens[:n], seqs[:n])),
                                   ("kv", (qlens, [max(q, int(s * f)) for q, s in zip(qlens, seqs)]))):
                rec.tag = f"eager:inject:{kind}{f}:{lab}:b{bi}"
                try:
                    b.build(common_prefix_len=0, common_attn_metadata=common_metadata(q2, s2, b.page_size,
                                                                                     case.max_model_len))
                except RuntimeError:
                    pass


def search_eager_legacy(case: Case, builders, rec, out) -> dict:
    """The search before issue 27 (kept to measure the new one against): random batches, then
    greedy mutation of the best one, ``case.legacy_search`` batches, tagged eager:legacy:."""
    import random

    rng = random.Random(case.seed * 7919 + 17)
    best = (-1, None)
    tried = 0

    def score(qlens, seqs, label):
        n0 = len(rec.calls)
        for bi, b in enumerate(builders):
            rec.tag = f"eager:legacy:{label}:b{bi}"
            b.build(common_prefix_len=0, common_attn_metadata=common_metadata(qlens, seqs, b.page_size,
                                                                             case.max_model_len))
        return max((c.get("float_bytes") or 0 for c in rec.calls[n0:]), default=0)

    budget = int(case.legacy_search)
    for i in range(budget):
        if best[1] is None or i < budget // 2:
            qlens, seqs = _random_batch(rng, case)
        else:
            qlens, seqs = _mutate(rng, case, *best[1])
        try:
            f = score(qlens, seqs, f"{len(qlens)}x{qlens[0]}:kv{max(seqs)}")
        except RuntimeError as exc:
            out["crash"] = {"phase": f"eager search {len(qlens)}x{qlens[0]}", "error": str(exc)}
            break
        tried += 1
        if f > best[0]:
            best = (f, (qlens, seqs))
    return {"batches": tried, "best_float_bytes": best[0],
            "best": None if best[1] is None else {"n": len(best[1][0]), "q": best[1][0][0], "kv": max(best[1][1])}}


def run_case(case: Case, rec, module, args) -> dict:
    import torch  # noqa: F401

    from vllm.config import set_current_vllm_config

    t0 = time.time()
    start = len(rec.calls)
    vc = make_vllm_config(case)
    out: dict = {"case": case.name, "config": dataclasses.asdict(case)}
    if case.config and vc.model_config.use_mla:  # vLLM decides MLA: nothing in the guarded buffer
        from realcalls_models import mla_evidence

        out.update(mla=mla_evidence(vc), prediction=[], calls=[], builders=[], seconds=round(time.time() - t0, 1))
        return out
    with set_current_vllm_config(vc), dcp_group(case.dcp):
        layers, groups = make_layers(case, vc)
        out["model"] = getattr(case, "model_info", None)
        if case.config and not groups:  # no layer runs on FlashInfer: the guard is never asked
            out.update(prediction=[], calls=[], builders=[], seconds=round(time.time() - t0, 1))
            return out
        resolve_layout(vc, [spec for _, spec in groups])
        mode, support = resolve_cudagraphs(case, vc, [spec for _, spec in groups])
        builders = make_builders(case, vc, groups)
        if case.config:  # the harness's fixed batches read the shape per rank of the first builder
            b0 = builders[0]
            case.model = dict(heads=b0.num_qo_heads * case.tp, kv_heads=b0.num_kv_heads * case.tp,
                              head_dim=b0.head_dim)
        out["cudagraph_mode"] = str(mode)
        out["runner"] = case.runner
        out["cg_support"] = str(support)
        out["capture_sizes"] = list(vc.compilation_config.cudagraph_capture_sizes or [])
        out["max_capture"] = vc.compilation_config.max_cudagraph_capture_size
        out["builders"] = []
        for b in builders:
            out["builders"].append({
                "num_qo_heads": b.num_qo_heads, "num_kv_heads": b.num_kv_heads, "head_dim": b.head_dim,
                "page_size": b.page_size, "window_left": getattr(b, "window_left", None),
                "kv_cache_dtype": str(getattr(b, "kv_cache_dtype", None)), "q_data_type": str(getattr(b, "q_data_type", None)),
                "use_trtllm_decode_attention": getattr(b, "use_trtllm_decode_attention", None),
                "dcp_world_size": getattr(b, "dcp_world_size", 1),
                "decode_cudagraph_max_bs": getattr(b, "_decode_cudagraph_max_bs", None),
                "reorder_batch_threshold": getattr(b, "reorder_batch_threshold", None),
                "enable_cuda_graph": getattr(b, "enable_cuda_graph", None),
            })
        out["prediction"] = [prediction(b, module) for b in builders]
        from tests.realcalls import standin as _st

        keys0 = len(getattr(_st.installed(), "prefill_module_keys", []))
        captured: list[int] = []
        out["crash"] = None
        try:
            capture(case, vc, mode, builders, rec, captured)
        except RuntimeError as exc:
            out["crash"] = {"phase": "capture", "error": str(exc)}
        out["captured"] = captured
        eager = []
        batches: dict = {}
        if case.eager and out["crash"] is None:
            graph_tokens = max((int(getattr(b, "_decode_cudagraph_max_bs", 0) or 0) for b in builders), default=0)
            for label, qlens, seqs in eager_batches(case, out["prediction"], graph_tokens):
                batches[label] = (qlens, seqs)
                try:
                    for bi, b in enumerate(builders):
                        rec.tag = f"eager:{label}:b{bi}"
                        b.build(common_prefix_len=0,
                                common_attn_metadata=common_metadata(qlens, seqs, b.page_size, case.max_model_len))
                    eager.append(label)
                except RuntimeError as exc:
                    out["crash"] = {"phase": f"eager {label}", "error": str(exc)}
                    break
        if case.search and out["crash"] is None:
            out["search"] = search_eager(case, builders, rec, out)
        if case.legacy_search and out["crash"] is None:
            out["legacy_search"] = search_eager_legacy(case, builders, rec, out)
        if case.inject and out["crash"] is None:
            inject_variants(case, builders, rec, out, batches)
        out["eager"] = eager
        # the prefill modules the server's own planning loaded (capture, eager, search)
        out["server_fi_modules"] = sorted(set(getattr(_st.installed(), "prefill_module_keys", [])[keys0:]))
        bufs = []
        for b in builders:
            buf = getattr(b, "_workspace_buffer", None)
            bufs.append(None if buf is None else {"bytes": int(buf.numel() * buf.element_size()),
                                                  "id": id(buf)})
        out["buffers"] = bufs
    calls = rec.calls[start:]
    out["calls"] = [{k: c.get(k) for k in ("seq", "tag", "wrapper", "backend", "planner", "batch_size",
                                             "total_num_rows", "qo", "kv", "num_qo_heads", "num_kv_heads",
                                             "head_dim_qk", "page_size", "cuda_graph", "q_dtype", "kv_dtype",
                                             "float_workspace_bytes", "float_bytes", "int_bytes", "split_kv",
                                             "padded_batch_size", "cta_tile_q", "ok", "error")}
                    for c in calls]
    out["seconds"] = round(time.time() - t0, 1)
    out["detect_gpu_calls"] = int(getattr(rec, "detect_gpu_calls", 0))
    return out


def run_or_redraw(case: Case, rec, module, args) -> dict:
    """``run_case``; where vLLM cannot build a drawn published model on the CPU (see
    tests/vllm/realcalls_models.py), the case's next drawn model (``alternates``), each skip
    recorded with its reason."""
    skipped = []
    base = dataclasses.replace(case, alternates=list(case.alternates))
    while True:
        try:
            res = run_case(case, rec, module, args)
            break
        except Exception as exc:
            traceback.print_exc()
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
            if case.config and base.alternates:
                skipped.append({"model": case.config, "why": why})
                nxt = base.alternates.pop(0)
                case = dataclasses.replace(base, config=nxt, alternates=[])
                case.max_model_len, case.max_num_batched_tokens = base.max_model_len, base.max_num_batched_tokens
                continue
            res = {"case": case.name, "setup_error": why}
            break
    if skipped:
        res["skipped_models"] = skipped
    if case.config:
        from realcalls_models import hub_name

        res["source"] = hub_name(case.config)
        res["corpus_config"] = case.config
    return res


def _understate() -> None:
    """A deliberately wrong model: every requirement the vLLM adapter gets is short by the
    dominant plan's largest allocation (the safety net must recover from the real overflow)."""
    import guard_core.flashinfer.planner_choice as d

    real = d.size_choice

    def short(*a, **k):
        r = real(*a, **k)
        dom = r.dominant.dominant_allocation if r.dominant else None
        return dataclasses.replace(r, float_bytes=max(0, r.float_bytes - (dom.bytes if dom else 0)))

    d.size_choice = short


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("group", choices=sorted(GROUPS) + ["gen"])
    p.add_argument("--cases", default="")
    p.add_argument("--seed", type=int, default=0, help="gen: the seed of the generated deployments")
    p.add_argument("--n", type=int, default=3, help="gen: how many deployments")
    p.add_argument("--gpu", default="h200", help="gen: the GPU (a key of GPUS)")
    p.add_argument("--space", default="shapes", choices=["shapes", "wide"],
                   help="gen: tests/differential/space.py shapes, or vllm_space.py (published models, wider limits)")
    p.add_argument("--no-cubins", action="store_true", help="gen: TRT-LLM cubins not installed")
    p.add_argument("--search", type=int, default=None, help="gen: evaluations of the worst-case search per builder")
    p.add_argument("--legacy-search", type=int, default=0, help="gen: also the earlier 24-batch search (before/after)")
    p.add_argument("--inject", action="store_true", help="gen: replay shrunk copies of the guard's worst eager batch")
    p.add_argument("--understate", action="store_true",
                   help="fault injection: the core's need under-stated by its largest allocation (safety net test)")
    p.add_argument("--phases", default="baseline,guard",
                   help="baseline: vLLM alone; guard: after vllm.plugins.load_general_plugins()")
    args = p.parse_args(argv)
    if args.group == "gen":  # generated deployments (tests/differential)
        gpu_key, cubins, cases = args.gpu, not args.no_cubins, None
    else:
        gpu_key, cubins, cases = GROUPS[args.group]
    phases = [x for x in args.phases.split(",") if x]
    name, sms, cc = GPUS[gpu_key]
    if not cubins:
        hide_cubins()
    elif cubins == "installed":
        # flashinfer-cubin installed: vLLM's own switch for it (envs.VLLM_HAS_FLASHINFER_CUBIN, read by
        # has_flashinfer_cubin), so supports_trtllm_attention does not need the network; on SM90 and
        # SM12x vLLM >= 0.32 then decodes with XQA (vllm/utils/flashinfer.py 0.33.0:675-697)
        os.environ["VLLM_HAS_FLASHINFER_CUBIN"] = "1"
    configure_vllm_logging()
    from tests.realcalls import standin

    rec = standin.install(name, sms, cc)
    gpu_platform(name, cc)
    gpu_host_triton()
    import vllm.plugins
    import vllm.v1.attention.backends.flashinfer as module

    if cases is None:
        sizes = tuple(module.FlashInferBackend.get_supported_head_sizes())
        if args.space == "wide":  # issue 27 item 4: published models built by vLLM, wider limits
            import realcalls_models
            from vllm.config import AttentionConfig

            from tests.differential.vllm_space import vllm_wide_cases

            realcalls_models.platform_answers()
            switch = "use_trtllm_attention" in {f.name for f in dataclasses.fields(AttentionConfig)}
            drawn = vllm_wide_cases(args.seed, args.n, gpu_key, realcalls_models.corpus_heads(),
                                    trtllm_switch=switch, sm10=cc[0] == 10)
        else:
            from tests.differential.space import vllm_cases

            drawn = vllm_cases(args.seed, args.n, gpu_key, head_sizes=sizes, trtllm_gpu=cc[0] == 10)
        cases = []
        for d in drawn:
            source = d.pop("source")
            if args.search is not None:
                d["search"] = args.search
            d["legacy_search"], d["inject"] = args.legacy_search, args.inject
            c = Case(**d)
            cases.append(c)
            GROUP_GPU[c.name] = gpu_key
            SOURCES[c.name] = source
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [c for c in cases if c.name in wanted]
    cpu_kernels(module)
    cpu_only_impl_buffers()  # vLLM 0.33's FlashInferImpl: TRT-LLM counter buffer on "cuda" -> CPU
    if hasattr(module, "get_device_sm_count"):  # ... and the SM count: this scenario's GPU (the stand-in)
        import flashinfer.utils

        module.get_device_sm_count = flashinfer.utils.get_device_sm_count
    import importlib.metadata as md

    meta = {"vllm": md.version("vllm"), "flashinfer": md.version("flashinfer-python"), "gpu": [name, sms, list(cc)],
            "cubins_visible": cubins, "group": args.group}
    for phase in phases:
        if phase == "guard":
            # the plugin arrives through vLLM's own loader (entry point group vllm.general_plugins)
            plugins_loaded_before = bool(vllm.plugins.plugins_loaded)
            vllm.plugins.load_general_plugins()
            if args.understate:
                _understate()
            get = module.FlashInferMetadataBuilder.__dict__.get("_get_workspace_buffer")
            meta_phase = {"plugins_loaded_before": plugins_loaded_before,
                          "guard_wrapped": bool(getattr(get, "__flashinfer_guard__", False))}
        else:
            meta_phase = {"plugins_loaded": bool(vllm.plugins.plugins_loaded)}
        for case in cases:
            res = run_or_redraw(case, rec, module, args)
            res.update(meta)
            res.update(meta_phase)
            if case.name in SOURCES and "source" not in res:
                res["source"] = SOURCES[case.name]
            res["phase"] = phase
            result(**res)


if __name__ == "__main__":
    main()
