"""Stage 6, ``report``: the plan's record (the ``--json`` output) from the decisions: the verdict,
its remedies, the groups and scenarios, what the guard would log, the KV budget (vLLM).
"""

from __future__ import annotations

from guard_core.commands.plan.records import RUNNER_LABELS, Command, Decided, FactsSet, ModelView, ServerConfig
from guard_core.flashinfer.releases import NATIVE_VAR
from guard_core.flashinfer.sizing import INT_WORKSPACE_BYTES
from guard_core.runtime.settings import MASTER

__all__ = ["report", "describe_scenario"]


def report(a, cmd: Command, server: ServerConfig, model: ModelView, fs: FactsSet, dd: Decided) -> dict:
    """Stage 6: the plan's record (the ``--json`` output), from the decisions."""
    from guard_core.decide import workspace as wd

    g_top, _runner, facts, computed = dd.top
    req = computed.requirement
    dec = dd.verdict.decision
    verdict = "ok" if dec.action == "ok" else "overflow"
    out = dict(server.record)
    pl_info = fs.planner_info
    choice = computed.choice
    if choice.missing:
        p = req.planners
        flag = ("--trtllm-attention on|off" if any("TRT-LLM" in m for m in choice.missing) else
                "--kv-cache-dtype" if any("KV" in m for m in choice.missing) else "--decode-planner/--prefill-planner")
        pl_info["notes"].append(f"unknown here: {', '.join(choice.missing)}; sized every case and kept the larger "
                                f"need ({p.decode} decode, {p.prefill} prefill); {flag} settles it")
    result = _verdict_fields(cmd.framework, fs.buffer, req, verdict, dec)
    if verdict == "overflow" and not server.deterministic:
        result["remedies"].update(wd.remedies(facts, computed, fs.buffer, graphs=bool(fs.limits.capture_sizes)))
    elif verdict == "overflow":
        result["remedies"].update(wd.remedies(facts, computed, fs.buffer, graphs=False))
        result["remedies"].pop("largest_capture_batch_that_fits", None)
    if dd.fixed_split:
        fa_buf, fa = dd.fixed_split
        info = dict(fs.fixed_info, **fa.as_dict())
        info["line"] = dd.verdict.decision.line
        info["longest_prompt_in_buffer"] = fa_buf.longest_prompt
        out["fixed_split"] = info
    out.update(_report_fields(cmd.framework, server.gpu, model, fs, dd))
    out.update(need=result.pop("need"), int_workspace_bytes=INT_WORKSPACE_BYTES, server_default_bytes=fs.server_bytes,
               server_default_source=fs.server_source, workspace_bytes=fs.buffer)
    out.update(result, notes=cmd.notes + model.reader["notes"] + list(req.notes))
    out["guard"] = _guard_fields(server, dd)
    out["kv_budget"] = (_sglang_kv_budget_fields(cmd, server, model, fs, dd) if cmd.framework == "sglang"
                        else _kv_budget_fields(a, cmd, server, fs, dd))
    return out


