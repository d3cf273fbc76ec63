"""vLLM's own defaults per line and GPU (rules and their sources: ``guard_core.deployment.server_defaults``):
batch tier, batched tokens, CUDA-graph capture sizes, the FlashInfer it pins, its workspace."""

from __future__ import annotations

from guard_core.deployment.deployment_record import (Defaults, Deployment, Derived, draft_context_page,
                                                   known_line, line_at_least, pin_source, pinned_flashinfer,
                                                   short_line)
from guard_core.gpus import gpu_memory
from guard_core.units import GIB, MIB
from guard_core.versions import parse_version

__all__ = ["VLLM_BYTES_PER_ELEM", "VLLM_DEFAULT", "vllm_batch_tier", "vllm_capture_grid", "vllm_defaults",
           "vllm_per_phase_builder", "vllm_workspace"]

VLLM_DEFAULT = 394 * MIB


def vllm_batch_tier(line: str, gpu_key: str | None, gpu_name: str, cc) -> tuple[int, int, str]:
    """(max_num_seqs, max_num_batched_tokens, rule) for ``vllm serve`` on this GPU."""
    mem = gpu_memory(gpu_key)
    label = f"vLLM {short_line(line)}"
    if mem is None:
        return 256, 2048, f"{label} default when the GPU's memory is unknown (give --gpu from the table)"
    total = mem[0]
    a100 = "a100" in gpu_name.lower() or gpu_key == "a100"
    gb10 = line_at_least(line, "0.33") and tuple(cc) == (12, 1)
    gib = total / GIB
    if line_at_least(line, "0.29") and total >= 160 * GIB:
        return 1024, 16384, f"{label} default on GPUs with >= 160 GiB ({gib:.0f} GiB)"
    if total >= 70 * GIB and not a100 and not gb10:
        return 1024, 8192, f"{label} API-server default on GPUs with >= 70 GiB other than A100 ({gib:.0f} GiB)"
    why = "A100" if a100 else ("GB10" if gb10 else f"{gib:.0f} GiB < 70 GiB")
    return 256, 2048, f"{label} API-server default on smaller GPUs ({why})"


def vllm_capture_grid(ceiling: int) -> list[int]:
    sizes = [b for b in (1, 2, 4) if b <= ceiling]
    if ceiling >= 8:
        sizes += range(8, min(ceiling + 1, 256), 8)
    if ceiling >= 256:
        sizes += range(256, ceiling + 1, 16)
    return sorted(set(sizes))


def _request_counts(max_reqs: int, limit: int) -> list[int]:
    max_reqs = min(max_reqs, limit)
    counts = [n for n in (1, 2, 4) if n <= max_reqs]
    counts += range(8, min(max_reqs + 1, 256), 8)
    counts += range(256, max_reqs + 1, 16)
    return sorted(set(counts) | {max_reqs})


def vllm_defaults(d: Deployment, line: str, line_source: str) -> Defaults:
    rules = known_line("vllm", line)
    label = f"vLLM {short_line(line)}"
    out = Defaults("vllm", line, line_source)
    v = out.values
    given = "in the command" if d.source == "command" else "given"
    _vllm_parallel(v, d, label, given)
    seqs_t, tokens_t, tier = vllm_batch_tier(line, d.gpu_key, d.gpu_name, d.cc)
    k = d.draft_tokens or 0
    tokens = _vllm_batched_tokens(d, rules, label, given, tokens_t, seqs_t, tier)
    v["max_batched_tokens"] = tokens
    if d.max_num_seqs:
        v["max_num_seqs"] = Derived(d.max_num_seqs, given, True)
    else:
        seqs = Derived(seqs_t, tier)
        if seqs_t > tokens.value:
            seqs = Derived(tokens.value, f"{label}: at most the max batched tokens ({tokens.value})")
        v["max_num_seqs"] = seqs
    seqs = v["max_num_seqs"].value
    tokens_n = tokens.value
    draft_context_page(v, d, k, given, 16, f"{label} default block size")
    if d.eager:
        v["capture_sizes"] = Derived((), f"eager mode ({given}): no CUDA graphs", True)
        out.decode_graph_sizes = ()
    else:
        _vllm_cuda_graphs(out, d, rules, label, given, seqs, k, tokens_n)
    return _vllm_workspace(out, d, label, tokens_n)


def _vllm_parallel(v: dict, d: Deployment, label: str, given: str) -> None:
    """tp, dp, pp, dcp: given, or the line's default of 1."""
    tp, pp, dp = d.tp or 1, d.pp or 1, d.dp or 1
    v["tp"] = Derived(tp, given if d.tp else f"{label} default", bool(d.tp))
    if d.dp and d.dp > 1:
        v["dp"] = Derived(dp, f"{given}: each DP rank holds all attention heads (attention TP {tp})", True)
    if d.pp and d.pp > 1:
        v["pp"] = Derived(pp, given, True)
    v["dcp"] = Derived(d.dcp or 1, given if d.dcp else f"{label} default", bool(d.dcp))


