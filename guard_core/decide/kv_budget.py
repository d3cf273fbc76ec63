"""What the workspace the guard sizes costs, or gives back, in the server's KV budget (issue 28).

Both servers size their KV cache before they allocate FlashInfer's workspace,
so the buffer lives in the operator's slack (vLLM: ``1 - gpu_memory_utilization``;
SGLang: ``1 - mem_fraction_static``). That slack was sized with the server's own
buffer in it. ``FLASHINFER_GUARD_RESERVE`` says how the guard moves the budget:

* ``auto`` (default): by exactly what the guard changes in the buffer, charged for
  the bytes it adds over the server's own size, credited for the bytes ``exact``
  gives back; the process uses the same total memory as without the guard;
* ``full``: the whole buffer counted inside the budget (for little slack);
* ``off``: the server's accounting untouched.

Pure arithmetic and one log line: the adapters measure, this module decides.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard_core.units import fmt_mib

__all__ = ["MODES", "BudgetMove", "budget_line", "kv_token_change"]

MODES = ("auto", "full", "off")


@dataclass(frozen=True)
class BudgetMove:
    """How the KV budget moves for one buffer.

    ``buffer_bytes``: the buffer FlashInfer will plan in (the guard's decision);
    ``server_bytes``: the server's own size for it (what the slack was sized with);
    ``counted_bytes``: bytes of the buffer the server's own measurement already
    holds (a buffer alive during the profile run, V1 FULL-graph profiling):
    never charged twice.
    """

    mode: str
    buffer_bytes: int
    server_bytes: int
    counted_bytes: int = 0

    @property
    def charge(self) -> int:
        """Bytes the KV budget loses (negative: bytes it gains)."""
        if self.mode == "off":
            return 0
        if self.mode == "full":
            return max(0, int(self.buffer_bytes) - int(self.counted_bytes))
        return int(self.buffer_bytes) - int(self.server_bytes)  # auto

    def tokens(self, per_token_bytes: int | None) -> int | None:
        return kv_token_change(self.charge, per_token_bytes)


def kv_token_change(charge: int, per_token_bytes: int | None) -> int | None:
    """The KV cache's change in tokens (negative: fewer) for a budget ``charge`` (bytes lost; negative: gained).

    Rounded down: a cost counts every token that no longer fits whole, a gain only
    the whole tokens that now fit. None where the server's per-token size is unknown.
    """
    if not per_token_bytes or per_token_bytes <= 0:
        return None
    return (-int(charge)) // int(per_token_bytes)


def budget_line(move: BudgetMove, where: str, per_token_bytes: int | None = None) -> str:
    """The one start-up line: the buffer, where it was counted, its effect on the KV cache.

    ``where`` says in the server's words where the charge was made, e.g.
    "inside vLLM's memory profile".
    """
    head = (f"KV budget (FLASHINFER_GUARD_RESERVE={move.mode}): workspace {fmt_mib(move.buffer_bytes)} "
            f"(the server's own {fmt_mib(move.server_bytes)})")
    if move.mode == "off" or move.charge == 0:
        return f"{head}; KV budget unchanged"
    verb = "charged" if move.charge > 0 else "credited"
    text = f"{head}; {verb} {fmt_mib(abs(move.charge))} {where}"
    tokens = move.tokens(per_token_bytes)
    if tokens is not None:
        sign = "-" if move.charge > 0 else "+"
        text += f"; KV cache {sign}{abs(tokens):,} tokens ({per_token_bytes:,} B per token)"
    return text
