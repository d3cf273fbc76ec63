"""Workspace guard: FlashInferMetadataBuilder's float workspace, sized exactly.

``FlashInferMetadataBuilder._get_workspace_buffer`` allocates one float
workspace per builder (394 MiB by default; from vLLM 0.26 at least
``max_num_batched_tokens * q_heads * head_dim * 16`` bytes). FlashInfer's
planner can ask for more at CUDA-graph capture (FlashInfer < 0.7.1 sizes its
split-KV scratch by packed query rows) and then aborts start-up.

The wrapper reads everything from the builder and its own ``vllm_config``,
lets guard_core compute the need over the whole serving envelope, and
allocates ``max(what vLLM would allocate, need)`` once. Where vLLM's own size
is enough it leaves the allocation to vLLM. ``set_workspace_buffer`` (the V2
model runner shares the first builder's buffer) is checked the same way.
"""

from __future__ import annotations

from guard_core.patching import PatchSet, guarded, when_imported
from guard_core.releases import NATIVE_VAR as _NATIVE_VARS
from guard_core.workspace_decision import is_out_of_memory

from ._log import get_log

BACKEND = "vllm.v1.attention.backends.flashinfer"
BUILDER = "FlashInferMetadataBuilder"
NATIVE_VAR = _NATIVE_VARS["vllm"]

_patches = PatchSet()  # the builder's wrapped methods, undone by uninstall()


def install(settings) -> None:
    if settings.workspace == "off":
        # one line, when vLLM's FlashInfer backend is actually used
        when_imported(BACKEND, _on_backend_off, key="vllm_guard.workspace.off")
        return
    when_imported(BACKEND, _on_backend, key="vllm_guard.workspace")
    # whatever the model might still miss: an overflowing plan() gets a buffer that fits
    from guard_core import safety_net

    safety_net.install(get_log())


def uninstall() -> None:
    from guard_core import safety_net

    _patches.undo()
    safety_net.uninstall()


def _on_backend_off(module) -> None:
    get_log().info_once("workspace-off", "workspace: off (FLASHINFER_GUARD_WORKSPACE=off); vLLM sizes it")


def _on_backend(module) -> None:
    guarded(get_log(), "workspace", "workspace guard", _patch_backend, module)


def _patch_backend(module) -> None:
    cls = getattr(module, BUILDER, None)
    if cls is None or not callable(getattr(cls, "_get_workspace_buffer", None)):
        from guard_core import releases
        from guard_core.versions import flashinfer_version

        get_log().missing_target("workspace", f"{BACKEND}.{BUILDER}._get_workspace_buffer",
                                 releases.line_label("vllm"), needed=releases.workspace_guard_needed(flashinfer_version()))
        return

    def make_get(orig):
        def _get_workspace_buffer(self, *args, **kwargs):
            if getattr(self, "_workspace_buffer", None) is not None:
                return orig(self, *args, **kwargs)
            plan = guarded(get_log(), "workspace", "workspace sizing", _plan_allocation, self, module, default=None)
            if plan is None:
                return orig(self, *args, **kwargs)
            try:
                with _raised_size_source(module, plan):
                    buf = orig(self, *args, **kwargs)
            except Exception as exc:
                if plan.target is None or not is_out_of_memory(exc):
                    raise
                # the device cannot hold the decided size (e.g. FLASHINFER_GUARD_WORKSPACE=200GiB):
                # vLLM's own size, as without the guard, and one warning
                get_log().warning_once(
                    "workspace-oom",
                    f"workspace: the device cannot hold {plan.target / (1 << 20):.0f} MiB "
                    f"({type(exc).__name__}); left to vLLM's own size ({(plan.server or 0) / (1 << 20):.0f} MiB)")
                self._workspace_buffer = None
                return orig(self, *args, **kwargs)
            guarded(get_log(), "workspace", "workspace sizing", _settle, self, module, plan, buf)
            return getattr(self, "_workspace_buffer", None) if getattr(self, "_workspace_buffer", None) is not None else buf

        return _get_workspace_buffer

    _patches.wrap(cls, "_get_workspace_buffer", make_get)

    if callable(getattr(cls, "set_workspace_buffer", None)):
        def make_set(orig):
            def set_workspace_buffer(self, workspace_buffer, *args, **kwargs):
                guarded(get_log(), "workspace", "workspace sizing (shared buffer)",
                        _grow_shared, self, module, workspace_buffer)
                return orig(self, workspace_buffer, *args, **kwargs)

            return set_workspace_buffer

        _patches.wrap(cls, "set_workspace_buffer", make_set)


