"""Compare the guard's prediction with the framework's real planning calls, in both directions.

Input: one RESULT record of a real-calls scenario (tests/vllm/realcalls_scenarios.py or
tests/sglang/realcalls_scenarios.py): the calls FlashInfer's real planner recorded (each
with its wrapper, backend, float bytes, and the builder it came from) and the guard's
prediction per builder (planners, need). The expected side is always the recorded calls.

Findings, each one line:
- ``overflow``: a plan() overflowed with the guard loaded;
- ``under``: the guard's need is below the largest real plan (a crash in auto);
- ``over``: the guard's need is more than 1 MiB above the largest real plan (what
  ``exact`` would waste);
- ``never-ran``: the guard predicted a planner for a phase that no call used;
- ``mismatch``: a call used a planner the guard did not predict for its phase.
"""

from __future__ import annotations

MIB = 1 << 20
DECODE_WRAPPERS = ("BatchDecodeWithPagedKVCacheWrapper", "CUDAGraphBatchDecodeWithPagedKVCacheWrapper")
NO_BUFFER = ("trtllm", "none")


def _phase(call: dict) -> str:
    return "decode" if call.get("wrapper") in DECODE_WRAPPERS else "prefill"


def _builder_calls(result: dict, i: int, n: int) -> list[dict]:
    calls = result.get("calls") or []
    if n <= 1:
        return calls
    return [c for c in calls if (c.get("tag") or "").endswith(f":b{i}")]


def findings(result: dict, *, slack: int = MIB) -> list[tuple[str, str]]:
    """(kind, detail) for everything wrong in one case; empty when the guard is right."""
    out: list[tuple[str, str]] = []
    if result.get("setup_error"):
        return [("setup", result["setup_error"])]
    if result.get("crash"):
        out.append(("overflow", f"{result['crash'].get('phase')}: {result['crash'].get('error', '')[:200]}"))
    bad = [c for c in result.get("calls") or [] if c.get("ok") is False]
    if bad and not result.get("crash"):
        out.append(("overflow", f"{bad[0].get('tag')}: {(bad[0].get('error') or '')[:200]}"))
    preds = result.get("prediction") or []
    for i, pred in enumerate(preds):
        if pred.get("error"):
            out.append(("prediction", pred["error"]))
            continue
        calls = _builder_calls(result, i, len(preds))
        real = max((int(c.get("float_bytes") or 0) for c in calls), default=0)
        need = int(pred.get("need_bytes") or 0)
        top = max(calls, key=lambda c: c.get("float_bytes") or 0, default=None)
        where = f"{top.get('tag')} {top.get('wrapper')} {top.get('backend')}" if top else "no call"
        if need < real:
            out.append(("under", f"builder {i}: guard {need} B < real {real} B ({where})"))
        elif need > real + slack:
            out.append(("over", f"builder {i}: guard {need} B > real {real} B + 1 MiB ({where})"))
        want = pred.get("planners") or {}
        used = {"prefill": set(), "decode": set()}
        for c in calls:
            used[_phase(c)].add(c.get("backend"))
        for phase in ("prefill", "decode"):
            p = want.get(phase)
            extra = used[phase] - {p}
            if extra:
                out.append(("mismatch", f"builder {i}: {phase} planned {sorted(extra)} where the guard said {p}"))
            if p not in NO_BUFFER and p not in used[phase]:
                out.append(("never-ran", f"builder {i}: guard predicted {phase} {p}; no {phase} call used it "
                                          f"(used: {sorted(used[phase]) or 'none'})"))
    return out


def largest_real(result: dict) -> int:
    return max((int(c.get("float_bytes") or 0) for c in result.get("calls") or []), default=0)


def guard_need(result: dict) -> int:
    return max((int(p.get("need_bytes") or 0) for p in result.get("prediction") or []), default=0)


def ratio(result: dict) -> float | None:
    real = largest_real(result)
    return guard_need(result) / real if real else None


