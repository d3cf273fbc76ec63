"""The MoE evidence table (guard_core.flashinfer.moe_evidence) and the decisions drawn from it (issue 20).

Expected actions come from the rules the issue states, written out here on their own
(``expected``), never from guard_core; every (GPU, op, FlashInfer, host, setting)
combination below is checked against them.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import replace

import pytest

from guard_core.flashinfer import moe_evidence as ev
from guard_core.decide.records import decide_moe
from guard_core.runtime.settings import load_settings

# GPUs by compute capability: A100, L40S, H100/GH200, B200/GB200, B300/GB300, SM107, Thor,
# RTX PRO 6000, GB10; None = unknown
SMS = (80, 89, 90, 100, 103, 107, 110, 120, 121, None)
OPS = ("bf16", "fp8", "nvfp4", "mxfp4", "mxint4", None)
# FlashInfer releases the checked lines pin or that bracket the fix (0.6.15.post1: the last without it)
RELEASES = ("0.5.0", "0.6.6", "0.6.12", "0.6.15", "0.6.15.post1", "0.6.16", "0.6.16.post3", "0.6.17",
            "0.6.18", "0.7.0.post1", "0.7.2.post1", "0.7.4")
HOSTS = ("x86_64", "aarch64", "arm64")
SOURCE = re.compile(r"#\d+|\.py:\d+|\.cu:\d+")


def _v(text):
    return tuple(int(x) for x in re.findall(r"\d+", text.split("post")[0])[:3])


def expected(sm, op, fi, host, setting, can_skip):
    """The issue's rules: the guard acts only on SM10x (an unknown GPU counts as SM10x);
    before FlashInfer 0.6.16 the route-map out-of-bounds read (FlashInfer #4237/#4288) hits
    every op: Grace blocks, other hosts warn (auto) or block (strict); from 0.6.16 only the
    BF16 routed MoE has open reports: info (auto), skip its autotune sweep where the line
    can, else block (strict)."""
    if sm is not None and sm // 10 != 10:
        return "none"
    if _v(fi) < (0, 6, 16):
        if host in ("aarch64", "arm64"):
            return "block"
        return "block" if setting == "strict" else "warn"
    if op == "bf16":
        if setting == "auto":
            return "info"
        return "skip_autotune" if can_skip else "block"
    return "none"


@pytest.mark.parametrize("setting", ["auto", "strict"])
def test_every_combination_follows_the_rules(setting):
    s = load_settings({"FLASHINFER_GUARD_MOE": setting})
    checked = 0
    for sm, op, fi, host, can_skip in itertools.product(SMS, OPS, RELEASES, HOSTS, (True, False)):
        d = decide_moe(s, machine=host, flashinfer_version=fi, gpu=sm, op=op, can_skip_autotune=can_skip)
        want = expected(sm, op, fi, host, setting, can_skip)
        assert d.action == want, (sm, op, fi, host, can_skip, d.reason)
        assert d.block == (want == "block")
        if want != "none":
            # one line names the op, the GPU family, the FlashInfer release and the table row
            line = d.line("x")
            assert fi in line and (f"SM{sm}" if sm else "GPU unknown") in line
            assert (f", {op} MoE" if op else ", every MoE op") in line
            assert d.rows and any(f"evidence {r.id}:" in line for r in d.rows)
        checked += 1
    assert checked == len(SMS) * len(OPS) * len(RELEASES) * len(HOSTS) * 2


def test_off_and_on_keep_working():
    for sm, fi, host in itertools.product(SMS, RELEASES, HOSTS):
        off = decide_moe(load_settings({"FLASHINFER_GUARD_MOE": "off"}), machine=host, flashinfer_version=fi, gpu=sm)
        on = decide_moe(load_settings({"FLASHINFER_GUARD_MOE": "on"}), machine=host, flashinfer_version=fi, gpu=sm)
        assert (off.block, off.action) == (False, "off")
        assert (on.block, on.action) == (True, "on")


def test_fixed_in_moves_the_route_map_rows():
    later = load_settings({"FLASHINFER_GUARD_MOE_FIXED_IN": "0.7.1"})
    assert decide_moe(later, machine="aarch64", flashinfer_version="0.7.0.post1", gpu=100).block
    assert decide_moe(later, machine="x86_64", flashinfer_version="0.7.0.post1", gpu=100).action == "warn"
    assert decide_moe(later, machine="aarch64", flashinfer_version="0.7.1", gpu=100).action == "none"
    # the open BF16 row starts where the user says the fix is
    assert decide_moe(later, machine="x86_64", flashinfer_version="0.7.1", gpu=103, op="bf16").action == "info"


def test_no_flashinfer_nothing_to_guard():
    d = decide_moe(load_settings({}), machine="aarch64", flashinfer_version=None, gpu=100)
    assert not d.block and d.action == "none"


# --- the table itself -----------------------------------------------------------------------

def table_problems(table) -> list[str]:
    """Why a table is not acceptable: every row cites at least one source (an issue or PR
    number, or a file:line), in its sources and its short citation; ranges parse; ops,
    phases and actions are known; a fixed row names the release with the fix."""
    out = []
    ids = [r.id for r in table]
    if len(set(ids)) != len(ids):
        out.append("duplicate row ids")
    for r in table:
        if not r.sources or not all(isinstance(s, str) and SOURCE.search(s) for s in r.sources):
            out.append(f"{r.id}: a source without an issue/PR number or file:line")
        if not SOURCE.search(r.cite or ""):
            out.append(f"{r.id}: no citation for log lines")
        if not set(r.ops) <= set(ev.OPS) or not r.ops:
            out.append(f"{r.id}: ops {r.ops}")
        if not set(r.phases) <= set(ev.PHASES) or not r.phases:
            out.append(f"{r.id}: phases {r.phases}")
        if r.default not in ev.ACTIONS or r.strict not in ev.ACTIONS:
            out.append(f"{r.id}: actions {r.default}/{r.strict}")
        if ev.ACTIONS.index(r.strict) < ev.ACTIONS.index(r.default):
            out.append(f"{r.id}: strict weaker than the default")
        if (r.status == "fixed") != (r.flashinfer_fixed_in is not None):
            out.append(f"{r.id}: status {r.status} with fixed_in {r.flashinfer_fixed_in}")
        if not all(sm // 10 == ev.REACH_MAJOR for sm in r.sms):
            out.append(f"{r.id}: reported on a GPU that cannot reach the path")
        for v in (r.flashinfer_from, r.flashinfer_fixed_in):
            if v is not None and not re.fullmatch(r"\d+\.\d+\.\d+(\.post\d+)?", v):
                out.append(f"{r.id}: release {v!r}")
        if not r.why:
            out.append(f"{r.id}: no reason for its defaults")
    return out


def test_table_rows_have_sources():
    assert table_problems(ev.TABLE) == []


def test_a_row_without_a_source_fails_the_check():
    row = ev.TABLE[0]
    assert table_problems((replace(row, sources=()),))
    assert table_problems((replace(row, sources=("someone said so",)),))
    assert table_problems((replace(row, cite="upstream"),))
    assert table_problems((replace(row, sms=(120,)),))


def test_the_table_holds_the_rows_the_issue_names():
    by_id = {r.id: r for r in ev.TABLE}
    oob = by_id["route-map-oob"]
    assert oob.hosts is None and set(oob.ops) == set(ev.OPS) and oob.flashinfer_fixed_in == "0.6.16"
    assert any("#4237" in s for s in oob.sources) and any("#4288" in s for s in oob.sources)
    grace = by_id["route-map-oob-grace"]
    assert "aarch64" in grace.hosts and grace.default == "block"
    assert any("#46861" in s for s in grace.sources) and any("#45285" in s for s in grace.sources)
    bf16 = by_id["bf16-open"]
    assert bf16.ops == ("bf16",) and bf16.flashinfer_from == "0.6.16" and bf16.flashinfer_fixed_in is None
    text = " ".join(bf16.sources)
    for ref in ("#4919", "#30209", "#7004", "#4157", "#46238"):
        assert ref in text
    assert bf16.default == "info" and bf16.strict == "skip_autotune"


def test_rows_that_apply_are_printed_for_a_deployment():
    # B300 on x86 with FlashInfer 0.6.12: the route-map row; on Grace both route-map rows
    x86 = ev.applicable(sm=103, flashinfer_version="0.6.12", machine="x86_64")
    grace = ev.applicable(sm=103, flashinfer_version="0.6.12", machine="aarch64")
    assert [r.id for r in x86] == ["route-map-oob"]
    assert [r.id for r in grace] == ["route-map-oob", "route-map-oob-grace"]
    assert [r.id for r in ev.applicable(sm=100, flashinfer_version="0.7.2.post1", machine="x86_64")] == ["bf16-open"]
    assert ev.applicable(sm=120, flashinfer_version="0.6.12", machine="aarch64") == ()
    assert ev.applicable(sm=100, flashinfer_version="not a version", machine="aarch64") == ()
    assert all("SM10x" in r.short() and r.cite in r.short() for r in ev.TABLE)


# --- flashinfer-guard plan / doctor print the rows that apply ---------------------------------

def _plan(*args):
    import io
    import json

    from guard_core.commands.cli import main

    out = io.StringIO()
    import contextlib

    with contextlib.redirect_stdout(out):
        code = main(["plan", "--json", *args])
    assert code == 0
    return json.loads(out.getvalue())["moe"]


def test_plan_prints_the_moe_rows_for_the_deployment():
    # GB200 (Grace) with vLLM 0.23.0's FlashInfer 0.6.12: both route-map rows, blocked
    gb = _plan("--framework-version", "0.23.0", "--gpu", "gb200")
    assert [r["id"] for r in gb["rows"]] == ["route-map-oob", "route-map-oob-grace"] and gb["block"]
    assert gb["gpu"] == "SM100" and all(r["sources"] for r in gb["rows"])
    # B200 on x86, same FlashInfer: the any-host row, a warning, nothing blocked
    b2 = _plan("--framework-version", "0.23.0", "--gpu", "b200")
    assert [r["id"] for r in b2["rows"]] == ["route-map-oob"] and not b2["block"]
    assert b2["ops"]["every op"]["action"] == "warn"
    # B300 with vLLM 0.33.0's FlashInfer 0.7.2.post1: the open BF16 reports only
    b3 = _plan("--framework-version", "0.33.0", "--gpu", "b300")
    assert [r["id"] for r in b3["rows"]] == ["bf16-open"] and b3["ops"]["bf16"]["action"] == "info"
    assert b3["ops"]["fp8"]["action"] == "none"
    # GB10 (SM121, an Arm host) never reaches the path, whatever the FlashInfer
    g10 = _plan("--framework-version", "0.23.0", "--gpu", "gb10")
    assert g10["rows"] == [] and not g10["block"] and g10["host_arch"] == "aarch64"


def test_plan_text_names_the_rows():
    import contextlib
    import io

    from guard_core.commands.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["plan", "--framework-version", "0.23.0", "--gpu", "gb200"]) == 0
    text = out.getvalue()
    assert "moe row    route-map-oob-grace (" in text and "#46861" in text and "default block" in text
