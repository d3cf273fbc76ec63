"""Reading vLLM's FlashInferMetadataBuilder into the core's workspace facts.

The first of the workspace guard's two parts (the second, the patch rows and the
one apply, is ``vllm_guard.workspace``): everything the core needs is read from
the builder and its own ``vllm_config`` (``get_current_vllm_config()`` is not
reliable there) and from vLLM's size source, then handed to
``guard_core.decide.workspace.decide`` once per builder. Nothing here changes
a buffer.

The public seam (tests use it; the apply uses the same functions):

- ``read_facts(builder, gpu, flashinfer_version)``: the builder as a
  ``guard_core.decide.workspace.WorkspaceFacts`` (what could be read, and the
  names of what could not);
- ``server_bytes(builder, module)``: what vLLM would allocate, and the user's own
  size where it decides;
- ``decide(builder, module)``: the builder's ``BuilderDecision`` (facts, vLLM's
  size, the core's outcome), its once-warnings logged; None where the guard
  stands down (batch invariance, no FlashInfer, no GPU properties).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard_core.flashinfer.releases import NATIVE_VAR as _NATIVE_VARS

from ._log import get_log

__all__ = ["NATIVE_VAR", "BuilderDecision", "read_facts", "server_bytes", "decide"]

NATIVE_VAR = _NATIVE_VARS["vllm"]


def server_bytes(builder, module) -> tuple[int | None, int | None]:
    """(what vLLM would allocate, the user-set native size or None).

    Used for the decision's numbers only: the buffer itself is allocated by
    vLLM's own code, with its size source raised where the need is larger, and
    the size vLLM really allocated is what the log line reports.
    None for the first item when vLLM runs batch-invariant (fixed split
    sizes, split-KV disabled: no planner scratch to size).
    """
    envs = module.envs
    # VLLM_BATCH_INVARIANT: every plan() of this buffer passes disable_split_kv=True (no split-KV
    # scratch), cascade attention is off, and vLLM allocates 2 GiB. Verified per line in
    # v1/attention/backends/flashinfer.py (self.disable_split_kv = True: 0.19.1:547, 0.23.0:561,
    # 0.26.0:645, 0.29.0:697, 0.32.0:763, 0.33.0:888; 2 GiB: 0.19.1:69, 0.23.0:79, 0.26.0:84,
    # 0.29.0:92, 0.32.0:98, 0.33.0:103); the one plan without it is DCP's ragged new-token plan
    # (SM-capped split), see docs/deterministic.md.
    if getattr(envs, "VLLM_BATCH_INVARIANT", False):
        return None, None
    size = int(getattr(envs, NATIVE_VAR))
    is_set = getattr(envs, "is_set", None)
    user = size if (callable(is_set) and is_set(NATIVE_VAR)) else None
    per_elem = getattr(module, "FLASHINFER_PREFILL_WORKSPACE_BYTES_PER_ELEM", None)
    if per_elem is not None:  # vLLM 0.26+: the head-footprint heuristic
        mbt = _max_num_batched_tokens(builder)
        size = max(size, int(mbt) * int(builder.num_qo_heads) * int(builder.head_dim) * int(per_elem))
        if user is not None and size > user:
            user = None  # vLLM's heuristic, not the user's size, decides what it allocates
    return size, user


def _max_num_batched_tokens(builder) -> int:
    v = getattr(builder, "max_num_batched_tokens", None)
    return int(v if v is not None else builder.vllm_config.scheduler_config.max_num_batched_tokens)


def _max_num_seqs(builder) -> int:
    v = getattr(builder, "max_num_reqs", None)
    return int(v if v is not None else builder.vllm_config.scheduler_config.max_num_seqs)


_MISSING = object()


def _kv_dtype(builder, vc):
    """The KV-cache dtype as vLLM plans with it (a torch dtype, 'nvfp4', a
    cache_dtype string), or None when nothing says."""
    for v in (getattr(builder, "kv_cache_dtype", None), getattr(builder, "cache_dtype", None),
              getattr(getattr(vc, "cache_config", None), "cache_dtype", None)):
        if v is not None:
            return v
    return None


def _trtllm_facts(builder):
    """(TRT-LLM attention usable, TRT-LLM decode) as the builder decided, None where unknown."""
    dec = getattr(builder, "use_trtllm_decode_attention", _MISSING)
    if dec is _MISSING:
        return None, None
    return bool(dec), bool(dec)


def _query_dtypes(builder):
    """The query dtype per phase as this builder plans with it.

    vLLM 0.26+ fixes both at construction (``q_data_type_prefill`` /
    ``q_data_type_decode``): they are read as they are. Up to 0.25 the builder
    holds one ``q_data_type`` that ``build()`` may still lower to the model dtype
    when TRT-LLM attention is not used: the core derives it ("derive"). A
    builder with neither is unknown (None: the core sizes both)."""
    p = getattr(builder, "q_data_type_prefill", _MISSING)
    d = getattr(builder, "q_data_type_decode", _MISSING)
    if p is not _MISSING and d is not _MISSING:
        return str(p), str(d)
    if getattr(builder, "q_data_type", _MISSING) is not _MISSING:
        return "derive", "derive"
    return None, None


def _capture_sizes(builder, vc, draft, max_seqs, missing):
    """CUDA-graph capture sizes (tokens) this builder plans for; where the
    builder does not say, the config's, and where that is unknown too, every
    size up to vLLM's own ceiling (the larger need)."""
    comp = getattr(vc, "compilation_config", None)
    sizes = tuple(int(s) for s in (getattr(comp, "cudagraph_capture_sizes", None) or ()))
    enabled = getattr(builder, "enable_cuda_graph", _MISSING)
    if enabled is _MISSING:
        mode = getattr(comp, "cudagraph_mode", None)
        decode_mode = getattr(mode, "decode_mode", None)
        try:
            enabled = str(getattr(decode_mode(), "name", decode_mode())) == "FULL" if callable(decode_mode) else None
        except Exception:
            enabled = None
        if enabled is None:
            missing.append("enable_cuda_graph")
            enabled = True
    if not enabled:
        return ()
    max_bs = getattr(builder, "_decode_cudagraph_max_bs", _MISSING)
    if max_bs is _MISSING or not max_bs:
        if max_bs is _MISSING:
            missing.append("_decode_cudagraph_max_bs")
        max_bs = (1 + draft) * max_seqs
        cap = getattr(comp, "max_cudagraph_capture_size", None)
        if isinstance(cap, int) and cap > 0:
            max_bs = min(max_bs, cap)
    max_bs = int(max_bs)
    # every pure decode batch of at most max_bs tokens plans the CUDA-graph wrapper, captured or
    # not (v1/attention/backends/flashinfer.py 0.23.0:1210-1214, 0.33.0:1938-1942), and its need
    # grows with the batch: max_bs itself is planned even where it is no capture size (issue 27:
    # --max-num-seqs 353 plans 353 one-token decodes with the graph flag, the list stops at 352)
    capture = tuple(sorted({s for s in sizes if s <= max_bs} | {max_bs}))
    if not sizes:
        missing.append("cudagraph_capture_sizes")
        capture = tuple(range(1, max_bs + 1))
    return capture


