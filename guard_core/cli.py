"""The ``flashinfer-guard`` command: plan, doctor, presets.

``plan`` answers "will this deployment crash, and what fixes it?" without a
GPU. A bare ``flashinfer-guard plan`` runs the vLLM seed: Qwen3.5-397B-A17B on
a B300, vLLM's 394 MiB default, tensor-core (FA2) decode, CUDA-graph batch 512,
FlashInfer 0.7.0 (where vLLM is installed, its installed line and FlashInfer
are simulated instead; ``--framework-version`` picks another).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

from . import __version__
from .decisions import moe_verdict
from .gpus import Gpu, find_spec, gpu_names
from .presets import DEFAULT_MODEL, PRESETS, ModelError, load_model
from .settings import load_settings
from .versions import flashinfer_version, installed_version
from . import flashinfer_model as fm

__all__ = ["SIGPIPE_EXIT", "build_parser", "main", "run_doctor"]


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


def _show(text) -> str:
    from .settings import show_value
    return show_value(text)


def _bounded_int(name, text, lo):
    """ASCII digits only, bounded by length before int(); ArgumentTypeError naming the option and its range."""
    hi = _INT_BOUNDS.get(name, _DEFAULT_INT_BOUND)
    what = "a positive integer" if lo == 1 else f"an integer >= {lo}"
    t = text.strip() if isinstance(text, str) else ""
    if t.isascii() and t.isdigit() and len(t) <= len(str(hi)) and lo <= int(t) <= hi:
        return int(t)
    raise argparse.ArgumentTypeError(f"{name} must be {what} ({lo} to {hi}), got {_show(text)}")


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
           f"got {_show(text)}")
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
        from .settings import bounded_version
        v = bounded_version(text)
        if v is None:
            raise argparse.ArgumentTypeError(f"{name} must be a version such as {example} "
                                             f"(at most 64 characters), got {_show(text)}")
        return v
    return conv


_version = _version_of("--flashinfer", "0.6.12 or 0.7.2.post1")

KV_CACHE_DTYPES = ("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4")


def _kv_cache_dtype(text):
    t = text.strip().lower() if isinstance(text, str) else ""
    if t in KV_CACHE_DTYPES:
        return t
    raise argparse.ArgumentTypeError(f"--kv-cache-dtype must be one of {', '.join(KV_CACHE_DTYPES)}, "
                                     f"got {_show(text)}")


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
                    "python -m sglang.launch_server --model-path ...). Plan options override the command.")
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
    pl.add_argument("--model-reader", choices=("auto", "builtin", "server"), default="auto",
                    help="who reads a config.json: the simulated server's own config code where it is installed "
                         "here (auto, server), or the built-in reader; default auto")
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


def _resolve_gpu(a) -> Gpu:
    name = a.gpu or ("b300" if a.sms is None else None)
    cc = None
    if a.cc is not None:
        t = a.cc.strip()
        major, _, minor = t.partition(".")
        if (t.isascii() and major.isdigit() and len(major) <= 2 and (minor == "" or (minor.isdigit() and len(minor) == 1))
                and 7 <= int(major) <= 19):
            cc = (int(major), int(minor or 0))
        else:
            raise UsageError(f"--cc must be a compute capability from 7.0 to 19.9 such as 9.0 or 10.0, got {_show(a.cc)}")
    if name is None:
        return Gpu(f"GPU with {a.sms} SMs", a.sms, cc or (9, 0))
    spec = find_spec(name)
    if spec is None:
        if a.sms is None:
            raise UsageError(f"unknown GPU {_show(name)}: pass --sms N (and --cc X.Y), or one of: {', '.join(gpu_names())}")
        return Gpu(name, a.sms, cc or (9, 0))
    g = spec.gpu()
    if a.sms or cc:
        g = Gpu(g.name, a.sms or g.num_sms, cc or g.cc, g.max_smem_per_sm)
    return g


def _parse_workspace(text: str) -> int:
    from .settings import parse_size
    n = parse_size(text)
    if n is None:
        from .settings import SIZE_ACCEPTED
        raise UsageError(f"--workspace must be {SIZE_ACCEPTED}, got {_show(text)}")
    return n


def run_plan(a) -> dict:
    """The plan for parsed options (``a.launch``: the command after ``--``); logic in plan_report."""
    from .plan_report import PlanUsageError, build
    if not hasattr(a, "launch"):
        a.launch = None
    try:
        return build(a, _resolve_gpu)
    except PlanUsageError as exc:
        raise UsageError(str(exc)) from None


def print_plan(r: dict, show_all: bool, out=sys.stdout) -> None:
    from .plan_report import print_report
    print_report(r, show_all, out=out)


def _doctor_model(path: str, tp: int, w) -> None:
    """The model's attention groups as each reader here reads them."""
    import importlib.util
    import os

    from .groups import GroupsError, read_with_server

    cfg_path = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        facts = load_model(path)
        mine = facts.model_groups().per_rank(tp)
    except (ModelError, GroupsError) as exc:
        # the built-in reader cannot read it: the server readers below may (issue 26)
        w(f"model      {_show(path)}, built-in reader: {exc}\n")
        mine = None
    key = sorted(g.key for g in mine) if mine is not None else None
    if mine is not None:
        w(f"model      {_show(cfg_path)} at tp {tp}, built-in reader: "
          + "; ".join(f"{g.count} x {g.kind} {g.num_qo_heads}/{g.num_kv_heads}/{g.head_dim_qk}/{g.head_dim_vo}"
                      for g in mine) + "\n")
    for fw in ("vllm", "sglang"):
        if importlib.util.find_spec(fw) is None:
            continue
        srv = read_with_server(fw, cfg_path, tp)
        if not srv.get("ok"):
            w(f"model      {srv['label']}: {srv.get('refusal')}\n")
            continue
        same = sorted(g.key for g in srv["groups"]) == key
        rel = ("the built-in reader cannot read it" if key is None
               else "agrees with the built-in reader" if same else "DIFFERS from the built-in reader")
        w(f"model      {srv['label']}: "
          + "; ".join(f"{g.count} x {g.kind} {g.num_qo_heads}/{g.num_kv_heads}/{g.head_dim_qk}/{g.head_dim_vo}"
                      for g in srv["groups"])
          + f" ({rel}; plan uses the server's)\n")


