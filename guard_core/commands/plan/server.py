"""Stage 2, ``resolve_server``: the model (``model_source``), the GPU, the simulated line's
defaults on it (each limit from its flag, else the command), the environment the server sees
and the FLASHINFER_GUARD_* switches in it, and what every plan says, sized or not (MoE included).
"""

from __future__ import annotations

from guard_core.commands.plan.model_source import mtp_depth, plan_model
from guard_core.commands.plan.records import Command, PlanUsageError, ServerConfig
from guard_core.decide.records import moe_verdict
from guard_core.deployment.guard_loading import not_loaded
from guard_core.deployment.server_defaults import (Deployment, ServerShape, derive, framework_label, gpu_memory,
                                                   is_aarch64_gpu, short_line)
from guard_core.flashinfer.planner import family
from guard_core.gpus import find_spec
from guard_core.runtime.settings import MOE, Settings, load_settings

__all__ = ["PLAN_FLAGS", "resolve_server"]


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
    # whether the guard loads there at all (FLASHINFER_GUARD=0, VLLM_PLUGINS, SGLANG_PLUGINS): where it does
    # not, every stage after this one runs as with the master switch off (the unguarded answer)
    guard_off = not_loaded(fw, env, settings.enabled)
    if guard_off and settings.enabled:
        settings = Settings(False, settings.moe, settings.moe_fixed_in, settings.workspace, settings.workspace_bytes,
                            settings.log_level, settings.warnings, settings.workspace_max, settings.reserve)
    det = fw == "sglang" and bool(getattr(a, "deterministic", False) or (L and L.deterministic))
    if getattr(a, "deterministic", False) and fw != "sglang":
        raise PlanUsageError("--deterministic is SGLang's --enable-deterministic-inference; vLLM's batch-invariant "
                             "mode plans without split-KV (docs/deterministic.md)")
    record = _base_record(a, L, fw, gpu, gpu_key, model, model_source, defaults, settings)
    record["environment"] = env_why
    if guard_off:
        # the MoE guard is part of the same plugin: nothing of it runs either
        record["moe"].update(block=False, verdict=f"not applied: {guard_off}", guard_loads=False)
    return ServerConfig(model, model_source, model_path, gpu, gpu_key, defaults, kv_dtype, env, env_why, settings,
                        det, record, d, guard_off)


def _pick(flag_value, cmd_value, name: str, notes: list, flag: str):
    """A plan flag beats the launch command; say so when they differ."""
    if flag_value is not None and cmd_value is not None and flag_value != cmd_value:
        notes.append(f"{flag} {flag_value} replaces the command's {name} {cmd_value}")
    return flag_value if flag_value is not None else cmd_value


# plan's own flags over the command's shape, in the order their notes are written: (the ServerShape
# field, plan's option (its dest in ``a``: the option's name, as argparse makes it), what the command
# calls the value: one name, or vLLM's and SGLang's)
PLAN_FLAGS = (("tp", "--tp", "tensor parallel size"),
              ("dcp", "--dcp", "decode context parallel size"),
              ("max_num_seqs", "--max-num-seqs", ("max seqs", "max running requests")),
              ("max_batched_tokens", "--max-batched-tokens", ("max batched tokens", "chunked prefill size")),
              ("max_model_len", "--max-model-len", "max model len"),
              ("draft_tokens", "--draft-tokens", "draft tokens"),
              ("capture_sizes", "--capture-sizes", "capture sizes"),
              ("max_capture", "--max-capture-batch", "capture ceiling"),
              ("page_size", "--page-size", "page size"))


def _deployment(a, L, fw, gpu, gpu_key, facts, model_max_len, model_name, environ, notes: list):
    """(Deployment, KV-cache dtype): the command's shape whole (``ServerShape.shape``), each of
    ``PLAN_FLAGS`` over it (``_pick``), on the GPU, the line and the model."""
    shape = (L or ServerShape()).shape()
    for name, flag, words in PLAN_FLAGS:
        # the command's draft tokens, where vLLM reads them from the model (MTP without a count)
        if name == "draft_tokens" and L and L.draft_tokens_from_model and shape[name] is None:
            shape[name], how = mtp_depth(model_name, environ)
            notes.append(f"speculative method {L.speculative} without num_speculative_tokens: vLLM runs the draft "
                         f"model's MTP depth (vllm/config/speculative.py n_predict): {shape[name]} ({how})")
        words = words if isinstance(words, str) else words[fw != "vllm"]
        shape[name] = _pick(getattr(a, flag[2:].replace("-", "_")), shape[name], words, notes, flag)
    shape["eager"] = bool(a.no_cuda_graph or shape["eager"])
    shape["expert_parallel"] = bool(shape["expert_parallel"] or (L and (L.ep or 1) > 1))  # SGLang --ep-size N
    kv_dtype = getattr(a, "kv_cache_dtype", None) or (L.kv_cache_dtype if L else None)
    if getattr(a, "kv_cache_dtype", None) and L and L.kv_cache_dtype and a.kv_cache_dtype != L.kv_cache_dtype:
        notes.append(f"--kv-cache-dtype {a.kv_cache_dtype} replaces the command's {L.kv_cache_dtype}")
    kv_dtype = kv_dtype or "auto"
    sizes, max_cap = shape["capture_sizes"], shape["max_capture"]
    if sizes and max_cap and not (L and L.capture_sizes and L.max_capture):
        notes.append(f"capture ceiling {max_cap} ignored: explicit capture sizes {min(sizes)}..{max(sizes)} decide")
        shape["max_capture"] = None
    d = Deployment(framework=fw, line=a.framework_version, gpu_key=gpu_key, cc=gpu.cc, gpu_name=gpu.name,
                   model_max_len=model_max_len, flashinfer=a.flashinfer, architecture=facts.architecture,
                   source="command" if L else "flag", **shape)
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


def server_environ(L, environ) -> tuple[dict, str]:
    """(the environment the server process sees, why): the exported one through the launch
    command's prefixes (``launch_command.server_environment``)."""
    import os

    from guard_core.deployment.launch_command import LaunchError, server_environment

    exported = os.environ if environ is None else environ
    if L is None:
        return dict(exported), "the exported environment (no launch command)"
    try:
        return server_environment(L.env_ops, exported)
    except LaunchError as exc:
        raise PlanUsageError(str(exc)) from None
