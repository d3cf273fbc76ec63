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

__all__ = ["MODES", "BudgetMove", "budget_line", "kv_token_change", "buffer_under_guard", "per_token_from_pages",
           "utilization_keeping_kv", "measured_return", "KvPlan", "vllm_kv_plan",
           "attention_per_token_bytes", "launch_utilization", "VLLM_DEFAULT_UTILIZATION", "sglang_kv_bytes",
           "sglang_mem_fraction_keeping_kv", "sglang_cell_bytes", "sglang_mem_fraction_delta", "sglang_budget_where",
           "SglangKvPlan", "sglang_kv_plan"]

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


# --- issue 28, vLLM side: the adapter's reservation and `plan` share this arithmetic ---

def buffer_under_guard(action: str, allocate_bytes: int, server_bytes: int) -> int:
    """The bytes FlashInfer's buffer has under a workspace decision, as the adapter's one
    apply gives it: ``exact`` below the server's size puts exactly the need in; a larger
    decided size raises the server's size source; otherwise the server's own size."""
    if action == "off":
        return int(server_bytes)
    if action == "exact" and allocate_bytes < server_bytes:
        return int(allocate_bytes)
    return max(int(allocate_bytes), int(server_bytes))


def per_token_from_pages(pages) -> int | None:
    """The KV cache's bytes per token from ``(page_size_bytes, block_size)`` of every
    layer that holds KV per token (vLLM: ``KVCacheSpec.page_size_bytes`` /
    ``block_size`` per layer, summed: how ``get_kv_cache_config`` divides the budget
    for one uniform group). None when nothing is known."""
    total = 0.0
    for page, block in pages:
        if not page or not block:
            continue
        total += int(page) / int(block)
    return int(round(total)) or None


def utilization_keeping_kv(utilization: float, charge: int, total_bytes: int) -> float:
    """The ``--gpu-memory-utilization`` that gives the KV cache the same bytes as without
    the guard when the budget is charged ``charge`` bytes (negative: credited): vLLM's
    requested memory is ``total * utilization`` (``request_memory``), so the charge moves
    it by ``charge / total``. Rounded up to vLLM's 4 decimals (never short), capped at 1."""
    import math

    if total_bytes <= 0:
        return utilization
    return min(1.0, math.ceil((utilization + charge / total_bytes) * 10_000 - 1e-9) / 10_000)


def measured_return(returned: int, move: BudgetMove) -> int:
    """What the adapter returns from vLLM's ``determine_available_memory`` when the
    buffer (``move.buffer_bytes``) was alive inside the measurement, so vLLM's own
    profile already took it from the budget, and ``move.counted_bytes`` is what the
    unguarded server would have counted of its own buffer there: the budget ends up
    moved by exactly ``move.charge`` from where vLLM alone would put it."""
    return int(returned) + int(move.buffer_bytes) - int(move.counted_bytes) - int(move.charge)


@dataclass(frozen=True)
class KvPlan:
    """`plan`'s KV-budget figures for one deployment (vLLM)."""

    move: BudgetMove
    per_token_bytes: int | None
    tokens: int | None  # the KV cache's change in tokens (negative: fewer)
    utilization: float | None  # the --gpu-memory-utilization in the command (vLLM's default when absent)
    keep_utilization: float | None  # the one that keeps the unguarded KV size
    total_bytes: int | None

    def line(self) -> str:
        text = budget_line(self.move, "inside vLLM's memory profile", self.per_token_bytes)
        if self.keep_utilization is not None and self.move.charge:
            text += (f"; --gpu-memory-utilization {self.keep_utilization:.4f} (instead of {self.utilization:.4f}) "
                     "keeps vLLM's unguarded KV size")
        return text


def vllm_kv_plan(mode: str, buffer_bytes: int, server_bytes: int, per_token_bytes: int | None,
                 utilization: float | None, total_bytes: int | None, counted_bytes: int = 0) -> KvPlan:
    """`plan`'s figures: the budget move, its KV tokens and the utilization that keeps the
    unguarded KV size. The KV size itself is vLLM's own estimate at start-up (profile
    run, CUDA-graph estimate); only the move is computed here, and it does not depend on it."""
    move = BudgetMove(mode, int(buffer_bytes), int(server_bytes), int(counted_bytes))
    keep = (utilization_keeping_kv(utilization, move.charge, total_bytes)
            if utilization is not None and total_bytes else None)
    return KvPlan(move, per_token_bytes, move.tokens(per_token_bytes), utilization, keep, total_bytes)


VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's CacheConfig.gpu_memory_utilization default (config/cache.py, 0.23-0.33)


def attention_per_token_bytes(groups, kv_dtype_bytes: int) -> int | None:
    """KV bytes per token per rank as vLLM's ``FullAttentionSpec.page_size_bytes / block_size``:
    ``2 (K and V) x kv heads x head size x dtype bytes`` per layer (K and V heads of equal size;
    ``head_size_v`` counted where it differs), summed over ``(count, kv_heads, dqk, dvo)`` groups."""
    total = 0
    for count, kv_heads, dqk, dvo in groups:
        total += int(count) * int(kv_heads) * (int(dqk) + int(dvo)) * int(kv_dtype_bytes)
    return total or None


