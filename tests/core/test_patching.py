import functools
import importlib
import logging
import sys
import textwrap

import pytest

from guard_core import patching
from guard_core.logs import GuardLog


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
