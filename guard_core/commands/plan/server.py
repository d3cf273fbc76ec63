"""Stage 2, ``resolve_server``: the model (``model_source``), the GPU, the simulated line's
defaults on it (each limit from its flag, else the command), the environment the server sees
and the FLASHINFER_GUARD_* switches in it, and what every plan says, sized or not (MoE included).
"""

from __future__ import annotations

from guard_core.commands.plan.command import server_environ
from guard_core.commands.plan.model_source import mtp_depth, plan_model
from guard_core.commands.plan.records import Command, PlanUsageError, ServerConfig
from guard_core.decide.records import moe_verdict
from guard_core.deployment.server_defaults import (Deployment, derive, framework_label, gpu_memory, is_aarch64_gpu,
                                                   short_line)
from guard_core.flashinfer.planner import family
from guard_core.gpus import find_spec
from guard_core.runtime.settings import MOE, load_settings

__all__ = ["resolve_server"]


def resolve_server(a, cmd: Command, resolve_gpu, environ) -> ServerConfig:
    """Stage 2: the model's config, the GPU, the line's defaults on it (flags over the
    command), the environment the server sees and the guard's switches there."""
    L, fw, notes = cmd.launch, cmd.framework, cmd.notes
    model, model_source, model_max_len, model_path, model_name = plan_model(a, L, environ, notes)
    gpu = resolve_gpu(a)
    spec = find_spec(a.gpu or "b300") if (a.gpu or a.sms is None) else None
    gpu_key = spec.key if spec else None
    d, kv_dtype = _deployment(a, L, fw, gpu, gpu_key, model, model_max_len, model_name, environ, notes)
    try:
        defaults = derive(d)
    except ValueError as exc:
        raise PlanUsageError(str(exc)) from None
    notes += defaults.notes
    env, env_why = server_environ(L, environ)
    settings = load_settings(env)
    notes += [f"{w} (in the environment the server sees)" for w in settings.warnings]
    det = fw == "sglang" and bool(getattr(a, "deterministic", False) or (L and L.deterministic))
    if getattr(a, "deterministic", False) and fw != "sglang":
        raise PlanUsageError("--deterministic is SGLang's --enable-deterministic-inference; vLLM's batch-invariant "
                             "mode plans without split-KV (docs/deterministic.md)")
    record = _base_record(a, L, fw, gpu, gpu_key, model, model_source, defaults, settings)
    record["environment"] = env_why
    return ServerConfig(model, model_source, model_path, gpu, gpu_key, defaults, kv_dtype, env, env_why, settings,
                        det, record)


def _pick(flag_value, cmd_value, name: str, notes: list, flag: str):
    """A plan flag beats the launch command; say so when they differ."""
    if flag_value is not None and cmd_value is not None and flag_value != cmd_value:
        notes.append(f"{flag} {flag_value} replaces the command's {name} {cmd_value}")
    return flag_value if flag_value is not None else cmd_value


