"""One entry for the float-workspace decision, shared by both adapters.

An adapter reads the live server into a ``WorkspaceFacts`` record (what it
could read, and the names of what it could not) and hands it here with the
server's and the user's sizes and the settings; it gets back one
``WorkspaceOutcome`` (the decision: size, reason, log line; the warnings to
log once) and applies it. The sequence is the same for every framework:
``choose_planners`` -> ``size_choice`` -> the "does not say X" warning ->
``exact_refusal`` -> ``decide_workspace``.

``need()`` and ``decide()`` are separate because SGLang answers its size
source several times per backend with different server sizes: the need is
computed once, the decision per size.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .releases import NATIVE_VAR

__all__ = ["FRAMEWORKS", "FrameworkNames", "WorkspaceFacts", "WorkspaceNeed", "WorkspaceOutcome",
           "need", "decide", "remedies", "is_out_of_memory", "assess_fixed_split", "decide_fixed_split"]


@dataclass(frozen=True)
class FrameworkNames:
    """How one framework is named in the decision's lines (kept as each adapter always said them)."""

    decision: str  # in the decision text ("vLLM allocates ...", "sglang allocates ...")
    refusal: str  # in exact's refusal ("outside the checked SGLang lines")
    package: str  # the distribution whose installed version is checked
    reader: str  # the "<reader> does not say X" warning
    missing_key: str  # the once-key prefix of that warning
    native_var: str  # the user's native size variable


FRAMEWORKS = {
    "vllm": FrameworkNames("vLLM", "vLLM", "vllm", "vLLM builder", "workspace-missing:",
                           NATIVE_VAR["vllm"]),
    "sglang": FrameworkNames("sglang", "SGLang", "sglang", "SGLang", "workspace.missing:",
                             NATIVE_VAR["sglang"]),
}


@dataclass(frozen=True)
class WorkspaceFacts:
    """What an adapter read from the live server, framework-free.

    ``layout``/``limits``/``planner_facts`` are guard_core.sizing/dispatch
    records; ``missing`` names what the adapter could not read (sized for the
    larger need). ``gpu`` None: nothing to size (only a set size applies)."""

    framework: str  # a key of FRAMEWORKS
    flashinfer_version: str
    gpu: Any = None
    layout: Any = None
    limits: Any = None
    planner_facts: Any = None
    kv_dtype_bytes_options: tuple | None = None
    missing: tuple = ()
    # ``flashinfer-guard plan --prefill-planner/--decode-planner/--decode-blocks-per-sm``:
    # (prefill or None, decode or None, decode blocks per SM or None) over the chosen planners
    planners_given: tuple | None = None

    @property
    def names(self) -> FrameworkNames:
        return FRAMEWORKS[self.framework]


@dataclass(frozen=True)
class WorkspaceNeed:
    """The computed need (a guard_core.sizing.Requirement) and the once-warnings it brings."""

    requirement: Any
    warnings: tuple = ()  # ((once-key, text), ...)
    choice: Any = None  # the guard_core.planner_choice.PlannerChoice sized


@dataclass(frozen=True)
class WorkspaceOutcome:
    """The one decision an adapter applies (its size, reason and log line are the
    decision's own fields: nothing is copied here)."""

    decision: Any  # guard_core.decisions.WorkspaceDecision
    requirement: Any = None
    warnings: tuple = ()  # ((once-key, text), ...), to log before the decision


def need(facts: WorkspaceFacts) -> WorkspaceNeed:
    """The planners for these facts and the need over the envelope, with one
    warning naming every fact that was missing (adapter's and planner choice's)."""
    from .planner_choice import choose_planners, size_choice

    choice = choose_planners(facts.planner_facts)
    if facts.planners_given is not None:
        choice = _given(choice, *facts.planners_given)
    req = size_choice(facts.layout, facts.limits, facts.gpu, facts.flashinfer_version, choice, facts.framework,
                      facts.kv_dtype_bytes_options)
    gone = list(dict.fromkeys([*facts.missing, *choice.missing]))
    warnings = ()
    if gone:
        n = facts.names
        warnings = ((n.missing_key + ",".join(gone),
                     f"workspace: {n.reader} does not say {', '.join(gone)}; sized for the larger need"),)
    return WorkspaceNeed(req, warnings, choice)


