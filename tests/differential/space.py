"""The space of deployments the differential search draws from (seeded, reproducible).

Model shapes are the attention shapes of published models, each as its config.json on
the Hugging Face hub states it (num_attention_heads, num_key_value_heads, head_dim or
hidden_size / num_attention_heads); the name is the repository the file comes from. The
rest of a deployment is what users pass on the command line: GPU, tensor parallel size,
KV-cache dtype, limits, CUDA graphs or --enforce-eager, speculative decoding, attention
switches. Nothing here comes from guard_core: the expected values of the search are the
framework's own calls through FlashInfer's own planner.
"""

from __future__ import annotations

import random

# (hub repository, query heads, KV heads, head dim) of the full-attention layers
SHAPES = (
    ("meta-llama/Llama-3.2-1B", 32, 8, 64),
    ("meta-llama/Llama-3.2-3B", 24, 8, 128),
    ("meta-llama/Llama-3.1-8B-Instruct", 32, 8, 128),
    ("meta-llama/Llama-3.1-70B-Instruct", 64, 8, 128),
    ("meta-llama/Llama-3.1-405B-Instruct", 128, 8, 128),
    ("meta-llama/Llama-4-Scout-17B-16E-Instruct", 40, 8, 128),
    ("Qwen/Qwen2.5-0.5B-Instruct", 14, 2, 64),
    ("Qwen/Qwen2.5-1.5B-Instruct", 12, 2, 128),
    ("Qwen/Qwen2.5-3B-Instruct", 16, 2, 128),
    ("Qwen/Qwen2.5-7B-Instruct", 28, 4, 128),
    ("Qwen/Qwen2.5-14B-Instruct", 40, 8, 128),
    ("Qwen/Qwen2.5-72B-Instruct", 64, 8, 128),
    ("Qwen/Qwen3-8B", 32, 8, 128),
    ("Qwen/Qwen3-32B", 64, 8, 128),
    ("Qwen/Qwen3-30B-A3B", 32, 4, 128),
    ("Qwen/Qwen3-235B-A22B", 64, 4, 128),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct", 16, 2, 256),
    ("Qwen/Qwen3.5-397B-A17B", 32, 2, 256),
    ("Qwen/Qwen3-VL-32B-Instruct", 64, 8, 128),
    ("mistralai/Mistral-7B-Instruct-v0.3", 32, 8, 128),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", 32, 8, 128),
    ("mistralai/Mistral-Nemo-Instruct-2407", 32, 8, 128),
    ("mistralai/Mistral-Large-Instruct-2407", 96, 8, 128),
    ("google/gemma-2-2b-it", 8, 4, 256),
    ("google/gemma-2-9b-it", 16, 8, 256),
    ("google/gemma-2-27b-it", 32, 16, 128),
    ("google/gemma-3-12b-it", 16, 8, 256),
    ("google/gemma-3-27b-it", 32, 16, 128),
    ("google/gemma-7b", 16, 16, 256),
    ("microsoft/phi-4", 40, 10, 128),
    ("microsoft/Phi-3-medium-4k-instruct", 40, 10, 128),
    ("microsoft/Phi-3.5-MoE-instruct", 32, 8, 128),
    ("microsoft/Phi-3-mini-4k-instruct", 32, 32, 96),
    ("microsoft/phi-2", 32, 32, 80),
    ("openai/gpt-oss-120b", 64, 8, 64),
    ("zai-org/GLM-4.5-Air", 96, 8, 128),
    ("01-ai/Yi-34B", 56, 8, 128),
    ("bigcode/starcoder2-15b", 48, 4, 128),
    ("internlm/internlm2_5-7b-chat", 32, 8, 128),
    ("baichuan-inc/Baichuan2-13B-Chat", 40, 40, 128),
    ("allenai/OLMo-2-1124-13B", 40, 40, 128),
    ("ibm-granite/granite-3.1-8b-instruct", 32, 8, 128),
    ("tiiuae/falcon-40b", 128, 8, 64),
    ("nvidia/Nemotron-4-340B-Instruct", 96, 8, 192),
    ("EleutherAI/gpt-j-6b", 16, 16, 256),
    ("CohereForAI/c4ai-command-r-08-2024", 64, 8, 128),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 40, 8, 128),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", 64, 8, 128),
    ("stabilityai/stablelm-3b-4e1t", 32, 32, 80),
    ("google/gemma-4-31b-it (full-attention layers)", 16, 2, 512),
)

