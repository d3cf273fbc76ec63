"""Gathering facts: what SGLang's model runner says about one FlashInferAttnBackend.

``read(module, runner)`` describes the backend's attention in framework-free terms
(guard_core.decide.workspace.WorkspaceFacts): heads per attention-TP rank, head
dims, page size, KV dtype, whether decode runs on tensor cores (SGLang's own
``should_use_tensor_core``, as its backend takes it), the decode CUDA-graph batch
sizes, speculative draft tokens, chunked prefill, deterministic inference's split
sizes, plus the GPU (guard_core.gpus.detect_gpu) and the installed FlashInfer
version. What it cannot read is named in ``WorkspaceFacts.missing`` (the core sizes
it both ways and keeps the larger need). Nothing here decides or patches anything:
the decision is guard_core's, the one apply is workspace.py's.

The readers follow SGLang's layouts: the resolved config bags of SGLang >= 0.5.19
(``sglang.srt.runtime_context``: ``get_exec()``, ``get_spec()``, ...), else
``server_args``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["BackendFacts", "read", "deterministic", "attention_backends"]


@dataclass(frozen=True)
class BackendFacts:
    """What one backend's runner says: the core's facts record, and what the apply and
    the fixed-split decision need besides."""

    workspace: Any  # guard_core.decide.workspace.WorkspaceFacts
    fixed_split: bool = False  # deterministic inference: SGLang plans with fixed split sizes
    device: Any = None  # the runner's device (its memory bounds the fixed-split buffer)


def read(module, runner) -> BackendFacts | None:
    """The facts of the backend SGLang builds in ``module`` (its flashinfer_backend, or a
    stand-in with ``should_use_tensor_core``) for ``runner``; None, with one info line,
    where FlashInfer is not installed or no CUDA GPU is visible (nothing to size)."""
    from guard_core.decide import workspace as workspace_decision
    from guard_core.gpus import detect_gpu
    from guard_core.flashinfer.planner_choice import PlannerFacts
    from guard_core.versions import flashinfer_version

    from ._log import log

    fi = flashinfer_version()
    if fi is None:
        log().info_once("workspace.nofi", "workspace: FlashInfer is not installed; nothing to size")
        return None
    missing: list[str] = []
    layout, kv_dtype, kv_options, tc = _read_layout(module, runner, missing)
    limits, fixed = _read_limits(runner, missing)
    device = getattr(runner, "device", None)
    gpu = detect_gpu(device)
    if gpu is None:
        log().info_once("workspace.nogpu", "workspace: no CUDA GPU visible to this process; nothing to size")
        return None
    facts = workspace_decision.WorkspaceFacts(
        "sglang", fi, gpu, layout, limits,
        PlannerFacts(framework="sglang", cc=tuple(gpu.cc), kv_dtype=None if kv_dtype is None else str(kv_dtype),
                     tensor_core_decode=tc),
        kv_options, tuple(missing))
    return BackendFacts(facts, fixed_split=fixed is not None, device=device)


def _attn_tp_size():
    """(attention TP size, decode-context-parallel size) of this rank."""
    try:  # SGLang >= 0.5.19: the runtime context
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        return int(par.attn_tp_size), int(getattr(par, "attn_dcp_size", 1) or 1)
    except Exception:
        pass
    from sglang.srt.layers.dp_attention import get_attention_tp_size

    return int(get_attention_tp_size()), 1


def _bag(name):
    """A resolved config bag of SGLang >= 0.5.19 (get_exec(), get_spec(), ...) or None."""
    try:
        import sglang.srt.runtime_context as rc

        return getattr(rc, "get_" + name)()
    except Exception:
        return None


def _first(*candidates):
    for c in candidates:
        if c is not None:
            return c
    return None


def _server_field(runner, name, bag=None):
    if bag is not None:
        b = _bag(bag)
        if b is not None:
            try:
                return getattr(b, name)
            except Exception:
                pass
    return getattr(getattr(runner, "server_args", None), name, None)


def _q_heads(mc) -> int:
    """Query heads SGLang plans with: the largest per-layer count where the config has one
    (0.5.23 plans get_max_num_attention_heads()), else num_attention_heads."""
    fn = getattr(mc, "get_max_num_attention_heads", None)
    if callable(fn):
        try:
            return int(fn())
        except Exception:
            pass
    return int(mc.num_attention_heads)


def _capture_sizes(runner, missing=None) -> tuple:
    """Decode CUDA-graph batch sizes in SGLang's list (empty when CUDA graphs are off); the
    core cuts them at the request pool (``sglang_runner_limits``).

    When graphs are on but no size can be read, the largest batch SGLang could capture
    (its request pool) stands in, and the missing input is named."""
    if _server_field(runner, "disable_cuda_graph", "exec"):
        return ()
    sizes = None
    ex = _bag("exec")
    if ex is not None:
        try:
            sizes = list(ex.graph.cuda_graph_config.decode.bs)
        except Exception:
            sizes = None
    if sizes is None:
        sa = getattr(runner, "server_args", None)
        sizes = list(getattr(sa, "cuda_graph_bs", None) or [])
        if not sizes and getattr(sa, "cuda_graph_max_bs", None):
            sizes = [int(sa.cuda_graph_max_bs)]
    pool = getattr(getattr(runner, "req_to_token_pool", None), "size", None)
    if not sizes:
        if missing is not None:
            missing.append("CUDA-graph batch sizes")
        sizes = [int(pool)] if pool else [512]
    # cut at the request pool by the core's rule (workspace_decision.sglang_capture_sizes)
    return tuple(sorted({int(b) for b in sizes}))


def _nested(bag, *path):
    obj = bag
    for name in path:
        obj = getattr(obj, name)
    return obj


def deterministic(runner) -> bool:
    """--enable-deterministic-inference as the backend reads it: 0.5.2x
    ``get_exec().deterministic.enable_deterministic_inference`` (0.5.23
    flashinfer_backend.py:436-438), earlier ``server_args.enable_deterministic_inference``
    (0.5.5:168-170)."""
    ex = _bag("exec")
    if ex is not None:
        for path in (("deterministic", "enable_deterministic_inference"), ("enable_deterministic_inference",)):
            try:
                return bool(_nested(ex, *path))
            except Exception:
                pass
    return bool(getattr(getattr(runner, "server_args", None), "enable_deterministic_inference", False))


def attention_backends(runner) -> set:
    """The attention backends the server resolved (0.5.2x ``get_exec().kernel``, else server_args)."""
    out = set()
    ex = _bag("exec")
    for name in ("attention_backend", "prefill_attention_backend", "decode_attention_backend"):
        v = None
        if ex is not None:
            for path in (("kernel", name), (name,)):
                try:
                    v = _nested(ex, *path)
                    break
                except Exception:
                    pass
        if v is None:
            v = getattr(getattr(runner, "server_args", None), name, None)
        if v:
            out.add(str(v))
    return out



def _fixed_split_limits(limits, runner):
    """Deterministic inference (every line 0.5.5-0.5.23, flashinfer_backend.py 0.5.5:168-183,
    0.5.23:436-451): eager prefill/decode plan with SGLang's split tile sizes, read from the
    environment as its get_int_env_var does; CUDA graphs with disable_split_kv; the KV of one
    decode batch bounded by the pool (max_total_num_tokens; the radix cache is off with
    FlashInfer in this mode, 0.5.5 server_args.py:1830-1837)."""
    import os
    from dataclasses import replace

    from guard_core.decide.fixed_split import split_sizes_from_env

    prefill, decode, notes = split_sizes_from_env(os.environ)
    pool = getattr(runner, "max_total_num_tokens", None)
    try:
        pool = int(pool) if pool and int(pool) > 0 else None
    except (TypeError, ValueError):
        pool = None
    limits = replace(limits, fixed_split_prefill=prefill, fixed_split_decode=decode, disable_graph_kv_split=True,
                     kv_pool_tokens=pool)
    return limits, {"notes": notes}


def _read_layout(module, runner, missing):
    """(AttentionLayout, KV dtype, KV widths to size when unknown, tensor-core decode) of this rank."""
    from guard_core.flashinfer.planner_choice import dtype_bytes, dtype_kind
    from guard_core.flashinfer.sizing import AttentionLayout

    mc = runner.model_config
    tp, dcp = _attn_tp_size()
    q_heads = _q_heads(mc) // tp
    try:
        kv_heads = mc.get_num_kv_heads(tp, dcp) if dcp > 1 else mc.get_num_kv_heads(tp)
    except TypeError:
        kv_heads = mc.get_num_kv_heads(tp)
    head_dim = int(mc.head_dim)
    v_head_dim = int(getattr(mc, "v_head_dim", None) or head_dim)
    # the page size FlashInfer plans with: 1 whatever --page-size (SGLang flattens its pages)
    from guard_core.deployment.sglang_defaults import SGLANG_FLASHINFER_PAGE as page
    # the KV dtype FlashInfer sees: SGLang's runner dtype (FP8 KV is 1 byte; with an
    # unknown dtype both widths are sized and the larger need kept)
    kv_dtype = getattr(runner, "kv_cache_dtype", None)
    kv_bytes = dtype_bytes(dtype_kind(kv_dtype))
    kv_options = None
    if kv_bytes is None:  # named by choose_planners
        kv_bytes, kv_options = 2, (1, 2)
    layout = AttentionLayout(int(q_heads), int(kv_heads), head_dim, v_head_dim, page, int(kv_bytes))
    # SGLang's own tensor-core decision (its should_use_tensor_core), as its backend takes it
    try:
        tc = bool(module.should_use_tensor_core(kv_cache_dtype=kv_dtype, num_attention_heads=q_heads,
                                                num_kv_heads=kv_heads))
    except Exception:
        tc = None
        missing.append("should_use_tensor_core")
    if deterministic(runner):
        tc = True
    return layout, kv_dtype, kv_options, tc


def _read_limits(runner, missing):
    """(ServingLimits, fixed-split notes or None) of this runner: the facts SGLang's objects
    give (capture sizes, requests, chunked prefill, speculation, the draft worker's topk),
    turned into limits by the core's one rule (``workspace_decision.sglang_runner_limits``,
    which ``plan`` calls too); deterministic inference on top."""
    from guard_core.decide.workspace import sglang_runner_limits

    from ._log import log

    mc = runner.model_config
    captures = _capture_sizes(runner, missing)
    pool = getattr(getattr(runner, "req_to_token_pool", None), "size", None)
    max_seqs = int(_first(_server_field(runner, "max_running_requests", "schedule"), pool, 256))
    chunk = _server_field(runner, "chunked_prefill_size", "schedule")
    if not chunk or chunk <= 0:
        chunk = _first(_server_field(runner, "max_prefill_tokens", "schedule"), 16384)
    spec = bool(_server_field(runner, "speculative_algorithm", "spec"))
    draft_runner = bool(getattr(runner, "is_draft_worker", False))
    verify_q, topk = _speculative(runner, spec, draft_runner, missing)
    limits = sglang_runner_limits(capture_sizes=captures, max_num_seqs=max_seqs, chunk=int(chunk),
                                  max_model_len=getattr(mc, "context_len", None), speculative=spec,
                                  draft_runner=draft_runner, verify_q=verify_q, topk=topk,
                                  request_pool=int(pool) if pool else None)
    fixed = None
    if deterministic(runner):
        limits, fixed = _fixed_split_limits(limits, runner)
        for note in fixed["notes"]:
            log().warning_once("workspace.split:" + note[:60], f"workspace: deterministic inference: {note}")
    return limits, fixed


def _speculative(runner, spec, draft_runner, missing):
    """(verify query length or None, the draft worker's EAGLE topk or None), as SGLang's
    objects say them; ``sglang_runner_limits`` turns them into limits."""
    # speculative verify: SGLang's speculative_num_draft_tokens already counts the
    # verified (bonus) token; a verify request holds exactly that many query tokens
    if spec and draft_runner:
        # the draft model's runner: its multi-step draft backends decode topk x bs requests
        # per step (FlashInferMultiStepDraftBackend.common_template, flashinfer_backend.py
        # 0.5.5:1446, 0.5.23:2501 ``bs = self.topk * num_seqs``); it verifies nothing
        topk = _server_field(runner, "speculative_eagle_topk", "spec")
        try:
            return None, max(1, int(topk or 1))
        except (TypeError, ValueError):
            return None, 1
    if spec:
        verify_q = int(_server_field(runner, "speculative_num_draft_tokens", "spec") or 0) or None
        if verify_q is None:
            missing.append("speculative_num_draft_tokens")
        return verify_q, None
    return None, None
