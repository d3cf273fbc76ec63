"""The serving envelope: the most bytes FlashInfer will ask of the workspace.

Adapters describe the situation in framework-free terms (``AttentionLayout``
per rank, ``ServingLimits``, ``Planners``, a ``Gpu`` and the installed
FlashInfer version); ``compute_requirement`` runs the planner model over every
request shape the server can send and names the scenario and the allocation
that dominate:

- ``cuda_graph_decode``: each CUDA-graph capture size, one query token each (also
  under speculation where the server plans one-token decode batches through its
  graph wrapper: ``ServingLimits.one_token_graphs``);
- ``cuda_graph_verify``: each capture size with ``1 + draft_tokens`` queries
  (speculative verify), when the server captures verify graphs, and every shorter
  query length where the server plans those too (``partial_verify_graphs``);
- ``eager_decode``: a decode batch outside CUDA graphs;
- ``eager_prefill``: a prefill/mixed batch up to the max batched tokens.

The eager figures are the planner's output for concrete batches that reach
the bound (split-KV scratch grows with the split batch, which the planner caps
at ``2 * SMs / kv_heads``; the worst case is a short query against a long KV
cache), not a loose product. With a window (``AttentionLayout.window_left >= 0``)
FlashInfer clips each request's KV to the window before its split search, so the
eager prefill witness is many requests of window-length KV (``_window_pages``);
each attention group is sized with its own layout, window included.
"""

from __future__ import annotations

from dataclasses import replace

from guard_core.flashinfer import planner as fm
from guard_core.flashinfer.scenarios import SCENARIO_KINDS, PlanContext, decode_blocks_per_sm_bound
from guard_core.flashinfer.sizing_records import (INT_WORKSPACE_BYTES, AttentionLayout, Planners, Requirement, Scenario,
                                                  ServingLimits)
from guard_core.gpus import Gpu
from guard_core.units import MIB

__all__ = ["AttentionLayout", "INT_WORKSPACE_BYTES", "Planners", "Requirement", "ServingLimits",
           "compute_requirement", "decode_blocks_per_sm_bound", "fixed_split_fixes", "largest_fitting", "largest_fitting_capture",
           "longest_fitting_context", "merge_requirements", "round_up_mib"]

_NO_PLANNERS_GIVEN = Planners()  # the planners FlashInfer's own dispatch picks (every field at its default)


def compute_requirement(
    layout: AttentionLayout,
    limits: ServingLimits,
    gpu: Gpu,
    flashinfer_version: str,
    planners: Planners = _NO_PLANNERS_GIVEN,
    caller: str = "vllm",
) -> Requirement:
    """The most bytes FlashInfer will ask of the workspace over every scenario.

    Each scenario kind is sized on its own: a plan FlashInfer itself rejects in
    one kind (e.g. a GQA group the CUDA-core decode kernels are not built for)
    becomes a note and leaves the other kinds' needs intact.
    """
    ctx = PlanContext(layout, gpu, flashinfer_version, planners, caller)
    scenarios: list[Scenario] = []
    notes: list[str] = []
    for label, kind in SCENARIO_KINDS:
        try:
            kind(ctx, layout, limits, gpu, flashinfer_version, planners, caller, scenarios)
        except fm.PlannerError as exc:
            # FlashInfer itself rejects this plan; the server fails there, not in the buffer
            notes.append(f"{label}: FlashInfer {flashinfer_version} rejects the plan ({exc})")
    if planners.decode in ("trtllm", "none"):
        notes.append(f"decode plans nothing in this buffer ({planners.decode})")
    if planners.prefill in ("trtllm", "none"):
        notes.append(f"prefill plans nothing in this buffer ({planners.prefill})")
    from guard_core.flashinfer.releases import flashinfer_extrapolation

    extrapolated = flashinfer_extrapolation(flashinfer_version)
    if extrapolated:
        notes.insert(0, extrapolated)

    dominant = max(scenarios, key=lambda s: s.float_bytes, default=None)
    return Requirement(
        float_bytes=max((s.float_bytes for s in scenarios), default=0),
        int_bytes=max((s.int_bytes for s in scenarios), default=0),
        scenarios=tuple(scenarios), dominant=dominant, flashinfer_version=flashinfer_version,
        layout=layout, gpu=gpu, planners=planners, notes=tuple(notes))


