"""``print_report``: the plan's record as text, in the order a reader checks it.
"""

from __future__ import annotations

import sys

from guard_core.commands.plan.mla_report import print_mla
from guard_core.deployment.server_defaults import framework_label
from guard_core.units import fmt_size

__all__ = ["print_report"]


def print_report(r: dict, show_all: bool, out=sys.stdout) -> None:
    """The plan as text, in the order a reader checks it: what is simulated, the model and its
    groups, the settings with their sources, the planners, the scenarios, the need against the
    server's buffer, the verdict and remedies, then notes and the options not read."""
    w = out.write
    _print_header(r, w)
    if r.get("area") == "mla":
        print_mla(r, w)
        _moe_line(r, w)
        return
    if r["verdict"] == "not_applicable":
        _print_not_applicable(r, w)
        return
    _print_model(r, w)
    _print_settings(r, w)
    _print_planners(r, w)
    _print_scenarios(r, show_all, w)
    n = _print_need(r, w)
    if r["verdict"] == "ok":
        w(f"verdict    OK: the need fits with {fmt_size(r['workspace_bytes'] - n['float_bytes'])} to spare"
          f"{_buffer_why(r)}\n")
    else:
        _print_overflow(r, n, w)
        _print_remedies(r, w)
    _print_fixed_split(r, w)
    _print_guard(r, w)
    _print_tail(r, w)


def _print_header(r: dict, w) -> None:
    sim = r["simulated"]
    g = sim["gpu"]
    mem = f", {g['memory_gib']:.0f} GiB" if g.get("memory_gib") else ""
    w(f"simulating {sim['label']} ({sim['line_source']}) on {g['name']}: {g['num_sms']} SMs, cc {g['cc']}{mem}\n")
    w(f"flashinfer {r['flashinfer']} ({r['flashinfer_source']}; sizing family {r['flashinfer_family']})\n")
    if r.get("launch"):
        la = r["launch"]
        w(f"command    {la['form']} ({framework_label(la['framework'])})\n")
    res = r.get("resolution")
    if res:
        w(f"resolved   by {res['used']}" + (f" ({res['why']})" if res.get("why") else "") + "\n")


def _print_not_applicable(r: dict, w) -> None:
    w(f"model      {r['model']['name']} ({r['model_source']})\n{r['model']['name']}: {r['reason']}\n")
    for line in (r["model"].get("groups") or {}).get("lines", []):
        w(f"  group    {line}\n")
    _moe_line(r, w)
    for note in r.get("notes", []):
        w(f"note       {note}\n")


def _print_model(r: dict, w) -> None:
    m, l = r["model"], r["layout"]
    hd = f"head_dim {l['head_dim_qk']}" + (f"/{l['head_dim_vo']}" if l["head_dim_vo"] != l["head_dim_qk"] else "")
    w(f"model      {m['name']} ({r['model_source']}): {l['num_qo_heads']} q / {l['num_kv_heads']} kv heads per rank "
      f"(tp {l['tp']}{', dcp ' + str(l['dcp']) if l['dcp'] > 1 else ''}), {hd}, KV cache {l['kv_cache_dtype']}\n")
    rd = r.get("model_reader") or {}
    w(f"groups     read by {rd.get('name', 'the built-in reader')}"
      + (f" (the built-in reader {'agrees' if rd.get('agrees') else 'disagrees'})" if "agrees" in rd else "")
      + "; per rank, each sized:\n")
    for gr in r.get("groups", []):
        ghd = f"head_dim {gr['head_dim_qk']}" + (f"/{gr['head_dim_vo']}" if gr["head_dim_vo"] != gr["head_dim_qk"] else "")
        w(f"  {gr['count']:>4} layers {gr['label']}: {gr['num_qo_heads']} q / {gr['num_kv_heads']} kv heads, {ghd}; "
          f"need {fmt_size(gr['need_bytes'])} at {gr['scenario']} {gr['batch']} (decode {gr['decode']}, prefill "
          f"{gr['prefill']}){'  <- largest' if gr['dominant'] and len(r['groups']) > 1 else ''}\n")
    for kind, n in (r["model"].get("groups") or {}).get("other", []):
        w(f"  {n:>4} layers {kind}: outside FlashInfer's attention planners\n")


