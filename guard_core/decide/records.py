"""Decisions: what the guards do here, as records with a one-line rendering."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from guard_core import TAG
from guard_core.runtime.settings import MOE, MOE_FIXED_IN, WORKSPACE, Settings
from guard_core.flashinfer.sizing import Requirement, round_up_mib
from guard_core.units import MIB, fmt_mib
from guard_core.versions import is_version, parse_version

__all__ = ["Decision", "MoeDecision", "WorkspaceDecision", "decide_fixed_split_workspace", "decide_moe",
           "decide_workspace", "describe_need", "exact_refusal", "moe_advice", "moe_verdict"]


@dataclass(frozen=True)
class Decision:
    area: str  # "workspace" | "moe"
    action: str
    reason: str
    level: str = "info"
    inputs: dict = field(default_factory=dict)
    numbers: dict = field(default_factory=dict)
    text: str = ""

    @property
    def line(self) -> str:
        return f"{TAG} {self.area}: {self.text}"

    def as_dict(self) -> dict:
        return {"area": self.area, "action": self.action, "reason": self.reason, "level": self.level,
                "inputs": dict(self.inputs), "numbers": dict(self.numbers), "line": self.line}


@dataclass(frozen=True)
class WorkspaceDecision(Decision):
    allocate_bytes: int = 0


def describe_need(req: Requirement, buffer_bytes: int | None = None) -> str:
    """'FlashInfer V prefill planner needs N MiB at <scenario> (<layout>)[, <alloc> overflows B MiB]'."""
    s = req.dominant
    l = req.layout
    if s is None:
        return f"FlashInfer {req.flashinfer_version} plans nothing in this buffer"
    where = {
        "cuda_graph_decode": f"CUDA-graph batch {s.batch}",
        "cuda_graph_verify": f"CUDA-graph verify batch {s.batch} x {s.q_len} tokens",
        "eager_decode": f"eager decode of {s.batch} requests",
        "eager_prefill": f"eager prefill of {s.batch} x {s.q_len} tokens",
    }.get(s.name, s.name)
    planner = {"fa2": "prefill planner", "decode": "decode planner", "fa3": "SM90 planner"}.get(s.planner, s.planner)
    hd = f"head_dim {l.head_dim_qk}" if l.head_dim_qk == l.head_dim_vo else f"head_dim {l.head_dim_qk}/{l.head_dim_vo}"
    text = (f"FlashInfer {req.flashinfer_version} {planner} needs {fmt_mib(req.float_bytes)} at {where} "
            f"({l.num_qo_heads} q / {l.num_kv_heads} kv heads per rank, {hd}, {req.gpu.num_sms} SMs)")
    over = s.plan.first_overflow(buffer_bytes) if buffer_bytes is not None else None
    if over:
        text += f", where {over['allocation']} ({fmt_mib(over['bytes'])}) would overflow {fmt_mib(buffer_bytes)}"
    return text


_AUTO = Settings(workspace="auto")

def exact_refusal(framework: str, framework_version: str | None, flashinfer_version: str | None) -> str | None:
    """Why ``exact`` must act as ``auto`` here (outside the FlashInfer releases the
    planner model was checked against, or the framework lines checked: the
    declarations in guard_core.flashinfer.releases), or None where it may shrink."""
    from guard_core.flashinfer.releases import DISPLAY, unchecked_reason

    why = unchecked_reason(framework, framework_version, flashinfer_version)
    fw = {v.lower(): k for k, v in DISPLAY.items()}.get(str(framework).lower(), str(framework).lower())
    if why is None and fw == "vllm":
        # each checked vLLM line was checked with the FlashInfer its wheel pins (Requires-Dist
        # flashinfer-python==: 0.23.0 -> 0.6.12, 0.32.0 -> 0.7.0.post1, 0.33.0 -> 0.7.2.post1):
        # another checked FlashInfer under that line is a pair nobody checked (issue 29)
        from guard_core.deployment.server_defaults import pinned_flashinfer

        pin = pinned_flashinfer("vllm", str(framework_version))
        if parse_version(str(flashinfer_version)) != parse_version(pin):
            why = (f"FlashInfer {flashinfer_version} under vLLM {framework_version} is not a checked pair "
                   f"(vLLM {framework_version} pins FlashInfer {pin})")
    return why


def _with_notes(dec: WorkspaceDecision, requirement: Requirement | None) -> WorkspaceDecision:
    """The core's notes (a rejected plan, an unknown fact, DCP heads) on the decision line."""
    notes = tuple(requirement.notes) if requirement is not None else ()
    if not notes:
        return dec
    from dataclasses import replace

    return replace(dec, text=f"{dec.text} [{'; '.join(notes)}]", inputs={**dec.inputs, "notes": list(notes)})


