"""SGLang's own defaults per line and GPU (rules and their sources: ``guard_core.deployment.server_defaults``):
memory tier, capture list, request pool, EAGLE draft settings, its workspace, tensor-core decode."""

from __future__ import annotations

from guard_core.deployment.deployment_record import (Defaults, Deployment, Derived, draft_context_page,
                                                   known_line, line_at_least, pinned_flashinfer)
from guard_core.gpus import gpu_memory
from guard_core.units import MIB
from guard_core.versions import parse_version

__all__ = ["SGLANG_DEFAULT", "SGLANG_FLASHINFER_PAGE", "SGLANG_LARGE", "sglang_capture_list", "sglang_default_workspace", "sglang_defaults",
           "sglang_memory_tier", "sglang_request_pool", "sglang_tensor_core_decode", "sglang_workspace"]

SGLANG_DEFAULT = 384 * MIB
# The page size SGLang's FlashInfer (MHA) backend hands FlashInfer's plan() whatever --page-size
# says: it flattens its pages into token indices and plans with page size 1 and last-page lengths
# of 1 (flashinfer_backend.py 0.5.5:1071,1090,1379; 0.5.11:1174,1193,1491; 0.5.23:1847,1866,2403).
# Issue 27: sized with --page-size 64, the guard's witness was 66 pages where FlashInfer plans 4,224.
SGLANG_FLASHINFER_PAGE = 1
SGLANG_LARGE = 512 * MIB
SGLANG_512_ARCHS_055 = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "MiMoForCausalLM")
SGLANG_512_ARCHS_056 = SGLANG_512_ARCHS_055 + ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration")


def sglang_memory_tier(line: str, gpu_key: str | None, tp: int) -> tuple[int, int, str]:
    """(chunked_prefill_size, cuda_graph_max_bs, rule) by GPU memory and TP."""
    label = f"SGLang {line}"
    mem = gpu_memory(gpu_key)
    if mem is None:
        return 4096, 160, f"{label} fallback when the GPU memory is unknown"
    mib = mem[1]
    gb = mib / 1024
    small = tp < 4
    tp_word = "TP < 4" if small else "TP >= 4"
    if mib < 20 * 1024:
        return 2048, 8, f"{label} default on GPUs below 20 GiB ({gb:.0f})"
    if mib < 35 * 1024:
        if line_at_least(known_line("sglang", line), "0.5.20"):
            return 4096, (48 if small else 160), f"{label} default on GPUs of 20-35 GiB at {tp_word} ({gb:.0f})"
        return 2048, (24 if small else 80), f"{label} default on GPUs of 20-35 GiB at {tp_word} ({gb:.0f})"
    if mib < 60 * 1024:
        return 4096, (32 if small else 160), f"{label} default on GPUs of 35-60 GiB at {tp_word} ({gb:.0f})"
    if mib < 160 * 1024:
        return 8192, (256 if small else 512), f"{label} default on GPUs of 60-160 GiB at {tp_word} ({gb:.0f})"
    return 16384, 512, f"{label} default on GPUs with >= 160 GiB ({gb:.0f})"


def sglang_capture_list(line: str, max_bs: int, speculative: bool, no_padding: bool) -> list[int]:
    if no_padding:
        sizes = list(range(1, max_bs + 1))
    elif not speculative:
        sizes = [1, 2, 4, 8, 12] + list(range(16, 257, 8)) + list(range(272, 512, 16)) + list(range(512, max_bs + 1, 32))
    else:
        sizes = (list(range(1, 9)) + list(range(10, 33, 2)) + list(range(40, 65, 4)) + list(range(72, 257, 8))
                 + list(range(272, max_bs + 1, 16)))
    sizes = [b for b in sizes if b <= max_bs]
    if line_at_least(known_line("sglang", line), "0.5.11") and max_bs not in sizes:
        sizes.append(max_bs)
    return sizes


