"""Ask FlashInfer where it can answer (issue 27 item 5).

From 0.6.15 (FlashInfer PR #3741: ``flashinfer/prefill.py`` / ``flashinfer/decode.py``
``workspace_size(...)``) the paged wrappers return the caller-owned workspace a ``plan()`` would
need, without allocating or changing plan state; 0.6.12 and earlier have no such method. Where
an adapter can ask it, ``cross_check`` runs FlashInfer's answer for each eager witness batch of
the guard's envelope next to the guard's own figure for that batch: the larger one is used, and
a disagreement is one warning naming both numbers. FlashInfer not answering (no method, an
error, a backend without it) changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

__all__ = ["asks_the_plan_module", "cross_check", "witness_indptrs", "workspace_size_of", "WS_SIZE_SINCE"]

WS_SIZE_SINCE = (0, 6, 15)  # FlashInfer PR #3741

# plan() parameters that enter get_batch_prefill_module's cache key. Where plan() takes one that
# workspace_size() does not, workspace_size() loads another module variant than the server's plan
# (a JIT build or a second module at start-up): FlashInfer 0.7.4's plan passes use_token_head_sf
# (flashinfer/prefill.py 0.7.4:3636, 4255-4271), its workspace_size does not (:3285-3321, 3545-3557).
MODULE_KEY_PARAMS = ("use_token_head_sf",)


def asks_the_plan_module(wrapper_cls) -> bool:
    """Whether ``wrapper_cls.workspace_size`` loads the prefill module its ``plan`` loads (by
    signature: no MODULE_KEY_PARAMS parameter of plan() missing from workspace_size())."""
    import inspect

    try:
        plan = inspect.signature(wrapper_cls.plan).parameters
        ws = inspect.signature(wrapper_cls.workspace_size).parameters
    except (AttributeError, TypeError, ValueError):
        return False
    return not any(p in plan and p not in ws for p in MODULE_KEY_PARAMS)


def witness_indptrs(witness) -> tuple[list[int], list[int]]:
    """(qo_indptr, kv_indptr in pages) of a witness ((query tokens, KV pages, requests), ...)."""
    qo, kv = [0], [0]
    for q, pages, count in witness:
        for _ in range(int(count)):
            qo.append(qo[-1] + int(q))
            kv.append(kv[-1] + int(pages))
    return qo, kv


def workspace_size_of(wrapper_cls, state: dict, device, witness, page: int, num_qo_heads: int, num_kv_heads: int,
                      head_dim: int, backend: str, **plan_kw) -> int:
    """FlashInfer's own ``workspace_size(...)`` (float bytes) for a witness batch, asked of one paged
    prefill wrapper kept in ``state`` (made on first use: FlashInfer's constructor allocates its
    8 MiB int buffer; the float buffer is a 1 KiB placeholder, only its device is read).
    ``plan_kw``: the keyword arguments the server's own ``plan()`` passes (dtypes, window, soft-cap)."""
    import torch

    if "w" not in state:
        state["w"] = wrapper_cls(torch.empty(1024, dtype=torch.uint8, device=device or "cuda"), "NHD", backend=backend)
    qo, kv = witness_indptrs(witness)
    n = len(qo) - 1
    i32 = torch.int32
    f, _ = state["w"].workspace_size(
        torch.tensor(qo, dtype=i32), torch.tensor(kv, dtype=i32), torch.zeros(kv[-1], dtype=i32),
        torch.full((n,), int(page), dtype=i32), int(num_qo_heads), int(num_kv_heads), int(head_dim), int(page),
        **plan_kw)
    return int(f)


def cross_check(computed, ask: Callable, key: str = "workspace-fi-size"):
    """``computed`` (a workspace_decision.WorkspaceNeed) checked against FlashInfer: ``ask(scenario)``
    returns FlashInfer's float workspace bytes for that scenario's witness batch, or None where it
    cannot say. Only the eager scenarios planned by FA2's PrefillPlan with a witness are asked.
    Returns ``computed`` unchanged when FlashInfer agrees (or cannot answer), else a copy whose
    need is the larger of the two and whose warnings carry one line naming both numbers."""
    req = getattr(computed, "requirement", None)
    if req is None:
        return computed
    answers = []
    for s in req.scenarios:
        if not s.witness or not s.name.startswith("eager") or s.planner != "fa2":
            continue
        try:
            fi = ask(s)
        except Exception:  # FlashInfer could not answer: the guard's own figure stands
            fi = None
        if fi is not None:
            answers.append((s, int(fi)))
    differ = [(s, fi) for s, fi in answers if fi != s.float_bytes]
    if not differ:
        return computed
    s, fi = max(differ, key=lambda x: abs(x[1] - x[0].float_bytes))
    larger = max(req.float_bytes, max(fi for _, fi in answers))
    text = (f"workspace: FlashInfer's workspace_size() gives {fi:,} B for the {s.name} batch "
            f"({s.batch} x {s.q_len} tokens) where the guard's model gives {s.float_bytes:,} B; "
            f"sizing with the larger ({larger:,} B)")
    req2 = dataclasses.replace(req, float_bytes=larger, notes=tuple(req.notes) + (text,))
    return dataclasses.replace(computed, requirement=req2, warnings=tuple(computed.warnings) + ((key, text),))
