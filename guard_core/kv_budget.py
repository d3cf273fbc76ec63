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

from .units import fmt_mib

__all__ = ["MODES", "BudgetMove", "budget_line", "kv_token_change", "sglang_kv_bytes", "sglang_mem_fraction_keeping_kv"]

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


# ---------------------------------------------------------------- SGLang's closed form (issue 28, plan)

def sglang_kv_bytes(pre_load_free: int, mem_fraction_static: float, weights: int, charge: int = 0,
                    reserved: int = 0) -> int:
    """SGLang's KV pool budget in bytes: the memory free after the weights minus
    ``pre_load_free x (1 - mem_fraction_static)`` (0.5.23 kv_cache_configurator.py:3000-3039,
    0.5.11 model_runner_kv_cache_mixin.py:57-70, 0.5.5 model_runner.py:1317-1319), i.e.
    ``pre_load_free x mem_fraction_static - weights``, less what SGLang itself reserves
    (``reserved``: the multimodal ``mm_runtime_reservation_gb``, 0.5.23:202-217) and the
    guard's ``charge`` (BudgetMove.charge). Nothing measured at run time beyond that
    (no forward pass is profiled), so this is the server's figure up to its float rounding."""
    free_after_weights = int(pre_load_free) - int(weights)
    slack = int(pre_load_free) * (1.0 - float(mem_fraction_static))
    return int(free_after_weights - slack) - int(reserved) - int(charge)


def sglang_mem_fraction_keeping_kv(mem_fraction_static: float, charge: int, pre_load_free: int) -> float | None:
    """The ``--mem-fraction-static`` that keeps SGLang's unguarded KV budget under a
    ``charge`` (bytes the budget loses; negative: gains): ``mfs + charge / pre_load_free``,
    rounded up to SGLang's own three decimals (its suggestion in the "Loaded weights leave
    no GPU memory" error, 0.5.23 kv_cache_configurator.py:3043-3047), so the KV cache is
    never smaller than without the guard. None where no fraction below 1 does it."""
    import math

    if not pre_load_free or pre_load_free <= 0:
        return None
    value = float(mem_fraction_static) + int(charge) / int(pre_load_free)
    value = math.ceil(round(value * 1000, 6)) / 1000
    if value >= 1.0 or value <= 0.0:
        return None
    return value
