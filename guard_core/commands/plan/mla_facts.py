"""Stage 4 for an MLA model, ``mla_facts``: the MLA paths the server plans through FlashInfer's
MLA planner (``deployment.mla_routes``) with the limits that bound each batch, as the
``decide.mla.MlaFacts`` record an adapter would build; or why nothing plans there.

Built-in rules only (the line's defaults, ``server_defaults.derive``): the server-resolution
path (``server_resolution``) does not answer MLA yet.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard_core.commands.plan.records import Command, ServerConfig
from guard_core.decide.mla import MlaFacts, MlaPath
from guard_core.decide.workspace import sglang_capture_sizes
from guard_core.deployment.mla_routes import MlaRoute, route

__all__ = ["MlaFactsSet", "mla_facts"]


@dataclass(frozen=True)
class MlaFactsSet:
    route: MlaRoute
    facts: MlaFacts | None  # None where nothing plans through MLAPlan
    limits: dict  # the limits used, each with its source


def _attn_dp(d) -> int:
    """SGLang's DP attention width (its limits are divided by it per rank), else 1."""
    return int(d.get("dp") or 1) if d.get("attn_tp") else 1


def _largest_batch(server: ServerConfig) -> tuple[int, str, str]:
    """(the most requests in one decode/verify batch, the option that sets it, its source): the
    running requests (the request pool where the line cuts them there) or the largest CUDA graph,
    whichever is larger (a graph plans its whole capture batch, padding rows included)."""
    d = server.defaults
    running = d.get("request_pool") or d.get("max_num_seqs") or 1
    src = d.values["request_pool" if d.get("request_pool") else "max_num_seqs"].source
    # graphs above the request pool are not captured (decide.workspace.sglang_capture_sizes, cited there)
    graphs = sglang_capture_sizes(d.decode_graph_sizes or (), d.get("request_pool"))
    top = max(graphs) if graphs else 0
    if top > running:
        from guard_core.deployment.deployment_record import known_line, line_at_least

        # SGLang 0.5.23 splits the option (--cuda-graph-max-bs-decode / -prefill)
        opt = ("--cuda-graph-max-bs-decode" if line_at_least(known_line("sglang", server.line), "0.5.23")
               else "--cuda-graph-max-bs")
        return top, opt, d.values["capture_sizes"].source
    return int(running), "--max-running-requests", src


def mla_facts(a, cmd: Command, server: ServerConfig) -> MlaFactsSet:
    """Stage 4 (MLA): the route per batch kind and the limits that bound each batch."""
    L, d = cmd.launch, server.defaults
    spec = bool(d.get("draft_tokens"))
    r = route(cmd.framework, server.line, server.gpu.cc, server.model.architecture,
              getattr(L, "attention_backend", None), getattr(L, "prefill_attention_backend", None),
              getattr(L, "decode_attention_backend", None), speculative=spec)
    if r.not_applicable:
        return MlaFactsSet(r, None, {})
    attn_tp = int(d.get("attn_tp") or d.get("tp") or 1)
    heads = max(server.model.num_attention_heads // attn_tp, 1)
    batch, batch_limit, batch_src = _largest_batch(server)
    adp = _attn_dp(d)
    # the request pool is --max-running-requests // DP attention where the line divides it
    req_scale = adp if (batch_limit == "--max-running-requests" and d.get("request_pool") and d.get("max_num_seqs")
                        and d.get("request_pool") == d.get("max_num_seqs") // adp) else 1
    chunk = int(d.get("max_batched_tokens") or 8192)
    q_verify = 1 + int(d.get("draft_tokens") or 0)
    src = dict(r.sources)
    paths = []
    for kind in r.kinds:
        if kind == "decode":
            paths.append(MlaPath("decode", heads, batch, limit=batch_limit, limit_scale=req_scale, source=src[kind]))
            topk = int(d.get("eagle_topk") or 1)
            if spec and topk > 1 and "draft decode" in src:
                # EAGLE's draft steps decode topk rows per request (FlashInferMLAMultiStepDraftBackend)
                paths.append(MlaPath("draft decode", heads, batch * topk, limit=batch_limit, limit_scale=req_scale,
                                     per_request=topk, source=src["draft decode"]))
        elif kind == "verify":  # target verify: 1 + draft tokens each; draft extend: up to that
            paths.append(MlaPath("verify", heads, batch, q_min=1, q_max=q_verify, causal=True, limit=batch_limit,
                                 limit_scale=req_scale, source=src[kind]))
        else:
            paths.append(MlaPath("extend", heads, batch, q_min=1, q_max=chunk, max_tokens=chunk, causal=True,
                                 drives="tokens", limit="--chunked-prefill-size", limit_scale=adp, source=src[kind]))
    max_kv = server.deployment.model_max_len or d.get("max_model_len")
    limits = {"heads_per_rank": {"value": heads, "source": f"{server.model.num_attention_heads} heads / attention "
                                                           f"TP {attn_tp}"},
              "largest_batch": {"value": batch, "source": batch_src, "limit": batch_limit},
              "chunk_tokens": {"value": chunk, "source": d.values["max_batched_tokens"].source},
              "verify_tokens": {"value": q_verify, "source": "1 + draft tokens" if spec else "no speculative decoding"},
              "num_sms": {"value": server.gpu.num_sms, "source": server.gpu.name}}
    facts = MlaFacts(cmd.framework, server.flashinfer, int(server.gpu.num_sms), tuple(paths),
                     max_kv=int(max_kv) if max_kv else None)
    return MlaFactsSet(r, facts, limits)
