"""Each server's options -> the fields of ``Launch`` (vLLM: parallelism, limits, attention and compilation
configs, speculative config; SGLang: the same and DP attention, deterministic inference)."""

from __future__ import annotations

from guard_core.deployment.command_limits import LaunchError
from guard_core.deployment.launch.record import BOUNDS, SGLANG_EAGLE_FAMILY, Launch
from guard_core.deployment.launch.values import (bool_option, human_int_option, int_option, json_option, sizes_option,
                                                 str_option)

__all__ = ["resolve_sglang", "resolve_vllm"]


# vLLM's MTP methods (vllm/config/speculative.py MTPModelTypes, 0.23-0.33): without
# num_speculative_tokens vLLM runs the draft model's n_predict (its MTP depth)
_MTP_SUFFIX = "mtp"


class _Presence:
    """``has(dest)``: the parsed option is set; every option asked about and set is in ``read``."""

    def __init__(self, ns: dict):
        self.ns, self.read = ns, set()

    def __call__(self, dest: str) -> bool:
        if self.ns.get(dest) is None:
            return False
        self.read.add(dest)
        return True


def resolve_vllm(out: Launch, ns: dict) -> set:
    has = _Presence(ns)
    read = has.read

    model = ns.get("model_tag") or ns.get("model")
    if model is not None:
        out.model = str_option("--model", model)
    read.update({"model_tag", "model"})
    for dest, name, opt in (("tensor_parallel_size", "tp", "--tensor-parallel-size"),
                            ("data_parallel_size", "dp", "--data-parallel-size"),
                            ("pipeline_parallel_size", "pp", "--pipeline-parallel-size"),
                            ("decode_context_parallel_size", "dcp", "--decode-context-parallel-size")):
        if has(dest):
            setattr(out, name, int_option(opt, ns[dest], BOUNDS["parallel"]))
    if has("enable_expert_parallel"):
        out.expert_parallel = bool_option("--enable-expert-parallel", ns["enable_expert_parallel"])
    if has("all2all_backend"):
        out.all2all_backend = str_option("--all2all-backend", ns["all2all_backend"])
    if has("max_num_seqs"):
        out.max_num_seqs = int_option("--max-num-seqs", ns["max_num_seqs"], BOUNDS["max_num_seqs"])
    if has("max_num_batched_tokens"):
        out.max_batched_tokens = human_int_option("--max-num-batched-tokens", ns["max_num_batched_tokens"],
                                            BOUNDS["max_batched_tokens"])
    if has("max_model_len"):
        out.max_model_len = human_int_option("--max-model-len", ns["max_model_len"], BOUNDS["max_model_len"], auto=True)
    for dest, name, opt in (("kv_cache_dtype", "kv_cache_dtype", "--kv-cache-dtype"),
                            ("attention_backend", "attention_backend", "--attention-backend"),
                            ("quantization", "quantization", "--quantization")):
        if has(dest):
            setattr(out, name, str_option(opt, ns[dest]))
    if has("block_size"):
        out.page_size = int_option("--block-size", ns["block_size"], BOUNDS["page_size"])
    if has("enforce_eager"):
        out.eager = bool_option("--enforce-eager", ns["enforce_eager"])
    if has("enable_chunked_prefill"):
        out.chunked_prefill = bool_option("--enable-chunked-prefill", ns["enable_chunked_prefill"])
    _vllm_attention_config(out, ns, has)
    _vllm_speculative(out, ns, has)
    _vllm_graph_options(out, ns, has, read)
    return read


def _vllm_attention_config(out: Launch, ns: dict, has) -> None:
    """--attention-config's backend (a JSON object or vLLM's config object)."""
    if has("attention_config"):
        ac = json_option("--attention-config", ns["attention_config"])
        be = ac.get("backend")
        if be is not None and not isinstance(be, str):
            be = getattr(be, "name", str(be))
        if be:
            out.attention_backend = str(be)