def _print_settings(r: dict, w) -> None:
    w("settings   (each with where it comes from)\n")
    vals = r["defaults"]["values"]
    order = [("tp", "tensor parallel"), ("dp", "data parallel"), ("pp", "pipeline parallel"), ("dcp", "decode context parallel"),
             ("max_num_seqs", "max seqs" if r["framework"] == "vllm" else "max running requests"),
             ("max_batched_tokens", "max batched tokens" if r["framework"] == "vllm" else "chunked prefill size"),
             ("max_model_len", "max model len"), ("draft_tokens", "draft tokens"), ("page_size", "page size"),
             ("max_capture", "capture ceiling"), ("capture_sizes", "capture sizes")]
    for key, name in order:
        if key not in vals:
            continue
        v = vals[key]
        val = v["value"]
        if key == "capture_sizes":
            val = f"{val[0]}..{val[-1]} ({len(val)} sizes)" if val else "none"
        w(f"  {name:<24} {str(val):<14} {v['source']}\n")
    dg = r["limits"]["capture_sizes"]
    if dg and vals.get("capture_sizes") and len(dg) != len(vals["capture_sizes"]["value"]):
        w(f"  {'decode graphs planned':<24} {str(dg[0]) + '..' + str(dg[-1]):<14} FlashInfer decode plans up to "
          f"(1 + draft tokens) x max seqs\n")


def _print_planners(r: dict, w) -> None:
    p = r["planners"]
    why = p["tensor_core_decode_reason"] + (f"; {p['trtllm_attention']}" if p.get("trtllm_attention") else "")
    w(f"planners   decode {p['decode']}, prefill {p['prefill']} ({why})\n")
    for c in r["planner_candidates"]:
        if len(r["planner_candidates"]) > 1:
            w(f"  candidate decode {c['decode']}, prefill {c['prefill']}: {fmt_size(c['float_bytes'])} ({c['reason']})\n")
    for n in r["planner_notes"]:
        w(f"  {n}\n")
    _moe_line(r, w)


def _print_scenarios(r: dict, show_all: bool, w) -> None:
    w(f"\n{'scenario':<19} {'batch':>6} {'q_len':>5} {'float bytes':>13} {'':>10} {'int bytes':>10}  largest allocation\n")
    rows = r["scenarios"]
    if not show_all:
        keep = []
        for kind in ("cuda_graph_decode", "cuda_graph_verify"):
            ks = [s for s in rows if s["name"] == kind]
            if ks:
                keep.append(max(ks, key=lambda s: (s["float_bytes"], s["batch"])))
        keep += [s for s in rows if s["name"] not in ("cuda_graph_decode", "cuda_graph_verify")]
        rows = keep
    for s in rows:
        w(f"{s['name']:<19} {s['batch']:>6} {s['q_len']:>5} {s['float_bytes']:>13,} {fmt_size(s['float_bytes']):>10} "
          f"{s['int_bytes']:>10,}  {s['dominant_allocation'] or '-'}\n")
    if not show_all and len(rows) < len(r["scenarios"]):
        w(f"({len(r['scenarios']) - len(rows)} smaller capture sizes not shown; --all lists them)\n")
    for s in rows:
        if s["name"].startswith("eager"):
            w(f"  {s['name']}: {s['description']}\n")


def _print_need(r: dict, w) -> dict:
    n = r["need"]
    w(f"\nneed       {n['float_bytes']:,} bytes ({fmt_size(n['float_bytes'])}) float at {n['scenario']}"
      f" batch {n['batch']} (largest allocation {n['allocation']}); int {fmt_size(n['int_bytes'])} of "
      f"{fmt_size(r['int_workspace_bytes'])}\n")
    srv = r["server_default_bytes"]
    w(f"{r['framework']} allocates {srv:,} bytes ({fmt_size(srv)}): {r['server_default_source']}"
      + (f"; checking against --workspace {r['workspace_bytes']:,}" if r["workspace_bytes"] != srv else "") + "\n")
    if r.get("not_read_options"):
        w(f"assumes    the server's default for {len(r['not_read_options'])} option(s) of the command not read "
          "(listed under 'not read' below)\n")
    return n


def _print_overflow(r: dict, n: dict, w) -> None:
    o = r["overflow"]
    fx = r.get("fixed_split")
    if fx:
        w(f"verdict    OVERFLOW: FlashInfer will raise on the first prompt longer than "
          f"{fx['longest_prompt_in_buffer']:,} tokens (the need grows with the prompt; start-up passes):\n")
    else:
        w(f"verdict    OVERFLOW: FlashInfer will raise at start-up{_buffer_why(r)}:\n")
    if o:
        w(f"           Buffer overflow when allocating memory for {o['allocation']} with size {o['bytes']} "
          f"and alignment {o['alignment']}, but only {o['available']} bytes available in AlignedAllocator.\n")
        w(f"           overflowing allocation {o['allocation']} ({o['bytes']:,} B); largest allocation "
          f"{n['allocation']} ({n['allocation_bytes']:,} B)\n")
    if r.get("overflow_reason"):
        w(f"           why they differ: {r['overflow_reason']}\n")