def decide_workspace(
    requirement: Requirement | None,
    *,
    framework: str,
    server_bytes: int,
    settings: Settings,
    user_bytes: int | None = None,
    user_var: str | None = None,
    flashinfer_version: str | None = None,
    exact_refused: str | None = None,
) -> WorkspaceDecision:
    """How big to make the float workspace, with the requirement's notes on the line.

    ``server_bytes`` is what the server would allocate on its own (including a
    user-set native size, which ``user_bytes`` names, through ``user_var``). We
    never shrink it, except under ``exact`` where ``exact_refused`` (from
    ``exact_refusal``) is None.
    """
    dec = _decide_workspace(requirement, framework=framework, server_bytes=server_bytes, user_bytes=user_bytes,
                            user_var=user_var, settings=settings, flashinfer_version=flashinfer_version,
                            exact_refused=exact_refused)
    return _with_notes(dec, requirement)


def _decide_workspace(requirement: Requirement | None, *, framework: str, server_bytes: int,
                      user_bytes: int | None, user_var: str | None, settings: Settings,
                      flashinfer_version: str | None, exact_refused: str | None) -> WorkspaceDecision:
    fi = flashinfer_version or (requirement.flashinfer_version if requirement else "?")
    need = requirement.float_bytes if requirement else 0
    numbers = {"need_bytes": need, "server_bytes": server_bytes}
    inputs = {"framework": framework, "flashinfer": fi, "setting": settings.workspace}
    if settings.workspace == "off":
        return WorkspaceDecision("workspace", "off", f"{WORKSPACE}=off", "info", inputs, numbers,
                                 f"off ({WORKSPACE}=off); {framework} allocates {fmt_mib(server_bytes)}",
                                 allocate_bytes=server_bytes)
    if settings.workspace == "size":
        return _decide_size(requirement, need, framework, server_bytes, settings, inputs, numbers)
    if settings.workspace == "exact":
        why = exact_refused
        if requirement is None:
            why = why or "nothing to size here"
        elif user_bytes:
            why = f"{user_var}={fmt_mib(user_bytes)} is the user's choice"
        if why is None:
            return _decide_exact(requirement, need, server_bytes, inputs, numbers)
        auto = _decide_workspace(requirement, framework=framework, server_bytes=server_bytes,
                                 user_bytes=user_bytes, user_var=user_var, settings=_AUTO,
                                 flashinfer_version=flashinfer_version, exact_refused=None)
        from dataclasses import replace

        return replace(auto, text=f"{auto.text} ({WORKSPACE}=exact not applied: {why}; acting as auto)",
                       inputs=dict(auto.inputs, setting="exact"))
    return _decide_auto(requirement, need, fi, server_bytes, user_bytes, user_var, settings, inputs, numbers)


def _decide_size(requirement, need, framework, server_bytes, settings, inputs, numbers) -> WorkspaceDecision:
    """FLASHINFER_GUARD_WORKSPACE=<size>: that size, never below the server's own."""
    size = settings.workspace_bytes or 0
    alloc = max(size, server_bytes)
    numbers.update(setting_bytes=size, allocate_bytes=alloc)
    if requirement is not None and alloc < need:
        text = (f"{WORKSPACE}={fmt_mib(size)} is below the computed need {fmt_mib(need)} "
                f"({describe_need(requirement, alloc)}); using {fmt_mib(alloc)} as asked")
        return WorkspaceDecision("workspace", "size", "size below need", "warning", inputs, numbers, text,
                                 allocate_bytes=alloc)
    kept = "" if alloc == size else f" (kept {framework}'s larger {fmt_mib(server_bytes)})"
    return WorkspaceDecision("workspace", "size", f"{WORKSPACE} set", "info", inputs, numbers,
                             f"{WORKSPACE}={fmt_mib(size)}: allocating {fmt_mib(alloc)}{kept}", allocate_bytes=alloc)


