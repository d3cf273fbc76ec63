"""Both adapters against stand-in framework modules: install -> uninstall -> install,
and the log levels of stand-downs and missing targets (item 4 of issue 9).

The stand-ins are plain modules put in ``sys.modules`` under the real names; the
real frameworks are exercised in tests/vllm and tests/sglang.
"""

from __future__ import annotations

import functools
import logging
import sys
import types

import pytest

from guard_core.runtime import wrapping as patching
from guard_core.runtime import settings


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


@pytest.fixture
def env(monkeypatch):
    """Clean adapter state around each test; ``set(**vars)`` sets FLASHINFER_GUARD_* and machine."""
    for k in list(__import__("os").environ):
        if k.startswith("FLASHINFER_GUARD"):
            monkeypatch.delenv(k)
    saved = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("vllm", "sglang")}

    def setup(machine="x86_64", **variables):
        for k, v in variables.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setattr("platform.machine", lambda: machine)
        settings.reset_settings_cache()

    yield setup
    import sglang_guard.plugin as sp
    import vllm_guard.plugin as vp

    vp.uninstall()
    sp.uninstall()
    for k in [k for k in sys.modules if k.split(".")[0] in ("vllm", "sglang")]:
        del sys.modules[k]
    sys.modules.update(saved)
    settings.reset_settings_cache()


def _fake_vllm(with_target=True):
    @functools.cache
    def has_flashinfer_trtllm_fused_moe():
        return True

    attrs = {"has_flashinfer_trtllm_fused_moe": has_flashinfer_trtllm_fused_moe} if with_target else {}
    utils = _module("vllm.utils.flashinfer", **attrs)
    user = _module("vllm.model_executor.layers.fused_moe.experts.trtllm_fp8_moe", **attrs)
    for name, mod in (("vllm", _module("vllm")), ("vllm.utils", _module("vllm.utils")),
                      ("vllm.utils.flashinfer", utils), (user.__name__, user)):
        sys.modules[name] = mod
    return utils, user


def _guard_records(caplog):
    return [(r.levelno, r.getMessage()) for r in caplog.records if "[flashinfer-guard]" in r.getMessage()]


def test_vllm_install_uninstall_install(env):
    env(machine="aarch64", FLASHINFER_GUARD_MOE="on")
    utils, user = _fake_vllm()
    original = utils.has_flashinfer_trtllm_fused_moe
    import vllm_guard.plugin as vp

    vp.register()
    assert vp.is_registered() and utils.has_flashinfer_trtllm_fused_moe() is False
    assert user.has_flashinfer_trtllm_fused_moe is utils.has_flashinfer_trtllm_fused_moe  # rebound by name
    vp.uninstall()
    assert not vp.is_registered()
    assert utils.has_flashinfer_trtllm_fused_moe is original and user.has_flashinfer_trtllm_fused_moe is original
    assert utils.has_flashinfer_trtllm_fused_moe() is True
    vp.register()  # patches again, on modules imported long ago
    assert patching.is_wrapped(utils.has_flashinfer_trtllm_fused_moe)
    assert utils.has_flashinfer_trtllm_fused_moe() is False and user.has_flashinfer_trtllm_fused_moe() is False


def _fake_sglang_moe_utils():
    import enum

    class MoeRunnerBackend(enum.Enum):
        AUTO = "auto"
        TRITON = "triton"
        FLASHINFER_TRTLLM = "flashinfer_trtllm"

    mod = _module("sglang.srt.layers.moe.utils", MoeRunnerBackend=MoeRunnerBackend,
                  MOE_RUNNER_BACKEND=None, SPECULATIVE_MOE_RUNNER_BACKEND=None)

    def initialize_moe_config(server_args):
        mod.MOE_RUNNER_BACKEND = MoeRunnerBackend(server_args.moe_runner_backend)

    mod.initialize_moe_config = initialize_moe_config
    for name in ("sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.moe"):
        sys.modules[name] = _module(name)
    sys.modules[mod.__name__] = mod
    return mod


