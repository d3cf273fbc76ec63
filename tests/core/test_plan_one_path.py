"""`flashinfer-guard plan` has no sizing or verdict of its own (issue 26, item 1).

Its need is ``guard_core.decide.workspace.need`` of the facts record the adapters build, and
its verdict is ``workspace_decision.decide``'s: replace either with a sentinel and the plan's
output follows the sentinel. And ``plan_report``'s source calls none of the functions that size
or judge (an AST check), so no second copy can grow back.
"""

import ast
import dataclasses
import inspect

from guard_core.commands import plan_report
from guard_core.decide import workspace as workspace_decision
from tests.core.test_plan_defaults import plan, plan_json

GPT_OSS = ["--gpu", "h200", "--framework-version", "0.23.0", "--model",
           "tests/data/model_configs/gpt-oss-120b.json"]


def test_the_plans_need_is_workspace_decisions_need(monkeypatch):
    real = workspace_decision.need
    seen = []
    sentinel = 987_654_321  # above the 394 MiB default, so the verdict must turn

    def fake(facts):
        seen.append(facts)
        out = real(facts)
        return dataclasses.replace(out, requirement=dataclasses.replace(out.requirement, float_bytes=sentinel))

    before = plan_json(*GPT_OSS)
    assert before["verdict"] == "ok" and before["need"]["float_bytes"] < sentinel
    monkeypatch.setattr(workspace_decision, "need", fake)
    after = plan_json(*GPT_OSS)
    assert seen and all(isinstance(f, workspace_decision.WorkspaceFacts) for f in seen)
    assert after["need"]["float_bytes"] == sentinel
    assert after["verdict"] == "overflow"
    assert after["remedies"]["workspace_bytes"] == 942 * (1 << 20)  # 987,654,321 B rounded up to whole MiB


def test_the_plans_verdict_is_workspace_decisions_decide(monkeypatch):
    real = workspace_decision.decide
    calls = []

    def fake(facts, **kw):
        calls.append(kw["settings"].workspace)
        out = real(facts, **kw)
        return dataclasses.replace(out, decision=dataclasses.replace(out.decision, action="raise",
                                                                     text="SENTINEL decision"))

    monkeypatch.setattr(workspace_decision, "decide", fake)
    r = plan_json(*GPT_OSS)
    assert calls  # the verdict (auto) and the guard's own switches
    assert r["verdict"] == "overflow"  # the need fits, but the decision says raise: the plan follows it
    assert r["guard"]["line"] == "[flashinfer-guard] workspace: SENTINEL decision"
    code, out, _ = plan(*GPT_OSS)
    assert code == 0 and "it logs: [flashinfer-guard] workspace: SENTINEL decision" in out


# the functions that size a need or judge it: plan_report may call none of them
SIZING = {"compute_requirement", "merge_requirements", "size_choice", "choose_planners", "largest_fitting_capture",
          "longest_fitting_context", "fixed_split_fixes", "assess", "decide_workspace", "decide_fixed_split_workspace",
          "exact_refusal", "fa3_head_dim_gate", "plan_prefill", "plan_decode"}


def test_plan_report_calls_no_sizing_and_compares_no_need():
    tree = ast.parse(inspect.getsource(plan_report))
    called = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            called.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None))
        if isinstance(node, ast.ImportFrom) and node.module in ("sizing", "flashinfer_model", "fixed_split"):
            names = {a.name for a in node.names}
            # sglang_min_kv_pool_tokens: SGLang's start-up refusal of a too-small pool (issue 29), a
            # check of the input, not a size
            assert names <= {"INT_WORKSPACE_BYTES", "AttentionLayout", "ServingLimits", "family",
                             "SGLANG_FORCED_BYTES", "split_sizes_from_env", "sglang_min_kv_pool_tokens"}, names
        if isinstance(node, ast.Compare):  # no `need > buffer` of its own
            text = ast.unparse(node)
            assert "float_bytes" not in text, text
    assert not (called & SIZING), called & SIZING
    # and the stages are there, each a function of the one before
    for stage in ("read_command", "resolve_server", "read_model", "build_facts", "decide", "report"):
        assert callable(getattr(plan_report, stage))