def sglang_defaults(d: Deployment, line: str, line_source: str) -> Defaults:
    label = f"SGLang {line}"
    out = Defaults("sglang", line, line_source)
    v, notes = out.values, out.notes
    given = "in the command" if d.source == "command" else "given"
    tp = d.tp or 1
    v["tp"] = Derived(tp, given if d.tp else f"{label} default", bool(d.tp))
    adp = d.attn_dp if d.attn_dp and d.attn_dp > 1 else None
    if adp:
        # DP attention: each attention DP group holds tp / dp of the TP ranks, so attention runs at
        # TP tp / dp, and the chunked prefill size is divided by dp (0.5.5 server_args.py
        # _handle_data_parallelism; 0.5.23 arg_groups/parallel_hook.py, --attn-dp-size)
        if tp % adp:
            raise ValueError(f"SGLang DP attention {adp} must divide the TP size {tp}")
        v["dp"] = Derived(adp, f"{given}: DP attention, attention TP = tp {tp} / {adp} = {tp // adp}", True)
        v["attn_tp"] = Derived(tp // adp, f"{label}: DP attention divides the attention TP by {adp}", True)
    elif d.dp and d.dp > 1:
        v["dp"] = Derived(d.dp, f"{given}: each DP rank holds all attention heads (attention TP {tp})", True)
    chunk, max_bs, tier = sglang_memory_tier(line, d.gpu_key, tp)
    if d.max_batched_tokens:
        v["max_batched_tokens"] = Derived(d.max_batched_tokens, given, True)
    else:
        v["max_batched_tokens"] = Derived(chunk, tier.replace("default", "chunked_prefill_size default", 1))
    if adp:
        c = v["max_batched_tokens"]
        v["max_batched_tokens"] = Derived(c.value // adp, f"{c.source}, divided by DP attention {adp} ({label})",
                                          c.passed)
    running = _sglang_running_requests(v, d, given, label)
    d = _sglang_eagle(v, d, given, label, line)
    k = d.draft_tokens or 0
    draft_context_page(v, d, k, given, 1, f"{label} default page size")
    if "spec_steps" in v and not v["spec_steps"].passed:
        v["draft_tokens"] = Derived(k, v["spec_steps"].source)
    if d.eager:
        v["capture_sizes"] = Derived((), f"CUDA graphs disabled ({given})", True)
    elif d.capture_sizes:
        v["capture_sizes"] = Derived(tuple(sorted(set(d.capture_sizes))), given, True)
        v["max_capture"] = Derived(max(d.capture_sizes), f"{label}: the largest given capture size", True)
    else:
        if d.max_capture:
            mb = Derived(d.max_capture, given, True)
        else:
            mb = Derived(max_bs, tier.replace("default", "cuda_graph_max_bs default", 1))
            if (line_at_least(known_line("sglang", line), "0.5.22") and d.max_num_seqs and max_bs > d.max_num_seqs):
                mb = Derived(d.max_num_seqs, f"{label}: the default graph max lowered to --max-running-requests")
                notes.append(f"cuda_graph_max_bs default {max_bs} lowered to max running requests {d.max_num_seqs} "
                             f"({label})")
        v["max_capture"] = mb
        sizes = sglang_capture_list(line, mb.value, d.speculates, d.disable_graph_padding)
        v["capture_sizes"] = Derived(tuple(sizes), f"{label} capture list up to {mb.value}"
                                     + (" (speculative list)" if d.speculates else ""))
    out.decode_graph_sizes = tuple(v["capture_sizes"].value)
    pool, pool_src = sglang_request_pool(line, running, adp)
    if pool is not None:
        v["request_pool"] = Derived(pool, pool_src, True)
        if out.decode_graph_sizes and max(out.decode_graph_sizes) > pool:
            notes.append(f"SGLang captures no decode CUDA graph above its request pool of {pool} and adds "
                         f"{pool} itself (get_batch_sizes_to_capture; {pool_src})")
    v["flashinfer"] = (Derived(d.flashinfer, "given", True) if d.flashinfer else
                       Derived(pinned_flashinfer("sglang", line), f"{label} pins it"))
    return out


# the speculative algorithms whose ServerArgs resets an unset --max-running-requests to 48
SGLANG_SPEC_48 = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH")


def _sglang_running_requests(v: dict, d: Deployment, given: str, label: str) -> int | None:
    """``max_num_seqs`` (max running requests) and the count SGLang's ServerArgs holds (None: it
    sizes it from the KV pool at start-up). Speculative decoding without
    ``--max-running-requests`` resets it to 48 (server_args.py 0.5.5:1523-1534, 1615-1622;
    0.5.11:3430-3433, 3447-3459, 3563-3566; arg_groups/speculative_hook.py 0.5.23:1072-1095,
    1285-1300)."""
    if d.max_num_seqs:
        v["max_num_seqs"] = Derived(d.max_num_seqs, given, True)
        return int(d.max_num_seqs)
    if (d.speculative or "").upper() in SGLANG_SPEC_48:
        v["max_num_seqs"] = Derived(48, f"{label} resets max running requests to 48 for speculative decoding "
                                        "(--max-running-requests not given)")
        return 48
    v["max_num_seqs"] = Derived(4096, f"{label} sizes max running requests from the KV pool at start-up; "
                                      "assumed unbounded (4096) for the eager shapes")
    return None


def sglang_request_pool(line: str, max_running_requests: int | None, attn_dp: int | None) -> tuple[int | None, str]:
    """(the model runner's request pool, ``req_to_token_pool.size``, or None where the KV memory
    decides it; its source) for ``--max-running-requests``. SGLang cuts its capture list there
    (``workspace_decision.sglang_capture_sizes``). 0.5.5: the given count (model_runner.py
    0.5.5:471-475, 1554-1562, 1680-1681). 0.5.11: ``min(max_running_requests // dp_size,
    estimated)`` with ``dp_size`` the DP-attention size (1 without) and ``estimated`` between 2048
    and 4096 from the KV memory (model_runner.py 0.5.11:338, model_runner_kv_cache_mixin.py
    0.5.11:698-717, 272-273). 0.5.23: ``min(max(1, max_running_requests // attn_dp_size),
    token_capacity // 2)`` (mem_cache/kv_cache_configurator.py 0.5.23:3119-3131; the capacity is
    taken as large). Lines in between take 0.5.11's rule (not read)."""
    label = f"SGLang {line}"
    if not max_running_requests:
        return None, f"{label} sizes the request pool from the KV memory"
    n = int(max_running_requests)
    if not line_at_least(known_line("sglang", line), "0.5.11"):
        return n, f"{label}: the request pool holds --max-running-requests {n}"
    adp = int(attn_dp or 1)
    per = n // adp
    if line_at_least(known_line("sglang", line), "0.5.23"):
        per = max(1, per)
    elif per > 2048:
        return None, f"{label}: the request pool is min({per}, an estimate of 2048-4096 from the KV memory)"
    how = f"--max-running-requests {n} // DP attention {adp}" if adp > 1 else f"--max-running-requests {n}"
    return per, f"{label}: the request pool holds {how} = {per}"


# architectures SGLang gives (3, 1, 4) on every line (server_args.py 0.5.5:4190-4199)
_SGLANG_EAGLE_314 = ("DeepseekV32ForCausalLM", "DeepseekV3ForCausalLM", "DeepseekV2ForCausalLM", "GptOssForCausalLM",
                     "BailingMoeForCausalLM", "BailingMoeV2ForCausalLM")


def _sglang_eagle(v: dict, d: Deployment, given: str, label: str, line: str | None = None) -> Deployment:
    """SGLang's EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE): without --speculative-num-steps it
    picks (steps, topk, draft tokens) itself, (5, 4, 8) for LlamaForCausalLM and Grok-1, (3, 1, 4)
    otherwise and for STANDALONE (auto_choose_speculative_params, server_args.py 0.5.11:7471-7506;
    arg_groups/speculative_hook.py 0.5.23:1430-1461); SGLang 0.5.5 gives (5, 4, 8) to every other
    architecture too, (3, 1, 4) only to DeepSeek V2/V3/V3.2, gpt-oss and Bailing (server_args.py
    0.5.5:4176-4204; found by the parity search on 0.5.5: Mistral, EAGLE without steps); with topk 1 the draft
    tokens are steps + 1 (0.5.5:1597-1604, 0.5.23:1255-1266). The draft worker decodes topk x bs
    requests per step (``eagle_topk``)."""
    from dataclasses import replace

    algo = (d.speculative or "").upper()
    if algo not in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        return d
    steps, topk, n = d.spec_steps, d.eagle_topk, (d.draft_tokens + 1 if d.draft_tokens is not None else None)
    src = given
    if steps is None:
        old_line = line is not None and parse_version(line) < parse_version("0.5.11")
        auto = (3, 1, 4) if algo == "STANDALONE" else (
            (5, 4, 8) if d.architecture in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM")
            else (5, 4, 8) if old_line and d.architecture not in _SGLANG_EAGLE_314 else (3, 1, 4))
        steps, topk, n = auto
        src = f"{label} picks (steps, topk, draft tokens) = {auto} for {d.architecture or 'this model'}"
    topk = topk or 1
    if topk == 1 and n != steps + 1:
        n = steps + 1
        src = f"{src}; topk 1: draft tokens = steps + 1 ({label})"
    v["eagle_topk"] = Derived(topk, given if d.eagle_topk is not None and d.spec_steps is not None else src,
                              d.eagle_topk is not None)
    v["spec_steps"] = Derived(steps, given if d.spec_steps is not None else src, d.spec_steps is not None)
    if n is None:
        # SGLang leaves speculative_num_draft_tokens unset here (arg_groups/speculative_hook.py
        # 0.5.23:1159-1174 picks all three only without steps): these rules cannot size the verify
        # graphs and refuse (build_facts); SGLang's own resolution (plan/server_resolution.py) reads
        # what the adapter reads
        v["draft_tokens_unset"] = Derived(None, "--speculative-eagle-topk above 1 needs "
                                                "--speculative-num-draft-tokens (SGLang does not pick it when the "
                                                "steps are given)")
        return replace(d, draft_tokens=None)
    return replace(d, draft_tokens=n - 1)


def sglang_workspace(sglang_version: str | None, architecture: str | None) -> Derived:
    """SGLang's own workspace and why: 384 MiB, 512 MiB for a hard-coded list of architectures
    (Qwen3-VL from 0.5.6)."""
    archs = SGLANG_512_ARCHS_056
    if sglang_version and parse_version(sglang_version) < parse_version("0.5.6"):
        archs = SGLANG_512_ARCHS_055
    label = f"SGLang {sglang_version}" if sglang_version else "SGLang"
    if architecture in archs:
        return Derived(SGLANG_LARGE, f"{label}: 512 MiB for {architecture} (its fixed architecture list)")
    return Derived(SGLANG_DEFAULT, f"{label}: SGLANG_FLASHINFER_WORKSPACE_SIZE default 384 MiB "
                                   f"({architecture or 'this model'} is not on its 512 MiB list)")


def sglang_default_workspace(sglang_version: str | None, architecture: str | None) -> int:
    return sglang_workspace(sglang_version, architecture).value


def sglang_tensor_core_decode(kv_kind: str | None, q_heads: int, kv_heads: int) -> tuple[bool, str]:
    if kv_kind == "fp8":
        return True, "SGLang decodes with tensor cores for an FP8 KV cache"
    g = q_heads // max(kv_heads, 1)
    if g >= 4:
        return True, f"SGLang decodes with tensor cores at GQA group {g} (>= 4)"
    return False, f"SGLang decodes on CUDA cores at GQA group {g} (< 4)"