def _doctor_model_usable(path: str, tp: int) -> None:
    """``doctor --model``: a model it cannot read (no such file, not a config, heads that do not
    split at ``--tp``, an empty name) is refused in one line, exit 2, like ``plan --model``;
    never a report that carries the error in one of its lines with exit 0 (issue 29)."""
    import importlib.util
    import os

    from .groups import GroupsError

    try:
        load_model(path).model_groups().per_rank(tp)
    except (ModelError, GroupsError) as exc:
        # a reader after the built-in one (the installed server's config code, transformers')
        # may read it: only when none can is doctor refused (issue 26)
        cfg_path = os.path.join(path, "config.json") if isinstance(path, str) and os.path.isdir(path) else path
        fw = next((f for f in ("vllm", "sglang") if importlib.util.find_spec(f) is not None), None)
        if (fw is None or isinstance(exc, GroupsError) or not isinstance(cfg_path, str)
                or not os.path.isfile(cfg_path)):  # GroupsError: read, but its heads do not split at --tp
            raise UsageError(f"doctor --model: {exc}") from None
        from .model_readers import facts_by_chain

        try:
            facts_by_chain(cfg_path, fw, "auto", first_error=exc)
        except ModelError as exc2:
            raise UsageError(f"doctor --model: {exc2}") from None