def merge_requirements(requirements, extra_notes=()) -> Requirement:
    """One requirement over several (alternative planner choices, or phases
    sized on different layouts): every scenario kept, the largest dominates;
    layout and planners are those of the requirement holding the dominant."""
    reqs = list(requirements)
    best = max(reqs, key=lambda r: (r.float_bytes, r.int_bytes))
    scenarios = tuple(s for r in reqs for s in r.scenarios)
    notes: list[str] = []
    for n in (*extra_notes, *(n for r in reqs for n in r.notes)):
        if n not in notes:
            notes.append(n)
    dominant = max(scenarios, key=lambda s: s.float_bytes, default=None)
    return replace(best, scenarios=scenarios, dominant=dominant, notes=tuple(notes),
                   float_bytes=max((s.float_bytes for s in scenarios), default=0),
                   int_bytes=max((s.int_bytes for s in scenarios), default=0))


def largest_fitting_capture(layout, limits, gpu, version, planners, caller, budget_bytes) -> int:
    """Largest CUDA-graph batch whose decode/verify plans fit ``budget_bytes``."""
    probe = lambda b: compute_requirement(  # noqa: E731
        layout, replace(limits, capture_sizes=(b,), eager=False), gpu, version, planners, caller).float_bytes
    return largest_fitting(max(limits.capture_sizes, default=0), lambda b: probe(b) <= budget_bytes)


def largest_fitting(hi: int, fits) -> int:
    """The largest batch in 0..``hi`` for which ``fits(batch)`` holds (the need grows with the
    batch), by bisection; 0 when none does."""
    lo = 0
    if hi and fits(hi):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def round_up_mib(n: int) -> int:
    return -(-n // MIB) * MIB


# ------------------------------------------------------------ fixed-split limits

def _fits(layout, limits, gpu, version, planners, caller, budget_bytes, only: str | None = None) -> bool:
    """Whether the need (or, with ``only``, that scenario's need) fits ``budget_bytes``."""
    try:
        req = compute_requirement(layout, limits, gpu, version, planners, caller)
    except (fm.PlannerError, ValueError):
        return False
    if only is None:
        return req.float_bytes <= budget_bytes
    return max((s.float_bytes for s in req.scenarios if s.name == only), default=0) <= budget_bytes


def _largest(lo: int, hi: int, ok) -> int:
    """Largest v in [lo, hi] with ok(v) (ok monotone: true up to some point), or lo - 1."""
    if hi < lo:
        return lo - 1
    if ok(hi):
        return hi
    if not ok(lo):
        return lo - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def longest_fitting_context(layout, limits, gpu, version, planners, caller, budget_bytes) -> int:
    """Longest prompt/context (tokens) whose fixed-split plans fit ``budget_bytes``, up to
    ``limits.max_model_len``; 0 when not even a one-token context fits. The need is
    monotone in the context (more KV chunks, never fewer)."""
    top = int(limits.max_model_len or 0)
    return max(0, _largest(1, top, lambda L: _fits(layout, replace(limits, max_model_len=L), gpu, version,
                                                   planners, caller, budget_bytes)))


def fixed_split_fixes(layout, limits, gpu, version, planners, caller, budget_bytes) -> dict:
    """Settings that make the full context fit ``budget_bytes`` in a fixed-split mode,
    each computed with the others unchanged and judged on its own phase's plan (None
    where no value of it is enough):

    - ``chunked_prefill_size``: the largest prefill chunk whose prefill plan fits;
    - ``prefill_split_tile_size``: the smallest prefill split (pages) whose prefill plan fits;
    - ``decode_split_tile_size``: the smallest decode split (pages) whose decode plan fits.
    """
    out: dict = {}
    ctx_pages = -(-int(limits.max_model_len or 1) // layout.page_size)

    def fits(**kw):
        only = "fixed_split_decode" if "fixed_split_decode" in kw else "fixed_split_prefill"
        return _fits(layout, replace(limits, **kw), gpu, version, planners, caller, budget_bytes, only)

    if limits.fixed_split_prefill:
        top = int(limits.max_num_batched_tokens)
        c = _largest(1, top, lambda v: fits(max_num_batched_tokens=v))
        out["chunked_prefill_size"] = c if c >= 1 else None

        def smallest_split(name, current):
            # fits() is monotone increasing in the split size; search [current, ctx_pages]
            hi = max(int(current), ctx_pages)
            if not fits(**{name: hi}):
                return None
            lo = int(current)
            while lo < hi:
                mid = (lo + hi) // 2
                if fits(**{name: mid}):
                    hi = mid
                else:
                    lo = mid + 1
            return lo

        out["prefill_split_tile_size"] = smallest_split("fixed_split_prefill", limits.fixed_split_prefill)
    if limits.fixed_split_decode:
        hi = max(int(limits.fixed_split_decode), ctx_pages)
        if fits(fixed_split_decode=hi):
            lo = int(limits.fixed_split_decode)
            while lo < hi:
                mid = (lo + hi) // 2
                if fits(fixed_split_decode=mid):
                    hi = mid
                else:
                    lo = mid + 1
            out["decode_split_tile_size"] = lo
        else:
            out["decode_split_tile_size"] = None
    return out