def _sglang_one(pred: dict | None, calls: list[dict], label: str, slack: int,
                graphs_only: bool = False) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if not calls:
        return out
    if pred is None or pred.get("float_bytes") is None:
        return [("prediction", f"{label}: the guard did not size this backend")]
    real = max(int(c.get("float_bytes") or 0) for c in calls)
    need = int(pred["float_bytes"])
    if graphs_only:  # only the CUDA-graph scenarios were replayed: compare those, in both directions
        need = max((int(x["float_bytes"]) for x in pred.get("scenarios") or [] if x["name"].startswith("cuda_graph")),
                   default=0)
    top = max(calls, key=lambda c: c.get("float_bytes") or 0)
    where = f"{top.get('phase')} batch {top.get('batch_size')} {top.get('wrapper')} {top.get('backend')}"
    if need < real:
        out.append(("under", f"{label}: guard {need} B < real {real} B ({where})"))
    elif need > real + slack:
        out.append(("over", f"{label}: guard {need} B > real {real} B + 1 MiB ({where})"))
    want = pred.get("planners") or {}
    # SGLang's wrappers: the decode wrapper plans with the decode planner (FA2 through PrefillPlan
    # for tensor-core decode, DecodePlan on CUDA cores); the paged prefill wrapper with the prefill
    # planner; the ragged wrapper keeps FlashInfer's own choice (checked by size only)
    used = {"prefill": set(), "decode": set()}
    for c in calls:
        if c.get("wrapper") == "BatchPrefillWithRaggedKVCacheWrapper":
            continue
        used[_phase(c)].add(c.get("planner") if _phase(c) == "decode" else c.get("backend"))
    exp = {"decode": {"fa2": "prefill", "decode": "decode"}.get(want.get("decode"), want.get("decode")),
           "prefill": want.get("prefill")}
    for phase in ("prefill", "decode"):
        extra = used[phase] - {exp[phase]}
        if extra:
            out.append(("mismatch", f"{label}: {phase} planned {sorted(extra)} where the guard said {want.get(phase)}"))
    return out


def sglang_findings(result: dict, *, slack: int = MIB, draft_over: bool = True) -> list[tuple[str, str]]:
    """The same comparison for one SGLang real-calls record (tests/sglang/realcalls_scenarios.py):
    the target backend, and the EAGLE draft backends where the record has them. A predicted
    phase that never ran is not flagged here: SGLang's eager decode and prefill are both
    replayed, and the target with speculative decoding captures verify graphs only."""
    out: list[tuple[str, str]] = []
    errs = list(result.get("errors") or []) + list((result.get("draft") or {}).get("errors") or [])
    if errs:
        out.append(("overflow", f"{errs[0].get('phase')} batch {errs[0].get('batch')}: {errs[0].get('error', '')[:200]}"))
    out += _sglang_one(result.get("prediction"), result.get("calls") or [], "target", slack)
    d = result.get("draft")
    if d:
        # the draft steps' capture (SGLang's draft CUDA-graph path) and, where the record has them
        # (issue 27), its eager batches through the same draft backend: then the whole draft
        # envelope is compared in both directions; else its graph part only
        eager = any(c.get("phase") == "eager_draft_decode" for c in d.get("calls") or [])
        found = _sglang_one(d.get("prediction"), d.get("calls") or [], "draft", slack, graphs_only=not eager)
        # draft_over=False: the draft's "over" is reported by the caller, not a finding (SGLang's
        # draft-extend backend, which shares the buffer, is not replayed: see test_differential)
        out += [f for f in found if draft_over or f[0] != "over"]
    return out


# --- issue 27: the expected value owned by the independent search --------------------------------

GUARD_TAGS = ("eager:witness_", "eager:core_")  # batches named by guard_core (inputs only)
INJECT_TAG = "eager:inject:"
LEGACY_TAG = "eager:legacy:"
SEARCH_TAG = "eager:search:"


def origin(call: dict) -> str:
    """Where a vLLM call's batch came from: ``guard`` (a witness or core shape of guard_core),
    ``inject`` (a shrunk guard batch, fault injection), ``legacy`` (the search before issue 27),
    ``search`` (tests/differential/search.py) or ``fixed`` (capture replay and the harness's own
    batches: the server's limits only)."""
    if call.get("origin"):  # SGLang records say it (tests/sglang/realcalls_scenarios.py _eager)
        return call["origin"]
    tag = call.get("tag") or ""
    if tag.startswith(GUARD_TAGS):
        return "guard"
    for kind, prefix in (("inject", INJECT_TAG), ("legacy", LEGACY_TAG), ("search", SEARCH_TAG)):
        if tag.startswith(prefix):
            return kind
    return "fixed"