def _sglang_moe_blocked(env):
    """SGLang's MoE config stand-in with the guard registered under `on`: the explicit TRT-LLM
    backend already replaced by triton. (module, server args, plugin, original function)"""
    env(machine="aarch64", FLASHINFER_GUARD_MOE="on")
    mu = _fake_sglang_moe_utils()
    original = mu.initialize_moe_config
    sa = types.SimpleNamespace(moe_runner_backend="flashinfer_trtllm", speculative_moe_runner_backend=None,
                               quantization="fp8")
    import sglang_guard.plugin as sp

    assert sp.register() is True
    mu.initialize_moe_config(sa)
    assert mu.MOE_RUNNER_BACKEND.value == "triton"
    return mu, sa, sp, original


def test_sglang_install_uninstall_install(env):
    mu, sa, sp, original = _sglang_moe_blocked(env)
    sp.uninstall()
    assert not sp.is_registered() and mu.initialize_moe_config is original
    mu.initialize_moe_config(sa)
    assert mu.MOE_RUNNER_BACKEND.value == "flashinfer_trtllm"
    assert sp.register() is True
    mu.initialize_moe_config(sa)
    assert mu.MOE_RUNNER_BACKEND.value == "triton"


def test_vllm_x86_stand_down_is_debug(env, caplog):
    env(machine="x86_64")
    _fake_vllm()
    import vllm_guard.plugin as vp

    with caplog.at_level(logging.DEBUG):
        vp.register()
    assert not [m for _, m in _guard_records(caplog) if "moe:" in m]  # nothing at INFO on x86
    vp.uninstall()
    env(machine="x86_64", FLASHINFER_GUARD_LOG="debug")
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        vp.register()
    assert any("moe: ok, x86_64 " in m for _, m in _guard_records(caplog))  # at DEBUG


def test_vllm_missing_target_warns_where_needed(env, caplog):
    env(machine="aarch64", FLASHINFER_GUARD_MOE="on")
    _fake_vllm(with_target=False)
    import vllm_guard.plugin as vp

    with caplog.at_level(logging.DEBUG):
        vp.register()
    warn = [m for lvl, m in _guard_records(caplog) if lvl == logging.WARNING]
    assert len(warn) == 1
    assert "vllm.utils.flashinfer.has_flashinfer_trtllm_fused_moe not found on" in warn[0]
    assert "where the guard is needed (FLASHINFER_GUARD_MOE=on)" in warn[0]


def test_vllm_missing_target_is_quiet_where_not_needed(env, caplog):
    env(machine="x86_64")
    _fake_vllm(with_target=False)
    import vllm_guard.plugin as vp

    with caplog.at_level(logging.DEBUG):
        vp.register()
    assert _guard_records(caplog) == []


def test_sglang_missing_target_levels(env, caplog):
    env(machine="aarch64", FLASHINFER_GUARD_MOE="on")
    from sglang_guard import moe

    with caplog.at_level(logging.DEBUG):
        moe.on_moe_utils_module(_module("sglang.srt.layers.moe.utils"))
    warn = [m for lvl, m in _guard_records(caplog) if lvl == logging.WARNING]
    assert len(warn) == 1 and "sglang.srt.layers.moe.utils.initialize_moe_config not found on" in warn[0]
    moe.uninstall()  # forget the decision
    env(machine="x86_64", FLASHINFER_GUARD_MOE="auto")
    caplog.clear()
    import sglang_guard._log as slog

    slog.reset_log()
    with caplog.at_level(logging.DEBUG):
        moe.on_moe_utils_module(_module("sglang.srt.layers.moe.utils"))
    assert _guard_records(caplog) == []  # not needed on x86: a debug line, hidden at info


