"""Read a server launch command: the options that change FlashInfer's workspace need.

Accepted forms (after ``flashinfer-guard plan [opts] --``):

- ``vllm serve MODEL [options]``
- ``python[3] -m vllm.entrypoints.openai.api_server --model MODEL [options]``
- ``python[3] -m sglang.launch_server --model-path|--model MODEL [options]``
  (and ``sglang serve``)

Leading ``VAR=value`` assignments (``CUDA_VISIBLE_DEVICES=7``) are skipped.
Options are read as the servers' own parsers do (``--opt value`` and
``--opt=value``, the short aliases); options that do not change the answer
are collected once in ``ignored``. A bad value raises ``LaunchError`` with
one line naming the option.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field


class LaunchError(ValueError):
    pass


@dataclass
class Launch:
    framework: str  # vllm | sglang
    form: str  # how it was started
    model: str | None = None
    tp: int | None = None
    dp: int | None = None
    pp: int | None = None
    dcp: int | None = None
    ep: int | None = None  # SGLang --ep-size
    expert_parallel: bool = False
    all2all_backend: str | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    max_model_len: int | None = None
    kv_cache_dtype: str | None = None
    draft_tokens: int | None = None
    speculative: str | None = None  # method / algorithm
    capture_sizes: tuple[int, ...] | None = None
    max_capture: int | None = None
    eager: bool = False
    chunked_prefill: bool | None = None
    attention_backend: str | None = None
    decode_attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    quantization: str | None = None
    page_size: int | None = None
    disable_graph_padding: bool = False
    dp_attention: bool = False
    deterministic: bool = False  # SGLang --enable-deterministic-inference
    kv_pool_tokens: int | None = None  # SGLang --max-total-tokens
    env: dict = field(default_factory=dict)  # leading VAR=value assignments the plan reads
    ignored: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def as_dict(self) -> dict:
        d = dict(self.__dict__)
        if d["capture_sizes"] is not None:
            d["capture_sizes"] = list(d["capture_sizes"])
        return d


# option spellings -> (field, kind); kinds: int, str, flag (True), noflag (False), sizes, json
_VLLM = {
    ("--tensor-parallel-size", "-tp"): ("tp", "int"),
    ("--data-parallel-size", "-dp"): ("dp", "int"),
    ("--pipeline-parallel-size", "-pp"): ("pp", "int"),
    ("--decode-context-parallel-size", "-dcp"): ("dcp", "int"),
    ("--enable-expert-parallel", "-ep"): ("expert_parallel", "flag"),
    ("--no-enable-expert-parallel",): ("expert_parallel", "noflag"),
    ("--all2all-backend",): ("all2all_backend", "str"),
    ("--max-num-seqs",): ("max_num_seqs", "int"),
    ("--max-num-batched-tokens",): ("max_batched_tokens", "int"),
    ("--max-model-len",): ("max_model_len", "len"),
    ("--kv-cache-dtype",): ("kv_cache_dtype", "str"),
    ("--speculative-config",): ("speculative_config", "json"),
    ("--num-speculative-tokens",): ("draft_tokens", "int0"),
    ("--cudagraph-capture-sizes", "--cuda-graph-sizes"): ("capture_sizes", "sizes"),
    ("--max-cudagraph-capture-size",): ("max_capture", "int"),
    ("--compilation-config", "-O", "-cc"): ("compilation_config", "json"),
    ("--enforce-eager",): ("eager", "flag"),
    ("--no-enforce-eager",): ("eager", "noflag"),
    ("--enable-chunked-prefill",): ("chunked_prefill", "flag"),
    ("--no-enable-chunked-prefill",): ("chunked_prefill", "noflag"),
    ("--attention-backend",): ("attention_backend", "str"),
    ("--quantization", "-q"): ("quantization", "str"),
    ("--block-size",): ("page_size", "int"),
    ("--model",): ("model", "str"),
}
_SGLANG = {
    ("--model-path", "--model"): ("model", "str"),
    ("--tp-size", "--tp", "--tensor-parallel-size"): ("tp", "int"),
    ("--dp-size", "--dp", "--data-parallel-size"): ("dp", "int"),
    ("--pp-size", "--pp", "--pipeline-parallel-size"): ("pp", "int"),
    ("--ep-size", "--ep", "--expert-parallel-size"): ("ep", "int"),
    ("--max-running-requests",): ("max_num_seqs", "int"),
    ("--chunked-prefill-size",): ("max_batched_tokens", "chunk"),
    ("--context-length",): ("max_model_len", "int"),
    ("--kv-cache-dtype",): ("kv_cache_dtype", "str"),
    ("--speculative-algorithm",): ("speculative", "str"),
    ("--speculative-num-draft-tokens",): ("sglang_draft", "int"),
    ("--cuda-graph-max-bs",): ("max_capture", "int"),
    ("--cuda-graph-bs",): ("capture_sizes", "list"),
    ("--disable-cuda-graph",): ("eager", "flag"),
    ("--disable-cuda-graph-padding",): ("disable_graph_padding", "flag"),
    ("--attention-backend",): ("attention_backend", "str"),
    ("--decode-attention-backend",): ("decode_attention_backend", "str"),
    ("--prefill-attention-backend",): ("prefill_attention_backend", "str"),
    ("--quantization",): ("quantization", "str"),
    ("--page-size",): ("page_size", "int"),
    ("--enable-dp-attention",): ("dp_attention", "flag"),
    ("--enable-deterministic-inference",): ("deterministic", "flag"),
    ("--max-total-tokens",): ("kv_pool_tokens", "int"),
}
# Leading VAR=value assignments of a launch command that change the plan (read, not skipped):
# SGLang's deterministic split tile sizes (flashinfer_backend.py, get_int_env_var).
READ_ENV = ("SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE", "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE")

_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_SGLANG_MODULES = ("sglang.launch_server",)


def _table(framework):
    out = {}
    for names, spec in (_VLLM if framework == "vllm" else _SGLANG).items():
        for n in names:
            out[n] = spec
    return out


# every integer in a launch command: ASCII digits, bounded before int() (hostile input)
_LAUNCH_INT_MAX = 1 << 27


def _int(opt: str, text: str, lo: int = 1) -> int:
    t = text.strip() if isinstance(text, str) else ""
    neg = t.startswith("-")
    digits = t[1:] if neg else t
    if not (digits.isascii() and digits.isdigit() and len(digits) <= len(str(_LAUNCH_INT_MAX))):
        raise LaunchError(f"{opt} in the launch command must be an integer ({lo} to {_LAUNCH_INT_MAX}), "
                          f"got {text[:40]!r}")
    v = -int(digits) if neg else int(digits)
    if not lo <= v <= _LAUNCH_INT_MAX:
        raise LaunchError(f"{opt} in the launch command must be from {lo} to {_LAUNCH_INT_MAX}, got {text[:40]!r}")
    return v


def _len(opt: str, text: str) -> int:
    """vLLM's --max-model-len: 3072, 32k, 1M, 1K (-1 / auto: the model's own)."""
    t = text.strip().lower()
    if t in ("-1", "auto"):
        return 0
    mult = 1
    if t and t[-1] in "kmg":
        mult = {"k": 1000, "m": 1000 ** 2, "g": 1000 ** 3}[t[-1]]
        if text.strip()[-1].isupper():
            mult = {"k": 1024, "m": 1024 ** 2, "g": 1024 ** 3}[t[-1]]
        t = t[:-1]
    try:
        if not (t.isascii() and len(t) <= 16):
            raise ValueError
        f = float(t)
        if not (0 < f * mult <= _LAUNCH_INT_MAX):  # also refuses inf and nan
            raise ValueError
        v = int(f * mult)
    except (ValueError, OverflowError):
        raise LaunchError(f"{opt} in the launch command must be a length from 1 to {_LAUNCH_INT_MAX} such as "
                          f"32768 or 32k, got {text[:40]!r}") from None
    if v <= 0:
        raise LaunchError(f"{opt} in the launch command must be positive, got {text[:40]!r}")
    return v


def _split_form(argv: list[str]) -> tuple[str, str, list[str], list[str]]:
    """(framework, form, option tokens, notes) from the raw command."""
    notes = []
    i = 0
    while i < len(argv) and "=" in argv[i] and not argv[i].startswith("-") and argv[i].split("=", 1)[0].isidentifier():
        if argv[i].split("=", 1)[0] not in READ_ENV:
            notes.append(f"environment {argv[i].split('=', 1)[0]} in the command: not read")
        i += 1
    rest = argv[i:]
    if not rest:
        raise LaunchError("empty launch command after --: give e.g. `vllm serve MODEL ...`")
    head = rest[0].rsplit("/", 1)[-1]
    if head in ("vllm", "sglang") and len(rest) > 1 and rest[1] == "serve":
        return head, f"{head} serve", rest[2:], notes
    if head.startswith("python"):
        j = 1
        while j < len(rest) and rest[j].startswith("-") and rest[j] != "-m":
            j += 1  # interpreter flags (-u, -X dev ...)
        if j + 1 < len(rest) and rest[j] == "-m":
            mod = rest[j + 1]
            if mod in _VLLM_MODULES:
                return "vllm", f"python -m {mod}", rest[j + 2:], notes
            if mod in _SGLANG_MODULES:
                return "sglang", f"python -m {mod}", rest[j + 2:], notes
            raise LaunchError(f"launch command runs module {mod!r}: expected vllm.entrypoints.openai.api_server "
                              "or sglang.launch_server")
    raise LaunchError(f"launch command {rest[0]!r} not recognised: expected `vllm serve MODEL ...`, "
                      "`python -m vllm.entrypoints.openai.api_server --model ...` or "
                      "`python -m sglang.launch_server --model-path ...`")


def parse_launch(argv: list[str]) -> Launch:
    framework, form, tokens, notes = _split_form(list(argv))
    table = _table(framework)
    out = Launch(framework, form, notes=notes)
    for tok in argv:  # the leading assignments _split_form read past
        name, eq, value = tok.partition("=")
        if not eq or tok.startswith("-") or not name.isidentifier():
            break
        if name in READ_ENV:
            out.env[name] = value[:64]
    if form == "vllm serve" and tokens and not tokens[0].startswith("-"):
        out.model = tokens[0]
        tokens = tokens[1:]
    raw: dict = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if not tok.startswith("-"):
            out.ignored.append(tok)
            continue
        name, eq, inline = tok.partition("=")
        spec = table.get(name)
        if spec is None:
            # an unknown option: its value (if any) is the next token when that is not an option
            if not eq and i < len(tokens) and not tokens[i].startswith("-"):
                out.ignored.append(f"{name} {tokens[i]}")
                i += 1
            else:
                out.ignored.append(tok)
            continue
        fname, kind = spec
        if kind in ("flag", "noflag"):
            if eq:
                val = inline.strip().lower()
                if val not in ("true", "false", "1", "0"):
                    raise LaunchError(f"{name} in the launch command takes no value, got {inline!r}")
                on = val in ("true", "1")
                raw[fname] = on if kind == "flag" else not on
            else:
                raw[fname] = kind == "flag"
            continue
        if kind == "list":  # SGLang --cuda-graph-bs 1 2 4 8 (nargs="+")
            vals = [inline] if eq else []
            while not eq and i < len(tokens) and not tokens[i].startswith("-"):
                vals.append(tokens[i])
                i += 1
            if not vals:
                raise LaunchError(f"{name} in the launch command needs batch sizes")
            raw[fname] = (name, " ".join(vals))
            continue
        if eq:
            value = inline
        else:
            if i >= len(tokens):
                raise LaunchError(f"{name} in the launch command needs a value")
            value = tokens[i]
            i += 1
        raw[fname] = (name, value)
    _convert(out, raw)
    return out


def _sizes(opt: str, text: str) -> tuple[int, ...]:
    parts = [p for p in text.replace(",", " ").replace("[", " ").replace("]", " ").split() if p]
    if not parts:
        raise LaunchError(f"{opt} in the launch command needs batch sizes, got {text!r}")
    return tuple(_int(opt, p) for p in parts)


def _json(opt: str, text: str) -> dict:
    try:
        v = json.loads(text)
    except ValueError:
        # vLLM also accepts -O3 / -O.key=value forms; only JSON objects are read here
        if text.strip().isdigit():
            return {}
        raise LaunchError(f"{opt} in the launch command must be a JSON object, got {text[:80]!r}") from None
    if not isinstance(v, dict):
        raise LaunchError(f"{opt} in the launch command must be a JSON object, got {text[:80]!r}")
    return v


def _convert(out: Launch, raw: dict) -> None:
    for fname, val in raw.items():
        if isinstance(val, bool):
            setattr(out, fname, val)
            continue
        opt, text = val
        if fname in ("tp", "dp", "pp", "dcp", "ep", "max_num_seqs", "max_capture", "page_size", "kv_pool_tokens"):
            setattr(out, fname, _int(opt, text))
        elif fname == "max_batched_tokens":
            if out.framework == "sglang":
                v = _int(opt, text, lo=-1)
                if v <= 0:
                    out.notes.append(f"{opt} {text}: chunked prefill off; prefill batches are whole prompts")
                else:
                    out.max_batched_tokens = v
            else:
                out.max_batched_tokens = _int(opt, text)
        elif fname == "max_model_len":
            v = _len(opt, text) if out.framework == "vllm" else _int(opt, text)
            out.max_model_len = v or None
        elif fname == "draft_tokens":
            out.draft_tokens = _int(opt, text, lo=0)
        elif fname == "sglang_draft":
            n = _int(opt, text)
            out.draft_tokens = n - 1  # SGLang counts the verified token in
        elif fname == "capture_sizes":
            out.capture_sizes = _sizes(opt, text)
        elif fname == "speculative_config":
            cfg = _json(opt, text)
            n = cfg.get("num_speculative_tokens")
            if n is not None:
                if type(n) is not int or n < 0:
                    raise LaunchError(f"{opt} num_speculative_tokens must be an integer >= 0, got {n!r}")
                out.draft_tokens = n
            out.speculative = str(cfg.get("method") or "speculative")
        elif fname == "compilation_config":
            cfg = _json(opt, text)
            if "cudagraph_capture_sizes" in cfg:
                sizes = cfg["cudagraph_capture_sizes"]
                if not isinstance(sizes, list) or not sizes or not all(type(s) is int and s > 0 for s in sizes):
                    raise LaunchError(f"{opt} cudagraph_capture_sizes must be a list of positive integers")
                out.capture_sizes = tuple(sizes)
            if "max_cudagraph_capture_size" in cfg:
                m = cfg["max_cudagraph_capture_size"]
                if type(m) is not int or m <= 0:
                    raise LaunchError(f"{opt} max_cudagraph_capture_size must be a positive integer, got {m!r}")
                out.max_capture = m
            mode = str(cfg.get("cudagraph_mode", "")).upper()
            if mode == "NONE" or cfg.get("cudagraph_mode") == 0:
                out.eager = True
        elif fname in ("kv_cache_dtype", "attention_backend", "decode_attention_backend", "prefill_attention_backend",
                       "quantization", "all2all_backend", "model", "speculative"):
            if not text.strip():
                raise LaunchError(f"{opt} in the launch command needs a value")
            setattr(out, fname, text.strip())
    if out.framework == "sglang" and out.speculative and out.draft_tokens is None:
        out.notes.append(f"--speculative-algorithm {out.speculative} without --speculative-num-draft-tokens: "
                         "SGLang picks the draft tokens; give it in the command to size verify batches")


def attention_backend_note(launch: Launch) -> str | None:
    """A line when the command selects an attention backend other than FlashInfer."""
    be = [b for b in (launch.attention_backend, launch.decode_attention_backend, launch.prefill_attention_backend) if b]
    others = [b for b in be if "flashinfer" not in b.lower()]
    if not others:
        return None
    if launch.framework == "vllm" and any(b.upper().startswith("FLASHINFER") for b in be):
        return None
    return (f"the command selects attention backend {', '.join(others)}: FlashInfer's planners do not serve "
            "attention there; the figures below hold only where FlashInfer does")
