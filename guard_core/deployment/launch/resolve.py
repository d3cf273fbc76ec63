"""A parsed namespace (either reader's) -> ``Launch``: each option read, ignored (known not to change the
workspace) or not read; model overrides; the command's environment; the native workspace variable."""

from __future__ import annotations

from guard_core.deployment.command_limits import LaunchError
from guard_core.deployment.launch.environment import Unseen, native_workspace
from guard_core.deployment.launch.fields import resolve_sglang, resolve_vllm
from guard_core.deployment.launch.record import READ_ENV, Launch
from guard_core.deployment.launch.values import json_option, printable
from guard_core.deployment.server_defaults import framework_label
from guard_core.flashinfer.releases import NATIVE_VAR

__all__ = ["HARMLESS", "HARMLESS_ENV", "HARMLESS_ENV_PREFIXES", "HARMLESS_SGLANG", "HARMLESS_VLLM",
           "apply_model_overrides", "resolve"]


# Options known not to change FlashInfer's workspace need (network, API, logging, loading,
# memory fraction, caching policy, tool/chat parsing): listed under "ignored".
HARMLESS_VLLM = {
    "host", "port", "uds", "api_key", "served_model_name", "trust_remote_code", "gpu_memory_utilization",
    "enable_prefix_caching", "disable_log_requests", "enable_log_requests", "disable_log_stats",
    "uvicorn_log_level", "disable_uvicorn_access_log", "tokenizer", "tokenizer_mode", "download_dir",
    "load_format", "seed", "revision", "code_revision", "tokenizer_revision", "swap_space", "cpu_offload_gb",
    "enable_auto_tool_choice", "tool_call_parser", "reasoning_parser", "chat_template", "response_role",
    "language_model_only", "async_scheduling", "disable_custom_all_reduce", "max_logprobs", "allowed_origins",
    "allowed_methods", "allowed_headers", "allow_credentials", "ssl_keyfile", "ssl_certfile", "root_path",
    "middleware", "disable_fastapi_docs", "enable_request_id_headers", "max_log_len", "config_format",
    "kv_cache_memory_bytes", "num_gpu_blocks_override", "distributed_executor_backend", "worker_cls",
    "lora_modules", "prompt_adapters", "return_tokens_as_token_ids", "enable_server_load_tracking",
    "generation_config", "override_generation_config", "tool_parser_plugin", "log_config_file",
    "data_parallel_address", "data_parallel_rpc_port", "data_parallel_size_local", "data_parallel_start_rank",
    "headless", "api_server_count", "hf_token", "otlp_traces_endpoint", "collect_detailed_traces",
    "disable_frontend_multiprocessing", "enable_sleep_mode", "model_loader_extra_config", "ignore_patterns",
    "use_tqdm_on_load", "pt_load_map_location", "safetensors_load_strategy", "chat_template_content_format",
    "enable_prompt_tokens_details", "enable_force_include_usage", "h11_max_incomplete_event_size",
    "h11_max_header_count", "log_error_stack", "structured_outputs_config", "guided_decoding_backend",
    "scheduling_policy", "preemption_mode", "mm_processor_cache_gb", "limit_mm_per_prompt",
    "enable_tokenizer_info_endpoint", "tokens_only", "exclude_tools_when_tool_choice_none", "dtype",
}
HARMLESS_SGLANG = {
    "host", "port", "api_key", "served_model_name", "trust_remote_code", "mem_fraction_static", "tokenizer_path",
    "tokenizer_mode", "skip_tokenizer_init", "load_format", "download_dir", "random_seed", "revision", "log_level",
    "log_level_http", "log_requests", "log_requests_level", "show_time_cost", "enable_metrics", "chat_template",
    "completion_template", "tool_call_parser", "reasoning_parser", "disable_radix_cache", "schedule_policy",
    "schedule_conservativeness", "file_storage_path", "watchdog_timeout", "dist_init_addr", "nnodes", "node_rank",
    "enable_cache_report", "decode_log_interval", "stream_interval", "stream_output", "allow_auto_truncate",
    "max_total_tokens", "max_prefill_tokens", "enable_mixed_chunk", "dtype", "tool_server", "sampling_backend",
    "grammar_backend", "constrained_json_whitespace_pattern", "disable_custom_all_reduce", "base_gpu_id",
    "gpu_id_step", "sleep_on_idle", "enable_p2p_check", "model_impl", "device", "weight_loader_disable_mmap",
    "enable_request_time_stats_logging", "crash_dump_folder", "tokenizer_worker_num", "json_model_override_args",
}
HARMLESS = {"vllm": HARMLESS_VLLM, "sglang": HARMLESS_SGLANG}
# environment variables of the command that do not change the workspace (device choice, downloads,
# communication, threads); any other (VLLM_BATCH_INVARIANT, SGLANG_*, ...) is "not read"
HARMLESS_ENV = {"CUDA_VISIBLE_DEVICES", "HF_TOKEN", "HF_HOME", "HF_HUB_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER",
                "HUGGING_FACE_HUB_TOKEN", "PYTHONPATH", "PYTHONUNBUFFERED", "PATH", "HOME", "TOKENIZERS_PARALLELISM",
                "VLLM_LOGGING_LEVEL", "VLLM_CONFIGURE_LOGGING", "VLLM_HOST_IP", "VLLM_PORT", "VLLM_API_KEY",
                "VLLM_USE_MODELSCOPE", "VLLM_CACHE_ROOT", "VLLM_NO_USAGE_STATS", "DO_NOT_TRACK", "SGLANG_LOG_LEVEL"}
