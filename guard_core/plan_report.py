"""``flashinfer-guard plan``: the deployment the user runs, resolved and sized, and its report.

Inputs come from the plan options and, after ``--``, the server's own launch
command (``launch.py``); the model from a config.json path, the local Hugging
Face cache (``hf_cache.py``) or the presets; every limit nobody gave from the
simulated framework line's own rules on the simulated GPU (``frameworks.py``);
the planners from ``dispatch.choose_planners`` (when a fact is unknown, every
candidate is sized and the larger need is kept). The result is a dict (the
``--json`` output); ``print_report`` renders it for a reader.
"""

from __future__ import annotations

import json
import os
import sys

from . import flashinfer_model as fm
from .decisions import moe_verdict
from .dispatch import PlannerFacts, choose_planners, dtype_bytes, dtype_kind, vllm_query_dtypes
from .frameworks import (NATIVE_VAR, Deployment, derive, framework_label, gpu_memory, is_aarch64_gpu,
                         sglang_tensor_core_decode, short_line, workspace_source, default_workspace,
                         vllm_per_phase_builder)
from .gpus import find_spec
from .hf_cache import find_config, looks_like_model_id
from .launch import LaunchError, attention_backend_note, parse_launch
from .presets import DEFAULT_MODEL, ModelError, ModelFacts, find_preset, load_model
from .settings import Settings
from .sizing import (INT_WORKSPACE_BYTES, AttentionLayout, Planners, ServingLimits, compute_requirement,
                     largest_fitting_capture, round_up_mib)

MIB = 1 << 20


class PlanUsageError(ValueError):
    """A bad input: one line for the user, exit 2."""


