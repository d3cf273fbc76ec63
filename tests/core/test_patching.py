import importlib
import logging
import sys
import textwrap

import pytest

from guard_core.runtime import wrapping as patching
from guard_core.runtime.logs import GuardLog


@pytest.fixture
def pkg(tmp_path, monkeypatch):
    root = tmp_path / "fg_demo"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "target.py").write_text(textwrap.dedent("""
        import functools
        @functools.cache
        def probe():
            return "real"
        def add(a, b):
            return a + b
        class Builder:
            def size(self):
                return 394
            @staticmethod
            def kind():
                return "base"
            @classmethod
            def name(cls):
                return cls.__name__
        class FlashBuilder(Builder):
            pass
        class OtherBuilder(Builder):
            pass
    """))
    (root / "user.py").write_text("from fg_demo.target import probe\ndef ask():\n    return probe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "fg_demo"
    for name in [n for n in sys.modules if n.startswith("fg_demo")]:
        del sys.modules[name]
    patching.clear_import_hooks()


def test_post_import_hook_runs_after_import_once(pkg):
    seen = []
    patching.when_imported("fg_demo.target", lambda m: seen.append(m.add(1, 2)), key="k")
    patching.when_imported("fg_demo.target", lambda m: seen.append("dup"), key="k")  # same key: ignored
    assert seen == []
    mod = importlib.import_module("fg_demo.target")
    assert seen == [3]
    assert mod.__loader__.__class__.__name__ != "_LoaderProxy"  # identity restored


def test_hook_runs_now_if_already_imported(pkg):
    importlib.import_module("fg_demo.target")
    seen = []
    patching.when_imported("fg_demo.target", lambda m: seen.append(m.__name__), key="now")
    assert seen == ["fg_demo.target"]


def test_hook_exception_does_not_break_import(pkg):
    def boom(m):
        raise RuntimeError("ours")
    patching.when_imported("fg_demo.target", boom, key="boom")
    mod = importlib.import_module("fg_demo.target")
    assert mod.add(2, 2) == 4


def test_wrap_keeps_cache_clear_and_is_idempotent(pkg):
    mod = importlib.import_module("fg_demo.target")
    orig = mod.probe
    assert patching.wrap_attr(mod, "probe", lambda f: (lambda: "guarded")) is True
    assert patching.wrap_attr(mod, "probe", lambda f: (lambda: "twice")) is False
    assert mod.probe() == "guarded"
    assert mod.probe.__wrapped__ is orig and callable(mod.probe.cache_clear)
    assert patching.unwrap_attr(mod, "probe") and mod.probe is orig


def test_wrap_method_and_missing_target(pkg):
    mod = importlib.import_module("fg_demo.target")
    assert patching.wrap_attr(mod.Builder, "size", lambda f: (lambda self: f(self) + 120))
    assert mod.Builder().size() == 514
    assert patching.wrap_attr(mod.Builder, "no_such_method", lambda f: f) is False
    patching.unwrap_attr(mod.Builder, "size")
    assert mod.Builder().size() == 394


def test_rebind_everywhere(pkg):
    target = importlib.import_module("fg_demo.target")
    user = importlib.import_module("fg_demo.user")
    old = target.probe
    patching.wrap_attr(target, "probe", lambda f: (lambda: "guarded"))
    assert user.ask() == "real"  # bound by name before the wrap
    places = patching.rebind_everywhere(old, target.probe, prefix="fg_demo")
    assert "fg_demo.user.probe" in places and user.ask() == "guarded"


def test_guarded_fails_open_with_one_warning(caplog):
    log = GuardLog(logging.getLogger("fg.test"))
    def broken():
        raise KeyError("x")
    with caplog.at_level(logging.INFO, logger="fg.test"):
        assert patching.guarded(log, "k", "workspace sizing", broken, default="orig") == "orig"
        assert patching.guarded(log, "k", "workspace sizing", broken, default="orig") == "orig"
    warns = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warns) == 1 and "[flashinfer-guard]" in warns[0].getMessage() and "KeyError" in warns[0].getMessage()