def _kv_budget_fields(a, cmd: Command, server: ServerConfig, fs: FactsSet, dd: Decided) -> dict | None:
    """Issue 28 (vLLM): the buffer's cost or gain in KV tokens and the --gpu-memory-utilization
    that keeps the unguarded KV size; the arithmetic is guard_core.decide.kv_budget's, the same the
    adapter logs. vLLM's own estimate (weights, activation peak, CUDA-graph memory) sizes the KV
    cache itself at start-up; the move does not depend on it."""
    from guard_core.decide import kv_budget
    from guard_core.deployment.server_defaults import gpu_memory

    if cmd.framework != "vllm" or dd.guard is None:
        return None
    d = dd.guard.decision
    buf = kv_budget.buffer_under_guard(d.action, int(d.allocate_bytes or 0), int(fs.server_bytes))
    rows = [(g.count, g.num_kv_heads, g.head_dim_qk, g.head_dim_vo) for g, _r, _f in fs.groups]
    per_token = kv_budget.attention_per_token_bytes(rows, fs.kv_bytes)
    util = kv_budget.launch_utilization(getattr(a, "launch", None)) or kv_budget.VLLM_DEFAULT_UTILIZATION
    mem = gpu_memory(server.gpu_key)
    kp = kv_budget.vllm_kv_plan(server.settings.reserve, buf, int(fs.server_bytes), per_token, util,
                                mem[0] if mem else None)
    return {"mode": kp.move.mode, "buffer_bytes": buf, "server_bytes": int(fs.server_bytes),
            "charge_bytes": kp.move.charge, "per_token_bytes": per_token, "kv_tokens": kp.tokens,
            "gpu_memory_utilization": util, "keep_utilization": kp.keep_utilization, "line": kp.line(),
            "estimate": "the KV size itself is vLLM's own estimate at start-up (profile run, CUDA-graph "
                        "memory); the move and its tokens are exact"}


def _sglang_kv_budget_fields(cmd: Command, server: ServerConfig, model: ModelView, fs: FactsSet,
                             dd: Decided) -> dict | None:
    """Issue 28 (SGLang): the figures the adapter's start-up line gives (sglang_guard/kv_reserve.py):
    the same BudgetMove (buffer: the guard's decided buffer; server: SGLang's own size), its KV
    tokens from SGLang's own cell size, and the --mem-fraction-static that keeps the unguarded KV
    size (the command's fraction, else the change to SGLang's automatic one)."""
    from guard_core.decide import kv_budget
    from guard_core.gpus import gpu_memory

    if dd.guard is None:
        return None
    d = dd.guard.decision
    buf = kv_budget.buffer_under_guard(d.action, int(d.allocate_bytes or 0), int(fs.server_bytes))
    mg = model.groups
    why_unknown = None
    if mg is not None and any(g.kind == "mla" for g in getattr(mg, "groups", ())):
        why_unknown = "MLA: SGLang sizes its latent KV cell itself"
    elif mg is not None and getattr(mg, "other_layers", ()):
        why_unknown = "Mamba / linear-attention hybrid: SGLang splits the budget with its state pool"
    elif any(g.kind != "full" for g, _r, _f in fs.groups):
        why_unknown = "sliding-window layers: SGLang may size them in their own pool"
    per_token = None
    if why_unknown is None:
        rows = [(g.count, g.num_kv_heads, g.head_dim_qk, g.head_dim_vo) for g, r, _f in fs.groups
                if r in ("", "target")]
        per_token = kv_budget.sglang_cell_bytes(server.line, rows, fs.kv_bytes)
    launch = cmd.launch
    mfs = getattr(launch, "mem_fraction_static", None) if launch is not None else None
    mem = gpu_memory(server.gpu_key)
    kp = kv_budget.sglang_kv_plan(server.settings.reserve, buf, int(fs.server_bytes), per_token, mfs,
                                  mem[0] if mem else None)
    estimate = ("SGLang's KV size is pre-load free memory x --mem-fraction-static - weights; the pre-load free "
                "memory is taken as the GPU's memory (SGLang measures it at start-up, less the CUDA context)")
    if mfs is None:
        estimate += "; --mem-fraction-static not in the command: SGLang's automatic value (its own estimate)"
    if why_unknown:
        estimate += f"; KV tokens unknown here ({why_unknown})"
    return {"mode": kp.move.mode, "buffer_bytes": buf, "server_bytes": int(fs.server_bytes),
            "charge_bytes": kp.move.charge, "per_token_bytes": per_token, "kv_tokens": kp.tokens,
            "mem_fraction_static": mfs, "keep_mem_fraction_static": kp.keep_fraction,
            "mem_fraction_static_delta": kp.fraction_delta, "line": kp.line(), "estimate": estimate}


