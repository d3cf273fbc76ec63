import pytest

from guard_core.runtime import settings as S
from guard_core.versions import parse_version, version_lt, is_version, installed_version, flashinfer_version


def test_defaults():
    s = S.load_settings({})
    assert (s.enabled, s.moe, s.moe_fixed_in, s.workspace, s.workspace_bytes, s.log_level) == (
        True, "auto", "0.6.16", "auto", None, "info")
    assert s.warnings == ()


@pytest.mark.parametrize("raw,expect", [
    ("768MiB", 768 << 20), ("1GiB", 1 << 30), ("1073741824", 1 << 30), ("512 mib", 512 << 20), ("1.5GiB", 3 << 29),
])
def test_workspace_sizes(raw, expect):
    s = S.load_settings({S.WORKSPACE: raw})
    assert s.workspace == "size" and s.workspace_bytes == expect and not s.warnings


@pytest.mark.parametrize("var,value,accepted", [
    (S.MASTER, "maybe", "1 or 0"),
    (S.MOE, "sometimes", "auto, strict, on or off"),
    (S.MOE_FIXED_IN, "next-year", "a version"),
    (S.WORKSPACE, "huge", "auto, exact, off or a size"),
    (S.WORKSPACE, "-5MiB", "auto, exact, off or a size"),
    (S.LOG, "loud", "info, debug or warning"),
])
def test_bad_values_warn_once_and_default(var, value, accepted):
    s = S.load_settings({var: value})
    assert len(s.warnings) == 1
    w = s.warnings[0]
    assert var in w and repr(value) in w and accepted in w and "\n" not in w
    assert s == S.load_settings({})  # defaults apply (warnings excluded from equality)


def test_switches():
    s = S.load_settings({S.MASTER: "0", S.MOE: "ON", S.WORKSPACE: "off", S.LOG: "debug", S.MOE_FIXED_IN: "0.7.1"})
    assert (s.enabled, s.moe, s.workspace, s.log_level, s.moe_fixed_in) == (False, "on", "off", "debug", "0.7.1")


def test_no_vllm_prefix():
    assert all(not v.startswith("VLLM_") for v in S.ALL_VARIABLES)


@pytest.mark.parametrize("a,b", [
    ("0.6.12", "0.6.16"), ("0.7.0", "0.7.0.post1"), ("0.7.0.post1", "0.7.1"), ("0.7.1rc1", "0.7.1"),
    ("0.19.1rc1.dev231+g9dd5ee011.cu130", "0.19.1"), ("0.7.1.dev3", "0.7.1rc1"), ("0.6.9", "0.6.10"),
])
def test_version_order(a, b):
    assert version_lt(a, b) and not version_lt(b, a)


def test_version_equal_and_invalid():
    assert parse_version("0.7.1") == parse_version("0.7.1.0")
    assert not is_version("banana") and is_version("1!2.0")


def test_installed_version_reads_metadata_only():
    import sys
    assert installed_version("pytest") is not None
    assert installed_version("no-such-distribution-xyz") is None
    before = set(sys.modules)
    flashinfer_version()
    assert "flashinfer" not in set(sys.modules) - before
