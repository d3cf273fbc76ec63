"""Fixed-split modes: where the workspace need grows with the prompt.

SGLang's ``--enable-deterministic-inference`` (every line 0.5.5-0.5.23,
``layers/attention/flashinfer_backend.py``: 0.5.5:168-183, 0.5.20:408-423,
0.5.23:436-451) plans eager prefill with ``fixed_split_size =
SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE`` (default 4096), eager decode with
``SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE`` (default 2048), CUDA graphs with
``disable_split_kv=True``, and forces ``SGLANG_FLASHINFER_WORKSPACE_SIZE.set(2 GiB)``
over whatever the user exported (SGLang PR #30244, open, would keep the user's
value). With a fixed split FlashInfer's planner has no SM cap: one set of scratch
rows per (query tile, KV chunk), so the need grows with the context.

This module answers, framework-free, for one deployment in such a mode:

- the need over the envelope (``sizing.compute_requirement`` with the fixed-split
  limits) and whether it is affordable (``FLASHINFER_GUARD_WORKSPACE_MAX``, a share
  of the GPU's memory, default 5%);
- where it is not: the buffer to allocate (the server's own, or more up to the
  affordable size, never less), the longest prompt that fits in it, and the
  settings that would make the full context fit (the chunked-prefill size and
  the split tile sizes, each computed by the planner model).

The adapters and ``flashinfer-guard plan`` both call ``assess``, so both say
the same line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from guard_core.runtime.settings import WORKSPACE_MAX, Settings
from guard_core.flashinfer.sizing import compute_requirement, fixed_split_fixes, longest_fitting_context, round_up_mib
from guard_core.units import GIB, fmt_mib, fmt_mib_gib

__all__ = ["SGLANG_FORCED_BYTES", "assess", "gpu_memory_bytes", "sglang_min_kv_pool_tokens", "split_sizes_from_env"]

# SGLang's own names (flashinfer_backend.py, read with get_int_env_var)
PREFILL_SPLIT_VAR = "SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE"
DECODE_SPLIT_VAR = "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE"
DEFAULT_PREFILL_SPLIT = 4096
DEFAULT_DECODE_SPLIT = 2048
SGLANG_FORCED_BYTES = 2048 * 1024 * 1024  # envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.set(2048 * 1024 * 1024)


def sglang_min_kv_pool_tokens(line: str | None) -> int:
    """The smallest KV pool (tokens) SGLang starts with. Its scheduler asserts "Memory pool
    size is too small" unless ``max_req_len = min(context_len - 1, pool - 1) > 0`` and, before
    0.5.23, ``max_req_input_len = max_req_len - 5 > 0`` (managers/tp_worker.py 0.5.5:295-302,
    0.5.11:302-309; 0.5.23:421-425 checks max_req_len only). The lines between 0.5.11 and
    0.5.23 were not read: taken as 0.5.11."""
    from guard_core.versions import is_version, version_lt

    return 2 if line and is_version(line) and not version_lt(line, "0.5.23") else 7


def split_sizes_from_env(environ) -> tuple[int | None, int | None, list[str]]:
    """(prefill split, decode split, notes) as SGLang's ``get_int_env_var`` reads them
    (sglang/srt/utils/common.py 0.5.5:257-265, 0.5.11:357-364, 0.5.23:1445-1452): unset or
    blank -> the default; else Python's ``int()`` of the value (surrounding spaces, underscores
    between digits, any Unicode decimal digits such as fullwidth ones); what ``int()`` refuses
    -> the default too (``except ValueError: return default``), which the notes say. A split
    <= 0: FlashInfer's own SM-capped split, returned as None."""
    out, notes = [], []
    for var, default in ((PREFILL_SPLIT_VAR, DEFAULT_PREFILL_SPLIT), (DECODE_SPLIT_VAR, DEFAULT_DECODE_SPLIT)):
        raw = None
        try:
            raw = environ.get(var)
        except Exception:
            raw = None
        if raw is None or not str(raw).strip():
            out.append(default)
            continue
        text = str(raw)
        try:
            v = int(text) if len(text) <= 64 else None
        except ValueError:
            v = None
        if v is None:
            notes.append(f"{var}={text.strip()[:40]!r} is not an integer to SGLang's int(): it uses its default "
                         f"{default}")
            out.append(default)
            continue
        if v > (1 << 40):
            notes.append(f"{var}={v}: larger than any KV cache; sized as one split")
        out.append(v if v > 0 else None)
        if v <= 0:
            notes.append(f"{var}={v}: no fixed split, FlashInfer's SM-capped split")
    return out[0], out[1], notes


def gpu_memory_bytes(gpu, device=None) -> int | None:
    """Total memory of the GPU: live through torch where a CUDA device is visible, else the
    table of known GPUs (``gpus.GPU_MEMORY``), else None."""
    import sys

    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            dev = device if device is not None and str(device).startswith("cuda") else torch.cuda.current_device()
            return int(torch.cuda.get_device_properties(dev).total_memory)
    except Exception:
        pass
    try:
        from guard_core.gpus import GPU_TABLE, find_spec, gpu_memory

        spec = find_spec(gpu.name) if gpu is not None else None
        if spec is None and gpu is not None:  # the table's own display name (offline / test GPUs)
            spec = next((g for g in GPU_TABLE if g.name == gpu.name), None)
        mem = gpu_memory(spec.key if spec else None)
        return int(mem[0]) if mem else None
    except Exception:
        return None