def launch_utilization(argv) -> float | None:
    """``--gpu-memory-utilization`` from a vLLM launch command (``--x v`` or ``--x=v``), None if absent."""
    argv = list(argv or ())
    for i, tok in enumerate(argv):
        for flag in ("--gpu-memory-utilization", "--gpu_memory_utilization"):
            try:
                if tok == flag and i + 1 < len(argv):
                    return float(argv[i + 1])
                if tok.startswith(flag + "="):
                    return float(tok.split("=", 1)[1])
            except ValueError:
                return None
    return None


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
    value = math.ceil(value * 1000 - 1e-9) / 1000  # 1e-9: float noise only (0.88 x 1000), not a charge
    if value >= 1.0 or value <= 0.0:
        return None
    return value


def sglang_budget_where(mode: str, sizer: str | None = None) -> str:
    """Where the charge was made, in SGLang's words (the adapter's start-up line and `plan`
    say the same); ``sizer``: SGLang's function that sized the budget, where known."""
    if mode == "full":
        return (f"inside SGLang's KV budget (created before {sizer or 'SGLang'} measured free memory; "
                "the backend reuses that tensor)")
    return f"in SGLang's KV budget ({(sizer + '; ') if sizer else ''}the workspace is allocated after it)"


def sglang_cell_bytes(line: str | None, groups, kv_dtype_bytes: int) -> int | None:
    """SGLang's per-token KV size (its "cell size", what the pool budget is divided by) for
    full-attention MHA/GQA layers, per rank, from ``(count, kv_heads per rank, dqk, dvo)`` groups:
    0.5.11+ ``get_num_kv_heads(tp) x (head_dim + v_head_dim) x layers x element size``
    (0.5.11 model_executor/pool_configurator.py:152-158, 0.5.23 pool_configurator.py:491-497);
    0.5.5 ``get_num_kv_heads(tp) x head_dim x layers x 2 x element size`` (K and V of the
    query/key head dim, model_executor/model_runner.py:1309-1316). MLA, Mamba / linear-attention
    hybrids and sliding-window pools have their own sizes: the caller passes no groups then."""
    from guard_core.versions import version_lt

    old = bool(line) and version_lt(str(line), "0.5.11")
    total = 0
    for count, kv_heads, dqk, dvo in groups:
        total += int(count) * int(kv_heads) * (2 * int(dqk) if old else int(dqk) + int(dvo)) * int(kv_dtype_bytes)
    return total or None


def sglang_mem_fraction_delta(charge: int, pre_load_free: int) -> float | None:
    """How much ``--mem-fraction-static`` must rise (negative: may fall) to keep SGLang's
    unguarded KV budget under ``charge``: ``charge / pre_load_free`` rounded up to SGLang's
    three decimals (a fraction it rounds itself, memory_hook.py 0.5.23:322-326), so added to a
    three-decimal fraction it gives what ``sglang_mem_fraction_keeping_kv`` gives."""
    import math

    if not pre_load_free or pre_load_free <= 0:
        return None
    return math.ceil(int(charge) * 1000 / int(pre_load_free) - 1e-9) / 1000 + 0.0


@dataclass(frozen=True)
class SglangKvPlan:
    """`plan`'s KV-budget figures for one SGLang deployment."""

    move: BudgetMove
    per_token_bytes: int | None
    tokens: int | None
    mem_fraction_static: float | None  # the command's --mem-fraction-static; None: SGLang's automatic value
    keep_fraction: float | None  # the one that keeps the unguarded KV size (with the command's)
    fraction_delta: float | None  # what the fraction must change by (either way)
    pre_load_free: int | None

    def line(self) -> str:
        text = budget_line(self.move, sglang_budget_where(self.move.mode), self.per_token_bytes)
        if not self.move.charge or self.fraction_delta is None:
            return text
        if self.mem_fraction_static is not None:
            if self.keep_fraction is not None:
                return text + (f"; --mem-fraction-static {self.keep_fraction:.3f} (instead of "
                               f"{self.mem_fraction_static:.3f}) keeps SGLang's unguarded KV size")
            return text + "; no --mem-fraction-static below 1 keeps SGLang's unguarded KV size"
        return text + (f"; --mem-fraction-static {self.fraction_delta:+.3f} over SGLang's automatic value "
                       "keeps SGLang's unguarded KV size")


def sglang_kv_plan(mode: str, buffer_bytes: int, server_bytes: int, per_token_bytes: int | None,
                   mem_fraction_static: float | None, pre_load_free: int | None) -> SglangKvPlan:
    """`plan`'s figures for SGLang: the move (the adapter's BudgetMove: buffer = the guard's
    decided buffer, server = SGLang's own size), its KV tokens from SGLang's cell size, and the
    --mem-fraction-static that keeps the unguarded KV size (``pre_load_free``: the memory SGLang
    measures before loading the weights)."""
    move = BudgetMove(mode, int(buffer_bytes), int(server_bytes))
    delta = sglang_mem_fraction_delta(move.charge, pre_load_free) if pre_load_free else None
    keep = (sglang_mem_fraction_keeping_kv(mem_fraction_static, move.charge, pre_load_free)
            if mem_fraction_static is not None and pre_load_free else None)
    return SglangKvPlan(move, per_token_bytes, move.tokens(per_token_bytes), mem_fraction_static, keep, delta,
                        pre_load_free)