def _facts(builder, gpu):
    """What the core needs about this builder: (AttentionLayout, ServingLimits,
    PlannerFacts, kv dtype bytes options, missing facts)."""
    from guard_core.flashinfer.planner_choice import PlannerFacts, dtype_bytes, dtype_kind
    from guard_core.flashinfer.sizing import AttentionLayout
    from guard_core.decide.workspace import vllm_graph_limits

    vc = builder.vllm_config
    missing: list[str] = []
    dcp = getattr(builder, "dcp_world_size", _MISSING)
    if dcp is _MISSING:
        dcp = getattr(getattr(vc, "parallel_config", None), "decode_context_parallel_size", None)
        if dcp is None:
            missing.append("dcp_world_size")
            dcp = 1
    dcp = max(1, int(dcp or 1))
    spec = getattr(builder, "kv_cache_spec", None)
    head_dim = int(builder.head_dim)
    head_dim_vo = getattr(spec, "head_size_v", None) or head_dim
    window_left = getattr(builder, "window_left", -1)
    kv = _kv_dtype(builder, vc)
    kind = dtype_kind(kv)
    if kind is None:
        missing.append(f"KV-cache dtype ({kv!r})")
    kv_bytes = dtype_bytes(kind)
    layout = AttentionLayout(
        num_qo_heads=int(builder.num_qo_heads),
        num_kv_heads=int(builder.num_kv_heads),
        head_dim_qk=head_dim,
        head_dim_vo=int(head_dim_vo),
        page_size=int(builder.page_size),
        kv_dtype_bytes=kv_bytes or 2,
        window_left=int(window_left) if isinstance(window_left, int) else -1,
    )
    trt_usable, trt_decode = _trtllm_facts(builder)
    if trt_usable is None:
        missing.append("use_trtllm_decode_attention")
    q_prefill, q_decode = _query_dtypes(builder)
    ac = getattr(vc, "attention_config", None)
    force = getattr(ac, "use_trtllm_attention", None)
    pfacts = PlannerFacts(
        framework="vllm", cc=tuple(gpu.cc) if gpu is not None else None,
        kv_dtype=str(kv) if kind is not None else None,
        trtllm_attention=trt_usable, trtllm_decode=trt_decode, dcp_size=dcp, tensor_core_decode=True,
        q_prefill=q_prefill, q_decode=q_decode,
        trtllm_force=force if isinstance(force, bool) else None,
        has_sinks=bool(getattr(builder, "has_sinks", False)),
        noncausal=bool(getattr(ac, "use_non_causal", False)),
        q_quant_disabled=bool(getattr(ac, "disable_flashinfer_q_quantization", False)))

    spec_cfg = getattr(vc, "speculative_config", None)
    draft = int(getattr(spec_cfg, "num_speculative_tokens", 0) or 0) if spec_cfg is not None else 0
    max_seqs = _max_num_seqs(builder)
    capture = _capture_sizes(builder, vc, draft, max_seqs, missing)
    threshold = getattr(builder, "reorder_batch_threshold", _MISSING)
    if threshold is _MISSING or threshold is None:
        threshold = None  # unknown: the larger need
        if draft:
            missing.append("reorder_batch_threshold")
    # the graphs vLLM captures: one core rule for the adapter and `plan`
    limits = vllm_graph_limits(
        capture_sizes=capture,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=_max_num_batched_tokens(builder),
        draft_tokens=draft,
        max_model_len=int(getattr(builder.model_config, "max_model_len", 0) or 0) or None,
        reorder_batch_threshold=threshold,
        fa2_native_decode=getattr(builder, "use_fa2_native_decode", False) is True,
    )
    kv_options = None if kv_bytes else (2, 1)
    return layout, limits, pfacts, kv_options, missing


