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