def _deployment(a, L, fw, gpu, gpu_key, facts, model_max_len, model_name, environ, notes: list):
    """(Deployment, KV-cache dtype): each limit from its flag, else the command (``_pick``)."""
    tp = _pick(a.tp, L.tp if L else None, "tensor parallel size", notes, "--tp")
    dcp = _pick(a.dcp, L.dcp if L else None, "decode context parallel size", notes, "--dcp")
    seqs = _pick(a.max_num_seqs, L.max_num_seqs if L else None,
                 "max seqs" if fw == "vllm" else "max running requests", notes, "--max-num-seqs")
    tokens = _pick(a.max_batched_tokens, L.max_batched_tokens if L else None,
                   "max batched tokens" if fw == "vllm" else "chunked prefill size", notes, "--max-batched-tokens")
    mlen = _pick(a.max_model_len, L.max_model_len if L else None, "max model len", notes, "--max-model-len")
    cmd_k = L.draft_tokens if L else None
    if L and L.draft_tokens_from_model and cmd_k is None:
        cmd_k, how = mtp_depth(model_name, environ)
        notes.append(f"speculative method {L.speculative} without num_speculative_tokens: vLLM runs the draft "
                     f"model's MTP depth (vllm/config/speculative.py n_predict): {cmd_k} ({how})")
    k = _pick(a.draft_tokens, cmd_k, "draft tokens", notes, "--draft-tokens")
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
                   attn_dp=L.attn_dp if L and fw == "sglang" else None,
                   expert_parallel=bool(L and (L.expert_parallel or (L.ep or 1) > 1)),
                   all2all_backend=L.all2all_backend if L else None, max_num_seqs=seqs, max_batched_tokens=tokens,
                   max_model_len=mlen, model_max_len=model_max_len, draft_tokens=k,
                   speculative=bool(L and L.speculative) or bool(k), capture_sizes=sizes, max_capture=max_cap,
                   speculative_algorithm=L.speculative if L and fw == "sglang" else None,
                   eagle_topk=L.eagle_topk if L else None, spec_steps=L.spec_steps if L else None,
                   eager=eager, chunked_prefill=L.chunked_prefill if L else None,
                   disable_graph_padding=bool(L and L.disable_graph_padding), page_size=page,
                   flashinfer=a.flashinfer, architecture=facts.architecture, source="command" if L else "flag")
    return d, kv_dtype


def _base_record(a, launch, fw, gpu, gpu_key, facts, model_source, defaults, settings) -> dict:
    """What every plan says, sized or not: the model, the simulated line and GPU, FlashInfer, MoE."""
    line = defaults.line
    fi = defaults.get("flashinfer")
    label = f"{framework_label(fw)} {short_line(line)}"
    header = {"framework": fw, "line": line, "line_source": defaults.line_source, "label": label,
              "gpu": {"name": gpu.name, "key": gpu_key, "num_sms": gpu.num_sms, "cc": f"{gpu.cc[0]}.{gpu.cc[1]}",
                      "memory_gib": round(gpu_memory(gpu_key)[0] / (1 << 30), 1) if gpu_memory(gpu_key) else None}}
    moe = _moe(a, fw, gpu_key, fi, settings, launch.quantization if launch else None)
    return {"model": facts.as_dict(), "model_source": model_source, "framework": fw, "framework_version": line,
            "simulated": header, "flashinfer": fi, "flashinfer_source": defaults.values["flashinfer"].source,
            "flashinfer_family": family(fi), "moe": moe, "defaults": defaults.as_dict(),
            "launch": launch.as_dict() if launch else None,
            "ignored_options": list(launch.ignored) if launch else [],
            "not_read_options": list(launch.not_read) if launch else []}


def _moe(a, fw, gpu_key, fi, settings, quantization) -> dict:
    """The MoE guard: ``moe_decision.decide`` for the command's quantization (the op its
    TRT-LLM experts run), and the verdict per op, under the switches the server sees."""
    from guard_core.decide.moe import MoeFacts, decide as moe_decide, op_of

    arch = getattr(a, "host_arch", None)
    if arch:
        src = "given"
    elif is_aarch64_gpu(gpu_key):
        arch, src = "aarch64", f"{gpu_key.upper()} systems have Grace/Arm hosts"
    else:
        arch, src = "x86_64", "assumed for this GPU; --host-arch aarch64 for a Grace host"
    spec = find_spec(gpu_key) if gpu_key else None
    v = moe_verdict(settings, machine=arch, flashinfer_version=fi, gpu=spec.cc if spec else None)
    op = op_of(fw, quantization)
    d = moe_decide(MoeFacts(fw, arch, fi, v["sm"], op), settings).decision
    return {"host_arch": arch, "host_arch_source": src, "block": v["block"], "reason": v["reason"],
            "gpu": v["gpu"], "ops": v["ops"], "rows": v["rows"], "setting": settings.moe,
            "decision": {"op": op or "unknown (every op)", "action": d.action, "block": d.block, "reason": d.reason},
            "verdict": (f"{v['gpu']}: {v['summary']} ({v['reason']})" if v["rows"] or v["block"]
                        else f"stands down ({v['reason']})")
            + (f" [{MOE}={settings.moe}]" if settings.moe != "auto" else "")}