def read_facts(builder, gpu, flashinfer_version: str):
    """This builder as the core's ``WorkspaceFacts`` (``gpu`` None: nothing to size,
    only a set size applies)."""
    from guard_core.decide.workspace import WorkspaceFacts

    if gpu is None:
        return WorkspaceFacts("vllm", flashinfer_version)
    layout, limits, pfacts, kv_options, missing = _facts(builder, gpu)
    return WorkspaceFacts("vllm", flashinfer_version, gpu, layout, limits, pfacts, kv_options, tuple(missing))


@dataclass(frozen=True)
class BuilderDecision:
    """One builder's decision, as the apply gets it."""

    facts: Any  # guard_core.decide.workspace.WorkspaceFacts
    server_bytes: int  # what vLLM would allocate (server_bytes)
    outcome: Any  # guard_core.decide.workspace.WorkspaceOutcome

    @property
    def decision(self):
        """The guard_core.decide.records.WorkspaceDecision to apply."""
        return self.outcome.decision


def _warn(warnings) -> None:
    for key, text in warnings:
        get_log().warning_once(key, text)


def decide(builder, module) -> BuilderDecision | None:
    """The facts of this builder, vLLM's own size and the user's, through one
    ``guard_core.decide.workspace.decide``; its warnings logged once. None, with
    one line saying why, where the guard stands down. Changes no buffer."""
    from guard_core import gpus
    from guard_core.decide import workspace as workspace_decision
    from guard_core.runtime.settings import get_settings
    from guard_core.versions import flashinfer_version

    settings = get_settings()
    server, user = server_bytes(builder, module)
    if server is None:
        get_log().info_once("workspace-bi", "workspace: ok, VLLM_BATCH_INVARIANT plans with disable_split_kv "
                                            "(no split-KV scratch in this buffer); vLLM allocates 2 GiB")
        return None
    fi = flashinfer_version()
    if fi is None:
        get_log().info_once("workspace-nofi", "workspace: ok, FlashInfer not installed; vLLM sizes it")
        return None
    gpu = gpus.detect_gpu(getattr(builder, "device", None))
    if gpu is None and settings.workspace != "size":
        get_log().warning_once(
            "workspace-nogpu",
            f"workspace: no GPU properties for device {getattr(builder, 'device', None)}; "
            f"left to vLLM ({server / (1 << 20):.0f} MiB)",
        )
        return None
    facts = read_facts(builder, gpu, fi)
    computed = None
    if settings.workspace != "off" and facts.gpu is not None and facts.layout is not None:
        from guard_core.flashinfer.ask import cross_check

        computed = cross_check(workspace_decision.need(facts), _flashinfer_asker(builder, facts))
    out = workspace_decision.decide(facts, server_bytes=server, user_bytes=user, settings=settings,
                                    computed=computed)
    _warn(out.warnings)
    return BuilderDecision(facts, server, out)