def _decide_exact(requirement, need, server_bytes, inputs, numbers) -> WorkspaceDecision:
    """FLASHINFER_GUARD_WORKSPACE=exact where it applies: the need rounded up to 1 MiB."""
    alloc = max(round_up_mib(need), MIB)
    numbers["allocate_bytes"] = alloc
    delta = server_bytes - alloc
    if delta >= 0:
        text = (f"exact: {describe_need(requirement)}; allocating {fmt_mib(alloc)} instead of "
                f"{fmt_mib(server_bytes)} (frees {fmt_mib(delta)})")
    else:
        text = (f"exact: {describe_need(requirement, server_bytes)}; raising "
                f"{fmt_mib(server_bytes)} -> {fmt_mib(alloc)}")
    return WorkspaceDecision("workspace", "exact", "exact need", "info", inputs, numbers, text,
                             allocate_bytes=alloc)


def _decide_auto(requirement, need, fi, server_bytes, user_bytes, user_var, settings, inputs,
                 numbers) -> WorkspaceDecision:
    """auto: raise to the need where the server would allocate less, never shrink."""
    if requirement is None:
        return WorkspaceDecision("workspace", "ok", "no requirement", "info", inputs, numbers,
                                 f"ok, nothing to size (FlashInfer {fi}); keeping {fmt_mib(server_bytes)}",
                                 allocate_bytes=server_bytes)
    if need <= server_bytes:
        src = f"{user_var}={fmt_mib(server_bytes)}" if user_bytes else f"{fmt_mib(server_bytes)} allocated"
        free = server_bytes - max(round_up_mib(need), MIB)
        hint = (f"; {WORKSPACE}=exact would free {fmt_mib(free)}"
                if free >= MIB and not user_bytes and settings.workspace == "auto" else "")
        return WorkspaceDecision("workspace", "ok", "need fits", "info", inputs, numbers,
                                 f"ok, need {fmt_mib(need)} <= {src} (FlashInfer {fi}){hint}",
                                 allocate_bytes=server_bytes)
    alloc = round_up_mib(need)
    numbers["allocate_bytes"] = alloc
    if user_bytes:
        text = (f"{user_var}={fmt_mib(server_bytes)} is too small: {describe_need(requirement, server_bytes)}; "
                f"raising {fmt_mib(server_bytes)} -> {fmt_mib(alloc)}")
        return WorkspaceDecision("workspace", "raise", "user size too small", "warning", inputs, numbers, text,
                                 allocate_bytes=alloc)
    text = f"{describe_need(requirement, server_bytes)}; raising {fmt_mib(server_bytes)} -> {fmt_mib(alloc)}"
    return WorkspaceDecision("workspace", "raise", "need exceeds default", "info", inputs, numbers, text,
                             allocate_bytes=alloc)


# Actions of a MoE decision: "off" (FLASHINFER_GUARD_MOE=off), "on" (=on: block everywhere),
# "none" (nothing applies), then the evidence table's "info" < "warn" < "skip_autotune" < "block".
_STRENGTH = {"none": 0, "info": 1, "warn": 2, "skip_autotune": 3, "block": 4}
_LEVEL = {"off": "debug", "none": "debug", "on": "warning", "info": "info", "warn": "warning",
          "skip_autotune": "info", "block": "warning"}


@dataclass(frozen=True)
class MoeDecision:
    block: bool
    reason: str
    inputs: dict = field(default_factory=dict)
    action: str = "none"
    rows: tuple = ()  # guard_core.flashinfer.moe_evidence rows behind the action
    op: str | None = None  # None: the gate shared by every op

    @property
    def level(self) -> str:
        return _LEVEL.get(self.action, "info")

    def line(self, detail: str) -> str:
        return f"{TAG} moe: {self.reason}: {detail}"

    def as_dict(self) -> dict:
        return {"area": "moe", "block": self.block, "action": self.action, "level": self.level,
                "reason": self.reason, "op": self.op, "rows": [r.id for r in self.rows],
                "inputs": dict(self.inputs)}


def _sm(gpu) -> int | None:
    """A Gpu, a (major, minor) pair, an SM number (100) or None -> SM number or None."""
    from guard_core.flashinfer.moe_evidence import sm_of

    if gpu is None:
        return None
    if isinstance(gpu, int):
        return gpu
    cc = getattr(gpu, "cc", gpu)
    return sm_of(cc)