def run_doctor(out=sys.stdout, model: str | None = None, tp: int = 1) -> int:
    from importlib import metadata
    import os
    import site

    w = out.write
    settings = load_settings()
    fi = flashinfer_version()
    fi_raw = fi
    from .versions import is_version
    if fi is not None and not is_version(fi):
        fi = None  # named below; every check that needs a version reads it as unknown
    w(f"flashinfer-guard {__version__}\n")
    w(f"host       {platform.machine()} / Python {platform.python_version()} / {platform.system()}\n")
    vers = {d: installed_version(d) for d in ("vllm", "sglang", "flashinfer-python", "torch")}
    for d, v in vers.items():
        if v is not None and not is_version(v):
            w(f"{d:<18} {_show(v)} (not a PEP 440 version: read as unknown)\n")
            continue
        w(f"{d:<18} {v or 'not installed'}\n")
    vers = {d: (v if v is None or is_version(v) else None) for d, v in vers.items()}
    from .releases import describe as describe_support

    for line in describe_support({"vllm": vers["vllm"], "sglang": vers["sglang"], "flashinfer": fi}):
        w(f"checked    {line}\n")
    gpu = None
    if vers["torch"]:
        from .gpus import detect_gpu
        gpu = detect_gpu()
    w(f"gpu        {f'{gpu.name}: {gpu.num_sms} SMs, cc {gpu.cc[0]}.{gpu.cc[1]}' if gpu else 'none visible'}\n")
    for group, expect in (("vllm.general_plugins", "vllm_guard"), ("sglang.srt.plugins", "sglang_guard")):
        try:
            eps = [e for e in metadata.entry_points(group=group) if e.value.startswith(expect)]
        except Exception:
            eps = []
        w(f"entry point {group}: {', '.join(f'{e.name} = {e.value}' for e in eps) or 'NOT FOUND (reinstall flashinfer-guard)'}\n")
    pth = []
    for d in (site.getsitepackages() if hasattr(site, "getsitepackages") else []) + [site.getusersitepackages()]:
        try:
            pth += [os.path.join(d, f) for f in os.listdir(d) if f.startswith("flashinfer_guard") and f.endswith(".pth")]
        except OSError:
            pass
    w(f"sglang .pth bootstrap: {', '.join(pth) or 'not found'}\n")
    for var in ("VLLM_PLUGINS", "SGLANG_PLUGINS"):
        if os.environ.get(var) is not None:
            names = os.environ[var].split(",")
            ok = "flashinfer_guard" in names
            w(f"{var}={_show(os.environ[var])}: {'lists' if ok else 'does NOT list'} flashinfer_guard\n")
    w("settings   " + ", ".join(f"{k}={v}" for k, v in settings.describe().items()) + "\n")
    for warning in settings.warnings:
        w(f"warning    {warning}\n")
    moe = moe_verdict(settings, machine=platform.machine(), flashinfer_version=fi, gpu=gpu)
    w(f"moe guard  {moe['gpu']}, {moe['machine']}, FlashInfer {fi or 'not installed'}: {moe['summary']}\n")
    w(f"moe why    {moe['reason']}\n")
    for row in moe["rows"]:
        w(f"moe row    {row['short']}: {row['risk']}; default {row['default']}, strict {row['strict']}\n")
    if settings.workspace == "off":
        w("workspace  off\n")
    elif fi is None and fi_raw is not None:
        w(f"workspace  FlashInfer {_show(fi_raw)} is not a PEP 440 version: its sizing family is "
          "unknown here; run `flashinfer-guard plan --flashinfer X.Y.Z` with the release it was built from\n")
    elif fi is None:
        w("workspace  FlashInfer not installed: nothing to size\n")
    else:
        fam = fm.family(fi)
        w(f"workspace  FlashInfer {fi} (sizing family {fam}): sized per model at start-up; "
          f"{'the over-allocation of PR #5177 is fixed in this release' if fm.features(fi).rows_by_query else 'this release sizes split-KV scratch by packed rows (pre-#5177): large GQA models need more than the defaults'}"
          "; run `flashinfer-guard plan --model ...` for a deployment\n")
    if not settings.enabled:
        w("FLASHINFER_GUARD=0: every guard is off in this environment\n")
    if model:
        _doctor_model(model, tp, w)
    return 0


def run_presets(as_json: bool, out=sys.stdout) -> int:
    if as_json:
        out.write(json.dumps([m.as_dict() for m in PRESETS], indent=2) + "\n")
        return 0
    out.write(f"{'model':<30} {'q':>4} {'kv':>4} {'dim':>4} {'attn layers':>12}  kind\n")
    for m in PRESETS:
        out.write(f"{m.name:<30} {m.num_attention_heads:>4} {m.num_key_value_heads:>4} {m.head_dim:>4} "
                  f"{m.attention_layers:>5}/{m.num_layers:<6}  {m.kind}{' - ' + m.note if m.note else ''}\n")
    return 0


def _check_args(a) -> None:
    """What argparse's converters cannot see: empty names, versions of the framework."""
    from .settings import bounded_version

    model = getattr(a, "model", None)
    if model is not None and not model.strip():
        raise UsageError(f"--model must name a preset or a config.json path, got {_show(model)}")
    gpu = getattr(a, "gpu", None)
    if gpu is not None and not gpu.strip():
        raise UsageError(f"--gpu must name a GPU, one of: {', '.join(gpu_names())}; got {_show(gpu)}")
    fv = getattr(a, "framework_version", None)
    if fv is not None:
        v = bounded_version(fv)
        if v is None:
            raise UsageError("--framework-version must be a version such as 0.23.0 or 0.5.5 "
                             f"(at most 64 characters), got {_show(fv)}")
        a.framework_version = v
    ws = getattr(a, "workspace", None)
    if ws is not None:
        _parse_workspace(ws)  # one line naming --workspace and the accepted range


