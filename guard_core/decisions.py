"""Decisions: what the guards do here, as records with a one-line rendering."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field

from . import TAG
from .settings import MOE, MOE_FIXED_IN, WORKSPACE, Settings, format_bytes
from .sizing import MIB, Requirement, round_up_mib
from .versions import is_version, parse_version


def _mib(n: int) -> str:
    return format_bytes(n) if n % MIB == 0 else f"{n / MIB:.1f} MiB"


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
    text = (f"FlashInfer {req.flashinfer_version} {planner} needs {_mib(req.float_bytes)} at {where} "
            f"({l.num_qo_heads} q / {l.num_kv_heads} kv heads per rank, {hd}, {req.gpu.num_sms} SMs)")
    over = s.plan.first_overflow(buffer_bytes) if buffer_bytes is not None else None
    if over:
        text += f", where {over['allocation']} ({_mib(over['bytes'])}) would overflow {_mib(buffer_bytes)}"
    return text


_AUTO = Settings(workspace="auto")

def exact_refusal(framework: str, framework_version: str | None, flashinfer_version: str | None) -> str | None:
    """Why ``exact`` must act as ``auto`` here (outside the FlashInfer releases the
    planner model was checked against, or the framework lines checked: the
    declarations in guard_core.support), or None where it may shrink."""
    from .support import unchecked_reason

    return unchecked_reason(framework, framework_version, flashinfer_version)


def _with_notes(dec: WorkspaceDecision, requirement: Requirement | None) -> WorkspaceDecision:
    """The core's notes (a rejected plan, an unknown fact, DCP heads) on the decision line."""
    notes = tuple(requirement.notes) if requirement is not None else ()
    if not notes:
        return dec
    from dataclasses import replace

    return replace(dec, text=f"{dec.text} [{'; '.join(notes)}]", inputs={**dec.inputs, "notes": list(notes)})


def decide_workspace(*args, **kwargs) -> WorkspaceDecision:
    """How big to make the float workspace (see ``_decide_workspace``), with the
    requirement's notes on the line."""
    requirement = args[0] if args else kwargs.get("requirement")
    return _with_notes(_decide_workspace(*args, **kwargs), requirement)