def decide_moe(settings: Settings, *, machine: str | None = None, flashinfer_version: str | None = None,
               gpu=None, op: str | None = None, can_skip_autotune: bool | None = None) -> MoeDecision:
    """What the MoE guard does for one op (None: the gate every TRT-LLM routed op shares) from
    the evidence table (guard_core.flashinfer.moe_evidence): the GPU (a Gpu, (major, minor), an SM
    number; None: unknown, taken as SM10x), the FlashInfer release, the host CPU and the
    setting. ``can_skip_autotune``: whether this line can skip the op's autotune sweep
    (strict turns "skip_autotune" into "block" where it cannot; None: not asked)."""
    from guard_core.flashinfer.moe_evidence import OPS, applicable, family_label, reaches

    machine = machine if machine is not None else platform.machine()
    sm = _sm(gpu)
    fam = family_label(sm)
    inputs = {"machine": machine, "flashinfer": flashinfer_version, "setting": settings.moe,
              "fixed_in": settings.moe_fixed_in, "gpu": fam, "sm": sm, "op": op or "every op"}
    opt = f", {op} MoE" if op else ", every MoE op"
    if settings.moe == "off":
        return MoeDecision(False, f"{MOE}=off", inputs, "off", op=op)
    if settings.moe == "on":
        return MoeDecision(True, f"{MOE}=on", inputs, "on", op=op)
    if not reaches(sm):
        return MoeDecision(False, f"{machine} host, {fam} never takes the TRT-LLM routed MoE (SM10x only), "
                                  "TRT-LLM fused MoE left as is", inputs, "none", op=op)
    if flashinfer_version is None:
        return MoeDecision(False, f"{machine} without FlashInfer installed, nothing to guard", inputs, "none", op=op)
    rows = applicable(sm=sm, flashinfer_version=flashinfer_version, machine=machine, op=op,
                      fixed_in=settings.moe_fixed_in)
    if op is None:  # the shared gate acts only on rows about every op
        rows = tuple(r for r in rows if set(r.ops) == set(OPS))
    strict = settings.moe == "strict"
    action, top = "none", None
    for r in rows:
        a = r.strict if strict else r.default
        if _STRENGTH[a] > _STRENGTH[action]:
            action, top = a, r
    if action == "skip_autotune" and can_skip_autotune is False:
        action = "block"
    fixed = settings.moe_fixed_in
    if top is None:
        where = fam if sm is not None else "any GPU"
        ok = (f"{machine} with FlashInfer {flashinfer_version} >= {fixed} ({MOE_FIXED_IN}) on {where}{opt}, "
              "TRT-LLM fused MoE left as is")
        if not (is_version(flashinfer_version) and parse_version(flashinfer_version) >= parse_version(fixed)):
            ok = f"{machine} with FlashInfer {flashinfer_version} on {where}{opt}: no evidence row applies"
        return MoeDecision(False, ok, inputs, "none", rows, op)
    mode = f"{MOE}=strict, " if strict else ""
    if top.flashinfer_fixed_in is not None:
        head = f"{machine} with FlashInfer {flashinfer_version} < {fixed} on {fam}{opt}"
    else:
        head = f"{machine} with FlashInfer {flashinfer_version} on {fam}{opt}"
    reason = f"{head} [{mode}evidence {top.id}: {top.cite}]"
    return MoeDecision(action == "block", reason, inputs, action, rows, op)


def moe_advice(d: MoeDecision) -> str:
    """The sentence that says what the decision means and which switch changes it."""
    if d.action == "warn":
        return ("known out-of-bounds read of the TRT-LLM routed MoE (fixed in FlashInfer 0.6.16); "
                f"TRT-LLM fused MoE kept; upgrade FlashInfer, or {MOE}=strict to keep the server off it")
    if d.action == "info":
        return (f"open reports of BF16 TRT-LLM routed MoE faults on this GPU family; nothing changed "
                f"({MOE}=strict skips its autotune sweep, or blocks it where the line cannot)")
    if d.action == "skip_autotune":
        return "skipping the BF16 TRT-LLM MoE autotune sweep"
    return ""


