"""The ``flashinfer-guard`` command line: its parser (plan, doctor, presets), each option's bounded converter,
and what the converters cannot see (empty names, the framework version, the GPU and its overrides)."""

from __future__ import annotations

import argparse

from guard_core import __version__
from guard_core.deployment.presets import DEFAULT_MODEL
from guard_core.gpus import Gpu, find_spec, gpu_names

__all__ = ["KV_CACHE_DTYPES", "UsageError", "build_parser", "check_args", "parse_workspace", "resolve_gpu", "show"]


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, exit 2, no usage dump
        # "argument --tp: --tp must be ..." -> "--tp must be ..." (our converters name the option)
        head, sep, rest = message.partition(": ")
        if sep and head.startswith("argument ") and rest.startswith(head[len("argument "):].split("/")[-1] + " "):
            message = rest
        raise UsageError(message)


# Upper bounds of the integer options (inclusive), checked on the text before any list is built:
# far above every real deployment, low enough that a plan stays well under a second.
_INT_BOUNDS = {
    "--qo-heads": 4096, "--kv-heads": 4096, "--head-dim": 2048, "--v-head-dim": 2048,
    "--tp": 1024, "--dcp": 1024, "--sms": 1024, "--max-capture-batch": 16384, "--max-num-seqs": 65536,
    "--max-batched-tokens": 1 << 24, "--max-model-len": 1 << 27, "--draft-tokens": 128,
    "--page-size": 65536, "--kv-dtype-bytes": 8, "--decode-blocks-per-sm": 64,
}
_DEFAULT_INT_BOUND = 1 << 24
_MAX_CAPTURE_SIZES = 1024


def show(text) -> str:
    from guard_core.runtime.settings import show_value
    return show_value(text)


def _bounded_int(name, text, lo):
    """ASCII digits only, bounded by length before int(); ArgumentTypeError naming the option and its range."""
    hi = _INT_BOUNDS.get(name, _DEFAULT_INT_BOUND)
    what = "a positive integer" if lo == 1 else f"an integer >= {lo}"
    t = text.strip() if isinstance(text, str) else ""
    if t.isascii() and t.isdigit() and len(t) <= len(str(hi)) and lo <= int(t) <= hi:
        return int(t)
    raise argparse.ArgumentTypeError(f"{name} must be {what} ({lo} to {hi}), got {show(text)}")


def _positive(name):
    def conv(text):
        return _bounded_int(name, text, 1)
    return conv


def _nonneg(name):
    def conv(text):
        return _bounded_int(name, text, 0)
    return conv


def _sizes(text):
    hi = _INT_BOUNDS["--max-capture-batch"]
    msg = (f"--capture-sizes must be at most {_MAX_CAPTURE_SIZES} comma-separated integers from 1 to {hi}, "
           f"got {show(text)}")
    if not isinstance(text, str) or len(text) > _MAX_CAPTURE_SIZES * 8:
        raise argparse.ArgumentTypeError(msg)
    parts = [x for x in text.replace(" ", "").split(",") if x]
    if not parts or len(parts) > _MAX_CAPTURE_SIZES:
        raise argparse.ArgumentTypeError(msg)
    vals = []
    for x in parts:
        if not (x.isascii() and x.isdigit() and len(x) <= len(str(hi)) and 1 <= int(x) <= hi):
            raise argparse.ArgumentTypeError(msg)
        vals.append(int(x))
    return tuple(vals)


def _version_of(name, example):
    def conv(text):
        from guard_core.runtime.settings import bounded_version
        v = bounded_version(text)
        if v is None:
            raise argparse.ArgumentTypeError(f"{name} must be a version such as {example} "
                                             f"(at most 64 characters), got {show(text)}")
        return v
    return conv


_version = _version_of("--flashinfer", "0.6.12 or 0.7.2.post1")

KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4")