def _vllm_batched_tokens(d: Deployment, rules: str, label: str, given: str, tokens_t: int, seqs_t: int,
                         tier: str) -> Derived:
    """max_num_batched_tokens: given, or the GPU tier's, bounded as the line bounds it."""
    if d.max_batched_tokens:
        return Derived(d.max_batched_tokens, given, True)
    dp = d.dp or 1
    batched_dp = (line_at_least(rules, "0.23.0") and d.expert_parallel and dp > 1
                  and (d.all2all_backend or "") in ("deepep_low_latency", "nixl_ep"))
    if batched_dp:
        tokens = Derived(256, f"{label} default with DP + expert parallel over {d.all2all_backend}")
    else:
        tokens = Derived(tokens_t, tier)
    t = tokens.value
    mlen = d.max_model_len or d.model_max_len
    if d.chunked_prefill is False and mlen and mlen > t:
        tokens = Derived(mlen, f"{label}: chunked prefill off, so at least max model len {mlen}")
    seqs_for_cap = d.max_num_seqs or seqs_t
    if mlen and seqs_for_cap * mlen < tokens.value:
        tokens = Derived(seqs_for_cap * mlen, f"{label}: at most max seqs x max model len ({seqs_for_cap} x {mlen})")
    return tokens


def _vllm_cuda_graphs(out: Defaults, d: Deployment, rules: str, label: str, given: str, seqs: int, k: int,
                      tokens_n: int) -> None:
    """The capture ceiling, the capture list and the sizes FlashInfer plans decode graphs for."""
    v, notes = out.values, out.notes
    ceiling_limit = 1024 if (line_at_least(rules, "0.29.0") and d.cc[0] == 10) else 512
    uniform: list[int] = []
    if d.max_capture:
        ceiling = d.max_capture
        csrc = given
    elif not d.capture_sizes and d.architecture == "GptOssForCausalLM" and line_at_least(rules, "0.23.0"):
        # GptOssForCausalLMConfig.verify_and_update_config raises the ceiling to 1024 when the user
        # sets neither capture list nor ceiling, before _set_cudagraph_sizes (model_executor/models/
        # config.py 0.23.0:164-168, 0.32.0:477-481, 0.33.0:555-559; vllm/config/vllm.py 0.23.0:856 then
        # 1281): the ceiling is then given, so no uniform decode sizes are added (0.33.0 vllm.py:2440-2480)
        ceiling = 1024
        csrc = (f"{label}: 1024 for GptOssForCausalLM (GptOssForCausalLMConfig.verify_and_update_config, "
                "model_executor/models/config.py)")
    else:
        ceiling = min(2 * seqs * (1 + k), ceiling_limit)
        where = "on compute capability 10.x (SM100 family)" if ceiling_limit == 1024 else (
            "off SM100" if line_at_least(rules, "0.29.0") else "(this line has one ceiling for every GPU)")
        csrc = f"{label}: min(2 x max seqs x (1 + draft tokens), {ceiling_limit}) {where}"
        if line_at_least(rules, "0.29.0"):
            if k > 0:
                uniform = sorted({n * (1 + k) for n in _request_counts(seqs, ceiling_limit)
                                  if n * (1 + k) <= ceiling})
            elif line_at_least(rules, "0.32.0") and seqs <= ceiling:
                uniform = [seqs]
    if tokens_n < ceiling:
        notes.append(f"capture ceiling {ceiling} lowered to the max batched tokens {tokens_n} ({label} caps it there)")
        ceiling = tokens_n
        csrc += ", then at most the max batched tokens"
    v["max_capture"] = Derived(ceiling, csrc, bool(d.max_capture))
    if d.capture_sizes:
        sizes = sorted({b for b in d.capture_sizes if b <= tokens_n})
        dropped = sorted(set(d.capture_sizes) - set(sizes))
        if dropped:
            notes.append(f"capture sizes {dropped} ignored: above the max batched tokens {tokens_n} ({label} drops them)")
        v["capture_sizes"] = Derived(tuple(sizes), given, True)
    else:
        sizes = vllm_capture_grid(ceiling)
        extra = []
        if line_at_least(rules, "0.23.0") and tokens_n <= ceiling:
            extra.append(tokens_n)
        extra += [b for b in uniform if b <= tokens_n]
        sizes = sorted(set(sizes) | set(extra))
        v["capture_sizes"] = Derived(tuple(sizes), f"{label} capture list up to {max(sizes, default=0)}")
    if line_at_least(rules, "0.34.0") and not d.capture_sizes and not d.max_capture:
        # not ported yet (issue 39): vLLM 0.34.0 resolves prefill and decode CUDA-graph sizes apart
        # (VllmConfig._split_cudagraph_capture_sizes, config/vllm.py 0.34.0:2557-2740; the grids in
        # config/compilation.py 0.34.0:54-128), on SM100 a decode graph for every request count of
        # decode_cudagraph_capture_grid(max seqs) within 8192 tokens and prefill graphs up to 8192
        # tokens; gpt-oss off SM100 its own prefill list (model_executor/models/config.py 0.34.0:849-880).
        # tests/vllm/test_defaults_crosscheck.py fails there on 0.34.0 until it is.
        notes.append(f"{label}'s split prefill/decode CUDA-graph sizes are not modelled here (the capture "
                     "list is vLLM 0.33's rule); vLLM's own resolution (--resolution server, with vLLM "
                     f"{short_line(out.line)} installed) reads them")
    decode_max = min((1 + k) * seqs, max(sizes, default=0))
    # every pure decode batch of at most decode_max tokens plans the CUDA-graph wrapper, captured
    # or not (v1/attention/backends/flashinfer.py 0.23.0:1210-1214, 0.33.0:1938-1942): decode_max too
    out.decode_graph_sizes = tuple(sorted({b for b in sizes if b <= decode_max} | ({decode_max} if decode_max else set())))
    if d.max_capture and d.max_capture > decode_max:
        notes.append(f"--max-cudagraph-capture-size {d.max_capture}: FlashInfer decode graphs stop at "
                     f"{decode_max} = (1 + draft tokens) x max seqs ({seqs}); larger graphs run mixed batches")
    elif sizes and max(sizes) > decode_max:
        notes.append(f"FlashInfer plans decode graphs only up to {decode_max} = (1 + draft tokens) x max seqs")