def _given(choice, prefill, decode, blocks_per_sm):
    """The chosen planners with the phases a user forced (``plan --*-planner``)."""
    from dataclasses import replace as _replace

    from .sizing import Planners

    cs = tuple(dict.fromkeys(Planners(prefill=prefill or c.prefill, decode=decode or c.decode,
                                      decode_blocks_per_sm=blocks_per_sm) for c in choice.candidates))
    return _replace(choice, candidates=cs, reasons=choice.reasons[:len(cs)])


def remedies(facts: WorkspaceFacts, computed: WorkspaceNeed, budget_bytes: int, *, graphs: bool) -> dict:
    """What makes ``computed`` fit ``budget_bytes`` without the guard: the largest CUDA-graph
    batch whose plans fit (``graphs``), and the need on FlashInfer 0.7.1 (PR #5177) where this
    release sizes the prefill scratch by rows (each through ``need`` of changed facts)."""
    from dataclasses import replace as _replace

    from . import flashinfer_model as fm

    out: dict = {}
    lim = facts.limits
    if graphs and lim.capture_sizes:
        def fits(b: int) -> bool:
            probe = _replace(facts, limits=_replace(lim, capture_sizes=(b,), eager=False))
            return need(probe).requirement.float_bytes <= budget_bytes

        lo, hi = 0, max(lim.capture_sizes)
        if fits(hi):
            lo = hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid - 1)
        out["largest_capture_batch_that_fits"] = lo
    if fm.features(facts.flashinfer_version).rows_by_query is False:
        out["flashinfer_0_7_1_need_bytes"] = need(_replace(facts, flashinfer_version="0.7.1")).requirement.float_bytes
    return out


def decide(facts: WorkspaceFacts, *, server_bytes: int, user_bytes: int | None, settings,
           computed: WorkspaceNeed | None = None) -> WorkspaceOutcome:
    """The workspace decision for these facts: the need (``computed`` when the
    adapter already has it; none with workspace off or without a GPU), exact's
    refusal outside the checked lines, then ``decide_workspace``."""
    from .decisions import decide_workspace, exact_refusal

    if computed is None and settings.workspace != "off" and facts.gpu is not None and facts.layout is not None:
        computed = need(facts)
    req = computed.requirement if computed is not None else None
    n = facts.names
    refused = None
    if settings.workspace == "exact":
        from .versions import installed_version

        refused = exact_refusal(n.refusal, installed_version(n.package), facts.flashinfer_version)
    dec = decide_workspace(req, framework=n.decision, server_bytes=int(server_bytes), user_bytes=user_bytes,
                           user_var=n.native_var, settings=settings, flashinfer_version=facts.flashinfer_version,
                           exact_refused=refused)
    return WorkspaceOutcome(dec, req, computed.warnings if computed is not None else ())


def assess_fixed_split(facts: WorkspaceFacts, computed: WorkspaceNeed, *, server_bytes: int, settings,
                       gpu_memory: int | None):
    """Fixed-split modes (SGLang deterministic inference; ``facts.limits`` carry the
    split sizes): ``guard_core.fixed_split.assess`` of the need ``computed`` for these
    facts against the server's ``server_bytes``."""
    from .fixed_split import assess

    req = computed.requirement
    return assess(req.layout, facts.limits, facts.gpu, facts.flashinfer_version, req.planners, facts.framework,
                  server_bytes=int(server_bytes), settings=settings, requirement=req, gpu_memory=gpu_memory)


def decide_fixed_split(facts: WorkspaceFacts, computed: WorkspaceNeed, assessment, *, server_bytes: int,
                       settings) -> WorkspaceOutcome:
    """The workspace decision in a fixed-split mode, from ``assess_fixed_split``'s
    assessment (``decisions.decide_fixed_split_workspace``)."""
    from .decisions import decide_fixed_split_workspace

    req = computed.requirement
    dec = decide_fixed_split_workspace(req, assessment, framework=facts.framework, server_bytes=int(server_bytes),
                                       settings=settings, flashinfer_version=facts.flashinfer_version)
    return WorkspaceOutcome(dec, req, computed.warnings)


def is_out_of_memory(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError) or an allocator's
    "out of memory" error, by type name and message (no torch import)."""
    return any(k.__name__ == "OutOfMemoryError" for k in type(exc).__mro__) or "out of memory" in str(exc).lower()
