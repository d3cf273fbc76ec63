"""`flashinfer-guard plan` has no sizing or verdict of its own (issue 26, item 1).

Its need is ``guard_core.decide.workspace.need`` of the facts record the adapters build, and
its verdict is ``workspace_decision.decide``'s: replace either with a sentinel and the plan's
output follows the sentinel. And the plan's source (``plan_report``, its one entry, and every
stage module of ``guard_core/commands/plan/``) calls none of the functions that size or judge
(an AST check), so no second copy can grow back.
"""

import ast
import dataclasses
from pathlib import Path

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


# the functions that size a need or judge it: the plan may call none of them
SIZING = {"compute_requirement", "merge_requirements", "size_choice", "choose_planners", "largest_fitting_capture",
          "longest_fitting_context", "fixed_split_fixes", "assess", "decide_workspace", "decide_fixed_split_workspace",
          "exact_refusal", "fa3_head_dim_gate", "plan_prefill", "plan_decode"}


ROOT = Path(__file__).resolve().parents[2]
# the modules from sizing/judging rooms that the plan may import names from, and which names
ALLOWED_IMPORTS = {"INT_WORKSPACE_BYTES", "AttentionLayout", "ServingLimits", "family", "SGLANG_FORCED_BYTES",
                   "split_sizes_from_env", "sglang_min_kv_pool_tokens"}
SIZING_MODULES = ("sizing", "planner", "flashinfer_model", "fixed_split")


def plan_sources() -> dict[str, str]:
    """The plan's one entry and each of its stage modules, by path."""
    paths = [ROOT / "guard_core/commands/plan_report.py"]
    paths += sorted((ROOT / "guard_core/commands/plan").glob("*.py"))
    return {p.relative_to(ROOT).as_posix(): p.read_text() for p in paths}


def sizing_calls(source: str) -> set[str]:
    """Names of the sizing/judging functions ``source`` calls; an import of another name from a
    sizing module, or a comparison with ``float_bytes``, fails on the spot."""
    called = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            called.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None))
        if isinstance(node, ast.ImportFrom) and (node.module or "").rpartition(".")[2] in SIZING_MODULES:
            names = {a.name for a in node.names}
            # sglang_min_kv_pool_tokens: SGLang's start-up refusal of a too-small pool (issue 29), a
            # check of the input, not a size
            assert names <= ALLOWED_IMPORTS, names
        if isinstance(node, ast.Compare):  # no `need > buffer` of its own
            text = ast.unparse(node)
            assert "float_bytes" not in text, text
    return called & SIZING


def test_plan_calls_no_sizing_and_compares_no_need():
    sources = plan_sources()
    assert "guard_core/commands/plan/facts.py" in sources and "guard_core/commands/plan/decide.py" in sources
    for path, source in sources.items():
        assert not sizing_calls(source), (path, sizing_calls(source))
    # and the stages are there, each a function of the one before, all through the one entry
    for stage in ("read_command", "resolve_server", "read_model", "build_facts", "decide", "report"):
        assert callable(getattr(plan_report, stage))


def test_the_source_check_can_fail():
    """The check above sees a planted sizing call, a planted import and a planted comparison."""
    assert sizing_calls("from guard_core.flashinfer import sizing\nsizing.compute_requirement(x)\n") == {
        "compute_requirement"}
    for planted in ("from guard_core.flashinfer.sizing import compute_requirement\n",
                    "if need.float_bytes > buffer:\n    pass\n"):
        try:
            sizing_calls(planted)
        except AssertionError:
            continue
        raise AssertionError(f"not refused: {planted!r}")
