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

from guard_core.patching import guarded, unwrap_attr, when_imported, wrap_attr

from ._log import get_log

BACKEND = "vllm.v1.attention.backends.flashinfer"
BUILDER = "FlashInferMetadataBuilder"
NATIVE_VAR = "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"

_patched: list[tuple[object, str]] = []


def install(settings) -> None:
    if settings.workspace == "off":
        # one line, when vLLM's FlashInfer backend is actually used
        when_imported(BACKEND, _on_backend_off, key="vllm_guard.workspace.off")
        return
    when_imported(BACKEND, _on_backend, key="vllm_guard.workspace")


def uninstall() -> None:
    for owner, name in reversed(_patched):
        unwrap_attr(owner, name)
    _patched.clear()


def _on_backend_off(module) -> None:
    get_log().info_once("workspace-off", "workspace: off (FLASHINFER_GUARD_WORKSPACE=off); vLLM sizes it")


def _on_backend(module) -> None:
    guarded(get_log(), "workspace", "workspace guard", _patch_backend, module)


def _patch_backend(module) -> None:
    cls = getattr(module, BUILDER, None)
    if cls is None or not callable(getattr(cls, "_get_workspace_buffer", None)):
        get_log().info_once(
            "workspace-na", f"workspace: {BACKEND}.{BUILDER}._get_workspace_buffer not found: not applicable on this version"
        )
        return

    def make_get(orig):
        def _get_workspace_buffer(self, *args, **kwargs):
            if getattr(self, "_workspace_buffer", None) is None:
                buf = guarded(get_log(), "workspace", "workspace sizing", _allocate, self, module, default=None)
                if buf is not None:
                    self._workspace_buffer = buf
            return orig(self, *args, **kwargs)

        return _get_workspace_buffer

    if wrap_attr(cls, "_get_workspace_buffer", make_get):
        _patched.append((cls, "_get_workspace_buffer"))

    if callable(getattr(cls, "set_workspace_buffer", None)):
        def make_set(orig):
            def set_workspace_buffer(self, workspace_buffer, *args, **kwargs):
                own = guarded(get_log(), "workspace", "workspace sizing (shared buffer)",
                              _check_shared, self, module, workspace_buffer, default=None)
                if own is not None:
                    workspace_buffer = own
                return orig(self, workspace_buffer, *args, **kwargs)

            return set_workspace_buffer

        if wrap_attr(cls, "set_workspace_buffer", make_set):
            _patched.append((cls, "set_workspace_buffer"))


# --- reading vLLM ---------------------------------------------------------

def server_bytes(builder, module) -> tuple[int | None, int | None]:
    """(what vLLM would allocate, the user-set native size or None).

    None for the first item when vLLM runs batch-invariant (fixed split
    sizes, split-KV disabled: no planner scratch to size).
    """
    envs = module.envs
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


def _kv_dtype_bytes(builder) -> int:
    dt = getattr(builder, "kv_cache_dtype", None)
    size = getattr(dt, "itemsize", None)
    if isinstance(size, int) and size > 0:
        return size
    return 1  # fp8 / nvfp4 strings


