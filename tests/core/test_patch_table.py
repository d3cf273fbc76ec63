"""guard_core.runtime.patch_table: dotted targets resolved through the class hierarchy,
feature checks, all-or-nothing rows (a failing ``apply`` included), one undo (the
post-import hooks included), one rebinding mechanism; on generated class hierarchies."""

import sys
import textwrap
import types

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guard_core.runtime.patch_table import PatchTable, Wrap, resolve_path
from guard_core.runtime.wrapping import is_wrapped


class _Log:
    def __init__(self):
        self.warnings = []

    def warning_once(self, key, msg):
        self.warnings.append((key, msg))


class _OnceLog(_Log):
    """warning_once as GuardLog keeps it: one line per key."""

    def warning_once(self, key, msg):
        if key not in [k for k, _ in self.warnings]:
            self.warnings.append((key, msg))


def _module():
    class Base:
        def size(self):
            return 394

        def other(self):
            return "base"

    class Builder(Base):
        class Inner:
            @staticmethod
            def kind():
                return "inner"

    class Sibling(Base):
        pass

    def plan(x):
        return x + 1

    return types.SimpleNamespace(__name__="fg_mod", Base=Base, Builder=Builder, Sibling=Sibling, plan=plan)


def _plus(n):
    def make(orig, module):
        def wrapper(*a, **k):
            return orig(*a, **k) + n
        return wrapper
    return make


def test_resolve_path_follows_dots_and_the_mro():
    m = _module()
    assert resolve_path(m, "Builder.size") == (m.Builder, "size")  # inherited from Base
    assert resolve_path(m, "Builder.Inner.kind") == (m.Builder.Inner, "kind")
    assert resolve_path(m, "plan") == (m, "plan")
    for bad in ("", ".", "Builder.", "Missing.size", "Builder.missing", "Builder..size"):
        assert resolve_path(m, bad) is None, bad


def test_inherited_method_is_wrapped_on_the_named_class_only_and_undone():
    m = _module()
    table = PatchTable(_Log)
    hook = table.row("fg_mod", "t.k", "test guard", wraps=(Wrap("Builder.size", _plus(1)),))
    hook(m)
    assert m.Builder().size() == 395
    assert m.Sibling().size() == 394 and m.Base().size() == 394
    assert table.undo() == 1
    assert "size" not in m.Builder.__dict__ and m.Builder().size() == 394


def test_a_failed_feature_check_applies_nothing_of_the_row_and_says_the_target():
    m = _module()
    said = []
    table = PatchTable(_Log)
    hook = table.row("fg_mod", "t.k", "test guard", apply=lambda mod: said.append("apply"),
                     wraps=(Wrap("plan", _plus(10)),
                            Wrap("Builder.size", _plus(1), feature=lambda owner, mod: hasattr(owner, "set_workspace"))),
                     missing=said.append)
    hook(m)
    assert said == ["fg_mod.Builder.size"]  # the missing target named; apply not run
    assert m.plan(1) == 2 and not is_wrapped(m.plan)  # the first wrap was not applied either
    assert len(table.patches) == 0


def test_an_optional_target_absent_on_a_release_is_skipped():
    m = _module()
    table = PatchTable(_Log)
    table.row("fg_mod", "t.k", "g", wraps=(Wrap("plan", _plus(10)), Wrap("Builder.fast_plan", _plus(1), required=False)),
              missing=lambda t: (_ for _ in ()).throw(AssertionError(t)))(m)
    assert m.plan(1) == 12


def test_an_exception_in_a_wrapper_factory_is_one_warning_and_the_server_goes_on():
    m = _module()
    log = _Log()
    table = PatchTable(lambda: log)

    def boom(orig, module):
        raise RuntimeError("ours")

    hook = table.row("fg_mod", "t.k", "test guard", wraps=(Wrap("plan", boom),))
    hook(m)
    hook(m)
    assert m.plan(1) == 2
    assert len(log.warnings) == 2 and "test guard skipped after an internal error (RuntimeError: ours)" in log.warnings[0][1]
    assert table.targets() == ["fg_mod.plan"]



