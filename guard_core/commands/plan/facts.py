"""Stage 4, ``build_facts``: one ``WorkspaceFacts`` per attention group (and per SGLang runner),
as the adapter reads its builder: the layout, the serving limits (deterministic mode's fixed
split included), the planner facts; and the sizes the server allocates.
"""

from __future__ import annotations

from guard_core.commands.plan.records import Command, FactsSet, ModelView, PlanUsageError, ServerConfig
from guard_core.deployment.server_defaults import sglang_tensor_core_decode, server_workspace, vllm_per_phase_builder
from guard_core.flashinfer.planner_choice import PlannerFacts, dtype_bytes, dtype_kind, vllm_query_dtypes
from guard_core.flashinfer.sizing import AttentionLayout
from guard_core.versions import is_version, parse_version

__all__ = ["build_facts"]


def build_facts(a, cmd: Command, server: ServerConfig, model: ModelView) -> FactsSet:
    """Stage 4: one ``WorkspaceFacts`` per attention group, as the adapter reads its builder
    (layout, limits, planner facts), and the sizes the server allocates."""
    from guard_core.decide.workspace import WorkspaceFacts

    L, fw, notes, defaults = cmd.launch, cmd.framework, cmd.notes, server.defaults
    unset = defaults.values.get("draft_tokens_unset")
    if unset is not None:  # a command these rules cannot size (sglang_defaults._sglang_eagle)
        raise PlanUsageError(unset.source)
    kv_dtype = _kv_dtype_for_bytes(a, server.kv_dtype, notes)
    kv_kind = dtype_kind(kv_dtype)
    kv_bytes = a.kv_dtype_bytes or dtype_bytes(kv_kind) or 2
    pfacts, pl_info = _planner_facts(a, fw, server.gpu, server.line, kv_dtype, kv_kind, model.rank_groups,
                                     model.dcp, server.deterministic)
    runners = _limits(fw, server, model, pfacts, notes)
    limits = runners[0][1]
    fixed_info = None
    if server.deterministic:
        limits, fixed_info = _deterministic_limits(a, L, limits, server.gpu, server.environ, notes)
        _check_kv_pool(fixed_info.get("kv_pool_tokens"), server.line)
        runners = [("", limits)]
    given = None
    if a.decode_planner or a.prefill_planner or a.decode_blocks_per_sm:
        given = (a.prefill_planner, a.decode_planner, a.decode_blocks_per_sm)
    page = defaults.get("page_size")
    if fw == "sglang":  # SGLang's FlashInfer backend plans page size 1 whatever --page-size says
        from guard_core.deployment.sglang_defaults import SGLANG_FLASHINFER_PAGE as page
    groups = [(g, runner, WorkspaceFacts(fw, server.flashinfer, server.gpu, _group_layout(g, page, kv_bytes), lim,
                                         pfacts, planners_given=given))
              for g in model.rank_groups for runner, lim in runners]
    top = max(model.rank_groups, key=lambda g: (g.num_qo_heads * (g.head_dim_vo + 1), g.head_dim_qk))
    server_bytes, server_src, user, buffer = _buffers(a, L, fw, server.line, server.model, limits, top.num_qo_heads,
                                                      top.head_dim_qk, server.deterministic)
    return FactsSet(groups, limits, kv_bytes, pl_info, server_bytes, server_src, user, buffer, fixed_info)


