"""Declared ranges and the one FlashInfer release table (guard_core.flashinfer.releases)."""

from __future__ import annotations

import io
import logging

import pytest

from guard_core.flashinfer import planner as fm
from guard_core.flashinfer import releases
from guard_core.runtime.logs import GuardLog


# --- framework lines -----------------------------------------------------------------

@pytest.mark.parametrize("fw, version, status", [
    ("vllm", "0.33.0", "checked"), ("vllm", "0.33.1", "checked"), ("vllm", "0.19.1", "checked"),
    ("vllm", "0.34.0", "checked"), ("vllm", "0.34.2", "checked"),
    ("vllm", "0.19.1rc1.dev231+g9dd5ee011.cu130", "checked"),  # the seed's dev build is the 0.19 line
    ("vllm", "0.24.0", "within"), ("vllm", "0.35.0", "newer"), ("vllm", "1.0.0", "newer"),
    ("vllm", "0.18.2", "older"), ("vllm", "not-a-version", "unknown"), ("vllm", None, "unknown"),
    ("sglang", "0.5.23", "checked"), ("sglang", "0.5.23.post1", "checked"), ("sglang", "0.5.21", "within"),
    ("sglang", "0.5.24", "newer"), ("sglang", "0.6.0", "newer"), ("sglang", "0.5.4", "older"),
])
def test_line_status(fw, version, status):
    assert releases.line_status(fw, version) == status


def test_line_notes():
    assert releases.line_note("vllm", "0.35.0") == \
        "vLLM 0.35.0 is newer than the last line checked (0.34.0); acting by feature"
    assert releases.line_note("sglang", "0.5.24") == \
        "SGLang 0.5.24 is newer than the last line checked (0.5.23); acting by feature"
    assert releases.line_note("vllm", "0.18.0") == \
        "vLLM 0.18.0 is older than the first line checked (0.19.1); acting by feature"
    assert releases.line_note("vllm", "0.26.3") is None and releases.line_note("sglang", "0.5.22") is None
    assert releases.line_note("vllm", None) is None


def test_announce_says_it_once(caplog):
    log = GuardLog(logging.getLogger("fg.support"))
    with caplog.at_level(logging.INFO, logger="fg.support"):
        assert releases.announce("vllm", log, "0.35.1").startswith("vLLM 0.35.1 is newer")
        releases.announce("vllm", log, "0.35.1")
        assert releases.announce("sglang", log, "0.5.23") is None
    msgs = [r.getMessage() for r in caplog.records]
    assert msgs == ["[flashinfer-guard] support: vLLM 0.35.1 is newer than the last line checked (0.34.0); "
                    "acting by feature"]


def test_announce_never_raises():
    class Broken:
        def info(self, *a, **k):
            raise RuntimeError("handler")

    assert releases.announce("vllm", Broken(), "9.9") is None


def test_line_label():
    assert releases.line_label("vllm", "0.23.0") == "vLLM 0.23.0"
    assert releases.line_label("sglang", "0.5.5") == "SGLang 0.5.5"


# --- the FlashInfer release table ----------------------------------------------------

def test_families_are_the_documented_ones():
    assert fm.FAMILIES == (
        ("0.0", "<=0.6.13"),
        ("0.6.14", "0.6.14-0.6.15"),
        ("0.6.16", "0.6.16-0.6.17"),
        ("0.6.18", "0.6.18-0.7.0.post1"),
        ("0.7.1", "0.7.1-0.7.2.post1"),
        ("0.7.4", ">=0.7.4"),
    )


def test_checked_releases_are_the_conformance_releases():
    from tests.conformance import oracle

    assert releases.FLASHINFER_CHECKED == tuple(oracle.RELEASES)


def test_every_locked_flashinfer_is_checked():
    """Each FlashInfer a checked line pins (ci/locks/) is compiled by the conformance suite:
    in the default run (FLASHINFER_CHECKED) or on that line in ci/matrix.sh."""
    import re
    from pathlib import Path

    locks = Path(__file__).resolve().parents[2] / "ci" / "locks"
    pins = {m.group(1) for f in locks.glob("*.txt")
            for m in re.finditer(r"^flashinfer-python==(\S+)", f.read_text(), re.M)}
    assert len(pins) >= 10
    checked = set(releases.FLASHINFER_CHECKED) | set(releases.FLASHINFER_MATRIX_CHECKED)
    assert pins <= checked, sorted(pins - checked)
    assert not set(releases.FLASHINFER_MATRIX_CHECKED) & set(releases.FLASHINFER_CHECKED)
    assert set(releases.FLASHINFER_MATRIX_CHECKED) <= pins  # no stale entry


def test_conformance_release_override(monkeypatch):
    from tests.conformance import oracle

    monkeypatch.delenv(oracle.RELEASES_ENV, raising=False)
    assert oracle.selected_releases() == oracle.RELEASES
    monkeypatch.setenv(oracle.RELEASES_ENV, "0.6.6, 0.7.1,0.6.6")
    assert oracle.selected_releases() == ("0.6.6", "0.7.1")
    for bad in ("0.6", "0.6.6;rm", "0.٦.6", "0.6.6,", "1" * 40):
        monkeypatch.setenv(oracle.RELEASES_ENV, bad)
        with pytest.raises(oracle.OracleError):
            oracle.selected_releases()


def test_moe_default_comes_from_the_table():
    from guard_core.runtime import settings

    assert releases.MOE_FIXED_IN == "0.6.16" == settings.DEFAULT_MOE_FIXED_IN