def test_sglang_declares_the_fallback_in_the_resolution_stash(env, caplog):
    """0.5.15+ resolve through a declaration stash (last writer wins): the fallback is
    declared there, the record's input left alone, and the user's request is named."""
    env(machine="aarch64", FLASHINFER_GUARD_MOE="on")
    from sglang_guard import moe

    sa = types.SimpleNamespace(moe_runner_backend="auto", speculative_moe_runner_backend=None,
                               quantization=None, _raw_input={"moe_runner_backend": "auto"},
                               _resolved_overrides=[("_quant", {"quantization": "fp8"}),
                                                    ("_model", {"moe_runner_backend": "flashinfer_trtllm"})])
    with caplog.at_level(logging.INFO):
        assert moe.guard_config(sa) == ["moe_runner_backend"]
    assert sa.moe_runner_backend == "auto"  # input untouched
    assert sa._resolved_overrides[-1] == ("flashinfer_guard", {"moe_runner_backend": "triton"})
    (line,) = [m for _, m in _guard_records(caplog)]
    assert "flashinfer_trtllm (chosen by SGLang for this model) replaced by triton" in line
    # a materialised record (0.5.15 after __post_init__) is written directly
    sa2 = types.SimpleNamespace(moe_runner_backend="flashinfer_trtllm", speculative_moe_runner_backend=None,
                                quantization="modelopt_fp4", _resolved_overrides=[],
                                _declarations_materialized=True)
    assert moe.guard_config(sa2) == ["moe_runner_backend"]
    assert sa2.moe_runner_backend == "flashinfer_cutlass"


@pytest.mark.parametrize("adapter", ["vllm", "sglang"])
def test_out_of_range_line_said_once(env, caplog, monkeypatch, adapter):
    from guard_core import versions

    env(machine="x86_64")
    newer = {"vllm": "0.35.0", "sglang": "0.5.24"}[adapter]
    monkeypatch.setattr(versions, "installed_version", lambda dist: newer if dist == adapter else None)
    with caplog.at_level(logging.INFO):
        if adapter == "vllm":
            _fake_vllm()
            sys.modules["vllm.engine"] = _module("vllm.engine")
            sys.modules["vllm.engine.arg_utils"] = _module("vllm.engine.arg_utils")  # a second target
            import vllm_guard.plugin as plugin
        else:
            _fake_sglang_moe_utils()
            sys.modules["sglang.srt.server_args"] = _module("sglang.srt.server_args")
            import sglang_guard.plugin as plugin
        plugin.register()
    notes = [m for _, m in _guard_records(caplog) if "support:" in m]
    want = {"vllm": "vLLM 0.35.0 is newer than the last line checked (0.34.0); acting by feature",
            "sglang": "SGLang 0.5.24 is newer than the last line checked (0.5.23); acting by feature"}[adapter]
    assert notes == [f"[flashinfer-guard] support: {want}"]


def test_vllm_uninstall_forgets_the_moe_decision(env, caplog):
    """The guard's memory (the MoE outcomes) is one state object that uninstall resets:
    the same process re-registered under other settings decides again."""
    env(machine="aarch64", FLASHINFER_GUARD_MOE="on")
    utils, _user = _fake_vllm()
    import vllm_guard.plugin as vp

    vp.register()
    assert utils.has_flashinfer_trtllm_fused_moe() is False  # blocked under on
    vp.uninstall()
    env(machine="aarch64", FLASHINFER_GUARD_MOE="off")
    with caplog.at_level(logging.INFO):
        vp.register()
        assert utils.has_flashinfer_trtllm_fused_moe() is True  # off: vLLM's own answer, decided anew
    assert not [m for _, m in _guard_records(caplog) if "moe" in m and "reported unavailable" in m]


def test_sglang_uninstall_forgets_the_moe_decision(env):
    mu, sa, sp, _ = _sglang_moe_blocked(env)
    sp.uninstall()
    env(machine="aarch64", FLASHINFER_GUARD_MOE="off")
    assert sp.register() is True
    mu.initialize_moe_config(sa)
    assert mu.MOE_RUNNER_BACKEND.value == "flashinfer_trtllm"  # off: decided anew, SGLang's own backend


def test_adapter_state_reset_restores_defaults_and_keeps_process_facts():
    from dataclasses import dataclass, field

    from guard_core.runtime.lifecycle import AdapterState

    @dataclass
    class State(AdapterState):
        KEEP = ("read_once",)
        read_once: int | None = None
        said: bool = False
        records: list = field(default_factory=list)

    s = State()
    s.read_once, s.said = 7, True
    s.records.append("r")
    kept = s.records
    s.reset()
    assert (s.read_once, s.said, s.records) == (7, False, []) and s.records is not kept