def _vllm_workspace(out: Defaults, d: Deployment, label: str, tokens: int) -> Defaults:
    out.values["flashinfer"] = (Derived(d.flashinfer, "given", True) if d.flashinfer else
                                Derived(pinned_flashinfer("vllm", out.line), pin_source("vllm", out.line, label)))
    return out


# vLLM 0.26's FlashInfer builder: a workspace floor of tokens * heads * dim * 16, and
# one query dtype per phase (q_data_type_prefill / q_data_type_decode, get_q_data_type)
VLLM_PER_PHASE_BUILDER = "0.26"


def vllm_per_phase_builder(vllm_version: str | None) -> bool:
    """Whether ``vllm_version`` has vLLM 0.26's builder (False when unknown or unparsable);
    by release, so a 0.26 rc or dev build counts as 0.26, as for the checked lines."""
    try:
        return bool(vllm_version) and (parse_version(str(vllm_version))[1]
                                       >= parse_version(VLLM_PER_PHASE_BUILDER)[1])
    except Exception:
        return False


# vLLM 0.26+: the float workspace is at least tokens x q heads x head dim x this many bytes
# (v1/attention/backends/flashinfer.py FLASHINFER_PREFILL_WORKSPACE_BYTES_PER_ELEM: 0.32.0:99, 0.33.0:104)
VLLM_BYTES_PER_ELEM = 16


def vllm_workspace(vllm_version: str | None, max_num_batched_tokens: int, q_heads: int, head_dim: int,
                   user: int | None = None, user_source: str | None = None) -> Derived:
    """vLLM's own float workspace and why (the one copy of this rule; the adapter reads the same rule
    live from vLLM, ``vllm_guard.workspace_facts.server_bytes``, and tests/vllm/test_defaults_crosscheck.py
    ties the two on each locked line): VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE (``user`` where the
    command sets it, else 394 MiB, envs.py); from 0.26 at least tokens x heads x dim x 16
    (``_get_workspace_buffer``)."""
    est = max_num_batched_tokens * q_heads * head_dim * VLLM_BYTES_PER_ELEM
    per_phase = vllm_per_phase_builder(vllm_version)
    if user is not None:
        if per_phase and est > user:
            return Derived(est, f"{user_source}, below vLLM's tokens x heads x dim x 16 = {est:,}, which wins")
        return Derived(user, user_source)
    label = f"vLLM {short_line(vllm_version)}" if vllm_version else "vLLM"
    if per_phase:
        if est > VLLM_DEFAULT:
            return Derived(est, f"{label}: max batched tokens x q heads x head dim x 16 = {max_num_batched_tokens} x "
                                f"{q_heads} x {head_dim} x 16 (above the 394 MiB floor)")
        return Derived(VLLM_DEFAULT, f"{label}: the 394 MiB floor (tokens x heads x dim x 16 = {est:,} is smaller)")
    return Derived(VLLM_DEFAULT, f"{label}: VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE default 394 MiB")