HARMLESS_ENV_PREFIXES = ("NCCL_", "HF_", "TRANSFORMERS_", "OMP_", "MKL_", "UCX_", "GLOO_", "TORCH_NCCL_", "NVIDIA_")
# heads / head dim keys of a model override: they change the workspace, and the plan does not apply them
_HEAD_KEYS = ("num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size", "num_heads", "kv_lora_rank",
              "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "layer_types", "sliding_window")


def _display(opt, values) -> str:
    if values is None or values == [] or isinstance(values, bool):
        return printable(opt)
    if isinstance(values, (list, tuple)):
        return printable(f"{opt} {' '.join(str(v) for v in values)}")
    return printable(f"{opt} {values}")


def apply_model_overrides(cfg: dict, overrides: dict) -> dict:
    """A model config with the command's overrides, as the server applies them: SGLang
    ``config.update(json_model_override_args)`` (a shallow update, hf_transformers_utils.py
    0.5.5:267-268); vLLM ``hf_overrides`` key by key, a nested config updated recursively and
    any other value set as is (``ModelConfig._apply_dict_overrides``, config/model.py 0.23.0:449-464)."""
    def deep(base: dict, over: dict, depth: int = 0) -> dict:
        out = dict(base)
        for k, v in over.items():
            if depth < 8 and isinstance(v, dict) and isinstance(out.get(k), dict):
                out[k] = deep(out[k], v, depth + 1)
            else:
                out[k] = v
        return out

    vals = overrides.get("values") or {}
    return deep(cfg, vals) if overrides.get("nested") else {**cfg, **vals}


def _heads_override(obj) -> list[str]:
    keys: list[str] = []

    def walk(d, prefix=""):
        if isinstance(d, dict):
            for k, v in d.items():
                if k in _HEAD_KEYS:
                    keys.append(prefix + str(k))
                elif isinstance(v, dict) and len(prefix) < 200:
                    walk(v, prefix + str(k) + ".")
    walk(obj)
    return keys


def _fraction(value) -> float | None:
    """SGLang's --mem-fraction-static as a number in (0, 1), else None (its automatic value assumed)."""
    try:
        v = float(value[-1] if isinstance(value, (list, tuple)) else value)
    except (TypeError, ValueError, IndexError):
        return None
    return v if 0.0 < v < 1.0 else None


def resolve(framework: str, form: str, ns: dict, seen: list, env: dict, environ, reader: str,
            ops=None) -> Launch:
    out = Launch(framework, form, reader=reader)
    out.env_ops = list(ops) if ops is not None else [("set", k, v) for k, v in env.items()]
    aliases = ns.get("_aliases") or {}
    if "_passed" in ns:  # the server's namespace holds every default: read what the command passed
        ns = {k: v for k, v in ns.items() if k in ns["_passed"]}
    try:
        read = resolve_vllm(out, ns) if framework == "vllm" else resolve_sglang(out, ns)
    except LaunchError as exc:  # name the option as the command spells it (-tp, not --tensor-parallel-size)
        msg = str(exc)
        for dest, opt, _v in seen:
            for name in sorted(aliases.get(dest, ()), key=len, reverse=True):
                if opt and name != opt and msg.startswith(name + " "):
                    msg = opt + msg[len(name):]
        raise LaunchError(msg) from None
    if framework == "sglang":
        out.mem_fraction_static = _fraction(ns.get("mem_fraction_static"))
    harmless = HARMLESS[framework]
    listed = set()
    for dest, opt, values in seen:
        text = _display(opt, values)
        if dest is None:
            out.not_read.append(f"{text} (not an option of {reader.split(chr(39) + 's')[0]})")
            continue
        if dest in ("help", "version") or dest in read:
            continue
        if text in listed:
            continue
        listed.add(text)
        if dest == "hf_overrides" or dest == "json_model_override_args":
            obj = json_option(opt, values) if isinstance(values, str) else json_option(opt, ns.get(dest))
            if obj:  # applied to the model's config as the server applies it (issue 26)
                out.model_overrides = {"option": opt, "values": obj, "nested": framework == "vllm"}
                keys = _heads_override(obj)
                if keys:
                    out.notes.append(f"{opt} overrides {', '.join(keys)}: applied to the model's config as "
                                     f"{framework_label(framework)} applies it")
                continue
        (out.ignored if dest in harmless else out.not_read).append(text)
    try:
        ws, src = native_workspace(framework, env, environ, out.env_ops)
    except Unseen as u:
        ws, src = None, None
        out.notes.append(f"{u.var} is exported here but the server does not see it ({u.why}): it allocates its "
                         "own default")
    out.workspace_bytes, out.workspace_source = ws, src
    for k in sorted(env):
        if k == NATIVE_VAR[framework] or k.startswith("FLASHINFER_GUARD") or k in ("VLLM_PLUGINS", "SGLANG_PLUGINS"):
            continue  # read by the plan from the environment the server sees (the plugin lists: guard_loading)
        if framework == "sglang" and k in READ_ENV:
            out.env[k] = str(env[k])[:64]
            continue
        harmless = k in HARMLESS_ENV or k.startswith(HARMLESS_ENV_PREFIXES)
        (out.ignored if harmless else out.not_read).append(printable(f"{k}={env[k][:40]}"))
    return out
