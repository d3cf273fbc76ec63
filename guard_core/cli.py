"""The ``flashinfer-guard`` command: plan, doctor, presets.

``plan`` answers "will this deployment crash, and what fixes it?" without a
GPU. A bare ``flashinfer-guard plan`` runs the vLLM seed: Qwen3.5-397B-A17B on
a B300, vLLM's 394 MiB default, tensor-core (FA2) decode, CUDA-graph batch 512,
FlashInfer 0.7.0.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys

from . import __version__
from .decisions import decide_moe
from .frameworks import (NATIVE_VAR, default_capture_sizes, default_max_batched_tokens, default_workspace)
from .gpus import GPU_TABLE, Gpu, find_spec, gpu_names
from .presets import DEFAULT_MODEL, PRESETS, ModelError, ModelFacts, load_model
from .settings import ALL_VARIABLES, load_settings
from .sizing import (INT_WORKSPACE_BYTES, AttentionLayout, Planners, ServingLimits, compute_requirement,
                     largest_fitting_capture, round_up_mib)
from .versions import flashinfer_version, installed_version, is_version
from . import flashinfer_model as fm

MIB = 1 << 20


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


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="flashinfer-guard", description="Size FlashInfer's workspace before it crashes a server.")
    p.add_argument("--version", action="version", version=f"flashinfer-guard {__version__}")
    sub = p.add_subparsers(dest="cmd", parser_class=_Parser)
    pl = sub.add_parser("plan", help="will this deployment overflow FlashInfer's workspace, and what fixes it?")
    pl.add_argument("--model", default=None, help=f"preset name or config.json path (default {DEFAULT_MODEL})")
    pl.add_argument("--qo-heads", type=_positive("--qo-heads"), help="query heads of the model (instead of --model)")
    pl.add_argument("--kv-heads", type=_positive("--kv-heads"))
    pl.add_argument("--head-dim", type=_positive("--head-dim"))
    pl.add_argument("--v-head-dim", type=_positive("--v-head-dim"))
    pl.add_argument("--tp", type=_positive("--tp"), default=1, help="attention tensor-parallel size")
    pl.add_argument("--dcp", type=_positive("--dcp"), default=1, help="decode context parallel size (vLLM)")
    pl.add_argument("--gpu", default=None, help=f"one of: {', '.join(gpu_names())} (default b300)")
    pl.add_argument("--sms", type=_positive("--sms"), help="SM count (required for a GPU not in the table)")
    pl.add_argument("--cc", default=None, help="compute capability, e.g. 9.0 (with --sms for unknown GPUs)")
    pl.add_argument("--flashinfer", type=_version, default=None, help="FlashInfer version (default 0.7.0)")
    pl.add_argument("--framework", choices=("vllm", "sglang"), default="vllm")
    pl.add_argument("--framework-version", default=None, help="vLLM/SGLang version (changes its default buffer)")
    pl.add_argument("--max-capture-batch", type=_positive("--max-capture-batch"), default=None)
    pl.add_argument("--capture-sizes", type=_sizes, default=None, help="comma-separated CUDA-graph batch sizes")
    pl.add_argument("--no-cuda-graph", action="store_true", help="the server runs eagerly")
    pl.add_argument("--max-num-seqs", type=_positive("--max-num-seqs"), default=None)
    pl.add_argument("--max-batched-tokens", type=_positive("--max-batched-tokens"), default=None)
    pl.add_argument("--max-model-len", type=_positive("--max-model-len"), default=None)
    pl.add_argument("--draft-tokens", type=_nonneg("--draft-tokens"), default=0)
    pl.add_argument("--page-size", type=_positive("--page-size"), default=None)
    pl.add_argument("--kv-dtype-bytes", type=_positive("--kv-dtype-bytes"), default=2)
    pl.add_argument("--decode-planner", choices=("fa2", "decode", "trtllm"), default="fa2")
    pl.add_argument("--prefill-planner", choices=("fa2", "fa3", "none"), default="fa2")
    pl.add_argument("--decode-blocks-per-sm", type=_positive("--decode-blocks-per-sm"), default=None)
    pl.add_argument("--workspace", default=None, help="the buffer the server will have (bytes or 512MiB)")
    pl.add_argument("--all", action="store_true", help="list every capture size, not only the largest")
    pl.add_argument("--json", action="store_true")
    sub.add_parser("doctor", help="inspect this environment: versions, entry points, what each guard would do")
    pr = sub.add_parser("presets", help="list the embedded models")
    pr.add_argument("--json", action="store_true")
    return p


def _fmt(n: int) -> str:
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n} B"


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


def _resolve_model(a) -> tuple[ModelFacts | None, int, int, int, int]:
    raw = (a.qo_heads, a.kv_heads, a.head_dim)
    if any(v is not None for v in raw):
        if a.model:
            raise UsageError("give either --model or --qo-heads/--kv-heads/--head-dim, not both")
        if None in raw:
            raise UsageError("--qo-heads, --kv-heads and --head-dim go together")
        facts = ModelFacts("custom", "custom", "custom", a.qo_heads, a.kv_heads, a.head_dim, a.v_head_dim)
        if a.qo_heads % a.kv_heads:
            raise UsageError(f"--qo-heads {a.qo_heads} must be a multiple of --kv-heads {a.kv_heads}")
    else:
        try:
            facts = load_model(a.model or DEFAULT_MODEL)
        except ModelError as exc:
            raise UsageError(str(exc)) from None
    if facts.uses_mla:
        return facts, 0, 0, 0, 0
    try:
        q, kv = facts.per_rank(a.tp)
    except ModelError as exc:
        raise UsageError(str(exc)) from None
    return facts, q * a.dcp, kv, facts.head_dim, (a.v_head_dim or facts.v_head_dim or facts.head_dim)


def _parse_workspace(text: str) -> int:
    from .settings import parse_size
    n = parse_size(text)
    if n is None:
        from .settings import SIZE_ACCEPTED
        raise UsageError(f"--workspace must be {SIZE_ACCEPTED}, got {_show(text)}")
    return n


def run_plan(a) -> dict:
    facts, q, kv, dqk, dvo = _resolve_model(a)
    gpu = _resolve_gpu(a)
    fw = a.framework
    fi = a.flashinfer or "0.7.0"
    if facts is not None and facts.uses_mla:
        return {"model": facts.as_dict(), "verdict": "not_applicable",
                "reason": "MLA model: FlashInfer's MLA planner uses its own buffer, not the one guarded here"}
    page = a.page_size or (16 if fw == "vllm" else 1)
    tokens = a.max_batched_tokens or default_max_batched_tokens(fw)
    max_seqs = a.max_num_seqs or 512
    k = a.draft_tokens
    if a.no_cuda_graph:
        sizes: tuple[int, ...] = ()
    elif a.capture_sizes:
        sizes = a.capture_sizes
    else:
        cap = a.max_capture_batch or 512
        if fw == "vllm":  # vLLM plans FlashInfer decode graphs up to (1 + k) * max_num_seqs tokens
            cap = min(cap, (1 + k) * max_seqs)
        sizes = default_capture_sizes(fw, cap)
    layout = AttentionLayout(q, kv, dqk, dvo, page, a.kv_dtype_bytes)
    limits = ServingLimits(capture_sizes=sizes, max_num_seqs=max_seqs, max_num_batched_tokens=tokens,
                           draft_tokens=k, max_model_len=a.max_model_len)
    planners = Planners(prefill=a.prefill_planner, decode=a.decode_planner,
                        decode_blocks_per_sm=a.decode_blocks_per_sm)
    req = compute_requirement(layout, limits, gpu, fi, planners, caller=fw)
    server = default_workspace(fw, a.framework_version, architecture=facts.architecture if facts else None,
                               max_num_batched_tokens=tokens, q_heads=q, head_dim=dqk)
    buffer = _parse_workspace(a.workspace) if a.workspace else server
    dom = req.dominant
    overflow = dom.plan.first_overflow(buffer) if dom and req.float_bytes > buffer else None
    verdict = "overflow" if req.float_bytes > buffer else "ok"
    remedies: dict = {}
    if verdict == "overflow":
        size = round_up_mib(req.float_bytes)
        remedies["workspace_bytes"] = size
        remedies["env"] = f"{NATIVE_VAR[fw]}={size}"
        if sizes:
            remedies["largest_capture_batch_that_fits"] = largest_fitting_capture(
                layout, limits, gpu, fi, planners, fw, buffer)
        if fm.features(fi).rows_by_query is False:
            fixed = compute_requirement(layout, limits, gpu, "0.7.1", planners, caller=fw)
            remedies["flashinfer_0_7_1_need_bytes"] = fixed.float_bytes
    scen = list(req.scenarios)
    return {
        "model": facts.as_dict() if facts else None,
        "framework": fw, "framework_version": a.framework_version,
        "flashinfer": fi, "flashinfer_family": fm.family(fi),
        "gpu": {"name": gpu.name, "num_sms": gpu.num_sms, "cc": f"{gpu.cc[0]}.{gpu.cc[1]}"},
        "layout": {"tp": a.tp, "num_qo_heads": q, "num_kv_heads": kv, "head_dim_qk": dqk, "head_dim_vo": dvo,
                   "page_size": page, "kv_dtype_bytes": a.kv_dtype_bytes},
        "limits": {"capture_sizes": list(sizes), "max_num_seqs": max_seqs, "max_batched_tokens": tokens,
                   "draft_tokens": k, "max_model_len": a.max_model_len},
        "planners": {"decode": planners.decode, "prefill": planners.prefill},
        "scenarios": [s.as_dict() for s in scen],
        "need": {"float_bytes": req.float_bytes, "int_bytes": req.int_bytes,
                 "scenario": dom.name if dom else None, "batch": dom.batch if dom else None,
                 "allocation": (dom.dominant_allocation.name if dom and dom.dominant_allocation else None)},
        "int_workspace_bytes": INT_WORKSPACE_BYTES,
        "server_default_bytes": server,
        "workspace_bytes": buffer,
        "verdict": verdict,
        "overflow": overflow,
        "remedies": remedies,
        "notes": list(req.notes),
    }


def print_plan(r: dict, show_all: bool, out=sys.stdout) -> None:
    w = out.write
    if r["verdict"] == "not_applicable":
        w(f"{r['model']['name']}: {r['reason']}\n")
        return
    m, l, g = r["model"], r["layout"], r["gpu"]
    name = m["name"] if m else "custom model"
    w(f"model      {name}: {l['num_qo_heads']} q / {l['num_kv_heads']} kv heads per rank (tp {l['tp']}), "
      f"head_dim {l['head_dim_qk']}" + (f"/{l['head_dim_vo']}" if l['head_dim_vo'] != l['head_dim_qk'] else "")
      + f", page {l['page_size']}\n")
    w(f"gpu        {g['name']}: {g['num_sms']} SMs, compute capability {g['cc']}\n")
    w(f"flashinfer {r['flashinfer']} (sizing family {r['flashinfer_family']}); {r['framework']}"
      f"{' ' + r['framework_version'] if r['framework_version'] else ''}; decode planner {r['planners']['decode']}, "
      f"prefill planner {r['planners']['prefill']}\n")
    lim = r["limits"]
    cs = lim["capture_sizes"]
    w(f"limits     capture sizes {cs[0] if cs else '-'}..{cs[-1] if cs else '-'} ({len(cs)}), max seqs "
      f"{lim['max_num_seqs']}, max batched tokens {lim['max_batched_tokens']}, draft tokens {lim['draft_tokens']}\n\n")
    w(f"{'scenario':<19} {'batch':>6} {'q_len':>5} {'float bytes':>13} {'':>10} {'int bytes':>10}  dominant allocation\n")
    rows = r["scenarios"]
    if not show_all:
        keep = []
        for kind in ("cuda_graph_decode", "cuda_graph_verify"):
            ks = [s for s in rows if s["name"] == kind]
            if ks:
                keep.append(max(ks, key=lambda s: (s["float_bytes"], s["batch"])))
        keep += [s for s in rows if s["name"] not in ("cuda_graph_decode", "cuda_graph_verify")]
        rows = keep
    for s in rows:
        w(f"{s['name']:<19} {s['batch']:>6} {s['q_len']:>5} {s['float_bytes']:>13,} {_fmt(s['float_bytes']):>10} "
          f"{s['int_bytes']:>10,}  {s['dominant_allocation'] or '-'}\n")
    if not show_all and len(rows) < len(r["scenarios"]):
        w(f"({len(r['scenarios']) - len(rows)} smaller capture sizes not shown; --all lists them)\n")
    n = r["need"]
    w(f"\nneed       {n['float_bytes']:,} bytes ({_fmt(n['float_bytes'])}) float at {n['scenario']}"
      f" batch {n['batch']} ({n['allocation']}); int {_fmt(n['int_bytes'])} of {_fmt(r['int_workspace_bytes'])}\n")
    srv = r["server_default_bytes"]
    w(f"{r['framework']} allocates {srv:,} bytes ({_fmt(srv)})"
      + (f"; checking against --workspace {r['workspace_bytes']:,}" if r["workspace_bytes"] != srv else "") + "\n")
    if r["verdict"] == "ok":
        w(f"verdict    OK: the need fits with {_fmt(r['workspace_bytes'] - n['float_bytes'])} to spare\n")
    else:
        o = r["overflow"]
        w("verdict    OVERFLOW: FlashInfer will raise at start-up:\n")
        if o:
            w(f"           Buffer overflow when allocating memory for {o['allocation']} with size {o['bytes']} "
              f"and alignment {o['alignment']}, but only {o['available']} bytes available in AlignedAllocator.\n")
        rem = r["remedies"]
        w("remedies\n")
        w(f"  - pip install flashinfer-guard in the server's environment: it raises the buffer to "
          f"{_fmt(rem['workspace_bytes'])} automatically; or\n")
        w(f"  - export {rem['env']}   ({_fmt(rem['workspace_bytes'])})\n")
        if "largest_capture_batch_that_fits" in rem:
            flag = "--max-cudagraph-capture-size" if r["framework"] == "vllm" else "--cuda-graph-max-bs"
            w(f"  - or keep today's buffer and cap CUDA-graph batches at {rem['largest_capture_batch_that_fits']} "
              f"({flag})\n")
        if "flashinfer_0_7_1_need_bytes" in rem:
            w(f"  - or upgrade to FlashInfer >= 0.7.1 (PR #5177): the need drops to "
              f"{_fmt(rem['flashinfer_0_7_1_need_bytes'])}\n")
    for note in r["notes"]:
        w(f"note       {note}\n")


def run_doctor(out=sys.stdout) -> int:
    from importlib import metadata
    import os
    import site

    w = out.write
    settings = load_settings()
    fi = flashinfer_version()
    w(f"flashinfer-guard {__version__}\n")
    w(f"host       {platform.machine()} / Python {platform.python_version()} / {platform.system()}\n")
    vers = {d: installed_version(d) for d in ("vllm", "sglang", "flashinfer-python", "torch")}
    for d, v in vers.items():
        w(f"{d:<18} {v or 'not installed'}\n")
    from .support import describe as describe_support

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
    moe = decide_moe(settings, flashinfer_version=fi)
    w(f"moe guard  {'WOULD BLOCK' if moe.block else 'stands down'}: {moe.reason}\n")
    if settings.workspace == "off":
        w("workspace  off\n")
    elif fi is None:
        w("workspace  FlashInfer not installed: nothing to size\n")
    else:
        fam = fm.family(fi)
        w(f"workspace  FlashInfer {fi} (sizing family {fam}): sized per model at start-up; "
          f"{'the over-allocation of PR #5177 is fixed in this release' if fm.features(fi).rows_by_query else 'this release sizes split-KV scratch by packed rows (pre-#5177): large GQA models need more than the defaults'}"
          "; run `flashinfer-guard plan --model ...` for a deployment\n")
    if not settings.enabled:
        w("FLASHINFER_GUARD=0: every guard is off in this environment\n")
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
            result = run_plan(args)
            if args.json:
                out.write(_strict_json(result) + "\n")
            else:
                print_plan(result, args.all, out=out)
        elif args.cmd == "doctor":
            code = run_doctor(out=out)
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
