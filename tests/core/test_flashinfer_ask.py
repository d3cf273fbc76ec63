"""guard_core.flashinfer.ask.cross_check: FlashInfer's workspace_size() next to the guard's figure
for each eager FA2 witness (issue 27 item 5). The asker here is a hand-written function (the
real one, FlashInfer's wrapper through the planner stand-in, runs in tests/vllm)."""

from __future__ import annotations

import dataclasses

from guard_core.flashinfer.ask import cross_check, witness_indptrs
from guard_core.decide.workspace import WorkspaceNeed


@dataclasses.dataclass(frozen=True)
class _Plan:
    float_bytes: int
    int_bytes: int = 0


def _need():
    from guard_core.flashinfer.sizing import Scenario

    sc = (Scenario("cuda_graph_decode", 8, 1, _Plan(500), "fa2", ()),
          Scenario("eager_decode", 64, 1, _Plan(700), "fa2", ((1, 2048, 64),)),
          Scenario("eager_prefill", 16, 8, _Plan(1000), "fa2", ((8, 2048, 16),)),
          Scenario("eager_prefill_fa3", 16, 8, _Plan(900), "fa3", ((8, 2048, 16),)))
    req = dataclasses.make_dataclass("Req", ["float_bytes", "scenarios", "notes"], frozen=True)(1000, sc, ())
    return WorkspaceNeed(req, (("w0", "earlier warning"),))


def test_agreement_changes_nothing_and_only_eager_fa2_witnesses_are_asked():
    asked = []
    need = _need()
    out = cross_check(need, lambda s: asked.append(s.name) or s.float_bytes)
    assert out is need
    assert asked == ["eager_decode", "eager_prefill"]


def test_flashinfer_larger_wins_with_one_warning_naming_both():
    out = cross_check(_need(), lambda s: 1300 if s.name == "eager_prefill" else s.float_bytes)
    assert out.requirement.float_bytes == 1300
    (key, text), = [w for w in out.warnings if w[0] == "workspace-fi-size"]
    assert "1,300 B" in text and "1,000 B" in text and "eager_prefill" in text
    assert out.warnings[0] == ("w0", "earlier warning")


def test_mirror_larger_keeps_the_mirror_and_still_warns():
    out = cross_check(_need(), lambda s: s.float_bytes - 100)
    assert out.requirement.float_bytes == 1000
    assert len([w for w in out.warnings if w[0] == "workspace-fi-size"]) == 1


def test_flashinfer_silent_or_failing_changes_nothing():
    need = _need()
    assert cross_check(need, lambda s: None) is need

    def boom(s):
        raise RuntimeError("no workspace_size for this backend")

    assert cross_check(need, boom) is need
    assert cross_check(WorkspaceNeed(None), boom).requirement is None


def test_witness_indptrs():
    assert witness_indptrs(((1, 3, 2), (8, 5, 1))) == ([0, 1, 2, 10], [0, 3, 6, 11])