def _decide_workspace(
    requirement: Requirement | None,
    *,
    framework: str,
    server_bytes: int,
    user_bytes: int | None = None,
    user_var: str | None = None,
    settings: Settings,
    flashinfer_version: str | None = None,
    layout=None,
    gpu=None,
    exact_refused: str | None = None,
) -> WorkspaceDecision:
    """How big to make the float workspace.

    ``server_bytes`` is what the server would allocate on its own (including a
    user-set native size, which ``user_bytes`` names). We never shrink it.
    """
    fi = flashinfer_version or (requirement.flashinfer_version if requirement else "?")
    need = requirement.float_bytes if requirement else 0
    numbers = {"need_bytes": need, "server_bytes": server_bytes}
    inputs = {"framework": framework, "flashinfer": fi, "setting": settings.workspace}
    if settings.workspace == "off":
        return WorkspaceDecision("workspace", "off", f"{WORKSPACE}=off", "info", inputs, numbers,
                                 f"off ({WORKSPACE}=off); {framework} allocates {_mib(server_bytes)}",
                                 allocate_bytes=server_bytes)
    if settings.workspace == "size":
        size = settings.workspace_bytes or 0
        alloc = max(size, server_bytes)
        numbers.update(setting_bytes=size, allocate_bytes=alloc)
        if requirement is not None and alloc < need:
            text = (f"{WORKSPACE}={_mib(size)} is below the computed need {_mib(need)} "
                    f"({describe_need(requirement, alloc)}); using {_mib(alloc)} as asked")
            return WorkspaceDecision("workspace", "size", "size below need", "warning", inputs, numbers, text,
                                     allocate_bytes=alloc)
        kept = "" if alloc == size else f" (kept {framework}'s larger {_mib(server_bytes)})"
        return WorkspaceDecision("workspace", "size", f"{WORKSPACE} set", "info", inputs, numbers,
                                 f"{WORKSPACE}={_mib(size)}: allocating {_mib(alloc)}{kept}", allocate_bytes=alloc)
    if settings.workspace == "exact":
        why = exact_refused
        if requirement is None:
            why = why or "nothing to size here"
        elif user_bytes:
            why = f"{user_var}={_mib(user_bytes)} is the user's choice"
        if why is None:
            alloc = max(round_up_mib(need), MIB)
            numbers["allocate_bytes"] = alloc
            delta = server_bytes - alloc
            if delta >= 0:
                text = (f"exact: {describe_need(requirement)}; allocating {_mib(alloc)} instead of "
                        f"{_mib(server_bytes)} (frees {_mib(delta)})")
            else:
                text = (f"exact: {describe_need(requirement, server_bytes)}; raising "
                        f"{_mib(server_bytes)} -> {_mib(alloc)}")
            return WorkspaceDecision("workspace", "exact", "exact need", "info", inputs, numbers, text,
                                     allocate_bytes=alloc)
        auto = _decide_workspace(requirement, framework=framework, server_bytes=server_bytes,
                                 user_bytes=user_bytes, user_var=user_var, settings=_AUTO,
                                 flashinfer_version=flashinfer_version)
        from dataclasses import replace

        return replace(auto, text=f"{auto.text} ({WORKSPACE}=exact not applied: {why}; acting as auto)",
                       inputs=dict(auto.inputs, setting="exact"))
    # auto
    if requirement is None:
        return WorkspaceDecision("workspace", "ok", "no requirement", "info", inputs, numbers,
                                 f"ok, nothing to size (FlashInfer {fi}); keeping {_mib(server_bytes)}",
                                 allocate_bytes=server_bytes)
    if need <= server_bytes:
        src = f"{user_var}={_mib(server_bytes)}" if user_bytes else f"{_mib(server_bytes)} allocated"
        free = server_bytes - max(round_up_mib(need), MIB)
        hint = (f"; {WORKSPACE}=exact would free {_mib(free)}"
                if free >= MIB and not user_bytes and settings.workspace == "auto" else "")
        return WorkspaceDecision("workspace", "ok", "need fits", "info", inputs, numbers,
                                 f"ok, need {_mib(need)} <= {src} (FlashInfer {fi}){hint}",
                                 allocate_bytes=server_bytes)
    alloc = round_up_mib(need)
    numbers["allocate_bytes"] = alloc
    if user_bytes:
        text = (f"{user_var}={_mib(server_bytes)} is too small: {describe_need(requirement, server_bytes)}; "
                f"raising {_mib(server_bytes)} -> {_mib(alloc)}")
        return WorkspaceDecision("workspace", "raise", "user size too small", "warning", inputs, numbers, text,
                                 allocate_bytes=alloc)
    text = f"{describe_need(requirement, server_bytes)}; raising {_mib(server_bytes)} -> {_mib(alloc)}"
    return WorkspaceDecision("workspace", "raise", "need exceeds default", "info", inputs, numbers, text,
                             allocate_bytes=alloc)


ARM_MACHINES = ("aarch64", "arm64", "armv8l", "armv8b")


@dataclass(frozen=True)
class MoeDecision:
    block: bool
    reason: str
    inputs: dict = field(default_factory=dict)

    def line(self, detail: str) -> str:
        return f"{TAG} moe: {self.reason}: {detail}"

    def as_dict(self) -> dict:
        return {"area": "moe", "block": self.block, "reason": self.reason, "inputs": dict(self.inputs)}


def decide_moe(settings: Settings, *, machine: str | None = None, flashinfer_version: str | None = None) -> MoeDecision:
    machine = machine if machine is not None else platform.machine()
    inputs = {"machine": machine, "flashinfer": flashinfer_version, "setting": settings.moe,
              "fixed_in": settings.moe_fixed_in}
    if settings.moe == "off":
        return MoeDecision(False, f"{MOE}=off", inputs)
    if settings.moe == "on":
        return MoeDecision(True, f"{MOE}=on", inputs)
    arm = machine.lower() in ARM_MACHINES
    if not arm:
        return MoeDecision(False, f"{machine} host, TRT-LLM fused MoE left as is", inputs)
    if flashinfer_version is None:
        return MoeDecision(False, f"{machine} without FlashInfer installed, nothing to guard", inputs)
    fixed = settings.moe_fixed_in
    if is_version(flashinfer_version) and parse_version(flashinfer_version) >= parse_version(fixed):
        return MoeDecision(False, f"{machine} with FlashInfer {flashinfer_version} >= {fixed} "
                                  f"({MOE_FIXED_IN}), TRT-LLM fused MoE left as is", inputs)
    return MoeDecision(True, f"{machine} with FlashInfer {flashinfer_version} < {fixed}", inputs)


def decide_fixed_split_workspace(requirement: Requirement | None, assessment, *, framework: str, server_bytes: int,
                                 settings: Settings, user_bytes: int | None = None, user_var: str | None = None,
                                 flashinfer_version: str | None = None) -> WorkspaceDecision:
    """The workspace in a fixed-split mode (SGLang deterministic inference), from
    ``guard_core.fixed_split.assess``: the need when affordable, else the largest
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