@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from(["plan", "Builder.size", "Builder.other", "Sibling.size", "Builder.Inner.kind",
                                 "Nope.size", "Builder.nope"]), min_size=1, max_size=6),
       st.lists(st.booleans(), min_size=6, max_size=6), st.booleans())
def test_generated_rows_are_all_or_nothing_and_undo_restores_every_callable(paths, required, apply_fails):
    m = _module()
    before = {p: resolve_path(m, p) and getattr(*resolve_path(m, p)) for p in paths}
    missing, log = [], _OnceLog()
    table = PatchTable(lambda: log)
    wraps = tuple(Wrap(p, _plus(1), required=required[i]) for i, p in enumerate(paths))
    apply = None
    if apply_fails:
        def apply(module):
            table.patches.on_undo(lambda: setattr(module, "undone", True))
            raise ValueError("apply broke")
    hook = table.row("fg_mod", "t.k", "g", apply, wraps=wraps, missing=missing.append)
    hook(m)
    hook(m)  # fired again (a second import hook): still one line
    absent_required = [w.target for w in wraps if w.required and resolve_path(m, w.target) is None]
    if absent_required:
        assert missing == ["fg_mod." + absent_required[0]] * 2 and len(table.patches) == 0
        assert log.warnings == [] and not hasattr(m, "undone")
    elif apply_fails:  # the wraps came off again, the apply's own undo ran, one warning
        assert missing == [] and len(table.patches) == 0 and m.undone is True
        assert [k for k, _ in log.warnings] == ["error:moe"]
        assert "g skipped after an internal error (ValueError: apply broke)" in log.warnings[0][1]
        for p, orig in before.items():
            if orig is not None:
                assert getattr(*resolve_path(m, p)) == orig and not is_wrapped(getattr(*resolve_path(m, p))), p
    else:
        assert missing == [] and log.warnings == []
        assert len(table.patches) == len({p for p in paths if resolve_path(m, p)})
    table.undo()
    for p, orig in before.items():
        if orig is not None:
            owner, name = resolve_path(m, p)
            assert getattr(owner, name) == orig, p


def test_when_false_applies_nothing_and_names_nothing():
    m = _module()
    said = []
    table = PatchTable(_Log)
    table.row("fg_mod", "t.k", "g", apply=said.append, when=lambda mod: False,
              wraps=(Wrap("Builder.missing", _plus(1)),), missing=said.append)(m)
    assert said == [] and len(table.patches) == 0


def test_one_of_needs_at_least_one_alternative():
    """Targets a release names differently (one class here, another there): the row needs one."""
    m = _module()
    said = []
    table = PatchTable(_Log)
    alternatives = (Wrap("Old.size", _plus(1), required=False), Wrap("Builder.size", _plus(1), required=False))
    table.row("fg_mod", "t.k", "g", wraps=alternatives, one_of=True, missing=said.append)(m)
    assert m.Builder().size() == 395 and said == []
    table.undo()
    table.row("fg_mod", "t.k2", "g", wraps=alternatives[:1], one_of=True, missing=said.append)(m)
    assert said == ["fg_mod.Old.size"] and m.Builder().size() == 394


def test_rebind_points_by_name_imports_at_the_wrapper_and_back():
    import sys

    m = _module()
    m.__name__ = "fg_pkg.mod"
    user = types.ModuleType("fg_pkg.user")
    user.plan = m.plan  # from fg_pkg.mod import plan
    original = m.plan
    sys.modules[user.__name__] = user
    try:
        table = PatchTable(_Log)
        hook = table.row("fg_pkg.mod", "t.k", "g", wraps=(Wrap("plan", _plus(10), rebind=("fg_pkg",)),))
        hook(m)
        hook(m)  # idempotent: wrapped and rebound once
        assert user.plan is m.plan is not original and user.plan(1) == 12
        assert len(table.patches) == 2  # the unwrap and the rebind back
        table.undo()
        assert user.plan is original and m.plan is original
    finally:
        del sys.modules[user.__name__]


