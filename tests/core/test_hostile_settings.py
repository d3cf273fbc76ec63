"""Hostile FLASHINFER_GUARD_* values: the settings parser never raises, never half-accepts.

Promise (guard_core/runtime/settings.py): every variable is either valid or gives exactly
one warning naming the variable, its value (truncated, escaped) and the accepted
values, and then its default; a bad value of one variable changes no other.
"""

import os
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st

from guard_core.runtime import settings as S
from guard_core.decide.records import decide_moe

FAST = hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DEFAULT = S.load_settings({})
FIELD = {S.MASTER: "enabled", S.MOE: "moe", S.MOE_FIXED_IN: "moe_fixed_in", S.WORKSPACE: "workspace",
         S.LOG: "log_level", S.WORKSPACE_MAX: "workspace_max", S.RESERVE: "reserve",
         S.MLA: "mla"}


def _assert_one_warning(s, var, value):
    assert len(s.warnings) == 1, s.warnings
    w = s.warnings[0]
    assert w.startswith(f"ignoring {var}=") and "accepted values are" in w and "using the default" in w
    assert w.isascii() and w.isprintable(), w  # escaped: no newline, no control or non-ASCII character
    assert len(w) < 400
    shown = ascii(value[:40])
    assert shown in w


@pytest.mark.parametrize("value", [
    "0.5", "0.5MiB", "1023KiB", "1048575", "0", "0.0GiB", ".1", "1.", "00000",
    "1" + "0" * 400, "9" * 5000, "99999999999999999999", "289GiB", "0.3TiB", "1e9", "1E3MiB", "inf", "nan",
    "\u00b2", "\u0662\u0663MiB", "\uff11\uff12GiB", "1GiB\n", "1\x01GiB", "1 GiB B",
    "1.5.5MiB", "--1MiB", "+1GiB", "1_000_000_000", "0x40000000", "1GiBs", "1 Gib2", "\U0001d7d9GiB",
    "768MiB; rm -rf /", "\x1b[31m1GiB", "\ud800", " " * 10 + "x",
])
def test_workspace_hostile_sizes_are_refused_with_one_warning(value):
    s = S.load_settings({S.WORKSPACE: value})
    _assert_one_warning(s, S.WORKSPACE, value)
    assert (s.workspace, s.workspace_bytes) == ("auto", None)
    assert s == DEFAULT


@pytest.mark.parametrize("value,expect", [
    ("1MiB", 1 << 20), ("1048576", 1 << 20), ("1.5GiB", 3 << 29), ("768 mib", 768 << 20), ("2GB", 2 * 10**9),
    ("288GiB", 288 << 30), ("0.25TiB", 1 << 38), (".5GiB", 1 << 29), ("1.3MiB", 1363149), ("4m", 4_000_000),
    ("  512MiB\t", 512 << 20), ("1000000b", None),
])
def test_workspace_sizes_integer_arithmetic(value, expect):
    assert S.parse_size(value) == expect
    s = S.load_settings({S.WORKSPACE: value})
    if expect is None:
        assert len(s.warnings) == 1 and s.workspace == "auto"
    else:
        assert s.workspace == "size" and s.workspace_bytes == expect and s.warnings == ()