def split_launch(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``plan [opts] -- CMD ...`` -> (plan argv, launch command or None)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def _fmt(n: int) -> str:
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


def _max_len_of(path: str) -> int | None:
    """max_position_embeddings of a config.json (text_config first), or None."""
    try:
        if os.path.getsize(path) > (4 << 20):
            return None
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    for scope in (cfg.get("text_config"), cfg.get("llm_config"), cfg):
        if isinstance(scope, dict):
            v = scope.get("max_position_embeddings")
            if type(v) is int and 0 < v <= (1 << 27):
                return v
    return None


def resolve_model(name: str, environ=None) -> tuple[ModelFacts, str, int | None]:
    """(facts, where they came from, the model's max length or None)."""
    if os.path.isdir(name) or name.endswith(".json") or os.path.exists(name):
        path = os.path.join(name, "config.json") if os.path.isdir(name) else name
        facts = load_model(name)
        return facts, f"config.json at {path}", _max_len_of(path)
    looked: list[str] = []
    if looks_like_model_id(name):
        path, looked = find_config(name, environ=environ)
        if path:
            facts = load_model(path)
            return facts, f"local Hugging Face cache: {path}", _max_len_of(path)
    preset = find_preset(name)
    if preset is not None:
        how = "embedded preset" if preset.name == name else f"embedded preset {preset.name}"
        return preset, how, None
    where = f"the local Hugging Face cache ({', '.join(looked)}) and " if looked else ""
    raise PlanUsageError(f"unknown model {name!r}: not found in {where}the presets; give a config.json path "
                         f"(or a directory holding one), or a preset: flashinfer-guard presets")


def _pick(flag_value, cmd_value, name: str, notes: list, flag: str):
    """A plan flag beats the launch command; say so when they differ."""
    if flag_value is not None and cmd_value is not None and flag_value != cmd_value:
        notes.append(f"{flag} {flag_value} replaces the command's {name} {cmd_value}")
    return flag_value if flag_value is not None else cmd_value


def build(a, resolve_gpu, environ=None) -> dict:
    """The plan for parsed options ``a`` (``a.launch``: the command after ``--`` or None)."""
    notes: list[str] = []
    launch = None
    if getattr(a, "launch", None) is not None:
        try:
            launch = parse_launch(a.launch)
        except LaunchError as exc:
            raise PlanUsageError(str(exc)) from None
    fw = a.framework or (launch.framework if launch else "vllm")
    if launch and a.framework and a.framework != launch.framework:
        raise PlanUsageError(f"--framework {a.framework} contradicts the launch command, which starts "
                             f"{framework_label(launch.framework)}")
    L = launch
    # model
    raw = (a.qo_heads, a.kv_heads, a.head_dim)
    model_max_len = None
    if any(v is not None for v in raw):
        if a.model:
            raise PlanUsageError("give either --model or --qo-heads/--kv-heads/--head-dim, not both")
        if None in raw:
            raise PlanUsageError("--qo-heads, --kv-heads and --head-dim go together")
        if a.qo_heads % a.kv_heads:
            raise PlanUsageError(f"--qo-heads {a.qo_heads} must be a multiple of --kv-heads {a.kv_heads}")
        facts = ModelFacts("custom", "custom", "custom", a.qo_heads, a.kv_heads, a.head_dim, a.v_head_dim)
        model_source = "given heads"
    else:
        name = a.model or (L.model if L else None)
        if a.model and L and L.model and a.model != L.model:
            notes.append(f"--model {a.model} replaces the command's model {L.model}")
        if name is None:
            name = DEFAULT_MODEL
            model_source_default = True
        else:
            model_source_default = False
        try:
            facts, model_source, model_max_len = resolve_model(name, environ)
        except ModelError as exc:
            raise PlanUsageError(str(exc)) from None
        if model_source_default:
            model_source = "the default model, the vLLM seed's"
        model_source = f"{name}: {model_source}" if name != facts.name else model_source
    # GPU
    gpu = resolve_gpu(a)
    spec = find_spec(a.gpu or "b300") if (a.gpu or a.sms is None) else None
    gpu_key = spec.key if spec else None
    # parallel layout and limits: flag, else command
    tp = _pick(a.tp, L.tp if L else None, "tensor parallel size", notes, "--tp")
    dcp = _pick(a.dcp, L.dcp if L else None, "decode context parallel size", notes, "--dcp")
    seqs = _pick(a.max_num_seqs, L.max_num_seqs if L else None,
                 "max seqs" if fw == "vllm" else "max running requests", notes, "--max-num-seqs")
    tokens = _pick(a.max_batched_tokens, L.max_batched_tokens if L else None,
                   "max batched tokens" if fw == "vllm" else "chunked prefill size", notes, "--max-batched-tokens")
    mlen = _pick(a.max_model_len, L.max_model_len if L else None, "max model len", notes, "--max-model-len")
    k = _pick(a.draft_tokens, L.draft_tokens if L else None, "draft tokens", notes, "--draft-tokens")
    sizes = _pick(a.capture_sizes, L.capture_sizes if L else None, "capture sizes", notes, "--capture-sizes")
    max_cap = _pick(a.max_capture_batch, L.max_capture if L else None, "capture ceiling", notes,
                    "--max-capture-batch")
    page = _pick(a.page_size, L.page_size if L else None, "page size", notes, "--page-size")
    eager = bool(a.no_cuda_graph or (L.eager if L else False))
    kv_dtype = getattr(a, "kv_cache_dtype", None) or (L.kv_cache_dtype if L else None)
    if getattr(a, "kv_cache_dtype", None) and L and L.kv_cache_dtype and a.kv_cache_dtype != L.kv_cache_dtype:
        notes.append(f"--kv-cache-dtype {a.kv_cache_dtype} replaces the command's {L.kv_cache_dtype}")
    kv_dtype = kv_dtype or "auto"
    if sizes and max_cap and not (L and L.capture_sizes and L.max_capture):
        notes.append(f"capture ceiling {max_cap} ignored: explicit capture sizes {min(sizes)}..{max(sizes)} decide")
        max_cap = None
    d = Deployment(framework=fw, line=a.framework_version, gpu_key=gpu_key, cc=gpu.cc, gpu_name=gpu.name,
                   tp=tp, pp=L.pp if L else None, dp=L.dp if L else None, dcp=dcp,
                   expert_parallel=bool(L and (L.expert_parallel or (L.ep or 1) > 1)),
                   all2all_backend=L.all2all_backend if L else None, max_num_seqs=seqs, max_batched_tokens=tokens,
                   max_model_len=mlen, model_max_len=model_max_len, draft_tokens=k,
                   speculative=bool(L and L.speculative) or bool(k), capture_sizes=sizes, max_capture=max_cap,
                   eager=eager, chunked_prefill=L.chunked_prefill if L else None,
                   disable_graph_padding=bool(L and L.disable_graph_padding), page_size=page,
                   flashinfer=a.flashinfer, architecture=facts.architecture, source="command" if L else "flag")
    try:
        defaults = derive(d)
    except ValueError as exc:
        raise PlanUsageError(str(exc)) from None
    notes += defaults.notes
    line = defaults.line
    fi = defaults.get("flashinfer")
    label = f"{framework_label(fw)} {short_line(line)}"
    header = {"framework": fw, "line": line, "line_source": defaults.line_source, "label": label,
              "gpu": {"name": gpu.name, "key": gpu_key, "num_sms": gpu.num_sms, "cc": f"{gpu.cc[0]}.{gpu.cc[1]}",
                      "memory_gib": round(gpu_memory(gpu_key)[0] / (1 << 30), 1) if gpu_memory(gpu_key) else None}}
    moe = _moe(a, gpu_key, fi)
    base = {"model": facts.as_dict(), "model_source": model_source, "framework": fw, "framework_version": line,
            "simulated": header, "flashinfer": fi, "flashinfer_source": defaults.values["flashinfer"].source,
            "flashinfer_family": fm.family(fi), "moe": moe, "defaults": defaults.as_dict(),
            "launch": launch.as_dict() if launch else None,
            "ignored_options": list(launch.ignored) if launch else []}
    if facts.uses_mla:
        base.update(verdict="not_applicable",
                    reason="MLA model: FlashInfer's MLA planner uses its own buffer, not the one guarded here",
                    notes=notes)
        return base
    if L:
        n = attention_backend_note(L)
        if n:
            notes.append(n)
        if L.quantization:
            notes.append(f"quantization {L.quantization}: weights only here; the KV cache is "
                         f"{kv_dtype if kv_dtype != 'auto' else 'the model dtype (auto) unless the checkpoint sets an FP8 KV cache'}")
        notes += L.notes
    tp_v = defaults.get("tp") or 1
    dcp_v = defaults.get("dcp") or 1
    try:
        q, kv = facts.per_rank(tp_v)
    except ModelError as exc:
        raise PlanUsageError(str(exc)) from None
    dqk = facts.head_dim
    dvo = a.v_head_dim or facts.v_head_dim or facts.head_dim
    # planners through the core's one function
    kv_kind = dtype_kind(kv_dtype)
    kv_bytes = a.kv_dtype_bytes or dtype_bytes(kv_kind) or 2
    planner_notes = []
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
    q_prefill = q_decode = "derive"
    if fw == "vllm" and vllm_per_phase_builder(line):
        # vLLM 0.26+ sets the query dtype per phase itself (get_q_data_type)
        q_prefill, q_decode = vllm_query_dtypes(gpu.cc, kv_kind, getattr(a, "trtllm_attention", None) == "off")
    choice = choose_planners(PlannerFacts(framework=fw, cc=gpu.cc, kv_dtype=kv_dtype, trtllm_attention=trt,
                                          dcp_size=dcp_v, tensor_core_decode=tcd,
                                          q_prefill=q_prefill, q_decode=q_decode))
    cands = list(choice.candidates)
    if a.decode_planner or a.prefill_planner:
        cands = [Planners(prefill=a.prefill_planner or c.prefill, decode=a.decode_planner or c.decode) for c in cands]
        cands = list(dict.fromkeys(cands))
        planner_notes.append("planner given: " + ", ".join(
            f"{n} {v}" for n, v in (("decode", a.decode_planner), ("prefill", a.prefill_planner)) if v))
    q_eff = q * choice.decode_qo_heads_factor  # vLLM DCP: decode plans every DCP rank's query heads
    layout = AttentionLayout(q_eff, kv, dqk, dvo, defaults.get("page_size"), kv_bytes)
    decode_sizes = defaults.decode_graph_sizes
    limits = ServingLimits(capture_sizes=decode_sizes, max_num_seqs=defaults.get("max_num_seqs"),
                           max_num_batched_tokens=defaults.get("max_batched_tokens"),
                           draft_tokens=defaults.get("draft_tokens") or 0, max_model_len=defaults.get("max_model_len"))
    results = []
    for p in cands:
        p2 = Planners(prefill=p.prefill, decode=p.decode, decode_blocks_per_sm=a.decode_blocks_per_sm)
        results.append((p2, compute_requirement(layout, limits, gpu, fi, p2, caller=fw)))
    planners, req = max(results, key=lambda r: r[1].float_bytes)
    cand_rows = [{"decode": p.decode, "prefill": p.prefill, "float_bytes": r.float_bytes,
                  "reason": choice.reasons[i] if i < len(choice.reasons) else ""}
                 for i, (p, r) in enumerate(results)]
    if choice.missing:
        flag = ("--trtllm-attention on|off" if any("TRT-LLM" in m for m in choice.missing) else
                "--kv-cache-dtype" if any("KV" in m for m in choice.missing) else "--decode-planner/--prefill-planner")
        planner_notes.append(f"unknown here: {', '.join(choice.missing)}; sized every case and kept the larger need "
                             f"({planners.decode} decode, {planners.prefill} prefill); {flag} settles it")
    server = default_workspace(fw, line, architecture=facts.architecture, max_num_batched_tokens=limits.max_num_batched_tokens,
                               q_heads=q, head_dim=dqk)
    server_src = workspace_source(fw, line, architecture=facts.architecture,
                                  max_num_batched_tokens=limits.max_num_batched_tokens, q_heads=q, head_dim=dqk)
    if a.workspace:
        from .settings import parse_size
        buffer = parse_size(a.workspace)
        if buffer is None:
            raise PlanUsageError(f"--workspace must be a size such as 394MiB, 1GiB or a byte count, got {a.workspace!r}")
    else:
        buffer = server
    dom = req.dominant
    verdict = "overflow" if req.float_bytes > buffer else "ok"
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
        size = round_up_mib(req.float_bytes)
        remedies["workspace_bytes"] = size
        remedies["env"] = f"{NATIVE_VAR[fw]}={size}"
        if decode_sizes:
            remedies["largest_capture_batch_that_fits"] = largest_fitting_capture(
                layout, limits, gpu, fi, planners, fw, buffer)
        if fm.features(fi).rows_by_query is False:
            fixed = compute_requirement(layout, limits, gpu, "0.7.1", planners, caller=fw)
            remedies["flashinfer_0_7_1_need_bytes"] = fixed.float_bytes
    scen = [dict(s.as_dict(), description=describe_scenario(s, layout, gpu, fw)) for s in req.scenarios]
    base.update({
        "gpu": {"name": gpu.name, "num_sms": gpu.num_sms, "cc": f"{gpu.cc[0]}.{gpu.cc[1]}"},
        "layout": {"tp": tp_v, "dcp": dcp_v, "num_qo_heads": q_eff, "num_kv_heads": kv, "head_dim_qk": dqk,
                   "head_dim_vo": dvo, "page_size": layout.page_size, "kv_dtype_bytes": kv_bytes, "kv_cache_dtype": kv_dtype},
        "limits": {"capture_sizes": list(decode_sizes), "max_num_seqs": limits.max_num_seqs,
                   "max_batched_tokens": limits.max_num_batched_tokens, "draft_tokens": limits.draft_tokens,
                   "max_model_len": limits.max_model_len},
        "planners": {"decode": planners.decode, "prefill": planners.prefill, "tensor_core_decode": tcd,
                     "tensor_core_decode_reason": tcd_why, "trtllm_attention": trt_src},
        "planner_candidates": cand_rows, "planner_missing": list(choice.missing), "planner_notes": planner_notes,
        "scenarios": scen,
        "need": {"float_bytes": req.float_bytes, "int_bytes": req.int_bytes,
                 "scenario": dom.name if dom else None, "batch": dom.batch if dom else None,
                 "allocation": largest.name if largest else None,
                 "allocation_bytes": largest.bytes if largest else None},
        "int_workspace_bytes": INT_WORKSPACE_BYTES,
        "server_default_bytes": server, "server_default_source": server_src,
        "workspace_bytes": buffer,
        "verdict": verdict, "overflow": overflow, "overflow_reason": overflow_reason,
        "remedies": remedies,
        "notes": notes + list(req.notes),
    })
    return base


def _moe(a, gpu_key, fi) -> dict:
    arch = getattr(a, "host_arch", None)
    if arch:
        src = "given"
    elif is_aarch64_gpu(gpu_key):
        arch, src = "aarch64", f"{gpu_key.upper()} systems have Grace/Arm hosts"
    else:
        arch, src = "x86_64", "assumed for this GPU; --host-arch aarch64 for a Grace host"
    spec = find_spec(gpu_key) if gpu_key else None
    v = moe_verdict(Settings(), machine=arch, flashinfer_version=fi, gpu=spec.cc if spec else None)
    return {"host_arch": arch, "host_arch_source": src, "block": v["block"], "reason": v["reason"],
            "gpu": v["gpu"], "ops": v["ops"], "rows": v["rows"],
            "verdict": (f"{v['gpu']}: {v['summary']} ({v['reason']})" if v["rows"] or v["block"]
                        else f"stands down ({v['reason']})")}


def describe_scenario(s, layout, gpu, fw) -> str:
    g = layout.gqa_group
    if s.name == "cuda_graph_decode":
        return f"CUDA-graph capture of a decode batch of {s.batch} requests, one query token each"
    if s.name == "cuda_graph_verify":
        return f"CUDA-graph speculative verify: {s.batch} requests x {s.q_len} query tokens"
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


def print_report(r: dict, show_all: bool, out=sys.stdout) -> None:
    w = out.write
    sim = r["simulated"]
    g = sim["gpu"]
    mem = f", {g['memory_gib']:.0f} GiB" if g.get("memory_gib") else ""
    w(f"simulating {sim['label']} ({sim['line_source']}) on {g['name']}: {g['num_sms']} SMs, cc {g['cc']}{mem}\n")
    w(f"flashinfer {r['flashinfer']} ({r['flashinfer_source']}; sizing family {r['flashinfer_family']})\n")
    if r.get("launch"):
        la = r["launch"]
        w(f"command    {la['form']} ({framework_label(la['framework'])})\n")
    if r["verdict"] == "not_applicable":
        w(f"model      {r['model']['name']} ({r['model_source']})\n{r['model']['name']}: {r['reason']}\n")
        _moe_line(r, w)
        for note in r.get("notes", []):
            w(f"note       {note}\n")
        return
    m, l = r["model"], r["layout"]
    hd = f"head_dim {l['head_dim_qk']}" + (f"/{l['head_dim_vo']}" if l["head_dim_vo"] != l["head_dim_qk"] else "")
    w(f"model      {m['name']} ({r['model_source']}): {l['num_qo_heads']} q / {l['num_kv_heads']} kv heads per rank "
      f"(tp {l['tp']}{', dcp ' + str(l['dcp']) if l['dcp'] > 1 else ''}), {hd}, KV cache {l['kv_cache_dtype']}\n")
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
    p = r["planners"]
    why = p["tensor_core_decode_reason"] + (f"; {p['trtllm_attention']}" if p.get("trtllm_attention") else "")
    w(f"planners   decode {p['decode']}, prefill {p['prefill']} ({why})\n")
    for c in r["planner_candidates"]:
        if len(r["planner_candidates"]) > 1:
            w(f"  candidate decode {c['decode']}, prefill {c['prefill']}: {_fmt(c['float_bytes'])} ({c['reason']})\n")
    for n in r["planner_notes"]:
        w(f"  {n}\n")
    _moe_line(r, w)
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
        w(f"{s['name']:<19} {s['batch']:>6} {s['q_len']:>5} {s['float_bytes']:>13,} {_fmt(s['float_bytes']):>10} "
          f"{s['int_bytes']:>10,}  {s['dominant_allocation'] or '-'}\n")
    if not show_all and len(rows) < len(r["scenarios"]):
        w(f"({len(r['scenarios']) - len(rows)} smaller capture sizes not shown; --all lists them)\n")
    for s in rows:
        if s["name"].startswith("eager"):
            w(f"  {s['name']}: {s['description']}\n")
    n = r["need"]
    w(f"\nneed       {n['float_bytes']:,} bytes ({_fmt(n['float_bytes'])}) float at {n['scenario']}"
      f" batch {n['batch']} (largest allocation {n['allocation']}); int {_fmt(n['int_bytes'])} of "
      f"{_fmt(r['int_workspace_bytes'])}\n")
    srv = r["server_default_bytes"]
    w(f"{r['framework']} allocates {srv:,} bytes ({_fmt(srv)}): {r['server_default_source']}"
      + (f"; checking against --workspace {r['workspace_bytes']:,}" if r["workspace_bytes"] != srv else "") + "\n")
    if r["verdict"] == "ok":
        w(f"verdict    OK: the need fits with {_fmt(r['workspace_bytes'] - n['float_bytes'])} to spare\n")
    else:
        o = r["overflow"]
        w("verdict    OVERFLOW: FlashInfer will raise at start-up:\n")
        if o:
            w(f"           Buffer overflow when allocating memory for {o['allocation']} with size {o['bytes']} "
              f"and alignment {o['alignment']}, but only {o['available']} bytes available in AlignedAllocator.\n")
            w(f"           overflowing allocation {o['allocation']} ({o['bytes']:,} B); largest allocation "
              f"{n['allocation']} ({n['allocation_bytes']:,} B)\n")
        if r.get("overflow_reason"):
            w(f"           why they differ: {r['overflow_reason']}\n")
        rem = r["remedies"]
        w("remedies\n")
        w(f"  - pip install flashinfer-guard in the server's environment: it raises the buffer to "
          f"{_fmt(rem['workspace_bytes'])} automatically; or\n")
        w(f"  - export {rem['env']}   ({_fmt(rem['workspace_bytes'])})\n")
        if "largest_capture_batch_that_fits" in rem:
            flag = "--max-cudagraph-capture-size" if r["framework"] == "vllm" else "--cuda-graph-max-bs"
            w(f"  - or keep today's buffer and cap CUDA-graph batches at {rem['largest_capture_batch_that_fits']} "
              f"({flag})\n")
        if "flashinfer_0_7_1_need_bytes" in rem:
            w(f"  - or upgrade to FlashInfer >= 0.7.1 (PR #5177): the need drops to "
              f"{_fmt(rem['flashinfer_0_7_1_need_bytes'])}\n")
    for note in r["notes"]:
        w(f"note       {note}\n")
    if r.get("ignored_options"):
        w(f"ignored    (do not change the workspace): {' '.join(r['ignored_options'])}\n")


def _moe_line(r, w):
    mo = r["moe"]
    w(f"moe guard  {mo['host_arch']} host ({mo['host_arch_source']}): {mo['verdict']}\n")
    for row in mo.get("rows", ()):
        w(f"moe row    {row['short']}: {row['risk']}; default {row['default']}, strict {row['strict']}\n")