def _guard_fields(server: ServerConfig, dd: Decided) -> dict:
    """What the guard inside the server would log and allocate (its switches as the server sees them)."""
    s = server.settings
    switches = {k: v for k, v in s.describe().items() if k in server.environ}
    if dd.guard is None:
        why = server.guard_off or f"{MASTER}=0: the guard stands down"
        return {"enabled": False, "switches": switches, "line": why, "why": why, "allocate_bytes": None}
    d = dd.guard.decision
    return {"enabled": True, "switches": switches, "action": d.action, "line": d.line,
            "allocate_bytes": d.allocate_bytes}


def _verdict_fields(fw, buffer: int, req, verdict: str, dec) -> dict:
    """The verdict's fields from the decision: the need, the allocation FlashInfer's error
    names, and the remedy size (what the decision raises to)."""
    dom = req.dominant
    overflow = dom.plan.first_overflow(buffer) if dom and verdict == "overflow" else None
    largest = dom.dominant_allocation if dom else None
    overflow_reason = None
    if overflow and largest and overflow["allocation"] != largest.name:
        overflow_reason = (f"FlashInfer allocates {largest.name} ({largest.bytes:,} B) first and it fits; it leaves "
                           f"{overflow['available']:,} B of the {buffer:,} B buffer, too little for the next one, "
                           f"{overflow['allocation']} ({overflow['bytes']:,} B), so the error names "
                           f"{overflow['allocation']}; what must fit is the sum, {req.float_bytes:,} B")
    remedies: dict = {}
    if verdict == "overflow":
        size = dec.numbers.get("allocate_bytes", dec.allocate_bytes)
        if dec.inputs.get("mode") == "fixed_split":
            # SGLang's .set(2 GiB) overwrites an export in this mode (PR #30244 open), and its
            # CUDA graphs plan no split (disable_split_kv): neither remedy applies
            remedies.update(workspace_bytes=size, env=None)
        else:
            remedies.update(workspace_bytes=size, env=f"{NATIVE_VAR[fw]}={size}")
    return {"need": {"float_bytes": req.float_bytes, "int_bytes": req.int_bytes,
                     "scenario": dom.name if dom else None, "batch": dom.batch if dom else None,
                     "allocation": largest.name if largest else None,
                     "allocation_bytes": largest.bytes if largest else None},
            "verdict": verdict, "overflow": overflow, "overflow_reason": overflow_reason, "remedies": remedies,
            "decision": dec.as_dict()}


def _candidate_rows(facts, computed) -> list:
    """Each candidate planner pair of the top group with its need (``need`` of facts with that pair given)."""
    from dataclasses import replace as _replace

    from guard_core.decide.workspace import need

    choice = computed.choice
    if len(choice.candidates) < 2:
        c = computed.requirement.planners
        return [{"decode": c.decode, "prefill": c.prefill, "float_bytes": computed.requirement.float_bytes,
                 "reason": choice.reasons[0] if choice.reasons else ""}]
    rows = []
    for i, c in enumerate(choice.candidates):
        r = need(_replace(facts, planners_given=(c.prefill, c.decode, c.decode_blocks_per_sm))).requirement
        rows.append({"decode": r.planners.decode, "prefill": r.planners.prefill, "float_bytes": r.float_bytes,
                     "reason": choice.reasons[i] if i < len(choice.reasons) else ""})
    return rows