def moe_verdict(settings: Settings, *, machine: str | None, flashinfer_version: str | None, gpu=None) -> dict:
    """The MoE guard's verdict for a deployment, per op, and the evidence rows that apply
    (the same decide_moe the adapters call), for ``flashinfer-guard doctor`` and ``plan``."""
    from guard_core.flashinfer.moe_evidence import OPS, applicable, family_label

    machine = machine if machine is not None else platform.machine()
    sm = _sm(gpu)
    per_op = {}
    for op in (None,) + OPS:
        d = decide_moe(settings, machine=machine, flashinfer_version=flashinfer_version, gpu=sm, op=op)
        per_op[op or "every op"] = {"action": d.action, "block": d.block, "reason": d.reason,
                                    "rows": [r.id for r in d.rows]}
    rows = applicable(sm=sm, flashinfer_version=flashinfer_version, machine=machine,
                      fixed_in=settings.moe_fixed_in)
    by_action: dict = {}
    for op in OPS:
        a = per_op[op]["action"]
        if per_op["every op"]["action"] == a and a not in ("none",):
            a = per_op["every op"]["action"]
        by_action.setdefault(a, []).append(op)
    words = {"block": "TRT-LLM routed MoE not chosen", "warn": "kept, one start-up WARNING (known fault)",
             "info": "kept, one INFO line (open reports)",
             "skip_autotune": "kept, autotune sweep skipped (blocked where the line cannot skip it)",
             "none": "left as is", "off": "guard off", "on": "TRT-LLM routed MoE not chosen (=on)"}
    parts = [f"{'/'.join(ops)}: {words.get(a, a)}" for a, ops in sorted(
        by_action.items(), key=lambda kv: -_STRENGTH.get(kv[0], 5 if kv[0] == "on" else -1))]
    head = per_op["every op"]["reason"] if per_op["every op"]["action"] != "none" else next(
        (v["reason"] for v in per_op.values() if v["action"] != "none"), per_op["every op"]["reason"])
    return {"gpu": family_label(sm), "sm": sm, "machine": machine, "flashinfer": flashinfer_version,
            "setting": settings.moe, "ops": per_op, "block": any(v["block"] for v in per_op.values()),
            "summary": "; ".join(parts), "reason": head,
            "rows": [{"id": r.id, "short": r.short(), "risk": r.risk, "default": r.default, "strict": r.strict,
                      "status": r.status, "sources": list(r.sources)} for r in rows]}


def decide_fixed_split_workspace(requirement: Requirement | None, assessment, *, framework: str, server_bytes: int,
                                 settings: Settings, user_bytes: int | None = None, user_var: str | None = None,
                                 flashinfer_version: str | None = None) -> WorkspaceDecision:
    """The workspace in a fixed-split mode (SGLang deterministic inference), from
    ``guard_core.decide.fixed_split.assess``: the need when affordable, else the largest
    affordable buffer and one warning with the longest prompt that fits and the
    settings that fit the full context. Never below the server's own size (``exact``
    acts as ``auto`` here); ``off`` and an explicit size behave as everywhere."""
    if settings.workspace in ("off", "size") or requirement is None or assessment is None:
        return decide_workspace(requirement, framework=framework, server_bytes=server_bytes, user_bytes=user_bytes,
                                user_var=user_var, settings=settings, flashinfer_version=flashinfer_version)
    fi = flashinfer_version or requirement.flashinfer_version
    a = assessment
    numbers = {"need_bytes": a.need_bytes, "server_bytes": server_bytes, "max_bytes": a.max_bytes,
               "allocate_bytes": max(a.allocate_bytes, server_bytes), "longest_prompt": a.longest_prompt,
               "context": a.context, **{f"fix_{k}": v for k, v in a.fixes.items()}}
    inputs = {"framework": framework, "flashinfer": fi, "setting": settings.workspace, "mode": "fixed_split",
              "workspace_max": settings.describe_workspace_max()}
    tail = f" ({WORKSPACE}=exact acts as auto: never below the server's size in this mode)" \
        if settings.workspace == "exact" else ""
    alloc = max(a.allocate_bytes, server_bytes)
    if not a.affordable:
        return _with_notes(WorkspaceDecision("workspace", "limit", "fixed-split need not affordable", "warning",
                                             inputs, numbers, a.text + tail, allocate_bytes=alloc), requirement)
    if alloc > server_bytes:
        return _with_notes(WorkspaceDecision("workspace", "raise", "fixed-split need affordable", "info", inputs,
                                             numbers, a.text + tail, allocate_bytes=alloc), requirement)
    return _with_notes(WorkspaceDecision("workspace", "ok", "fixed-split need fits", "info", inputs, numbers,
                                         a.text + tail, allocate_bytes=server_bytes), requirement)
