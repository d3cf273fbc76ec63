"""guard_core.decide.kv_budget's SGLang closed form (issue 28): the KV budget and the
--mem-fraction-static that keeps it under the guard's charge. Expected values by hand."""

from hypothesis import given, strategies as st

from guard_core.decide.kv_budget import sglang_kv_bytes, sglang_mem_fraction_keeping_kv

GIB = 1 << 30
MIB = 1 << 20


def test_budget_is_pre_load_free_times_fraction_less_weights():
    # 100 GiB free before loading, 0.9 static, 60 GiB of weights: 90 - 60 = 30 GiB
    assert sglang_kv_bytes(100 * GIB, 0.9, 60 * GIB) == 30 * GIB
    # SGLang's own multimodal reservation and the guard's charge come off it
    assert sglang_kv_bytes(100 * GIB, 0.9, 60 * GIB, charge=512 * MIB, reserved=100 * MIB) == 30 * GIB - 612 * MIB
    # a credit (exact gives 463 MiB back) adds to it
    assert sglang_kv_bytes(100 * GIB, 0.9, 60 * GIB, charge=-463 * MIB) == 30 * GIB + 463 * MIB


def test_fraction_keeping_the_unguarded_kv():
    # 512 MiB on 100 GiB pre-load free: +0.005 exactly -> 0.905
    assert sglang_mem_fraction_keeping_kv(0.9, 512 * MIB, 100 * GIB) == 0.905
    # 3 MiB (the 0.5.5 seed's raise) on 139.9 GiB: +0.0000209 -> rounded up to 0.881
    assert sglang_mem_fraction_keeping_kv(0.88, 3 * MIB, 150217949184) == 0.881
    # a credit lowers it, rounded up (the KV cache never below the unguarded one)
    assert sglang_mem_fraction_keeping_kv(0.88, -463 * MIB, 150217949184) == 0.877
    assert sglang_mem_fraction_keeping_kv(0.99, 2 * GIB, 100 * GIB) is None  # no fraction below 1 does it
    assert sglang_mem_fraction_keeping_kv(0.9, GIB, 0) is None
    # two bytes: still one thousandth more (hypothesis found the rounding that dropped it)
    assert sglang_mem_fraction_keeping_kv(0.5, 2, 40 * GIB) == 0.501


@given(st.floats(0.5, 0.95), st.integers(-4 * GIB, 4 * GIB), st.integers(40 * GIB, 280 * GIB),
       st.integers(0, 30 * GIB))
def test_the_suggested_fraction_keeps_at_least_the_unguarded_budget(mfs, charge, pre, weights):
    m = sglang_mem_fraction_keeping_kv(mfs, charge, pre)
    if m is None:
        return
    unguarded = sglang_kv_bytes(pre, mfs, weights)
    assert sglang_kv_bytes(pre, m, weights, charge=charge) >= unguarded - 1
    # and not more than one thousandth of the pre-load memory above it (SGLang's 3 decimals)
    assert sglang_kv_bytes(pre, m, weights, charge=charge) <= unguarded + pre // 1000 + 1