def _limits(fw, server: ServerConfig, model: ModelView, pfacts, notes: list):
    """The serving limits the adapter reads from the server: vLLM's builder through the core's
    one rule (``workspace_decision.vllm_graph_limits``: which graphs vLLM captures on this line)."""
    from guard_core.decide.workspace import vllm_graph_limits, vllm_reorder_batch_threshold, vllm_spec_decode_graphs

    defaults = server.defaults
    draft = defaults.get("draft_tokens") or 0
    if fw != "vllm":
        return _sglang_runners(server, draft, notes)
    spec_as_decode = _vllm_spec_as_decode(server, pfacts)
    threshold = vllm_reorder_batch_threshold(draft, spec_as_decode, model.dcp)
    capture = defaults.decode_graph_sizes
    if vllm_spec_decode_graphs(draft, spec_as_decode, model.dcp) is False and capture:
        capture = ()
        notes.append(f"speculative decoding without a FlashInfer builder that decodes {1 + draft}-token batches: vLLM "
                     "drops its FULL decode CUDA graphs to PIECEWISE (resolve_cudagraph_mode_and_sizes), so "
                     "FlashInfer plans every batch eagerly, verify batches as prefills")
    return [("", vllm_graph_limits(capture_sizes=capture, max_num_seqs=defaults.get("max_num_seqs"),
                                   max_num_batched_tokens=defaults.get("max_batched_tokens"), draft_tokens=draft,
                                   max_model_len=defaults.get("max_model_len"), reorder_batch_threshold=threshold,
                                   fa2_native_decode=_vllm_fa2_native_decode(server)))]


def _sglang_runners(server: ServerConfig, draft: int, notes: list) -> list:
    """SGLang's model runners, each with its own backend and limits (``sglang_runner_limits``,
    the adapter's reading): one without speculation; with it the target (verify graphs of the
    draft tokens + 1) and, for the EAGLE family, the draft worker (topk x bs decode requests)."""
    from guard_core.decide.workspace import sglang_runner_limits

    defaults = server.defaults
    base = dict(capture_sizes=defaults.decode_graph_sizes, max_num_seqs=defaults.get("max_num_seqs"),
                chunk=defaults.get("max_batched_tokens"), max_model_len=defaults.get("max_model_len"),
                request_pool=defaults.get("request_pool"))
    if not draft and "eagle_topk" not in defaults.values:
        return [("", sglang_runner_limits(**base, speculative=False))]
    out = [("target", sglang_runner_limits(**base, speculative=True, verify_q=draft + 1))]
    if "eagle_topk" in defaults.values:
        topk = defaults.get("eagle_topk")
        out.append(("draft", sglang_runner_limits(**base, speculative=True, draft_runner=True, topk=topk)))
        notes.append(f"the draft worker decodes topk x bs = {topk} x bs requests per step (SGLang's multi-step draft "
                     "backend, flashinfer_backend.py 0.5.5:1446, 0.5.23:2501); sized with the target's attention shape")
    return out


def _vllm_fa2_native_decode(server: ServerConfig) -> bool:
    """vLLM's ``use_fa2_native_decode`` on the simulated line and GPU: from 0.33, below SM90
    (``_use_fa2_native_decode``, v1/attention/backends/flashinfer.py 0.33.0:118-120; absent in 0.32.0)."""
    cc = tuple(server.gpu.cc)
    return bool(is_version(server.line) and parse_version(server.line) >= parse_version("0.33.0") and cc < (9, 0))


def _vllm_spec_as_decode(server: ServerConfig, pfacts) -> bool | None:
    """``supports_spec_as_decode`` of vLLM's FlashInfer builder on the simulated line and GPU
    (see ``workspace_decision.vllm_reorder_batch_threshold``): TRT-LLM decode (the planner
    facts' TRT-LLM attention; None: unknown), and from 0.33 FA2's native decode below SM90."""
    if _vllm_fa2_native_decode(server):
        return True
    return pfacts.trtllm_attention