# --- reading vLLM ---------------------------------------------------------

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
    capture = tuple(s for s in sizes if s <= max_bs)
    if not sizes:
        missing.append("cudagraph_capture_sizes")
        capture = tuple(range(1, max_bs + 1))
    return capture or (max_bs,)


def facts(builder, gpu):
    """What the core needs about this builder: (AttentionLayout, ServingLimits,
    PlannerFacts, kv dtype bytes options, missing facts)."""
    from guard_core.planner_choice import PlannerFacts, dtype_bytes, dtype_kind
    from guard_core.sizing import AttentionLayout, ServingLimits

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
        verify_in_graph = True  # unknown: the larger need
        if draft:
            missing.append("reorder_batch_threshold")
    else:
        # verify batches run through FlashInfer's decode graphs only when the
        # builder treats spec tokens as decodes
        verify_in_graph = int(threshold) > 1
    limits = ServingLimits(
        capture_sizes=capture,
        max_num_seqs=max_seqs,
        max_num_batched_tokens=_max_num_batched_tokens(builder),
        draft_tokens=draft,
        eager=True,
        max_model_len=int(getattr(builder.model_config, "max_model_len", 0) or 0) or None,
        verify_in_graph=verify_in_graph,
        capture_unit="tokens",
        one_token_graphs=False,
    )
    kv_options = None if kv_bytes else (2, 1)
    return layout, limits, pfacts, kv_options, missing


def workspace_facts(builder, gpu, fi):
    """This builder as the core's WorkspaceFacts (gpu None: nothing to size)."""
    from guard_core.workspace_decision import WorkspaceFacts

    if gpu is None:
        return WorkspaceFacts("vllm", fi)
    layout, limits, pfacts, kv_options, missing = facts(builder, gpu)
    return WorkspaceFacts("vllm", fi, gpu, layout, limits, pfacts, kv_options, tuple(missing))


def _warn(warnings) -> None:
    for key, text in warnings:
        get_log().warning_once(key, text)


def requirement(builder, gpu, fi):
    """The core's Requirement for this builder (planners from guard_core.planner_choice)."""
    from guard_core import workspace_decision

    computed = workspace_decision.need(workspace_facts(builder, gpu, fi))
    _warn(computed.warnings)
    return computed.requirement


def describe(builder, gpu):
    """(AttentionLayout, ServingLimits, Planners) of this builder (the dominant candidate)."""
    from guard_core.planner_choice import choose_planners

    layout, limits, pfacts, _, _ = facts(builder, gpu)
    return layout, limits, choose_planners(pfacts).planners


def decide(builder, module):
    """(WorkspaceDecision or None, what vLLM would allocate)."""
    from guard_core import gpus, workspace_decision
    from guard_core.settings import get_settings
    from guard_core.versions import flashinfer_version

    settings = get_settings()
    server, user = server_bytes(builder, module)
    if server is None:
        get_log().info_once("workspace-bi", "workspace: ok, VLLM_BATCH_INVARIANT plans with disable_split_kv "
                                            "(no split-KV scratch in this buffer); vLLM allocates 2 GiB")
        return None, None
    fi = flashinfer_version()
    if fi is None:
        get_log().info_once("workspace-nofi", "workspace: ok, FlashInfer not installed; vLLM sizes it")
        return None, server
    gpu = gpus.detect_gpu(getattr(builder, "device", None))
    if gpu is None and settings.workspace != "size":
        get_log().warning_once(
            "workspace-nogpu",
            f"workspace: no GPU properties for device {getattr(builder, 'device', None)}; "
            f"left to vLLM ({server / (1 << 20):.0f} MiB)",
        )
        return None, server
    out = workspace_decision.decide(workspace_facts(builder, gpu, fi), server_bytes=server, user_bytes=user,
                                    settings=settings)
    _warn(out.warnings)
    return out.decision, server