def _vllm_speculative(out: Launch, ns: dict, has) -> None:
    """Speculative decoding (-sc, --speculative-config, dotted -sc.key)."""
    if has("speculative_config"):
        sc = json_option("--speculative-config", ns["speculative_config"])
        n = sc.get("num_speculative_tokens")
        method = sc.get("method")
        if n is not None:
            out.draft_tokens = int_option("--speculative-config num_speculative_tokens", n, BOUNDS["draft_tokens"],
                                          lo=0)
        if sc:
            out.speculative = str(method or "speculative")
            if n is None and method and str(method).endswith(_MTP_SUFFIX):
                out.draft_tokens_from_model = True


def _vllm_graph_options(out: Launch, ns: dict, has, read: set) -> None:
    """CUDA graphs: the top-level options and the compilation config (-cc, -O JSON, dotted)."""
    cc = {}
    if has("compilation_config"):
        cc = json_option("--compilation-config", ns["compilation_config"])
    sizes = None
    for dest, opt in (("cudagraph_capture_sizes", "--cudagraph-capture-sizes"),
                      ("cuda_graph_sizes", "--cuda-graph-sizes")):
        if has(dest):
            sizes = sizes_option(opt, ns[dest])
    if sizes is None and cc.get("cudagraph_capture_sizes") is not None:
        sizes = sizes_option("--compilation-config cudagraph_capture_sizes", cc["cudagraph_capture_sizes"])
    out.capture_sizes = sizes
    m = ns.get("max_cudagraph_capture_size")
    if m is not None:
        read.add("max_cudagraph_capture_size")
    elif cc.get("max_cudagraph_capture_size") is not None:
        m = cc["max_cudagraph_capture_size"]
    if m is not None:
        out.max_capture = int_option("--max-cudagraph-capture-size", m, BOUNDS["max_capture"])
    mode = cc.get("cudagraph_mode")
    if mode is not None:  # null: vLLM's default mode (CUDA graphs unless -O0)
        name = getattr(mode, "name", mode)
        if (isinstance(name, str) and name.strip().upper() == "NONE") or (type(name) is int and name == 0):
            out.eager = True
    elif has("optimization_level"):
        lvl = ns["optimization_level"]
        lvl = getattr(lvl, "value", lvl)
        if str(lvl).strip() in ("0", "O0"):
            # OPTIMIZATION_LEVEL_00 sets cudagraph_mode NONE where the user set no mode
            # (vllm/config/vllm.py, 0.19.1-0.33)
            out.eager = True