def _planner_facts(a, fw, gpu, line, kv_dtype, kv_kind, rank_groups, dcp_v: int, det: bool):
    """(PlannerFacts, what the report says about them): the facts the adapter reads from the
    builder (TRT-LLM attention, tensor-core decode, the query dtype per phase), for the
    core's one planner choice."""
    top = max(rank_groups, key=lambda g: (g.num_qo_heads * (g.head_dim_vo + 1), g.head_dim_qk))
    q, kv = top.num_qo_heads, top.num_kv_heads
    if fw == "vllm":
        trt = {"on": True, "off": False}.get(getattr(a, "trtllm_attention", None))
        if trt is not None:
            trt_src = f"TRT-LLM attention {a.trtllm_attention} (given)"
        elif gpu.cc[0] == 10:
            trt_src = "TRT-LLM attention unknown (SM10x: usable when FlashInfer's cubins are present)"
        else:
            trt, trt_src = False, f"no TRT-LLM attention off SM10x (cc {gpu.cc[0]}.{gpu.cc[1]})"
        tcd, tcd_why = True, "vLLM always decodes with tensor cores"
    else:
        trt, trt_src = False, ""
        tcd, tcd_why = sglang_tensor_core_decode(kv_kind, q, kv)
    if det:
        # flashinfer_backend.py: decode_use_tensor_cores = True in this mode (0.5.5:175, 0.5.23:443)
        tcd, tcd_why = True, "deterministic inference forces tensor-core decode"
    q_prefill = q_decode = "derive"
    if fw == "vllm" and vllm_per_phase_builder(line):
        # vLLM 0.26+ sets the query dtype per phase itself (get_q_data_type); the rule gives
        # dtype kinds, the planner choice takes dtype names: an FP8 query is the KV cache's own
        # dtype (q_data_type = kv_cache_dtype; e4m3 or e5m2 matters to the TRT-LLM prefill rule)
        qp_kind, qd_kind = vllm_query_dtypes(gpu.cc, kv_kind, getattr(a, "trtllm_attention", None) == "off")
        q_prefill, q_decode = (kv_dtype if k == "fp8" else _KIND_NAME.get(k, k) for k in (qp_kind, qd_kind))
    pfacts = PlannerFacts(framework=fw, cc=gpu.cc, kv_dtype=kv_dtype, trtllm_attention=trt,
                          dcp_size=dcp_v, tensor_core_decode=tcd, q_prefill=q_prefill, q_decode=q_decode)
    notes = []
    if a.decode_planner or a.prefill_planner:
        notes.append("planner given: " + ", ".join(
            f"{n} {v}" for n, v in (("decode", a.decode_planner), ("prefill", a.prefill_planner)) if v))
    return pfacts, {"tcd": tcd, "tcd_why": tcd_why, "trt_src": trt_src, "notes": notes}


def _buffers(a, L, fw, line, facts, limits, q: int, dqk: int, det: bool):
    """(the server's own buffer, where that size comes from, the user's native size where it
    decides (the adapter's ``user_bytes``), the buffer checked: --workspace or the server's)."""
    own = server_workspace(fw, line, architecture=facts.architecture, max_num_batched_tokens=limits.max_num_batched_tokens,
                           q_heads=q, head_dim=dqk)
    server, server_src = own.value, own.source
    user = None
    if L and L.workspace_bytes and not a.workspace:
        server, server_src = _native_buffer(fw, line, facts.architecture, L, server, server_src,
                                            limits.max_num_batched_tokens, q, dqk)
        user = L.workspace_bytes if server == L.workspace_bytes else None
    if det:
        user = None
        from guard_core.decide.fixed_split import SGLANG_FORCED_BYTES

        server = SGLANG_FORCED_BYTES
        server_src = ("--enable-deterministic-inference: SGLang forces SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB, over "
                      "a user's export (flashinfer_backend.py 0.5.5:183, 0.5.20:423, 0.5.23:451; PR #30244 open)")
    if a.workspace:
        from guard_core.runtime.settings import parse_size
        buffer = parse_size(a.workspace)
        if buffer is None:
            raise PlanUsageError(f"--workspace must be a size such as 394MiB, 1GiB or a byte count, got {a.workspace!r}")
    else:
        buffer = server
    return server, server_src, user, buffer


def _native_buffer(fw, line, architecture, L, server, server_src, tokens, q, dqk):
    """The buffer the server allocates with its own workspace variable set (issue #22)."""
    from guard_core.deployment.server_defaults import SGLANG_LARGE, sglang_default_workspace, vllm_workspace
    user = L.workspace_bytes
    if fw == "vllm":
        own = vllm_workspace(line, tokens, q, dqk, user=user, user_source=L.workspace_source)
        return own.value, own.source
    if sglang_default_workspace(line, architecture) == SGLANG_LARGE:
        # SGLang sets the variable to 512 MiB for its fixed architecture list, over the user's value
        # (layers/attention/flashinfer_backend.py: envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.set(512 MiB))
        return server, f"{server_src}; {L.workspace_source} is overridden by SGLang for {architecture}"
    return user, L.workspace_source