@pytest.mark.parametrize("version, groups", [
    ("0.5.0", {1, 2, 3, 4, 8}), ("0.6.16", {1, 2, 3, 4, 8}), ("0.7.0.post1", {1, 2, 3, 4, 6, 8}),
    ("0.7.2.post1", {1, 2, 3, 4, 6, 8, 16}), ("0.9.0", {1, 2, 3, 4, 6, 8, 16}),
])
def test_decode_groups(version, groups):
    assert fm.decode_group_sizes(version) == frozenset(groups)


def test_uniform_q_len_callers():
    assert fm.decode_uniform_q_len("sglang", "0.7.4") is True
    assert fm.decode_uniform_q_len("sglang", "0.7.2.post1") is False
    # vLLM's fast_plan_decode calls the wrapper's plan / FlashInfer's fast_decode_plan
    # (vLLM 0.33.0 v1/attention/backends/flashinfer.py:2904,2934): it follows the release
    assert fm.decode_uniform_q_len("vllm", "0.7.4") is True
    assert fm.decode_uniform_q_len("vllm", "0.7.2.post1") is False


def test_every_feature_flag_is_a_table_row():
    features = set(fm.Features.__dataclass_fields__)
    rows = {name for _f, name, _fam, _v, _w in releases.FLASHINFER_RELEASES}
    assert features <= rows


@pytest.mark.parametrize("version, feats", [
    ("0.5.0", (False, False, False, False, False, False)),
    ("0.6.12", (False, False, False, False, False, True)),
    ("0.6.14", (True, False, False, False, False, True)),
    ("0.6.16", (True, True, False, False, False, True)),
    ("0.7.0.post1", (True, True, True, False, False, True)),
    ("0.7.2.post1", (True, True, True, True, False, True)),
    ("0.7.4", (True, True, True, True, True, True)),
])
def test_features_per_checked_release(version, feats):
    f = fm.features(version)
    assert (f.vo512_rule, f.uniform_q_len, f.qk512_and_smem, f.rows_by_query, f.fixed_uniform_q_len,
            f.colocated) == feats


# --- extrapolation -------------------------------------------------------------------

@pytest.mark.parametrize("version, note", [
    ("0.7.4", None), ("0.7.2.post1", None), ("0.6.18", None), ("0.5.0", None), ("0.7.4+cu130", None),
    ("0.7.5", "extrapolated from FlashInfer 0.7.4"), ("0.8.0", "extrapolated from FlashInfer 0.7.4"),
    ("1.0.0rc1", "extrapolated from FlashInfer 0.7.4"), ("0.4.9", "extrapolated from FlashInfer 0.5.0"),
    (None, None), ("garbage", None),
])
def test_flashinfer_extrapolation(version, note):
    assert releases.flashinfer_extrapolation(version) == note


def test_newer_flashinfer_is_sized_with_the_newest_family():
    assert fm.family("0.8.0") == fm.family("0.7.4") == ">=0.7.4"
    assert fm.features("1.0.0") == fm.features("0.7.4")
    req = dict(planner="prefill", params=dict(
        qo_indptr=list(range(0, 513)), kv_indptr=[i * 64 for i in range(513)], batch_size=512,
        total_num_rows=512, num_qo_heads=32, num_kv_heads=2, head_dim_qk=256, head_dim_vo=256, page_size=16,
        enable_cuda_graph=True, num_sms=132))
    assert fm.run_planner("0.8.0", **req) == fm.run_planner("0.7.4", **req)


# --- doctor ----------------------------------------------------------------------------

def test_doctor_prints_the_declared_ranges(monkeypatch):
    from guard_core.commands import cli, doctor

    versions = {"vllm": "0.35.0", "sglang": None, "flashinfer-python": "0.8.0", "torch": None}
    monkeypatch.setattr(doctor, "installed_version", lambda d: versions.get(d))
    monkeypatch.setattr(doctor, "flashinfer_version", lambda: "0.8.0")
    out = io.StringIO()
    assert cli.run_doctor(out=out) == 0
    text = out.getvalue()
    assert "vLLM lines 0.19.1, 0.23.0, 0.26.0, 0.29.0, 0.32.0, 0.33.0, 0.34.0 (installed 0.35.0: newer than the " \
           "last checked line: acting by feature)" in text
    assert "SGLang lines 0.5.5, 0.5.11, 0.5.15, 0.5.20, 0.5.22, 0.5.23\n" in text
    assert ("FlashInfer planner releases 0.5.0, 0.6.12, 0.6.14, 0.6.16, 0.7.0.post1, 0.7.2.post1, 0.7.4 "
            "(installed 0.8.0: sizing family >=0.7.4; extrapolated from FlashInfer 0.7.4)") in text


@pytest.mark.parametrize("fw, v, fi, ok", [
    ("vllm", "0.23.0", "0.6.12", True), ("vLLM", "0.19.1rc1.dev231+g9dd5ee011", "0.6.6", True),
    ("SGLang", "0.5.21", "0.6.18", False), ("SGLang", "0.5.20", "0.6.18", True), ("vllm", "0.35.0", "0.7.4", False), ("vllm", "0.34.0", "0.7.4", True), ("sglang", "0.5.4", "0.5.0", False),
    ("vllm", "0.33.0", "0.8.0", False), ("vllm", None, "0.7.2.post1", False), ("vllm", "0.33.0", None, False),
    ("other", "1.0", "0.7.4", False),
])
def test_unchecked_reason(fw, v, fi, ok):
    reason = releases.unchecked_reason(fw, v, fi)
    assert (reason is None) == ok, reason


def test_workspace_guard_needed_follows_the_release_table():
    from guard_core.flashinfer import releases

    assert "0.6.12 < 0.7.1" in releases.workspace_guard_needed("0.6.12")
    assert releases.workspace_guard_needed("0.7.1") is None and releases.workspace_guard_needed("0.7.2.post1") is None
    assert releases.workspace_guard_needed(None) is None and releases.workspace_guard_needed("garbage") is None