@dataclass(frozen=True)
class FixedSplitAssessment:
    need_bytes: int  # the need over the whole envelope at the full context
    server_bytes: int  # what the server allocates on its own (SGLang: the forced 2 GiB)
    max_bytes: int  # FLASHINFER_GUARD_WORKSPACE_MAX for this GPU
    affordable: bool
    allocate_bytes: int  # what the guard makes the buffer (never below server_bytes)
    context: int  # the longest context the server accepts (tokens)
    longest_prompt: int  # the longest prompt whose plans fit allocate_bytes (== context when it all fits)
    fixes: dict = field(default_factory=dict)
    dominant: str = ""  # "fixed_split_prefill" | "fixed_split_decode" | ...
    text: str = ""

    def as_dict(self) -> dict:
        return {"need_bytes": self.need_bytes, "server_bytes": self.server_bytes, "max_bytes": self.max_bytes,
                "affordable": self.affordable, "allocate_bytes": self.allocate_bytes, "context": self.context,
                "longest_prompt": self.longest_prompt, "fixes": dict(self.fixes), "dominant": self.dominant,
                "text": self.text}


def assess(layout, limits, gpu, version: str, planners, caller: str, *, server_bytes: int, settings: Settings,
           gpu_memory: int | None, mode: str = "deterministic inference", server: str = "SGLang",
           requirement=None) -> FixedSplitAssessment:
    """Need, affordability and, where the need is too big, the longest prompt that fits and
    the settings that fit the full context. ``limits`` carry the fixed splits and the
    context (``max_model_len``)."""
    req = requirement or compute_requirement(layout, limits, gpu, version, planners, caller)
    need = req.float_bytes
    max_bytes = settings.workspace_max_bytes(gpu_memory)
    ctx = int(limits.max_model_len or 0)
    dom = req.dominant.name if req.dominant is not None else ""
    splits = (f"prefill split {limits.fixed_split_prefill or 'SM-capped'}, "
              f"decode split {limits.fixed_split_decode or 'SM-capped'} pages of {layout.page_size}")
    head = (f"{mode} ({splits}, chunk {limits.max_num_batched_tokens}, context {ctx:,}): FlashInfer {version} "
            f"needs {fmt_mib_gib(need)}")
    if need <= server_bytes:
        return FixedSplitAssessment(need, server_bytes, max_bytes, True, server_bytes, ctx, ctx, {}, dom,
                                    f"{head} <= {server}'s {fmt_mib_gib(server_bytes)}: every prompt up to the "
                                    f"context fits")
    if need <= max_bytes:
        alloc = round_up_mib(need)
        return FixedSplitAssessment(need, server_bytes, max_bytes, True, alloc, ctx, ctx, {}, dom,
                                    f"{head} > {server}'s forced {fmt_mib_gib(server_bytes)}, affordable "
                                    f"(<= {WORKSPACE_MAX} {settings.describe_workspace_max()} = {fmt_mib_gib(max_bytes)}): "
                                    f"raising {fmt_mib_gib(server_bytes)} -> {fmt_mib_gib(alloc)}")
    # not affordable: the largest buffer we may give, and what fits in it
    budget = max(server_bytes, max_bytes)
    longest = longest_fitting_context(layout, limits, gpu, version, planners, caller, budget)
    alloc = server_bytes
    if longest > 0:
        fit = compute_requirement(layout, replace(limits, max_model_len=longest), gpu, version, planners, caller)
        alloc = max(server_bytes, round_up_mib(fit.float_bytes))
        if alloc > budget:  # rounding up past the budget: stay on the server's own
            alloc = server_bytes
            longest = longest_fitting_context(layout, limits, gpu, version, planners, caller, alloc)
    fixes = fixed_split_fixes(layout, limits, gpu, version, planners, caller, budget)
    prefill_fits = [s for s in req.scenarios if s.name == "fixed_split_prefill" and s.float_bytes <= budget]
    decode_fits = [s for s in req.scenarios if s.name == "fixed_split_decode" and s.float_bytes <= budget]
    phase_fixes = []  # one per phase that does not fit; within a phase any one suffices
    if not prefill_fits and limits.fixed_split_prefill:
        c = fixes.get("chunked_prefill_size")
        p = fixes.get("prefill_split_tile_size")
        alts = ([f"--chunked-prefill-size {c}"] if c else []) + ([f"{PREFILL_SPLIT_VAR}={p}"] if p else [])
        phase_fixes.append("prefill " + (" or ".join(alts) if alts else "does not fit at any chunk or split"))
    if not decode_fits and limits.fixed_split_decode:
        d = fixes.get("decode_split_tile_size")
        phase_fixes.append("decode " + (f"{DECODE_SPLIT_VAR}={d}" if d else "needs fewer --max-running-requests"))
    parts = ["; ".join(phase_fixes)] if phase_fixes else []
    parts.append(f"{WORKSPACE_MAX}={fmt_mib_gib(round_up_mib(need)) if need < 10 * GIB else fmt_mib(round_up_mib(need))}")
    over = ""
    if req.dominant is not None:
        s = req.dominant
        where = (f"a {s.q_len:,}-token prompt chunk against {ctx:,} tokens of KV" if s.name == "fixed_split_prefill"
                 else f"a decode batch of {s.batch} requests" if s.name == "fixed_split_decode" else s.name)
        over = f" at {where}"
    text = (f"{head}{over}, more than {WORKSPACE_MAX} {settings.describe_workspace_max()} = {fmt_mib_gib(max_bytes)} "
            f"of this GPU; buffer {fmt_mib_gib(alloc)} ({server}'s forced {fmt_mib_gib(server_bytes)}"
            f"{'' if alloc == server_bytes else ', raised'}): prompts up to {longest:,} tokens fit, a longer one "
            f"overflows it (the safety net then grows the buffer for that call if the GPU has the memory); "
            f"for the full {ctx:,}-token context: {' or '.join(parts)}")
    return FixedSplitAssessment(need, server_bytes, max_bytes, False, alloc, ctx, longest, fixes, dom, text)