def _kv_cache_dtype(text):
    t = text.strip().lower() if isinstance(text, str) else ""
    if t in KV_CACHE_DTYPES:
        return t
    raise argparse.ArgumentTypeError(f"--kv-cache-dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                                     f"got {show(text)}")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="flashinfer-guard", description="Size FlashInfer's workspace before it crashes a server.")
    p.add_argument("--version", action="version", version=f"flashinfer-guard {__version__}")
    sub = p.add_subparsers(dest="cmd", parser_class=_Parser)
    _add_plan_parser(sub)
    _add_doctor_parser(sub)
    _add_presets_parser(sub)
    return p


def _add_plan_parser(sub) -> None:
    """``flashinfer-guard plan``: its options in the order ``--help`` lists them."""
    pl = sub.add_parser(
        "plan", help="will this deployment overflow FlashInfer's workspace, and what fixes it?",
        usage="flashinfer-guard plan [options] [-- LAUNCH COMMAND ...]",
        description="Size FlashInfer's workspace for a deployment, offline. Every limit not given is what the "
                    "simulated framework line chooses on the simulated GPU; the server's own launch command can "
                    "follow `--` (vllm serve MODEL ..., python -m vllm.entrypoints.openai.api_server --model ..., "
                    "python -m sglang.launch_server --model-path ...). Plan options override the command. "
                    "For an MLA model (DeepSeek-V3/R1, Kimi-K2, ...) it answers FlashInfer's MLA planner limit "
                    "instead: the backend the server takes, each batch kind planned through MLAPlan, the largest "
                    "works against its 16,384 capacity (over: silent wrong attention, then an illegal address; "
                    "FlashInfer PR #5170) and the largest --max-running-requests / --chunked-prefill-size that "
                    "fits; not applicable, with why, on other backends (docs/mla-guard.md).")
    _add_model_options(pl)
    _add_server_options(pl)
    _add_limit_options(pl)
    _add_dtype_and_planner_options(pl)
    _add_output_options(pl)


def _add_model_options(pl) -> None:
    """plan: the model (a name, a config.json, or raw heads) and its parallelism."""
    pl.add_argument("--model", default=None,
                    help=f"Hugging Face id (read from the local HF cache, then the presets), preset name, or a "
                         f"config.json path; default: the command's model, else {DEFAULT_MODEL}")
    pl.add_argument("--qo-heads", type=_positive("--qo-heads"), default=None,
                    help="query heads of the whole model (instead of --model); default: from the model")
    pl.add_argument("--kv-heads", type=_positive("--kv-heads"), default=None,
                    help="KV heads of the whole model (with --qo-heads); default: from the model")
    pl.add_argument("--head-dim", type=_positive("--head-dim"), default=None, help="query/key head dim (with --qo-heads); default: from the model")
    pl.add_argument("--v-head-dim", type=_positive("--v-head-dim"), default=None,
                    help="value head dim when it differs; default: the head dim")
    pl.add_argument("--tp", type=_positive("--tp"), default=None,
                    help="attention tensor-parallel size; default: the command's, else 1")
    pl.add_argument("--dcp", type=_positive("--dcp"), default=None,
                    help="decode context parallel size (vLLM); default: the command's, else 1")


def _add_server_options(pl) -> None:
    """plan: the GPU, FlashInfer, the server line and how its command is read."""
    pl.add_argument("--gpu", default=None, help=f"GPU simulated, one of: {', '.join(gpu_names())}; default b300")
    pl.add_argument("--sms", type=_positive("--sms"), default=None,
                    help="SM count (required for a GPU not in the table); default: the table's for --gpu")
    pl.add_argument("--cc", default=None, help="compute capability such as 9.0 (with --sms for unknown GPUs); "
                                               "default: the table's")
    pl.add_argument("--flashinfer", type=_version, default=None,
                    help="FlashInfer version; default: the one the simulated framework line pins")
    pl.add_argument("--framework", choices=("vllm", "sglang"), default=None,
                    help="server simulated; default: the command's, else vllm")
    pl.add_argument("--framework-version", default=None,
                    help="server line simulated (its defaults per GPU, its buffer, its FlashInfer pin); "
                         "default: the line installed here (with its installed FlashInfer), else the seed's "
                         "line, vLLM 0.19.1 / SGLang 0.5.5")
    pl.add_argument("--launch-reader", choices=("auto", "server", "builtin"), default="auto",
                    help="how the command after -- is read: the server's own argument parser (server), the "
                         "built-in reader rebuilt from the line's option table (builtin); default auto: the "
                         "server's own parser when the simulated line is the one installed here")
    pl.add_argument("--resolution", choices=("auto", "server", "builtin"), default="auto",
                    help="who resolves the command into the server's config: the installed server itself, on a "
                         "simulated GPU (server), or the built-in per-line rules (builtin); default auto: the "
                         "server where it is installed here at the simulated line, else the built-in rules")
    pl.add_argument("--trtllm-attention", choices=("on", "off"), default=None,
                    help="vLLM on SM10x: whether FlashInfer's TRT-LLM attention cubins are usable (then decode "
                         "plans nothing in this buffer); default: unknown, the larger need is kept")
    pl.add_argument("--host-arch", choices=("x86_64", "aarch64"), default=None,
                    help="CPU of the server host, for the MoE guard; default: aarch64 for GB200/GB300/GH200/GB10, "
                         "else x86_64")


def _add_limit_options(pl) -> None:
    """plan: the serving limits (capture sizes, requests, tokens, context, drafts, pages)."""
    pl.add_argument("--max-capture-batch", type=_positive("--max-capture-batch"), default=None,
                    help="CUDA-graph capture ceiling (vLLM --max-cudagraph-capture-size, SGLang --cuda-graph-max-bs); "
                         "default: the line's rule")
    pl.add_argument("--capture-sizes", type=_sizes, default=None,
                    help="comma-separated CUDA-graph batch sizes; default: the line's list up to the ceiling")
    pl.add_argument("--no-cuda-graph", action="store_true", help="the server runs eagerly (no CUDA graphs)")
    pl.add_argument("--max-num-seqs", type=_positive("--max-num-seqs"), default=None,
                    help="max concurrent requests (SGLang --max-running-requests); default: the line's rule per GPU")
    pl.add_argument("--max-batched-tokens", type=_positive("--max-batched-tokens"), default=None,
                    help="max tokens per step (SGLang --chunked-prefill-size); default: the line's rule per GPU")
    pl.add_argument("--max-model-len", type=_positive("--max-model-len"), default=None,
                    help="longest request in tokens; default: the command's, else the model's config, else unbounded")
    pl.add_argument("--draft-tokens", type=_nonneg("--draft-tokens"), default=None,
                    help="speculative tokens per step; default: the command's, else 0")
    pl.add_argument("--page-size", type=_positive("--page-size"), default=None,
                    help="KV page size; default: the command's, else vLLM 16 / SGLang 1")


def _add_dtype_and_planner_options(pl) -> None:
    """plan: KV-cache dtype, model reader, forced planners, fixed-split mode."""
    pl.add_argument("--kv-dtype-bytes", type=_positive("--kv-dtype-bytes"), default=None,
                    help="bytes per KV element; default: from the KV-cache dtype (2, or 1 for FP8); 1 alone "
                         "means an FP8 cache, as --kv-cache-dtype fp8")
    pl.add_argument("--kv-cache-dtype", type=_kv_cache_dtype, default=None,
                    help="KV-cache dtype as the server takes it (auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16, nvfp4 ...); "
                         "default: the command's, else auto (the model dtype)")
    pl.add_argument("--model-reader", choices=("auto", "builtin", "server", "transformers"), default="auto",
                    help="who reads a config.json: the simulated server's own config code where it is installed "
                         "here (auto, server), transformers' config classes alone (transformers), or the built-in "
                         "reader; default auto: each in that order, a reader that cannot read hands over")
    pl.add_argument("--decode-planner", choices=("fa2", "decode", "trtllm"), default=None,
                    help="force the decode planner; default: chosen from the GPU, dtypes and framework")
    pl.add_argument("--prefill-planner", choices=("fa2", "fa3", "none"), default=None,
                    help="force the prefill planner; default: chosen from the GPU, dtypes and framework")
    pl.add_argument("--decode-blocks-per-sm", type=_positive("--decode-blocks-per-sm"), default=None,
                    help="CUDA-core decode kernel occupancy; default: an upper bound from threads and shared memory")
    pl.add_argument("--deterministic", action="store_true",
                    help="SGLang --enable-deterministic-inference: fixed-split plans, SGLang's forced 2 GiB")
    pl.add_argument("--kv-pool-tokens", type=_positive("--kv-pool-tokens"), default=None,
                    help="tokens the KV pool holds (SGLang max_total_num_tokens, --max-total-tokens); bounds one "
                         "deterministic decode batch; default: one full-context request plus one-token requests")


def _add_output_options(pl) -> None:
    """plan: the buffer checked and the output form."""
    pl.add_argument("--workspace", default=None,
                    help="check against this buffer (bytes or 512MiB) instead of the server's default")
    pl.add_argument("--all", action="store_true", help="list every capture size, not only the largest")
    pl.add_argument("--json", action="store_true", help="machine-readable output, one entry per scenario")


def _add_doctor_parser(sub) -> None:
    dr = sub.add_parser("doctor", help="inspect this environment: versions, entry points, what each guard would do")
    dr.add_argument("--model", default=None,
                    help="also read this config.json (or directory): its attention groups by the built-in reader "
                         "and by each installed server's own config code, and whether they agree")
    dr.add_argument("--tp", type=_positive("--tp"), default=1, help="tensor parallel size for --model; default 1")


def _add_presets_parser(sub) -> None:
    pr = sub.add_parser("presets", help="list the embedded models")
    pr.add_argument("--json", action="store_true")


def resolve_gpu(a) -> Gpu:
    name = a.gpu or ("b300" if a.sms is None else None)
    cc = None
    if a.cc is not None:
        t = a.cc.strip()
        major, _, minor = t.partition(".")
        if (t.isascii() and major.isdigit() and len(major) <= 2 and (minor == "" or (minor.isdigit() and len(minor) == 1))
                and 7 <= int(major) <= 19):
            cc = (int(major), int(minor or 0))
        else:
            raise UsageError(f"--cc must be a compute capability from 7.0 to 19.9 such as 9.0 or 10.0, got {show(a.cc)}")
    if name is None:
        return Gpu(f"GPU with {a.sms} SMs", a.sms, cc or (9, 0))
    spec = find_spec(name)
    if spec is None:
        if a.sms is None:
            raise UsageError(f"unknown GPU {show(name)}: pass --sms N (and --cc X.Y), or one of: {', '.join(gpu_names())}")
        return Gpu(name, a.sms, cc or (9, 0))
    g = spec.gpu()
    if a.sms or cc:
        g = Gpu(g.name, a.sms or g.num_sms, cc or g.cc, g.max_smem_per_sm)
    return g


def parse_workspace(text: str) -> int:
    from guard_core.runtime.settings import parse_size
    n = parse_size(text)
    if n is None:
        from guard_core.runtime.settings import SIZE_ACCEPTED
        raise UsageError(f"--workspace must be {SIZE_ACCEPTED}, got {show(text)}")
    return n


def check_args(a) -> None:
    """What argparse's converters cannot see: empty names, versions of the framework."""
    from guard_core.runtime.settings import bounded_version

    model = getattr(a, "model", None)
    if model is not None and not model.strip():
        raise UsageError(f"--model must name a preset or a config.json path, got {show(model)}")
    gpu = getattr(a, "gpu", None)
    if gpu is not None and not gpu.strip():
        raise UsageError(f"--gpu must name a GPU, one of: {', '.join(gpu_names())}; got {show(gpu)}")
    fv = getattr(a, "framework_version", None)
    if fv is not None:
        v = bounded_version(fv)
        if v is None:
            raise UsageError("--framework-version must be a version such as 0.23.0 or 0.5.5 "
                             f"(at most 64 characters), got {show(fv)}")
        a.framework_version = v
    ws = getattr(a, "workspace", None)
    if ws is not None:
        parse_workspace(ws)  # one line naming --workspace and the accepted range
