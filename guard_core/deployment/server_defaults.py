"""What each server does on its own, per release line and per GPU, as data.

Framework-free facts read from the released wheels (``pip download vllm==X
--no-deps`` / ``sglang==X``), used by the CLI for offline planning. The
adapters read the live values from the framework instead; the cross-check
tests (``tests/vllm/test_defaults_crosscheck.py``,
``tests/sglang/test_defaults_crosscheck.py``) compare these tables with what
the installed framework computes on the same simulated GPU.

Every derived value carries the rule it came from (``Derived.source``), so the
report can say "max seqs 1024: vLLM 0.33 default on GPUs with >= 160 GiB".

Rules (the wheel and function each one was read from):

vLLM (``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults`` and
``_set_default_max_num_seqs_and_batched_tokens_args``; ``vllm/config/vllm.py``
``VllmConfig._set_cudagraph_sizes``; ``vllm/v1/attention/backends/flashinfer.py``):

- batch defaults for ``vllm serve`` (usage context OPENAI_API_SERVER), by the
  device's total memory (torch's ``total_memory``, GiB = 2**30 bytes):
  0.19.1-0.26: >= 70 GiB and not A100 -> 1024 seqs / 8192 tokens, else
  256 / 2048. 0.29-0.32: >= 160 GiB -> 1024 / 16384; >= 70 GiB, not A100 ->
  1024 / 8192; else 256 / 2048. 0.33: as 0.29, and GB10 (cc 12.1) stays on the
  small tier. 0.23+: DP > 1 with expert parallel and a DeepEP-low-latency or
  NIXL-EP all2all backend defaults to 256 tokens.
- defaulted tokens: at least ``max_model_len`` when chunked prefill is off,
  at most ``max_num_seqs * max_model_len``; defaulted seqs at most the tokens.
- CUDA-graph capture ceiling (unless given): ``min(2 * max_num_seqs * (1 + k),
  C)`` with C = 512, and from 0.29 C = 1024 on compute capability 10.x
  (``is_device_capability_family(100)``); then at most the batched tokens.
  Sizes: 1, 2, 4, every 8 below 256, every 16 from 256 up to the ceiling;
  0.23+: plus the batched tokens when they are below the ceiling; 0.29+: plus
  the uniform decode sizes for k > 0 (request counts times 1 + k); 0.32+: plus
  ``max_num_seqs`` itself when k = 0 and it is below the ceiling.
- GptOssForCausalLM (0.23+): the ceiling is 1024 when no capture size is given
  (``GptOssForCausalLMConfig.verify_and_update_config``, model_executor/models/config.py
  0.23.0:164-168, 0.33.0:555-559), then at most the batched tokens.
- FlashInfer decode graphs are planned up to ``min((1 + k) * max_num_seqs,
  max capture size)`` (``_decode_cudagraph_max_bs``).
- workspace: ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE`` = 394 MiB; from 0.26
  ``max(394 MiB, max_num_batched_tokens * q_heads * head_dim * 16)``.

SGLang (``sglang/srt/server_args.py`` ``_handle_gpu_memory_settings`` up to
0.5.15; ``sglang/srt/arg_groups/memory_hook.py`` and ``cuda_graph_hook.py``
from 0.5.20; ``layers/attention/flashinfer_backend.py``):

- by the GPU memory nvidia-smi reports (MiB): < 20 GiB: 2048 chunk / graph
  bs 8; < 35 GiB: 2048 / 24 (TP < 4) or 80, from 0.5.20 4096 / 48 or 160; < 60 GiB: 4096 /
  32 or 160; < 90 GiB and < 160 GiB: 8192 / 256 (TP < 4) or 512; above: 16384
  / 512.
- capture list: 1, 2, 4, 8, 12, every 8 from 16 to 256, every 16 from 272 to
  496, every 32 from 512 up to the max; 0.5.11+: plus the max itself. With
  speculative decoding: 1..8, every 2 from 10 to 32, every 4 from 40 to 64,
  every 8 from 72 to 256, every 16 from 272.
- 0.5.22+: a default graph max above ``--max-running-requests`` is lowered to it.
- workspace: ``SGLANG_FLASHINFER_WORKSPACE_SIZE`` = 384 MiB; 512 MiB for a
  fixed architecture list (Qwen2, Qwen3, MiMo; Qwen3-VL and Qwen3-VL-MoE from 0.5.6).
- tensor-core decode (the prefill planner) for an FP8 KV cache or a GQA group >= 4.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from guard_core.flashinfer.releases import CHECKED_LINES  # the lines whose wheels the rules here were read from
from guard_core.gpus import GPU_MEMORY, gpu_memory, is_aarch64_gpu  # per-GPU facts: one table, gpus.GPU_TABLE
from guard_core.units import GIB, MIB
from guard_core.versions import is_version, parse_version

__all__ = ["DEFAULT_LINE", "Deployment", "Derived", "GPU_MEMORY", "SGLANG_LARGE", "VLLM_BYTES_PER_ELEM",
           "default_workspace", "derive", "framework_label", "gpu_memory", "installed_line", "is_aarch64_gpu",
           "pinned_flashinfer", "server_workspace", "sglang_default_workspace", "sglang_request_pool",
           "sglang_tensor_core_decode", "sglang_workspace", "short_line", "vllm_capture_grid", "vllm_per_phase_builder",
           "vllm_workspace", "workspace_source"]

VLLM_DEFAULT = 394 * MIB
SGLANG_DEFAULT = 384 * MIB
SGLANG_LARGE = 512 * MIB
SGLANG_512_ARCHS_055 = ("Qwen2ForCausalLM", "Qwen3ForCausalLM", "MiMoForCausalLM")
SGLANG_512_ARCHS_056 = SGLANG_512_ARCHS_055 + ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration")

# What ``plan`` simulates when the framework is not installed here (and no
# --framework-version is given): the line of each framework's seed crash.
DEFAULT_LINE = {"vllm": "0.19.1", "sglang": "0.5.5"}

# The FlashInfer each line pins (Requires-Dist of the wheel; the in-between
# vLLM lines from shared/reference/installing-frameworks.md).
FLASHINFER_PINS = {
    "vllm": (("0.19", "0.6.6"), ("0.20", "0.6.8.post1"), ("0.22", "0.6.11.post2"), ("0.23", "0.6.12"),
             ("0.25", "0.6.13"), ("0.26", "0.6.14"), ("0.27", "0.6.16.post3"), ("0.29", "0.6.18"),
             ("0.30", "0.6.18.post1"), ("0.31", "0.7.0.post1"), ("0.33", "0.7.2.post1")),
    "sglang": (("0.5.5", "0.5.0"), ("0.5.6", "0.5.3"), ("0.5.11", "0.6.8.post1"), ("0.5.15", "0.6.12"),
               ("0.5.19", "0.6.18"), ("0.5.22", "0.7.1"), ("0.5.23", "0.7.2")),
}



@dataclass(frozen=True)
class Derived:
    """One value of the simulated deployment and where it came from."""

    value: object
    source: str
    passed: bool = False  # given by the user (flag or launch command)

    def as_dict(self) -> dict:
        v = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"value": v, "source": self.source, "passed": self.passed}


@dataclass
class Deployment:
    """Inputs of one deployment, ``None`` where the user gave nothing."""

    framework: str = "vllm"
    line: str | None = None
    gpu_key: str | None = None
    cc: tuple[int, int] = (10, 3)
    gpu_name: str = ""
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    attn_dp: int | None = None  # SGLang DP attention width (--enable-dp-attention with --dp, or --attn-dp-size)
    dcp: int | None = None
    expert_parallel: bool = False
    all2all_backend: str | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    max_model_len: int | None = None  # given
    model_max_len: int | None = None  # from the model's config
    draft_tokens: int | None = None
    speculative: bool = False
    speculative_algorithm: str | None = None  # SGLang --speculative-algorithm
    eagle_topk: int | None = None  # SGLang --speculative-eagle-topk
    spec_steps: int | None = None  # SGLang --speculative-num-steps
    capture_sizes: tuple[int, ...] | None = None
    max_capture: int | None = None
    eager: bool = False
    chunked_prefill: bool | None = None
    disable_graph_padding: bool = False
    page_size: int | None = None
    flashinfer: str | None = None
    architecture: str | None = None
    source: str = "flag"  # "flag" | "command": how passed values are named in notes


@dataclass
class Defaults:
    """The resolved deployment: every limit with its source, and notes."""

    framework: str
    line: str
    line_source: str
    values: dict = field(default_factory=dict)  # name -> Derived
    notes: list = field(default_factory=list)
    decode_graph_sizes: tuple[int, ...] = ()  # capture sizes FlashInfer plans decode for

    def get(self, name):
        d = self.values.get(name)
        return d.value if d else None

    def as_dict(self) -> dict:
        return {"framework": self.framework, "line": self.line, "line_source": self.line_source,
                "values": {k: v.as_dict() for k, v in self.values.items()}, "notes": list(self.notes),
                "decode_graph_sizes": list(self.decode_graph_sizes)}


def framework_label(framework: str) -> str:
    return "vLLM" if framework == "vllm" else "SGLang"


def _ge(version: str, ref: str) -> bool:
    return parse_version(version) >= parse_version(ref)


def known_line(framework: str, version: str) -> str:
    """The line of ``version`` whose rules apply: the newest read line not above it."""
    lines = CHECKED_LINES[framework]
    best = lines[0]
    for line in lines:
        if _ge(version, line):
            best = line
    return best


def short_line(version: str) -> str:
    """'0.23.0' -> '0.23', '0.5.5' -> '0.5.5', '0.19.1' -> '0.19.1'."""
    parts = version.split(".")
    if len(parts) == 3 and parts[2] == "0" and parts[0] == "0" and int(parts[1]) >= 10:
        return ".".join(parts[:2])
    return version


def pinned_flashinfer(framework: str, version: str) -> str:
    pin = FLASHINFER_PINS[framework][0][1]
    for since, fi in FLASHINFER_PINS[framework]:
        if _ge(version, since):
            pin = fi
    return pin


# ---------------------------------------------------------------- vLLM


def vllm_batch_tier(line: str, gpu_key: str | None, gpu_name: str, cc) -> tuple[int, int, str]:
    """(max_num_seqs, max_num_batched_tokens, rule) for ``vllm serve`` on this GPU."""
    mem = gpu_memory(gpu_key)
    label = f"vLLM {short_line(line)}"
    if mem is None:
        return 256, 2048, f"{label} default when the GPU's memory is unknown (give --gpu from the table)"
    total = mem[0]
    a100 = "a100" in gpu_name.lower() or gpu_key == "a100"
    gb10 = _ge(line, "0.33") and tuple(cc) == (12, 1)
    gib = total / GIB
    if _ge(line, "0.29") and total >= 160 * GIB:
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
    _draft_context_page(v, d, k, given, 16, f"{label} default block size")
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
    batched_dp = (_ge(rules, "0.23.0") and d.expert_parallel and dp > 1
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
    ceiling_limit = 1024 if (_ge(rules, "0.29.0") and d.cc[0] == 10) else 512
    uniform: list[int] = []
    if d.max_capture:
        ceiling = d.max_capture
        csrc = given
    elif not d.capture_sizes and d.architecture == "GptOssForCausalLM" and _ge(rules, "0.23.0"):
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
            "off SM100" if _ge(rules, "0.29.0") else "(this line has one ceiling for every GPU)")
        csrc = f"{label}: min(2 x max seqs x (1 + draft tokens), {ceiling_limit}) {where}"
        if _ge(rules, "0.29.0"):
            if k > 0:
                uniform = sorted({n * (1 + k) for n in _request_counts(seqs, ceiling_limit)
                                  if n * (1 + k) <= ceiling})
            elif _ge(rules, "0.32.0") and seqs <= ceiling:
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
        if _ge(rules, "0.23.0") and tokens_n <= ceiling:
            extra.append(tokens_n)
        extra += [b for b in uniform if b <= tokens_n]
        sizes = sorted(set(sizes) | set(extra))
        v["capture_sizes"] = Derived(tuple(sizes), f"{label} capture list up to {max(sizes, default=0)}")
    decode_max = min((1 + k) * seqs, max(sizes, default=0))
    out.decode_graph_sizes = tuple(b for b in sizes if b <= decode_max)
    if d.max_capture and d.max_capture > decode_max:
        notes.append(f"--max-cudagraph-capture-size {d.max_capture}: FlashInfer decode graphs stop at "
                     f"{decode_max} = (1 + draft tokens) x max seqs ({seqs}); larger graphs run mixed batches")
    elif sizes and max(sizes) > decode_max:
        notes.append(f"FlashInfer plans decode graphs only up to {decode_max} = (1 + draft tokens) x max seqs")


def _vllm_workspace(out: Defaults, d: Deployment, label: str, tokens: int) -> Defaults:
    out.values["flashinfer"] = (Derived(d.flashinfer, "given", True) if d.flashinfer else
                                Derived(pinned_flashinfer("vllm", out.line), f"{label} pins it"))
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


# ---------------------------------------------------------------- SGLang


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
        if _ge(known_line("sglang", line), "0.5.20"):
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
    if _ge(known_line("sglang", line), "0.5.11") and max_bs not in sizes:
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
    d = _sglang_eagle(v, d, given, label)
    k = d.draft_tokens or 0
    _draft_context_page(v, d, k, given, 1, f"{label} default page size")
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
            if (_ge(known_line("sglang", line), "0.5.22") and d.max_num_seqs and max_bs > d.max_num_seqs):
                mb = Derived(d.max_num_seqs, f"{label}: the default graph max lowered to --max-running-requests")
                notes.append(f"cuda_graph_max_bs default {max_bs} lowered to max running requests {d.max_num_seqs} "
                             f"({label})")
        v["max_capture"] = mb
        sizes = sglang_capture_list(line, mb.value, d.speculative, d.disable_graph_padding)
        v["capture_sizes"] = Derived(tuple(sizes), f"{label} capture list up to {mb.value}"
                                     + (" (speculative list)" if d.speculative else ""))
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
    if (d.speculative_algorithm or "").upper() in SGLANG_SPEC_48:
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
    if not _ge(known_line("sglang", line), "0.5.11"):
        return n, f"{label}: the request pool holds --max-running-requests {n}"
    adp = int(attn_dp or 1)
    per = n // adp
    if _ge(known_line("sglang", line), "0.5.23"):
        per = max(1, per)
    elif per > 2048:
        return None, f"{label}: the request pool is min({per}, an estimate of 2048-4096 from the KV memory)"
    how = f"--max-running-requests {n} // DP attention {adp}" if adp > 1 else f"--max-running-requests {n}"
    return per, f"{label}: the request pool holds {how} = {per}"


def _sglang_eagle(v: dict, d: Deployment, given: str, label: str) -> Deployment:
    """SGLang's EAGLE family (EAGLE, EAGLE3, NEXTN, STANDALONE): without --speculative-num-steps it
    picks (steps, topk, draft tokens) itself, (5, 4, 8) for LlamaForCausalLM and Grok-1, (3, 1, 4)
    otherwise and for STANDALONE (auto_choose_speculative_params, server_args.py 0.5.5:4176-4200,
    0.5.11:7471-7495; arg_groups/speculative_hook.py 0.5.23:1430-1470); with topk 1 the draft
    tokens are steps + 1 (0.5.5:1597-1604, 0.5.23:1255-1266). The draft worker decodes topk x bs
    requests per step (``eagle_topk``)."""
    from dataclasses import replace

    algo = (d.speculative_algorithm or "").upper()
    if algo not in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        return d
    steps, topk, n = d.spec_steps, d.eagle_topk, (d.draft_tokens + 1 if d.draft_tokens is not None else None)
    src = given
    if steps is None:
        auto = (3, 1, 4) if algo == "STANDALONE" else (
            (5, 4, 8) if d.architecture in ("LlamaForCausalLM", "Grok1ForCausalLM", "Grok1VForCausalLM") else (3, 1, 4))
        steps, topk, n = auto
        src = f"{label} picks (steps, topk, draft tokens) = {auto} for {d.architecture or 'this model'}"
    topk = topk or 1
    if topk == 1 and n != steps + 1:
        n = steps + 1
        src = f"{src}; topk 1: draft tokens = steps + 1 ({label})"
    if n is None:
        raise ValueError("--speculative-eagle-topk above 1 needs --speculative-num-draft-tokens (SGLang does not "
                         "pick it when the steps are given)")
    v["eagle_topk"] = Derived(topk, given if d.eagle_topk is not None and d.spec_steps is not None else src,
                              d.eagle_topk is not None)
    v["spec_steps"] = Derived(steps, given if d.spec_steps is not None else src, d.spec_steps is not None)
    return replace(d, draft_tokens=n - 1, speculative=True)


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


# ---------------------------------------------------------------- both


def derive(d: Deployment) -> Defaults:
    """Every limit of ``d`` the user did not give, as the line would choose it on this GPU."""
    fw = d.framework
    if d.line:
        line, src = d.line, "given"
        if not is_version(line):
            raise ValueError(f"--framework-version must be a version such as {DEFAULT_LINE[fw]}, got {line!r}")
        rules = known_line(fw, line)
        if parse_version(line) < parse_version(CHECKED_LINES[fw][0]):
            src = f"given; older than every line read, simulated with {framework_label(fw)} {rules}'s rules"
        elif rules != line:
            src = f"given; simulated with the rules read from {framework_label(fw)} {rules}"
    elif installed_line(fw):
        # the line installed here is the one a launch command starts (issue #22)
        line = installed_line(fw)
        src = "installed in this environment; --framework-version to simulate another"
    else:
        line, src = DEFAULT_LINE[fw], f"default: the {framework_label(fw)} seed's line; --framework-version to change"
    out = vllm_defaults(d, line, src) if fw == "vllm" else sglang_defaults(d, line, src)
    if not d.line and not d.flashinfer and installed_line(fw):
        from guard_core.versions import flashinfer_version
        fi = flashinfer_version()
        if fi and is_version(fi):
            out.values["flashinfer"] = Derived(fi, f"installed beside {framework_label(fw)} {line}")
    return out


def installed_line(framework: str) -> str | None:
    """The installed version of ``framework`` when it is one (importlib.metadata; never imports it)."""
    from guard_core.versions import installed_version
    v = installed_version(framework)
    return v if v and is_version(v) else None


def server_workspace(framework: str, version: str | None, *, architecture: str | None,
                     max_num_batched_tokens: int, q_heads: int, head_dim: int) -> Derived:
    """What the server allocates on its own and why (``Derived(bytes, source)``)."""
    if framework == "sglang":
        return sglang_workspace(version, architecture)
    return vllm_workspace(version, max_num_batched_tokens, q_heads, head_dim)


def default_workspace(framework: str, version: str | None, **kw) -> int:
    return server_workspace(framework, version, **kw).value


def workspace_source(framework: str, version: str | None, **kw) -> str:
    return server_workspace(framework, version, **kw).source


def _draft_context_page(v, d, k: int, given: str, page: int, page_words: str) -> None:
    """The fields both servers take alike: draft tokens, context length, page size
    (``page`` and ``page_words``: the server's default page and what it calls it)."""
    v["draft_tokens"] = Derived(k, given if d.draft_tokens is not None else "no speculative decoding",
                                d.draft_tokens is not None)
    if d.max_model_len:
        v["max_model_len"] = Derived(d.max_model_len, given, True)
    elif d.model_max_len:
        v["max_model_len"] = Derived(d.model_max_len, "the model's config.json (max_position_embeddings)")
    v["page_size"] = Derived(d.page_size or page, given if d.page_size else page_words, bool(d.page_size))