def test_log_levels(caplog):
    with caplog.at_level(logging.DEBUG, logger="fg.lv"):
        quiet = GuardLog(logging.getLogger("fg.lv"), level="warning")
        quiet.info("hidden"); quiet.debug("hidden"); quiet.warning("shown")
        loud = GuardLog(logging.getLogger("fg.lv"), level="debug")
        loud.debug("detail")
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["[flashinfer-guard] shown", "[flashinfer-guard] detail"]


def test_hook_error_is_reported_once(pkg, caplog):
    def boom(m):
        raise RuntimeError("ours")
    patching.when_imported("fg_demo.target", boom, key="boom2")
    with caplog.at_level(logging.WARNING, logger="flashinfer_guard"):
        importlib.import_module("fg_demo.target")
    msgs = [r.getMessage() for r in caplog.records if r.name == "flashinfer_guard"]
    assert len(msgs) == 1 and "RuntimeError: ours" in msgs[0] and "fg_demo.target" in msgs[0]


def test_log_points_at_caller(caplog):
    log = GuardLog(logging.getLogger("fg.site"))
    with caplog.at_level(logging.INFO, logger="fg.site"):
        log.info("here")
    assert caplog.records[0].filename == "test_patching.py"


def test_inherited_method_is_wrapped_on_the_target_class(pkg):
    mod = importlib.import_module("fg_demo.target")
    base_size = mod.Builder.__dict__["size"]
    assert "size" not in vars(mod.FlashBuilder)
    assert patching.wrap_attr(mod.FlashBuilder, "size", lambda f: (lambda self: f(self) + 120)) is True
    assert mod.FlashBuilder().size() == 514
    assert mod.Builder().size() == 394 and mod.OtherBuilder().size() == 394  # base and siblings untouched
    assert mod.Builder.__dict__["size"] is base_size
    assert mod.FlashBuilder.size.__wrapped__ is base_size
    assert patching.wrap_attr(mod.FlashBuilder, "size", lambda f: f) is False  # idempotent
    assert patching.unwrap_attr(mod.FlashBuilder, "size") is True
    assert "size" not in vars(mod.FlashBuilder) and mod.FlashBuilder().size() == 394


def test_inherited_static_and_class_methods(pkg):
    mod = importlib.import_module("fg_demo.target")
    assert patching.wrap_attr(mod.FlashBuilder, "kind", lambda f: (lambda: "guarded-" + f()))
    assert patching.wrap_attr(mod.FlashBuilder, "name", lambda f: (lambda cls: "guarded-" + f(cls)))
    assert mod.FlashBuilder.kind() == "guarded-base" and mod.FlashBuilder().kind() == "guarded-base"
    assert mod.FlashBuilder.name() == "guarded-FlashBuilder"
    assert mod.Builder.kind() == "base" and mod.OtherBuilder.name() == "OtherBuilder"
    assert isinstance(vars(mod.FlashBuilder)["kind"], staticmethod)
    assert isinstance(vars(mod.FlashBuilder)["name"], classmethod)
    patching.unwrap_attr(mod.FlashBuilder, "kind")
    patching.unwrap_attr(mod.FlashBuilder, "name")
    assert "kind" not in vars(mod.FlashBuilder) and "name" not in vars(mod.FlashBuilder)


def test_subclass_of_a_wrapped_base_is_not_wrapped_twice(pkg):
    mod = importlib.import_module("fg_demo.target")
    assert patching.wrap_attr(mod.Builder, "size", lambda f: (lambda self: f(self) + 1))
    assert patching.wrap_attr(mod.FlashBuilder, "size", lambda f: (lambda self: f(self) + 1)) is False
    assert mod.FlashBuilder().size() == 395
    patching.unwrap_attr(mod.Builder, "size")


