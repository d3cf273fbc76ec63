"""guard_core.decide.kv_budget: the budget move per FLASHINFER_GUARD_RESERVE mode and its one line."""

from hypothesis import given, strategies as st

from guard_core.runtime import settings as S
from guard_core.decide.kv_budget import BudgetMove, budget_line, kv_token_change
from guard_core.units import MIB


def test_auto_moves_by_the_guards_change_both_ways():
    assert BudgetMove("auto", 514 * MIB, 394 * MIB).charge == 120 * MIB
    assert BudgetMove("auto", 200 * MIB, 394 * MIB).charge == -194 * MIB  # exact gives back
    assert BudgetMove("full", 514 * MIB, 394 * MIB).charge == 514 * MIB
    assert BudgetMove("full", 514 * MIB, 394 * MIB, counted_bytes=514 * MIB).charge == 0
    assert BudgetMove("off", 514 * MIB, 394 * MIB).charge == 0


@given(st.integers(-(1 << 40), 1 << 40), st.integers(1, 1 << 24))
def test_tokens_cost_rounds_up_gain_rounds_down(charge, per_token):
    t = kv_token_change(charge, per_token)
    assert t * per_token <= -charge < (t + 1) * per_token
    assert kv_token_change(charge, None) is None and kv_token_change(charge, 0) is None


def test_line_names_mode_charge_and_tokens():
    line = budget_line(BudgetMove("auto", 514 * MIB, 394 * MIB), "inside vLLM's memory profile", 30720)
    assert line == ("KV budget (FLASHINFER_GUARD_RESERVE=auto): workspace 514 MiB (the server's own 394 MiB); "
                    "charged 120 MiB inside vLLM's memory profile; KV cache -4,096 tokens (30,720 B per token)")
    assert "credited 194 MiB" in budget_line(BudgetMove("auto", 200 * MIB, 394 * MIB), "there", 4096)
    assert budget_line(BudgetMove("off", 514 * MIB, 394 * MIB), "there").endswith("KV budget unchanged")


def test_reserve_variable():
    assert S.load_settings({}).reserve == "auto"
    assert S.load_settings({S.RESERVE: " FULL "}).reserve == "full"
    bad = S.load_settings({S.RESERVE: "half"})
    assert bad.reserve == "auto" and bad.warnings == (
        "ignoring FLASHINFER_GUARD_RESERVE='half': accepted values are auto, full or off; using the default auto",)