def test_size_bounds_are_exact():
    assert S.parse_size(str(S.MIN_SIZE_BYTES)) == S.MIN_SIZE_BYTES
    assert S.parse_size(str(S.MIN_SIZE_BYTES - 1)) is None
    assert S.parse_size(str(S.MAX_SIZE_BYTES)) == S.MAX_SIZE_BYTES
    assert S.parse_size(str(S.MAX_SIZE_BYTES + 1)) is None
    # no float round trip: 2**53 + 1 bytes stays exact (would be refused as > 288 GiB anyway, so use the fraction path)
    assert S.parse_size("1.000000001GiB") == -(-(1_000_000_001 * (1 << 30)) // 10**9)


@pytest.mark.parametrize("value", [
    "9" * 5000, "1." * 3000, "0.6.16" + "0" * 100, "1" * 19 + ".0", "0.6.\u0661\u0666", "\uff10.7.1",
    "0.6.16\n0.7", "latest", "v", "0.6.16+", "0.6.16+" + "a" * 80, "1!" * 40, "\x00", "0.6.16 0.7.1",
])
def test_moe_fixed_in_hostile_versions(value):
    s = S.load_settings({S.MOE_FIXED_IN: value})
    _assert_one_warning(s, S.MOE_FIXED_IN, value)
    assert s.moe_fixed_in == S.DEFAULT_MOE_FIXED_IN
    assert s == DEFAULT


@pytest.mark.parametrize("value", ["0.7.1", " 0.7.2.post1 ", "1!0.6", "0.6.16rc1.dev3+g12ab", "v0.7.0"])
def test_moe_fixed_in_valid_versions(value):
    s = S.load_settings({S.MOE_FIXED_IN: value})
    assert s.warnings == () and s.moe_fixed_in == value.strip()
    decide_moe(s, machine="aarch64", flashinfer_version="0.6.12")  # usable by the decision


def test_bad_value_of_one_variable_changes_no_other():
    env = {S.MASTER: "0", S.MOE: "on", S.MOE_FIXED_IN: "0.7.1", S.WORKSPACE: "1GiB", S.LOG: "debug",
           S.WORKSPACE_MAX: "10%", S.RESERVE: "full", S.MLA: "off"}
    good = S.load_settings(env)
    hostile = {S.MASTER: "\u00b2", S.MOE: "x" * 10000, S.MOE_FIXED_IN: "9" * 5000, S.WORKSPACE: "0.5",
               S.LOG: "\nloud", S.WORKSPACE_MAX: "5%%", S.RESERVE: "\uff26ULL",
               S.MLA: "0"}
    for var, bad in hostile.items():
        s = S.load_settings(dict(env, **{var: bad}))
        assert len(s.warnings) == 1 and var in s.warnings[0]
        for other, field in FIELD.items():
            if other != var:
                assert getattr(s, field) == getattr(good, field), (var, other)
        assert getattr(s, FIELD[var]) == getattr(DEFAULT, FIELD[var])


def test_all_bad_at_once_gives_one_warning_each():
    s = S.load_settings({S.MASTER: "2", S.MOE: "sometimes", S.MOE_FIXED_IN: "x", S.WORKSPACE: "0.5", S.LOG: "loud",
                         S.WORKSPACE_MAX: "51%", S.RESERVE: "half", S.MLA: "strictest"})
    assert len(s.warnings) == 8
    assert [w.split("=", 1)[0] for w in s.warnings] == [f"ignoring {v}" for v in S.ALL_VARIABLES]
    assert s == DEFAULT


def test_non_string_mapping_values_do_not_raise():
    class Boom:
        def __str__(self):
            raise RuntimeError("no")
    s = S.load_settings({S.MOE: Boom(), S.LOG: 7, S.WORKSPACE: b"1GiB"})
    assert len(s.warnings) == 3 and s == DEFAULT


def test_get_settings_in_a_process_with_hostile_env_and_doctor():
    """The exact values of the issue, through the real process env, in doctor: exit 0, one warning each."""
    env = dict(os.environ, FLASHINFER_GUARD_WORKSPACE="1" + "0" * 400, FLASHINFER_GUARD_MOE_FIXED_IN="9" * 5000,
               FLASHINFER_GUARD_LOG="\u00b2")
    r = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "doctor"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    warnings = [line for line in r.stdout.splitlines() if line.startswith("warning")]
    assert len(warnings) == 3
    assert max(map(len, r.stdout.splitlines())) < 1000


# ---- property-based ----

_units = st.sampled_from(["", "b", "B", "k", "KB", "KiB", "m", "MB", "MiB", "mib", "g", "GB", "GiB", "t", "TiB"])
_numbers = st.one_of(st.integers(min_value=0, max_value=10**30).map(str),
                     st.tuples(st.integers(0, 10**6), st.integers(0, 10**9)).map(lambda t: f"{t[0]}.{t[1]}"),
                     st.from_regex(r"[0-9.]{1,40}", fullmatch=True))
_size_like = st.builds(lambda n, sp, u: f"{n}{sp}{u}", _numbers, st.sampled_from(["", " ", "  "]), _units)
_anything = st.text(max_size=200)
_hostile = st.one_of(_anything, _size_like, st.text(alphabet=st.characters(codec="utf-8"), max_size=60),
                     st.from_regex(r"[0-9.]{0,30}", fullmatch=True), st.sampled_from(["auto", "off", "on", "1", "0"]))


@FAST
@given(st.dictionaries(st.sampled_from(S.ALL_VARIABLES), _hostile))
def test_property_settings_always_a_value_and_at_most_one_warning_per_variable(env):
    s = S.load_settings(env)  # never raises
    assert isinstance(s, S.Settings)
    assert len(s.warnings) <= len(env)
    for var in S.ALL_VARIABLES:
        said = [w for w in s.warnings if w.startswith(f"ignoring {var}=")]
        assert len(said) <= 1
        if said:  # a refused variable has its default
            assert getattr(s, FIELD[var]) == getattr(DEFAULT, FIELD[var])
            assert said[0].isascii() and said[0].isprintable()
    assert s.enabled in (True, False) and s.moe in ("auto", "on", "off") and s.log_level in ("info", "debug", "warning")
    assert s.workspace in ("auto", "off", "size")
    if s.workspace == "size":
        assert type(s.workspace_bytes) is int and S.MIN_SIZE_BYTES <= s.workspace_bytes <= S.MAX_SIZE_BYTES
    else:
        assert s.workspace_bytes is None
    assert S.bounded_version(s.moe_fixed_in) == s.moe_fixed_in
    kind, value = s.workspace_max
    assert (kind == "percent" and 1 <= value <= 5000) or (kind == "bytes" and S.MIN_SIZE_BYTES <= value
                                                           <= S.MAX_SIZE_BYTES)
    assert 0 < s.workspace_max_bytes(141 * S.GIB) <= S.MAX_SIZE_BYTES
    s.describe()


@pytest.mark.parametrize("value", [
    "0%", "0.00%", "50.01%", "51%", "100%", "5.001%", "-5%", "5 %%", "%", "5%5", "\u0665%", "５%", "5e1%",
    "1" * 300 + "%", "1MiB%", "0.5", "289GiB", "5%\n", "\x1b[5%", "five percent", ".5%",
])
def test_workspace_max_hostile_values_are_refused_with_one_warning(value):
    s = S.load_settings({S.WORKSPACE_MAX: value})
    _assert_one_warning(s, S.WORKSPACE_MAX, value)
    assert s.workspace_max == S.DEFAULT_WORKSPACE_MAX and "5%" in s.warnings[0]
    assert s == DEFAULT


@pytest.mark.parametrize("value,expect,on_h200", [
    ("5%", ("percent", 500), 150754820096 * 500 // 10000), ("2.5%", ("percent", 250), 150754820096 * 250 // 10000),
    ("0.01%", ("percent", 1), 150754820096 // 10000), ("50%", ("percent", 5000), 150754820096 // 2),
    (" 12 %", ("percent", 1200), 150754820096 * 12 // 100), ("8GiB", ("bytes", 8 << 30), 8 << 30),
    ("1MiB", ("bytes", 1 << 20), 1 << 20),
])
def test_workspace_max_accepted_values(value, expect, on_h200):
    s = S.load_settings({S.WORKSPACE_MAX: value})
    assert s.warnings == () and s.workspace_max == expect
    assert s.workspace_max_bytes(150754820096) == on_h200  # an H200's torch total_memory
    if expect[0] == "percent":
        assert s.workspace_max_bytes(None) == S.WORKSPACE_MAX_UNKNOWN_GPU


@FAST
@given(_size_like)
def test_property_parse_size_matches_exact_rational_arithmetic(text):
    from fractions import Fraction
    got = S.parse_size(text)
    num, _, unit = text.partition(" ")
    if not _:
        i = len(text.rstrip("bBkKmMgGtTiI"))
        num, unit = text[:i], text[i:]
    unit = unit.strip().lower()
    mult = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
            "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tib": 2**40}.get(unit)
    try:
        ok = (mult is not None and num.count(".") <= 1 and num.replace(".", "").isdigit() and len(num) <= 24
              and num not in (".",))
        exact = Fraction(num) * mult if ok else None
    except (ValueError, ZeroDivisionError):
        exact = None
    if exact is None or not (S.MIN_SIZE_BYTES <= -(-exact.numerator // exact.denominator) <= S.MAX_SIZE_BYTES):
        assert got is None, (text, got)
    else:
        assert got == -(-exact.numerator // exact.denominator), (text, got)


_ADAPTERS = r"""
import logging, sys
records = []
class H(logging.Handler):
    def emit(self, r):
        records.append(r.getMessage())
logging.getLogger().addHandler(H()); logging.getLogger().setLevel(logging.DEBUG)
from guard_core.runtime import wrapping as patching
import vllm_guard.plugin as vp, sglang_guard.plugin as sp
vp.register(); vp.register()
ok = sp.register(); sp.register()
print("sglang_registered", ok, sp.is_registered())
print("hooks", sorted(patching._hooks))
print("records", len(records))
for r in records:
    print("R", r)
"""


def test_adapters_stay_on_with_every_setting_hostile_but_the_switches():
    """The issue's worst case: a bad value used to make settings raise and turn the whole guard off
    ("not installed after an internal error"). Now both adapters register, with one warning per variable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_GUARD")}
    env.update(FLASHINFER_GUARD_WORKSPACE="1" + "0" * 400, FLASHINFER_GUARD_MOE_FIXED_IN="9" * 5000,
               FLASHINFER_GUARD_LOG="\u00b2", FLASHINFER_GUARD_MOE="\x1b[2J")
    r = subprocess.run([sys.executable, "-c", _ADAPTERS], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "sglang_registered True True" in out
    hooks = out.split("hooks ", 1)[1].splitlines()[0]
    assert "sglang.srt.layers.attention.flashinfer_backend" in hooks  # the SGLang workspace guard
    assert "'vllm.utils.flashinfer'" in hooks  # the vLLM MoE guard
    assert "'vllm.v1.attention.backends.flashinfer'" in hooks  # the vLLM workspace guard
    assert "internal error" not in out and "not installed" not in out and "not loaded" not in out
    lines = [line[2:] for line in out.splitlines() if line.startswith("R ")]
    for var in ("FLASHINFER_GUARD_WORKSPACE", "FLASHINFER_GUARD_MOE_FIXED_IN", "FLASHINFER_GUARD_LOG",
                "FLASHINFER_GUARD_MOE"):
        said = [line for line in lines if f"ignoring {var}=" in line]
        # each adapter says each bad variable once (vLLM's and SGLang's loggers are separate)
        assert 1 <= len(said) <= 2, (var, lines)
        assert all(len(line) < 400 and "\n" not in line and "\x1b" not in line for line in said)


def test_size_bound_is_the_largest_gpu_memory_class():
    """288 GiB: at least every GPU's memory in the table (B300: 268.6 GiB), and not absurdly more."""
    from guard_core.deployment.server_defaults import GPU_MEMORY
    largest = max(b for b, _ in GPU_MEMORY.values())
    assert largest <= S.MAX_SIZE_BYTES < 2 * largest
    assert S.parse_size(str(largest)) == largest
    assert S.parse_size("99999999999999999999") is None  # ~87 EiB used to be accepted