def _graph(call: dict) -> bool:
    if "phase" in call:  # SGLang
        return str(call.get("phase")).startswith("cuda_graph")
    return not (call.get("tag") or "").startswith("eager:")


def _best(calls, kinds) -> int:
    return max((int(c.get("float_bytes") or 0) for c in calls if origin(c) in kinds), default=0)


def search_stats(result: dict, *, slack: int = MIB) -> list[dict]:
    """Per builder of one vLLM record: the guard's need; the expected value (the largest real
    plan over batches found without guard_core: capture replay, the harness's fixed batches and
    the search); the largest real plan of the guard's own batches; whether the independent side
    alone reaches the guard's need (``reach``: at or above it; ``near``: within ``slack``);
    ``witness_ok``: the guard's batches (with the graphs) reach its number; and the injected
    gap (``injected_gap``)."""
    out = []
    preds = result.get("prediction") or []
    for i, pred in enumerate(preds):
        calls = _builder_calls(result, i, len(preds))
        need = int(pred.get("need_bytes") or 0)
        indep = _best(calls, ("fixed", "search"))
        guard = _best(calls, ("guard",))
        graphs = max((int(c.get("float_bytes") or 0) for c in calls if _graph(c)), default=0)
        dom = pred.get("dominant") or {}
        # a CUDA-graph scenario has no witness batch (vLLM also plans one-token decodes of eager
        # steps through its graph wrapper, which the capture replay does not make): its number is
        # checked by the under/over comparison alone
        witnessed = any(x.get("witness") for x in pred.get("scenarios") or []
                        if x.get("name") == dom.get("name") and x.get("batch") == dom.get("batch"))
        row = {"builder": i, "need": need, "expected": indep, "guard_batches": guard, "graphs": graphs,
               "reach": indep >= need, "near": indep >= need - slack,
               "witness_ok": max(guard, graphs) >= need - slack or not (witnessed or str(dom.get("name", "")).startswith("eager"))}
        row.update(injected_gap(calls))
        out.append(row)
    return out


def injected_gap(calls: list[dict], *, gap: float = 0.98) -> dict:
    """The search's own test (issue 27): a guard right about its witness and blind to a worse
    batch. The injected guard's need is the largest real plan among the shrunk copies of the
    guard's worst eager batch (``eager:inject:``) at or below ``gap`` of the largest real plan
    there is, or the graphs' largest if above it (the guard is right about its graphs); the
    search finds the gap when a batch it found without guard_core plans more than that. ``before``:
    the same with what the comparison had before issue 27 (its fixed batches and the 24-batch
    random + greedy search); ``after``: the fixed batches and the new search."""
    truth = max((int(c.get("float_bytes") or 0) for c in calls), default=0)
    graphs = max((int(c.get("float_bytes") or 0) for c in calls if _graph(c)), default=0)
    inj = [int(c.get("float_bytes") or 0) for c in calls if origin(c) == "inject"]
    below = [x for x in inj if x <= gap * truth]
    if not inj or truth <= graphs or not below:
        return {"injected": None}
    need = max(max(below), graphs)
    if need >= truth:
        return {"injected": None}
    has_legacy = any(origin(c) == "legacy" for c in calls)
    return {"injected": need, "truth": truth,
            "found_after": _best(calls, ("fixed", "search")) > need,
            "found_before": (_best(calls, ("fixed", "legacy")) > need) if has_legacy else None}


def sglang_search_stats(result: dict, *, slack: int = MIB) -> list[dict]:
    """``search_stats`` for one SGLang record's target backend (its eager batches carry their
    origin; the graphs are the capture replay)."""
    pred = result.get("prediction") or {}
    calls = result.get("calls") or []
    need = int(pred.get("float_bytes") or 0)
    indep = _best(calls, ("fixed", "search"))
    guard = _best(calls, ("guard",))
    graphs = max((int(c.get("float_bytes") or 0) for c in calls if _graph(c)), default=0)
    row = {"builder": "target", "need": need, "expected": indep, "guard_batches": guard, "graphs": graphs,
           "reach": indep >= need, "near": indep >= need - slack, "witness_ok": max(guard, graphs) >= need - slack}
    row.update(injected_gap(calls))
    return [row]