def _strict_json(obj) -> str:
    try:
        return json.dumps(obj, indent=2, allow_nan=False)
    except ValueError:
        raise _InternalError("the result holds a number JSON cannot represent (NaN or infinity); "
                             "not printing invalid JSON") from None


class _InternalError(Exception):
    pass


def _one_line(text, limit: int = 600) -> str:
    """A message as one printable line: non-printable characters escaped, the length bounded."""
    t = str(text)
    if len(t) > limit:
        t = t[:limit] + "..."
    return "".join(ch if ch.isprintable() else ascii(ch)[1:-1] for ch in t)


def _error(message, code: int = 2) -> int:
    try:
        sys.stderr.write(f"flashinfer-guard: error: {_one_line(message)}\n")
        sys.stderr.flush()
    except Exception:  # no stderr either: the exit status still says it
        pass
    return code


def _silence_stdout() -> None:
    """Point fd 1 at /dev/null so that the interpreter's final flush cannot fail again."""
    import os
    try:
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(fd, sys.stdout.fileno())
        finally:
            os.close(fd)
    except Exception:
        pass


SIGPIPE_EXIT = 141  # 128 + SIGPIPE: what a shell reports for a writer whose reader went away


def _emit(text: str) -> int:
    """Write the whole report at once; a closed pipe ends quietly (141), other write errors in one line (1)."""
    out = sys.stdout
    if out is None:  # started with stdout closed (>&-)
        return _error("cannot write to standard output: it is closed", 1)
    try:
        # a path or name that the terminal's encoding cannot show (undecodable bytes in a file name,
        # PYTHONIOENCODING=ascii) is escaped, not an error
        enc = getattr(out, "encoding", None) or "utf-8"
        text = text.encode(enc, "backslashreplace").decode(enc, "replace")
    except (LookupError, TypeError, ValueError):
        pass
    try:
        if text:
            out.write(text)
        out.flush()
    except BrokenPipeError:
        _silence_stdout()
        return SIGPIPE_EXIT
    except OSError as exc:
        _silence_stdout()
        return _error(f"cannot write to standard output: {exc.strerror or type(exc).__name__}", 1)
    except ValueError:  # I/O operation on a closed file
        return _error("cannot write to standard output: it is closed", 1)
    return 0


def main(argv=None) -> int:
    """The command. Exit 0 with the report on stdout, or 2 with one error line on stderr (1 for an
    internal error or a failed write, 141 when the reader of a pipe went away); never a traceback."""
    import io

    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    from .plan_report import split_launch
    argv, launch_cmd = split_launch(argv)  # plan [opts] -- <the server's launch command>
    out = io.StringIO()
    code = 0
    try:
        try:
            args = parser.parse_args(argv or ["plan"])
        except SystemExit as exc:  # --help / --version printed their text
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
            return _emit("") or status
        if args.cmd in (None, "plan"):
            if args.cmd is None:
                args = parser.parse_args(["plan"])
            _check_args(args)
            args.launch = launch_cmd
            result = run_plan(args)
            if args.json:
                out.write(_strict_json(result) + "\n")
            else:
                print_plan(result, args.all, out=out)
        elif launch_cmd is not None:  # doctor/presets read no launch command: refuse it, never ignore it
            raise UsageError(f"{args.cmd} takes no launch command after --: it inspects this environment; "
                             f"for `{' '.join(launch_cmd)[:60]}` run `flashinfer-guard plan -- <command>`")
        elif args.cmd == "doctor":
            if args.model is not None:
                _doctor_model_usable(args.model, args.tp)
            code = run_doctor(out=out, model=args.model, tp=args.tp)
        elif args.cmd == "presets":
            code = run_presets(args.json, out=out)
    except UsageError as exc:
        return _error(exc)
    except ValueError as exc:  # layouts and limits validate themselves
        return _error(exc)
    except Exception as exc:  # a bug of ours: one line, not a traceback
        return _error(f"internal error ({type(exc).__name__}: {exc}); please report it", 1)
    return _emit(out.getvalue()) or code


if __name__ == "__main__":
    sys.exit(main())