# evaluations of the worst-case search (tests/differential/search.py) per builder; the command
# line (python -m tests.differential --search N) sets any other
SEARCH_BUDGET = 400

VLLM_GPUS = ("a100", "l40s", "h100", "h200", "b200", "b300", "rtx6000")


def _tp_options(q: int, kv: int) -> list[int]:
    out = []
    for tp in (1, 2, 4, 8):
        if q % tp:
            continue
        kv_rank = max(1, kv // tp)
        if kv % tp and tp % kv:
            continue
        if (q // tp) % kv_rank:
            continue
        out.append(tp)
    return out


def vllm_cases(seed: int, n: int, gpu: str, head_sizes=(64, 128, 256, 512), trtllm_gpu: bool = False):
    """``n`` vLLM deployments on ``gpu`` from ``seed`` (dicts of realcalls_scenarios.Case fields).
    ``head_sizes``: what vLLM's FlashInfer backend accepts (FlashInferBackend.get_supported_head_sizes,
    asked by the caller, so only deployments vLLM would run on FlashInfer are drawn)."""
    rng = random.Random(f"vllm:{seed}:{gpu}")
    shapes = [s for s in SHAPES if s[3] in head_sizes]
    out = []
    for i in range(n):
        name, q, kv, hd = rng.choice(shapes)
        tp = rng.choice(_tp_options(q, kv))
        case = dict(
            name=f"gen{seed}_{gpu}_{i}", model=dict(heads=q, kv_heads=kv, head_dim=hd), tp=tp,
            kv_cache_dtype=rng.choice(["auto", "auto", "fp8", "fp8_e5m2"]),
            draft=rng.choice([0, 0, 1, 3]),
            max_num_seqs=rng.choice([16, 64, 128, 256, 512, 1024]),
            max_num_batched_tokens=rng.choice([2048, 4096, 8192, 16384]),
            capture=rng.choice([None, None, 64, 256, 512]),
            max_model_len=rng.choice([4096, 8192, 32768, 131072]),
            cudagraphs=rng.random() > 0.25,
            disable_q_quant=rng.random() < 0.2,
            trtllm=rng.choice([None, None, None, False]) if trtllm_gpu else None,
            search=SEARCH_BUDGET, seed=seed * 1000 + i, eager=True, source=name)
        if case["max_num_batched_tokens"] < case["max_num_seqs"]:
            case["max_num_batched_tokens"] = case["max_num_seqs"]
        out.append(case)
    return out


def launch_command(case: dict, gpu: str, line: str) -> str:
    """The deployment as the command a user would type (for one-line reproductions)."""
    parts = [f"vllm serve {case.get('source', 'MODEL')}", f"--tensor-parallel-size {case.get('tp', '?')}",
             f"--kv-cache-dtype {case.get('kv_cache_dtype', '?')}", f"--max-num-seqs {case.get('max_num_seqs', '?')}",
             f"--max-num-batched-tokens {case.get('max_num_batched_tokens', '?')}",
             f"--max-model-len {case.get('max_model_len', '?')}"]
    if not case.get("cudagraphs", True):
        parts.append("--enforce-eager")
    elif case.get("capture"):
        parts.append(f"--max-cudagraph-capture-size {case['capture']}")
    if case.get("draft"):
        method = case.get("spec_method") or "ngram"
        head = "" if method == "ngram" else ', \"model\": \"<EAGLE head>\"'
        parts.append(f"--speculative-config '{{\"method\": \"{method}\"{head}, \"num_speculative_tokens\": {case['draft']}}}'")
    if case.get("disable_q_quant"):
        parts.append("--attention-config.disable_flashinfer_q_quantization true")
    if case.get("trtllm") is not None:
        parts.append(f"--attention-config.use_trtllm_attention {str(case['trtllm']).lower()}")
    # issue 27 item 4 (vllm_space.py): block size, chunked prefill, CUDA-graph mode
    if case.get("block_size", 16) != 16:
        parts.append(f"--block-size {case['block_size']}")
    if case.get("chunked_prefill") is False:
        parts.append("--no-enable-chunked-prefill")
    if case.get("cudagraph_mode") and case.get("cudagraphs", True):
        parts.append(f"--compilation-config '{{\"cudagraph_mode\": \"{case['cudagraph_mode']}\"}}'")
    return f"[{line}, {gpu}] " + " ".join(parts)


def sglang_cases(seed: int, n: int):
    """``n`` SGLang deployments from ``seed``: options of tests/sglang/realcalls_scenarios.py ``run``."""
    rng = random.Random(f"sglang:{seed}")
    out = []
    for i in range(n):
        name, q, kv, hd = rng.choice(SHAPES)
        tp = rng.choice(_tp_options(q, kv))
        spec = rng.choice(["none", "none", "eagle", "eagle_topk"])
        ctx = rng.choice([4096, 8192, 16384])
        opts = {"shape": [q // tp, max(1, kv // tp), hd], "source": f"{name} (TP {tp})",
                "kv": rng.choice(["auto", "auto", "fp8"]), "context": ctx, "kv_width": ctx + 64,
                "max_bs": rng.choice([None, 32, 64, 160]), "search": SEARCH_BUDGET, "seed": seed * 1000 + i,
                "gpu": rng.choice(["h200", "h100", "l40s", "a100"])}
        if spec == "eagle":
            opts.update(draft_tokens=rng.choice([2, 4]), topk=1)
        elif spec == "eagle_topk":
            opts.update(draft_tokens=rng.choice([4, 8]), topk=rng.choice([2, 4, 8]), draft_steps=3)
            opts["max_bs"] = rng.choice([16, 32, 64])
        out.append({k: v for k, v in opts.items() if v is not None})
    return out


def sglang_launch_command(opts: dict, line: str) -> str:
    parts = [f"python -m sglang.launch_server --model {opts.get('source', 'MODEL')}",
             f"--kv-cache-dtype {'fp8_e4m3' if opts.get('kv') == 'fp8' else 'auto'}",
             f"--context-length {opts.get('context')}"]
    if opts.get("max_bs"):
        parts.append(f"--cuda-graph-max-bs {opts['max_bs']}")
    if opts.get("draft_tokens"):
        parts.append(f"--speculative-algorithm EAGLE --speculative-num-draft-tokens {opts['draft_tokens']} "
                     f"--speculative-eagle-topk {opts.get('topk', 1)} --speculative-num-steps "
                     f"{opts.get('draft_steps', max(1, opts['draft_tokens'] - 1))}")
    return f"[{line}, {opts.get('gpu', 'h200')}] " + " ".join(parts)


def sglang_deterministic_cases(seed: int, n: int):
    """``n`` SGLang --enable-deterministic-inference deployments from ``seed`` (issue 19): published
    shapes per TP rank (head dims SGLang's FlashInfer backend runs), GPU, context, chunked-prefill
    size and SGLang's split tile sizes (``env``: its SGLANG_FLASHINFER_*_SPLIT_TILE_SIZE variables;
    absent: 4096 / 2048). Each runs the longest prompt's last chunk, a shorter prompt, and a decode
    batch with one full-context request, through SGLang's own backend in the mode."""
    rng = random.Random(f"sglang-det:{seed}")
    shapes = [s for s in SHAPES if s[3] in (64, 128, 256)]
    out = []
    for _ in range(n):
        name, q, kv, hd = rng.choice(shapes)
        tp = rng.choice(_tp_options(q, kv))
        ctx = rng.choice([4096, 8192, 16384])
        reqs = 16
        env = {}
        split = rng.choice([None, None, 1024, 8192])
        if split:
            env["SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE"] = str(split)
        dsplit = rng.choice([None, None, 512])
        if dsplit:
            env["SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE"] = str(dsplit)
        out.append({"shape": [q // tp, max(1, kv // tp), hd], "source": f"{name} (TP {tp})", "context": ctx,
                    "kv_width": ctx + 8, "chunk": rng.choice([2048, 4096, 8192]), "pool_size": reqs,
                    "gpu": rng.choice(["gb10", "b200", "rtxpro6000", "h200"]), "env": env,
                    "server_args": {"enable_deterministic_inference": True, "attention_backend": "flashinfer",
                                    "max_running_requests": reqs},
                    "det_prompts": [ctx // 2, ctx], "det_decode": [ctx - 1] + [1] * (reqs - 1)})
    return out