def resolve_sglang(out: Launch, ns: dict) -> set:
    has = _Presence(ns)
    read = has.read

    if has("model_path"):
        out.model = str_option("--model-path", ns["model_path"])
    # 0.5.5 stores --tp-size as tensor_parallel_size (ServerArgs.from_cli_args copies it to tp_size)
    for dest, name, opt in (("tp_size", "tp", "--tp-size"), ("tensor_parallel_size", "tp", "--tp-size"),
                            ("dp_size", "dp", "--dp-size"), ("data_parallel_size", "dp", "--dp-size"),
                            ("pp_size", "pp", "--pp-size"), ("pipeline_parallel_size", "pp", "--pp-size"),
                            ("ep_size", "ep", "--ep-size"), ("expert_parallel_size", "ep", "--ep-size"),
                            ("attn_dp_size", "attn_dp", "--attn-dp-size")):
        if has(dest):
            setattr(out, name, int_option(opt, ns[dest], BOUNDS["parallel"]))
    if has("enable_dp_attention"):
        out.dp_attention = bool_option("--enable-dp-attention", ns["enable_dp_attention"])
    if has("enable_deterministic_inference"):  # fixed-split plans, SGLang's forced 2 GiB (issue 19)
        out.deterministic = bool_option("--enable-deterministic-inference", ns["enable_deterministic_inference"])
    if has("max_total_tokens"):  # the KV pool: bounds one deterministic decode batch
        out.kv_pool_tokens = int_option("--max-total-tokens", ns["max_total_tokens"], BOUNDS["max_model_len"])
    if has("max_running_requests"):
        out.max_num_seqs = int_option("--max-running-requests", ns["max_running_requests"], BOUNDS["max_num_seqs"])
    if has("chunked_prefill_size"):
        v = int_option("--chunked-prefill-size", ns["chunked_prefill_size"], BOUNDS["max_batched_tokens"],
                       lo=-(1 << 24))
        if v <= 0:
            out.chunked_prefill = False
            out.notes.append(f"--chunked-prefill-size {v}: chunked prefill off; prefill batches are whole prompts")
        else:
            out.max_batched_tokens = v
    if has("context_length"):
        out.max_model_len = int_option("--context-length", ns["context_length"], BOUNDS["max_model_len"])
    for dest, name, opt in (("kv_cache_dtype", "kv_cache_dtype", "--kv-cache-dtype"),
                            ("attention_backend", "attention_backend", "--attention-backend"),
                            ("decode_attention_backend", "decode_attention_backend", "--decode-attention-backend"),
                            ("prefill_attention_backend", "prefill_attention_backend", "--prefill-attention-backend"),
                            ("quantization", "quantization", "--quantization"),
                            ("speculative_algorithm", "speculative", "--speculative-algorithm")):
        if has(dest):
            setattr(out, name, str_option(opt, ns[dest]))
    if has("speculative_num_draft_tokens"):
        n = int_option("--speculative-num-draft-tokens", ns["speculative_num_draft_tokens"], BOUNDS["draft_tokens"] + 1)
        out.draft_tokens = n - 1  # SGLang counts the verified token in
    if has("speculative_eagle_topk"):  # the draft decodes topk x bs requests (issue 26)
        out.eagle_topk = int_option("--speculative-eagle-topk", ns["speculative_eagle_topk"], BOUNDS["draft_tokens"])
    if has("speculative_num_steps"):
        out.spec_steps = int_option("--speculative-num-steps", ns["speculative_num_steps"], BOUNDS["draft_tokens"])
    if has("page_size"):
        out.page_size = int_option("--page-size", ns["page_size"], BOUNDS["page_size"])
    for dest, opt in (("cuda_graph_max_bs", "--cuda-graph-max-bs"),
                      ("cuda_graph_max_bs_decode", "--cuda-graph-max-bs-decode")):
        if has(dest):
            out.max_capture = int_option(opt, ns[dest], BOUNDS["max_capture"])
    for dest, opt in (("cuda_graph_bs", "--cuda-graph-bs"), ("cuda_graph_bs_decode", "--cuda-graph-bs-decode")):
        if has(dest):
            out.capture_sizes = sizes_option(opt, ns[dest])
    for dest, opt in (("disable_cuda_graph", "--disable-cuda-graph"),
                      ("disable_decode_cuda_graph", "--disable-decode-cuda-graph")):
        if has(dest) and bool_option(opt, ns[dest]):
            out.eager = True
    if has("disable_cuda_graph_padding"):
        out.disable_graph_padding = bool_option("--disable-cuda-graph-padding", ns["disable_cuda_graph_padding"])
    # DP attention: attention TP = tp / attention DP, and the chunk is divided by it
    # (0.5.5 ServerArgs._handle_data_parallelism; 0.5.23 arg_groups/parallel_hook.py
    # handle_deprecated_dp_attention: --dp N --enable-dp-attention -> --attn-dp-size N)
    if out.dp_attention and (out.dp or 1) > 1 and not (out.attn_dp and out.attn_dp > 1):
        out.attn_dp = out.dp
    elif not out.dp_attention and (out.attn_dp or 1) <= 1:
        out.attn_dp = None
    if out.attn_dp is not None and out.attn_dp <= 1:
        out.attn_dp = None
    if out.attn_dp:
        tp = out.tp or 1
        if tp % out.attn_dp:
            raise LaunchError(f"attention DP {out.attn_dp} in the launch command must divide the TP size {tp} "
                              "(SGLang asserts tp_size % dp_size == 0)")
    if out.speculative and out.draft_tokens is None and str(out.speculative).upper() not in SGLANG_EAGLE_FAMILY:
        out.notes.append(f"--speculative-algorithm {out.speculative} without --speculative-num-draft-tokens: "
                         "SGLang picks the draft tokens; give it in the command to size verify batches")
    return read