# --- applying -------------------------------------------------------------

class _Plan:
    __slots__ = ("decision", "server", "target")

    def __init__(self, decision, server, target):
        self.decision, self.server, self.target = decision, server, target


def _plan_allocation(builder, module):
    """What to do before vLLM allocates: None (stand down) or a _Plan whose
    target, when set, is the size vLLM's own size source must give.

    ``exact`` below what vLLM would allocate (the user's choice): our buffer of
    exactly the need goes in before vLLM's code runs, which then keeps it.
    """
    dec, server = decide(builder, module)
    if dec is None:
        return None
    if dec.action == "exact" and dec.allocate_bytes < (server or 0):
        import torch

        # below vLLM's own size: never more than the device would have given vLLM
        builder._workspace_buffer = torch.zeros(dec.allocate_bytes, dtype=torch.uint8, device=builder.device)
        get_log().decision(dec, key="workspace:" + dec.line)
        return None
    target = dec.allocate_bytes if dec.allocate_bytes > (server or 0) else None
    if target is None:
        get_log().decision(dec, key="workspace:" + dec.line)
    return _Plan(dec, server, target)


class _raised_size_source:
    """For the duration of vLLM's own allocation, vLLM's size source
    (``envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE``, read through the envs
    module's ``__getattr__``) answers at least the target. vLLM's own rules
    (batch invariance, the 0.26+ heuristic, a larger user size) still apply on
    top; the environment itself is never touched."""

    def __init__(self, module, plan):
        self.envs = getattr(module, "envs", None)
        self.target = plan.target if plan is not None else None
        self.had = False
        self.old = None

    def __enter__(self):
        if self.target is None or self.envs is None:
            self.target = None
            return self
        d = self.envs.__dict__
        self.had, self.old = NATIVE_VAR in d, d.get(NATIVE_VAR)
        current = int(getattr(self.envs, NATIVE_VAR))
        setattr(self.envs, NATIVE_VAR, max(current, int(self.target)))
        return self

    def __exit__(self, *exc):
        if self.target is None:
            return False
        try:
            if self.had:
                setattr(self.envs, NATIVE_VAR, self.old)
            else:
                delattr(self.envs, NATIVE_VAR)
        except Exception:
            pass
        return False


def _nbytes(buf) -> int:
    return int(buf.numel() * buf.element_size())


def _settle(builder, module, plan, buf) -> None:
    """After vLLM allocated: the line with what it really allocated; where the
    buffer is still below the target (vLLM sized it some other way), grow it."""
    if plan.target is None or buf is None:
        return
    have = _nbytes(buf)
    dec = plan.decision
    if have < plan.target:
        _grow(buf, plan.target)
        get_log().warning_once(
            "workspace-grown:" + dec.line,
            f"workspace: vLLM allocated {have / (1 << 20):.0f} MiB despite the raised size; "
            f"grown in place to {plan.target / (1 << 20):.0f} MiB")
    get_log().decision(dec, key="workspace:" + dec.line)


def _grow(buf, size: int) -> None:
    """Grow a workspace tensor in place: every holder of this tensor (the
    builder, FlashInfer wrappers made from it) sees the larger buffer."""
    buf.resize_(int(size))


def _grow_shared(builder, module, buffer) -> None:
    """A builder handed a shared buffer (V2 model runner): one buffer for all.
    When this builder needs more than it holds, grow that same buffer (before
    any CUDA graph is captured, as vLLM shares it at initialisation) instead of
    giving this builder a copy."""
    dec, server = decide(builder, module)
    if dec is None or dec.action == "off":
        return
    have = _nbytes(buffer)
    need = int(dec.numbers.get("need_bytes", 0))
    floor = dec.allocate_bytes if dec.action == "size" else need
    if have >= floor:
        return
    target = max(dec.allocate_bytes, floor)
    _grow(buffer, target)
    get_log().info_once(
        "workspace-shared:" + dec.line,
        f"workspace: shared buffer grown {have / (1 << 20):.0f} MiB -> {target / (1 << 20):.0f} MiB "
        f"for this builder's need ({need / (1 << 20):.1f} MiB)")
