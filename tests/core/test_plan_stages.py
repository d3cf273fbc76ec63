"""`plan`'s stages read in one direction (issue 42 item 7): each stage module of
``guard_core/commands/plan/`` imports, of the other plan modules, only ``records`` (the records the
stages hand on) and the modules of its own stage; no stage calls back into a stage before it (nor
ahead into one after it: what it needs comes as the record of the stage before). Only the entry,
``plan_report``, imports every stage. And no module below ``commands`` (deployment, decide,
flashinfer, runtime) imports a ``commands`` module. Every import counts, a function's too (AST).

On main before this test: ``server`` imported ``command.server_environ`` (stage 2 calling back into
stage 1) and ``report`` imported ``facts.RUNNER_LABELS`` (the report stage calling back into the
facts stage).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "guard_core" / "commands" / "plan"
# the stages in order (plan_report.build); a stage may span modules
STAGES = [{"command"}, {"server", "model_source"}, {"model"}, {"server_resolution"}, {"facts", "mla_facts"},
          {"decide"}, {"report", "printing", "mla_report"}]
SHARED = {"records", "__init__"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (absolute names; relative imports resolved in guard_core.commands.plan)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = "guard_core.commands.plan" if node.level == 1 else "guard_core.commands"
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            out.add(mod)
            if mod in ("guard_core.commands.plan", "guard_core.commands"):
                out.update(f"{mod}.{a.name}" for a in node.names)
    return out


def _stage_of(name: str) -> int | None:
    return next((i for i, s in enumerate(STAGES) if name in s), None)


def test_every_plan_module_has_a_stage():
    mods = {p.stem for p in PLAN.glob("*.py")}
    assert mods - SHARED == set().union(*STAGES), mods - SHARED ^ set().union(*STAGES)


def test_no_stage_calls_into_another_stage():
    bad = []
    for p in sorted(PLAN.glob("*.py")):
        me = _stage_of(p.stem)
        for mod in _imports(p):
            if not mod.startswith("guard_core.commands"):
                continue
            other = mod.split(".")[3] if mod.startswith("guard_core.commands.plan.") else mod
            if other in SHARED or (me is not None and _stage_of(other) == me):
                continue
            if p.stem in SHARED and other in SHARED:
                continue
            bad.append(f"{p.stem} (stage {me}) imports {mod}")
    assert not bad, bad


def test_nothing_below_commands_imports_commands():
    bad = []
    for room in ("deployment", "decide", "flashinfer", "runtime"):
        for p in sorted((ROOT / "guard_core" / room).rglob("*.py")):
            bad += [f"{p.relative_to(ROOT)} imports {m}" for m in _imports(p) if m.startswith("guard_core.commands")]
    assert not bad, bad


def test_the_rule_sees_a_call_back(tmp_path, monkeypatch):
    """The check itself: a planted function-level import of an earlier stage is found."""
    planted = tmp_path / "facts.py"
    planted.write_text("def f():\n    from guard_core.commands.plan.command import read_command\n    return read_command\n")
    assert "guard_core.commands.plan.command" in _imports(planted)
    assert _stage_of("command") < _stage_of("facts")