def _check_kv_pool(pool, line) -> None:
    """A KV pool SGLang would refuse at start-up is refused here too (not sized to "need 0")."""
    from guard_core.decide.fixed_split import sglang_min_kv_pool_tokens

    least = sglang_min_kv_pool_tokens(line)
    if pool is not None and pool < least:
        raise PlanUsageError(f"a KV pool of {pool} tokens (--kv-pool-tokens / --max-total-tokens): SGLang {line} "
                             f"refuses to start under {least} (\"Memory pool size is too small\", "
                             "managers/tp_worker.py)")


def _deterministic_limits(a, L, limits, gpu, environ: dict, notes):
    """SGLang --enable-deterministic-inference: the split tile sizes (from the command's
    leading assignments, else SGLang's defaults 4096 / 2048), disable_split_kv graphs, the
    KV pool when given; the longest context is required."""
    from dataclasses import replace

    from guard_core.decide.fixed_split import split_sizes_from_env

    from guard_core.deployment.launch_command import READ_ENV

    env = {k: environ[k] for k in READ_ENV if k in environ}
    prefill, decode, env_notes = split_sizes_from_env(env)
    notes.extend(env_notes)
    if not limits.max_model_len:
        raise PlanUsageError("deterministic inference sizes the workspace by the longest prompt: give --max-model-len "
                             "(--context-length in the command) or a model whose config.json has "
                             "max_position_embeddings")
    pool = getattr(a, "kv_pool_tokens", None) or (L.kv_pool_tokens if L else None)
    if gpu.cc[0] not in (10, 12) and not (L and "flashinfer" in " ".join(
            b for b in (L.attention_backend, L.decode_attention_backend, L.prefill_attention_backend) if b)):
        notes.append(f"deterministic inference on cc {gpu.cc[0]}.{gpu.cc[1]}: SGLang picks fa3 unless "
                     "--attention-backend flashinfer (0.5.5 server_args.py:1800-1812); the figures hold with FlashInfer")
    if pool is None:
        notes.append("deterministic decode sized for one full-context request plus one-token requests; give "
                     "--kv-pool-tokens (SGLang's max_total_num_tokens) for the pool's bound")
    limits = replace(limits, fixed_split_prefill=prefill, fixed_split_decode=decode, disable_graph_kv_split=True,
                     kv_pool_tokens=pool)
    info = {"mode": "deterministic", "prefill_split_tile_size": prefill, "decode_split_tile_size": decode,
            "split_source": ", ".join(f"{k}={v}" for k, v in env.items()) or "SGLang's defaults",
            "kv_pool_tokens": pool}
    return limits, info


_KIND_NAME = {"16bit": "bfloat16", "fp8": "fp8_e4m3", "fp4": "nvfp4", "32bit": "float32"}


def _kv_dtype_for_bytes(a, kv_dtype: str, notes: list) -> str:
    """``--kv-dtype-bytes 1`` without a KV-cache dtype is an FP8 cache: the planner
    choice must see the same dtype ``--kv-cache-dtype fp8`` gives (FA2 vs FA3 on SM90)."""
    b = getattr(a, "kv_dtype_bytes", None)
    if b is None or kv_dtype not in (None, "auto"):
        return kv_dtype
    if b == 1:
        notes.append("--kv-dtype-bytes 1: an FP8 KV cache (as --kv-cache-dtype fp8)")
        return "fp8"
    return kv_dtype


def _group_layout(g, page_size: int, kv_bytes: int) -> AttentionLayout:
    """The per-rank layout FlashInfer plans for one group. Sliding layers plan with
    ``window_left = window - 1`` (vLLM's builder window_left; the prefill plans
    clip by it). Chunked local attention (Llama 4) is sized as full attention:
    its virtual batches never need more than a full-attention batch of the same tokens."""
    window_left = (g.window - 1) if (g.kind == "sliding" and g.window) else -1
    return AttentionLayout(g.num_qo_heads, g.num_kv_heads, g.head_dim_qk, g.head_dim_vo,
                           page_size, kv_bytes, window_left)