def _flashinfer_asker(builder, facts):
    """FlashInfer's own ``BatchPrefillWithPagedKVCacheWrapper.workspace_size(...)`` (FlashInfer
    >= 0.6.15, PR #3741) for a witness batch of the guard's envelope (guard_core.flashinfer.ask.
    cross_check), asked exactly as this builder's own prefill ``plan()`` asks: the wrapper built
    with ``backend="auto"`` and the same ``q``/``kv``/``o`` dtypes, head dim, window and soft-cap
    (vLLM 0.33.0 ``v1/attention/backends/flashinfer.py:1451-1456`` and ``:1870-1889``; 0.32.0 the
    same). FlashInfer loads its prefill module through ``get_batch_prefill_module``, a
    ``functools.cache`` keyed on exactly these (``flashinfer/prefill.py`` 0.7.2.post1 ``:534``), so
    asking loads the module the server's first prefill plan loads anyway, never a variant the
    server would not use (a JIT build or a second module at start-up). Where the builder's prefill
    is not that wrapper (DCP, attention sinks, an NVFP4 KV cache on TRT-LLM) or an argument cannot
    be read, nothing is asked (None). One wrapper, made on first use (FlashInfer's constructor
    allocates its 8 MiB int buffer)."""
    state = {}

    def _args():
        import torch

        if getattr(builder, "use_dcp", False) or getattr(builder, "has_sinks", False) or any(
                getattr(builder, n, False) for n in ("nvfp4_trtllm", "is_kvcache_nvfp4")):
            return None
        q_dt = getattr(builder, "q_data_type_prefill", None) or getattr(builder, "q_data_type", None)
        kv_dt = getattr(builder, "kv_cache_dtype", None)
        o_dt = getattr(getattr(builder, "model_config", None), "dtype", None)
        window = getattr(builder, "window_left", None)
        if not all(isinstance(d, torch.dtype) for d in (q_dt, kv_dt, o_dt)) or not isinstance(window, int):
            return None
        return dict(causal=True, window_left=window, logits_soft_cap=getattr(builder, "logits_soft_cap", None),
                    q_data_type=q_dt, kv_data_type=kv_dt, o_data_type=o_dt)

    def ask(scenario):
        import flashinfer

        from guard_core.flashinfer.ask import asks_the_plan_module, workspace_size_of

        W = getattr(flashinfer, "BatchPrefillWithPagedKVCacheWrapper", None)
        if W is None or not hasattr(W, "workspace_size"):
            return None
        if not asks_the_plan_module(W):  # FlashInfer 0.7.4: another module variant (ask.MODULE_KEY_PARAMS)
            return None
        kw = _args()
        if kw is None:
            return None
        return workspace_size_of(W, state, getattr(builder, "device", None), scenario.witness, builder.page_size,
                                 builder.num_qo_heads, builder.num_kv_heads, builder.head_dim, "auto", **kw)

    return ask