def _report_fields(fw, gpu, model: ModelView, fs: FactsSet, dd: Decided) -> dict:
    """The sized plan's fields: GPU, layout, limits, planners, groups, scenarios."""
    g_top, _runner, facts, computed = dd.top
    req = computed.requirement
    layout, planners, limits, pl_info = req.layout, req.planners, facts.limits, fs.planner_info
    kv, dqk, dvo = g_top.num_kv_heads, g_top.head_dim_qk, g_top.head_dim_vo
    scen = [dict(s.as_dict(), description=describe_scenario(s, layout, gpu, fw)) for s in req.scenarios]
    return {
        "gpu": {"name": gpu.name, "num_sms": gpu.num_sms, "cc": f"{gpu.cc[0]}.{gpu.cc[1]}"},
        "layout": {"tp": model.tp, "dcp": model.dcp, "num_qo_heads": layout.num_qo_heads, "num_kv_heads": kv,
                   "head_dim_qk": dqk, "head_dim_vo": dvo, "page_size": layout.page_size,
                   "kv_dtype_bytes": fs.kv_bytes, "kv_cache_dtype": facts.planner_facts.kv_dtype},
        "limits": {"capture_sizes": list(limits.capture_sizes), "max_num_seqs": limits.max_num_seqs,
                   "max_batched_tokens": limits.max_num_batched_tokens, "draft_tokens": limits.draft_tokens,
                   "max_model_len": limits.max_model_len},
        "planners": {"decode": planners.decode, "prefill": planners.prefill, "tensor_core_decode": pl_info["tcd"],
                     "tensor_core_decode_reason": pl_info["tcd_why"], "trtllm_attention": pl_info["trt_src"]},
        "groups": [dict(g.as_dict(), label=_kind_label(g, model.groups) + (f" ({RUNNER_LABELS[runner]})" if runner else ""),
                        runner=runner, need_bytes=n.requirement.float_bytes,
                        scenario=n.requirement.dominant.name if n.requirement.dominant else None,
                        batch=n.requirement.dominant.batch if n.requirement.dominant else None,
                        decode=n.requirement.planners.decode, prefill=n.requirement.planners.prefill,
                        dominant=f is facts)
                   for g, runner, f, n in dd.needs],
        "model_reader": model.reader,
        "planner_candidates": _candidate_rows(facts, computed), "planner_missing": list(computed.choice.missing),
        "planner_notes": pl_info["notes"],
        "scenarios": scen,
    }


def _kind_label(g, mg) -> str:
    from guard_core.deployment.groups import kind_label
    base = kind_label(g.kind, g.window) + (" (sized as full)" if g.kind == "chunked" else "")
    if mg is not None and mg.other_layers:
        total = mg.num_layers or sum(n for _, n in mg.other_layers) + mg.attention_layers
        base += f" (hybrid share: {g.count} of {total} layers)"
    if g.sinks:
        base += ", attention sinks"
    return base


def describe_scenario(s, layout, gpu, fw) -> str:
    g = layout.gqa_group
    if s.name == "cuda_graph_decode":
        return f"CUDA-graph capture of a decode batch of {s.batch} requests, one query token each"
    if s.name == "cuda_graph_verify":
        return f"CUDA-graph speculative verify: {s.batch} requests x {s.q_len} query tokens"
    if s.name == "fixed_split_prefill":
        return (f"fixed-split prefill: a {s.q_len}-token prompt chunk against the longest context, its KV cut into "
                f"fixed chunks (no SM cap): {s.plan.padded_batch_size} (query tile, KV chunk) pairs x "
                f"{s.plan.cta_tile_q} rows")
    if s.name == "fixed_split_decode":
        return (f"fixed-split decode of {s.batch} requests: {s.plan.padded_batch_size} KV chunks in all "
                f"(no SM cap)")
    cap = (2 * gpu.num_sms) // layout.num_kv_heads
    if s.name == "eager_decode":
        return (f"eager decode of {s.batch} requests with KV caches long enough that the planner splits them into "
                f"its maximum of {cap} chunks (2 x {gpu.num_sms} SMs / {layout.num_kv_heads} KV heads)")
    if s.name == "eager_prefill":
        if s.plan.split_kv:
            return (f"eager prefill worst case: {s.batch} request(s) of {s.q_len} query token(s) "
                    f"({s.q_len * g} rows with the GQA group {g}) against a long KV cache: one short prompt against a "
                    f"long KV cache makes the planner split the KV into its maximum of {cap} chunks, each with its own "
                    f"scratch rows")
        return f"eager prefill of {s.batch} x {s.q_len} tokens (no split-KV; int buffer only)"
    return s.name
