"""This process's KV reservation (what ``kv_reserve`` did to SGLang's KV budget), on the floor below
both ``kv_reserve`` (which decides it) and ``workspace_apply`` (which allocates at least what was
paid for): one direction of imports, no circle (issue 42 item 7)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from guard_core.runtime.lifecycle import AdapterState


@dataclass
class Reservation:
    """What the guard did to this process's KV budget."""

    move: Any  # guard_core.decide.kv_budget.BudgetMove (what the budget moved by, vs without the guard)
    where: str  # SGLang's function that sized the budget
    per_token_bytes: int | None = None  # SGLang's own cell size (bytes of KV per token)
    buffer: Any = None  # full: the tensor created before the measurement
    placed: str | None = None  # full: "module" | "registry"
    line: str | None = None  # the start-up line said


@dataclass
class _State(AdapterState):
    reservation: Reservation | None = None
    tried: bool = False  # once per process: the first sizing call decides


_state = _State()


def reservation() -> Reservation | None:
    """This process's reservation (tests and benchmarks)."""
    return _state.reservation


def reserved_bytes() -> int | None:
    """The buffer size the KV budget was moved for (the backend allocates at least this)."""
    r = _state.reservation
    if r is None or r.move.mode == "off":
        return None
    return int(r.move.buffer_bytes)