def test_forgotten_hooks_register_and_run_again(pkg):
    importlib.import_module("fg_demo.target")
    seen = []
    patching.when_imported("fg_demo.target", lambda m: seen.append(1), key="adapter.a")
    patching.when_imported("fg_demo.other", lambda m: seen.append(2), key="adapter.b")
    patching.when_imported("fg_demo.target", lambda m: seen.append(3), key="else.c")
    assert seen == [1, 3]
    assert patching.forget_import_hook("fg_demo.target", "adapter.a")
    assert patching.forget_import_hook("fg_demo.other", "adapter.b")
    assert not patching.forget_import_hook("fg_demo.other", "adapter.b")  # gone already
    patching.when_imported("fg_demo.target", lambda m: seen.append(1), key="adapter.a")  # registers anew, runs now
    patching.when_imported("fg_demo.target", lambda m: seen.append(3), key="else.c")  # still registered: no-op
    assert seen == [1, 3, 1]


def test_patch_set_undoes_everything_in_reverse(pkg):
    mod = importlib.import_module("fg_demo.target")
    ps = patching.PatchSet()
    order = []
    assert ps.wrap(mod, "add", lambda f: (lambda a, b: f(a, b) * 10))
    assert ps.wrap(mod.FlashBuilder, "size", lambda f: (lambda self: 0))
    assert not ps.wrap(mod, "missing", lambda f: f)
    ps.on_undo(lambda: order.append("last registered"))
    ps.on_undo(lambda: 1 / 0)  # a failing step does not stop the rest
    assert mod.add(1, 2) == 30 and mod.FlashBuilder().size() == 0
    assert ps.undo() == 3 and order == ["last registered"]
    assert mod.add(1, 2) == 3 and mod.FlashBuilder().size() == 394 and len(ps) == 0
    assert ps.wrap(mod, "add", lambda f: (lambda a, b: 0)) and mod.add(1, 2) == 0  # and again
    ps.undo()


def test_one_logger_name_for_the_product():
    import sglang_guard._log as slog
    import vllm_guard
    from guard_core.runtime import logs

    assert logs.LOGGER_NAME == "flashinfer_guard"
    assert GuardLog().logger.name == logs.LOGGER_NAME
    assert vllm_guard.LOGGER_NAME == "vllm." + logs.LOGGER_NAME  # under vLLM's configured tree
    slog.reset_log()
    try:
        assert slog.log().logger.name == logs.LOGGER_NAME
    finally:
        slog.reset_log()


def test_missing_target_levels(caplog):
    with caplog.at_level(logging.DEBUG, logger="fg.miss"):
        log = GuardLog(logging.getLogger("fg.miss"))
        log.missing_target("moe", "a.b.target", "vLLM 0.23.0", needed="aarch64 with FlashInfer 0.6.12 < 0.6.16")
        log.missing_target("moe", "a.b.target", "vLLM 0.23.0", needed="again")  # once
        log.missing_target("moe", "a.b.other", "vLLM 0.23.0", needed=None)  # not needed: debug, hidden at info
        GuardLog(logging.getLogger("fg.miss"), level="debug").missing_target("moe", "a.b.other", "vLLM 0.33.0")
    recs = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert len(recs) == 2
    assert recs[0][0] == logging.WARNING
    assert "a.b.target not found on vLLM 0.23.0, where the guard is needed (aarch64 with FlashInfer" in recs[0][1]
    assert recs[1][0] == logging.INFO and "a.b.other not found on vLLM 0.33.0: not applicable" in recs[1][1]


def test_adapters_import_no_plugin_from_their_guards():
    """No import cycle: the guards log through ``_log``, never through ``plugin``."""
    import ast
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2]
    for rel in ("sglang_guard/moe.py", "sglang_guard/moe_facts.py", "sglang_guard/moe_config.py",
                "sglang_guard/moe_runtime.py", "sglang_guard/_log.py", "vllm_guard/moe.py", "vllm_guard/moe_facts.py",
                "vllm_guard/moe_apply.py", "vllm_guard/_log.py"):
        tree = ast.parse((root / rel).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "plugin" and not (node.level and node.module and
                                                        node.module.endswith("plugin")), (rel, node.module)