def describe(builder, gpu):
    """(AttentionLayout, ServingLimits, Planners) of this builder."""
    from guard_core.sizing import AttentionLayout, Planners, ServingLimits

    vc = builder.vllm_config
    dcp = int(getattr(builder, "dcp_world_size", 1) or 1)
    spec = getattr(builder, "kv_cache_spec", None)
    head_dim = int(builder.head_dim)
    head_dim_vo = getattr(spec, "head_size_v", None) or head_dim
    window_left = getattr(builder, "window_left", -1)
    layout = AttentionLayout(
        num_qo_heads=int(builder.num_qo_heads) * dcp,  # DCP plans with all ranks' heads
        num_kv_heads=int(builder.num_kv_heads),
        head_dim_qk=head_dim,
        head_dim_vo=int(head_dim_vo),
        page_size=int(builder.page_size),
        kv_dtype_bytes=_kv_dtype_bytes(builder),
        window_left=int(window_left) if isinstance(window_left, int) else -1,
    )

    nvfp4 = bool(getattr(builder, "is_kvcache_nvfp4", False))
    trtllm_decode = bool(getattr(builder, "use_trtllm_decode_attention", False))
    if nvfp4:
        planners = Planners(prefill="trtllm", decode="trtllm")
    else:
        sm90 = gpu is not None and tuple(gpu.cc) == (9, 0)
        prefill = "fa3" if sm90 else "fa2"  # prefill wrappers' "auto" backend
        if trtllm_decode:
            decode = "trtllm"
        elif sm90 and layout.kv_dtype_bytes == 1:
            decode = "none"  # FP8 tensor-core decode on SM90 runs FA3 (int buffer only)
        else:
            decode = "fa2"  # vLLM decodes with tensor cores: the prefill planner
        planners = Planners(prefill=prefill, decode=decode)

    spec_cfg = getattr(vc, "speculative_config", None)
    draft = int(getattr(spec_cfg, "num_speculative_tokens", 0) or 0) if spec_cfg is not None else 0
    capture: tuple[int, ...] = ()
    max_bs = getattr(builder, "_decode_cudagraph_max_bs", None)
    if getattr(builder, "enable_cuda_graph", False) and max_bs:
        sizes = getattr(vc.compilation_config, "cudagraph_capture_sizes", None) or ()
        capture = tuple(int(s) for s in sizes if int(s) <= int(max_bs))
        if not capture:
            capture = (int(max_bs),)
    threshold = int(getattr(builder, "reorder_batch_threshold", 1) or 1)
    limits = ServingLimits(
        capture_sizes=capture,
        max_num_seqs=_max_num_seqs(builder),
        max_num_batched_tokens=_max_num_batched_tokens(builder),
        draft_tokens=draft,
        eager=True,
        max_model_len=int(getattr(builder.model_config, "max_model_len", 0) or 0) or None,
        # verify batches run through FlashInfer's decode graphs only when
        # the builder treats spec tokens as decodes without TRT-LLM
        verify_in_graph=threshold > 1 and planners.decode != "trtllm",
    )
    return layout, limits, planners


def decide(builder, module):
    """The WorkspaceDecision for this builder, or None (stand down silently)."""
    from guard_core import gpus
    from guard_core.decisions import decide_workspace
    from guard_core.settings import get_settings
    from guard_core.sizing import compute_requirement
    from guard_core.versions import flashinfer_version

    settings = get_settings()
    server, user = server_bytes(builder, module)
    if server is None:
        get_log().info_once("workspace-bi", "workspace: ok, VLLM_BATCH_INVARIANT disables split-KV; vLLM sizes it")
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
    requirement = None
    layout = None
    if gpu is not None:
        layout, limits, planners = describe(builder, gpu)
        requirement = compute_requirement(layout, limits, gpu, fi, planners, caller="vllm")
    dec = decide_workspace(
        requirement, framework="vLLM", server_bytes=server, user_bytes=user, user_var=NATIVE_VAR,
        settings=settings, flashinfer_version=fi, layout=layout, gpu=gpu,
    )
    return dec, server


def _allocate(builder, module):
    """Our buffer when it must be larger than vLLM's, else None (vLLM allocates)."""
    dec, server = decide(builder, module)
    if dec is None:
        return None
    get_log().decision(dec, key="workspace:" + dec.line)
    if dec.allocate_bytes <= server:
        return None
    import torch

    return torch.zeros(dec.allocate_bytes, dtype=torch.uint8, device=builder.device)


def _check_shared(builder, module, buffer):
    """A builder handed a shared buffer (V2 model runner): keep sharing when
    it holds this builder's need (and an explicit size), else give this
    builder its own buffer, as large as it would have allocated itself."""
    dec, server = decide(builder, module)
    if dec is None or dec.action == "off":
        return None
    have = int(buffer.numel() * buffer.element_size())
    need = int(dec.numbers.get("need_bytes", 0))
    floor = dec.allocate_bytes if dec.action == "size" else need
    if have >= floor:
        return None
    own = max(dec.allocate_bytes, server)
    get_log().info_once(
        "workspace-shared:" + dec.line,
        f"workspace: shared buffer of {have / (1 << 20):.0f} MiB is below this builder's need "
        f"({need / (1 << 20):.1f} MiB); giving it its own {own / (1 << 20):.0f} MiB",
    )
    import torch

    return torch.zeros(own, dtype=torch.uint8, device=builder.device)