def test_a_failing_apply_takes_the_rows_wraps_and_rebinds_off_and_leaves_other_rows_on():
    m = _module()
    m.__name__ = "fg_pkg2.mod"
    user = types.ModuleType("fg_pkg2.user")
    user.plan = original = m.plan  # from fg_pkg2.mod import plan
    sys.modules[user.__name__] = user
    log = _OnceLog()
    try:
        table = PatchTable(lambda: log)
        table.row("fg_pkg2.mod", "t.ok", "first guard", wraps=(Wrap("Builder.size", _plus(1)),))(m)

        def apply(module):
            assert user.plan is module.plan is not original  # the wrap and its rebind were on
            raise RuntimeError("late")

        table.row("fg_pkg2.mod", "t.bad", "second guard", apply, error_key="second",
                  wraps=(Wrap("plan", _plus(10), rebind=("fg_pkg2",)), Wrap("Builder.other", _plus(1))))(m)
        assert m.plan is original and user.plan is original and m.plan(1) == 2  # row 2: nothing left
        assert m.Builder().other() == "base"
        assert m.Builder().size() == 395  # row 1 untouched
        assert log.warnings == [("error:second", "second guard skipped after an internal error (RuntimeError: "
                                                 "late); the server continues with its own behaviour")]
        assert table.undo() == 1 and m.Builder().size() == 394
    finally:
        del sys.modules[user.__name__]


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    """A real package on sys.path: ``fg_tbl.mod`` (the patched module), ``fg_tbl.late``
    (imported later, holding the original ``plan`` it got before the wrap)."""
    root = tmp_path / "fg_tbl"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "mod.py").write_text("import fgstore\ndef plan(x):\n    return x + 1\nfgstore.ORIGINAL = plan\n")
    (tmp_path / "fgstore.py").write_text("ORIGINAL = None\n")  # outside the rebind prefix
    (root / "late.py").write_text(textwrap.dedent("""
        from fgstore import ORIGINAL as plan  # the original, as a module that imported it early holds it
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fg_tbl"
    for name in [n for n in sys.modules if n.startswith(("fg_tbl", "fgstore"))]:
        del sys.modules[name]


def test_undo_forgets_the_import_hooks_so_install_patches_again(pkg):
    import importlib

    table = PatchTable(_Log)
    table.row("fg_tbl.mod", "fg_tbl.t", "g", wraps=(Wrap("plan", _plus(10)),))
    table.install()
    mod = importlib.import_module("fg_tbl.mod")  # the hook fires on import
    assert mod.plan(1) == 12
    table.undo()
    assert mod.plan(1) == 2
    del sys.modules["fg_tbl.mod"]
    mod = importlib.import_module("fg_tbl.mod")  # imported again: the hook is forgotten
    assert mod.plan(1) == 2
    table.install()  # registers anew and runs now for the imported module
    assert mod.plan(1) == 12
    table.undo()
    assert mod.plan(1) == 2


def test_importers_are_rebound_when_imported_later_and_not_after_undo(pkg):
    import importlib

    table = PatchTable(_Log)
    table.row("fg_tbl.mod", "fg_tbl.t", "g",
              wraps=(Wrap("plan", _plus(10), rebind=("fg_tbl",), importers=("fg_tbl.late",)),))
    table.install()
    mod = importlib.import_module("fg_tbl.mod")
    late = importlib.import_module("fg_tbl.late")  # imported after the wrap, holding the original
    assert late.plan is mod.plan and late.plan(1) == 12
    original = sys.modules["fgstore"].ORIGINAL
    assert mod.plan is not original
    table.undo()
    assert late.plan is original and mod.plan is original
    del sys.modules["fg_tbl.late"]
    late = importlib.import_module("fg_tbl.late")  # the importer's hook is forgotten too
    assert late.plan is original