def _buffer_why(r: dict) -> str:
    """Which buffer the verdict checked and why, where the environment decides it (a native size
    variable, or an environment the command changes: docker run, env -i, env -u)."""
    la = r.get("launch") or {}
    env = r.get("environment") or ""
    if not la.get("workspace_source") and env.startswith("the exported environment") and ";" not in env:
        return ""
    return f" (against {fmt_size(r['workspace_bytes'])}: {r['server_default_source']}; the server's environment: {env})"


def _print_remedies(r: dict, w) -> None:
    fx = r.get("fixed_split")
    rem = r["remedies"]
    w("remedies\n")
    if fx and not fx["affordable"]:
        w(f"  - pip install flashinfer-guard in the server's environment: the need is not affordable "
          f"(FLASHINFER_GUARD_WORKSPACE_MAX {fmt_size(fx['max_bytes'])}); it raises the buffer to "
          f"{fmt_size(fx['allocate_bytes'])} (prompts up to {fx['longest_prompt']:,} tokens) and says so; or\n")
    elif r.get("guard") and not r["guard"]["enabled"]:
        w(f"  - let the guard run in the server (it does not: {r['guard']['line']}): it raises the buffer to "
          f"{fmt_size(rem['workspace_bytes'])} automatically; or\n")
    else:
        w(f"  - pip install flashinfer-guard in the server's environment: it raises the buffer to "
          f"{fmt_size(rem['workspace_bytes'])} automatically; or\n")
    if rem.get("env"):
        w(f"  - export {rem['env']}   ({fmt_size(rem['workspace_bytes'])})\n")
    else:
        w("  - (an export of SGLANG_FLASHINFER_WORKSPACE_SIZE does not help here: deterministic inference "
          "overwrites it with 2 GiB; SGLang PR #30244 is open)\n")
    if "largest_capture_batch_that_fits" in rem:
        flag = "--max-cudagraph-capture-size" if r["framework"] == "vllm" else "--cuda-graph-max-bs"
        w(f"  - or keep today's buffer and cap CUDA-graph batches at {rem['largest_capture_batch_that_fits']} "
          f"({flag})\n")
    if "flashinfer_0_7_1_need_bytes" in rem:
        w(f"  - or upgrade to FlashInfer >= 0.7.1 (PR #5177): the need drops to "
          f"{fmt_size(rem['flashinfer_0_7_1_need_bytes'])}\n")


def _print_fixed_split(r: dict, w) -> None:
    fx = r.get("fixed_split")
    if fx:
        w(f"\ndeterministic inference (splits: prefill {fx['prefill_split_tile_size']}, decode "
          f"{fx['decode_split_tile_size']} pages; {fx['split_source']}; context {fx['context']:,} tokens)\n")
        w(f"  SGLang forces {fmt_size(fx['server_bytes'])}; the need is {fx['need_bytes']:,} bytes "
          f"({fmt_size(fx['need_bytes'])}); longest prompt that fits {fmt_size(r['workspace_bytes'])}: "
          f"{fx['longest_prompt_in_buffer']:,} tokens\n")
        w(f"  affordable up to {fmt_size(fx['max_bytes'])} (FLASHINFER_GUARD_WORKSPACE_MAX): "
          + (f"the guard makes the buffer {fmt_size(fx['allocate_bytes'])}\n" if fx["affordable"] else
             f"no; the guard gives {fmt_size(fx['allocate_bytes'])}, prompts up to {fx['longest_prompt']:,} tokens, "
             "and warns:\n"))
        if not fx["affordable"]:
            w(f"  {fx['line']}\n")


def _print_guard(r: dict, w) -> None:
    g = r.get("guard")
    if g and not g["enabled"]:
        w(f"guard      does not run in the server: {g['line']}; the verdict is the server's own, unguarded\n")
    elif g:
        sw = ", ".join(f"{k}={v}" for k, v in g["switches"].items())
        w(f"guard      inside the server{' (' + sw + ')' if sw else ''} it logs: {g['line']}\n")
    if r.get("kv_budget"):
        w(f"KV budget  {r['kv_budget']['line']} ({r['kv_budget']['estimate']})\n")
    if r.get("environment"):
        w(f"server env {r['environment']}\n")


def _print_tail(r: dict, w) -> None:
    for note in r["notes"]:
        w(f"note       {note}\n")
    if r.get("launch"):
        w(f"read by    {r['launch']['reader']}\n")
    if r.get("ignored_options"):
        w(f"ignored    (does not change the workspace): {' '.join(r['ignored_options'])}\n")
    if r.get("not_read_options"):
        w(f"not read   (the server's default assumed for each): {' '.join(r['not_read_options'])}\n")


def _moe_line(r, w):
    mo = r["moe"]
    w(f"moe guard  {mo['host_arch']} host ({mo['host_arch_source']}): {mo['verdict']}\n")
    for row in mo.get("rows", ()):
        w(f"moe row    {row['short']}: {row['risk']}; default {row['default']}, strict {row['strict']}\n")
