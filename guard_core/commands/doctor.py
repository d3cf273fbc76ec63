"""``flashinfer-guard doctor`` (this environment: versions, GPU, entry points, settings, what each guard would
do, a model as each reader here reads it) and ``flashinfer-guard presets``."""

from __future__ import annotations

import json
import platform
import sys

from guard_core import __version__
from guard_core.commands.options import UsageError, show
from guard_core.decide.records import moe_verdict
from guard_core.deployment.presets import PRESETS, ModelError, load_model
from guard_core.flashinfer import planner as fm
from guard_core.runtime.settings import load_settings
from guard_core.versions import flashinfer_version, installed_version

__all__ = ["doctor_model_usable", "run_doctor", "run_presets"]


def _doctor_model(path: str, tp: int, w) -> None:
    """The model's attention groups as each reader here reads them."""
    import importlib.util
    import os

    from guard_core.deployment.groups import GroupsError
    from guard_core.deployment.guard_module import session

    cfg_path = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        facts = load_model(path)
        mine = facts.model_groups().per_rank(tp)
    except (ModelError, GroupsError) as exc:
        # the built-in reader cannot read it: the server readers below may (issue 26)
        w(f"model      {show(path)}, built-in reader: {exc}\n")
        mine = None
    key = sorted(g.key for g in mine) if mine is not None else None
    if mine is not None:
        w(f"model      {show(cfg_path)} at tp {tp}, built-in reader: "
          + "; ".join(f"{g.count} x {g.kind} {g.num_qo_heads}/{g.num_kv_heads}/{g.head_dim_qk}/{g.head_dim_vo}"
                      for g in mine) + "\n")
    with session():  # the server's code in one process per server, its writes in a scratch directory (plan's rule)
        for fw in ("vllm", "sglang"):
            if importlib.util.find_spec(fw) is None:
                continue
            _doctor_server_line(fw, cfg_path, tp, key, w)


def _doctor_server_line(fw: str, cfg_path: str, tp: int, key, w) -> None:
    from guard_core.deployment.server_reader import read_with_server

    srv = read_with_server(fw, cfg_path, tp)
    if not srv.get("ok"):
        w(f"model      {srv['label']}: {srv.get('refusal')}\n")
        return
    same = sorted(g.key for g in srv["groups"]) == key
    rel = ("the built-in reader cannot read it" if key is None
           else "agrees with the built-in reader" if same else "DIFFERS from the built-in reader")
    w(f"model      {srv['label']}: "
      + "; ".join(f"{g.count} x {g.kind} {g.num_qo_heads}/{g.num_kv_heads}/{g.head_dim_qk}/{g.head_dim_vo}"
                  for g in srv["groups"])
      + f" ({rel}; plan uses the server's)\n")


def doctor_model_usable(path: str, tp: int) -> None:
    """``doctor --model``: a model it cannot read (no such file, not a config, heads that do not
    split at ``--tp``, an empty name) is refused in one line, exit 2, like ``plan --model``;
    never a report that carries the error in one of its lines with exit 0 (issue 29)."""
    import importlib.util
    import os

    from guard_core.deployment.groups import GroupsError

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
        from guard_core.deployment.model_readers import facts_by_chain

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
    from guard_core.versions import is_version
    if fi is not None and not is_version(fi):
        fi = None  # named below; every check that needs a version reads it as unknown
    w(f"flashinfer-guard {__version__}\n")
    w(f"host       {platform.machine()} / Python {platform.python_version()} / {platform.system()}\n")
    vers = {d: installed_version(d) for d in ("vllm", "sglang", "flashinfer-python", "torch")}
    for d, v in vers.items():
        if v is not None and not is_version(v):
            w(f"{d:<18} {show(v)} (not a PEP 440 version: read as unknown)\n")
            continue
        w(f"{d:<18} {v or 'not installed'}\n")
    vers = {d: (v if v is None or is_version(v) else None) for d, v in vers.items()}
    from guard_core.flashinfer.releases import describe as describe_support

    for line in describe_support({"vllm": vers["vllm"], "sglang": vers["sglang"], "flashinfer": fi}):
        w(f"checked    {line}\n")
    gpu = None
    if vers["torch"]:
        from guard_core.gpus import detect_gpu
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
            w(f"{var}={show(os.environ[var])}: {'lists' if ok else 'does NOT list'} flashinfer_guard\n")
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
        w(f"workspace  FlashInfer {show(fi_raw)} is not a PEP 440 version: its sizing family is "
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
