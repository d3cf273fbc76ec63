"""One entry for the MoE decision, shared by both adapters.

An adapter reads the live server into a ``MoeFacts`` record (the host CPU, the
installed FlashInfer, the GPU's SM number, the op the experts run, whether this
line can skip one op's autotune sweep; and the names of what it could not read)
and hands it here with the settings; it gets back one ``MoeOutcome``: the
decision (``guard_core.decide.records.decide_moe`` over the evidence table,
``guard_core.flashinfer.moe_evidence``), and the lines it says:

- ``stand_down()``: where no patch is needed at all (nothing blocks, nothing
  warns), the one "moe: ok, <reason>" line and its level (DEBUG on a host the bug
  never affects, INFO on an aarch64 host with a reaching GPU);
- ``note(text)``: where the server's TRT-LLM backend stays, what the table says
  about it (a WARNING for a known fault, INFO for open reports or the skipped
  autotune sweep, else DEBUG/INFO as for a stand-down);
- ``line(detail)``: the decision's one line with the adapter's own words about
  what it changed;
- ``needed``: what a missing patch target names (the reason, where the guard
  would have blocked), else None.

The framework rules the decision needs are data here, per framework: which op a
quantization's TRT-LLM experts run (``op_of``) and the backend a server accepts
next for a quantization (``fallback_backend``). Which FlashInfer/host pairs fault,
and the sources, stay in ``guard_core.flashinfer.moe_evidence``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from guard_core.decide.records import MoeDecision, decide_moe, moe_advice
from guard_core.flashinfer.releases import unaffected_moe_host

__all__ = ["QUANT_OPS", "MoeFacts", "MoeOutcome", "Note", "decide", "fallback_backend", "op_of"]

TRTLLM = "flashinfer_trtllm"

# Each server's quantization names -> the FlashInfer TRT-LLM MoE op its TRT-LLM experts
# run (the key None: an unquantized checkpoint, BF16); a name not listed: unknown (None).
QUANT_OPS = {
    "vllm": {None: "bf16", "fp8": "fp8", "modelopt": "fp8", "modelopt_fp4": "nvfp4", "nvfp4": "nvfp4",
             "mxfp4": "mxfp4", "gpt_oss_mxfp4": "mxfp4", "compressed-tensors": None},
    "sglang": {None: "bf16", "fp8": "fp8", "modelopt": "fp8", "modelopt_fp8": "fp8", "w8a8_fp8": "fp8",
               "mxfp8": "fp8", "modelopt_fp4": "nvfp4", "nvfp4": "nvfp4", "modelopt_mixed": "nvfp4",
               "mxfp4": "mxfp4"},
}
# Main ops whose speculative (NextN/MTP drafter) MoE is BF16 (SGLang #30209, FlashInfer #4919).
_DRAFT_BF16 = {"sglang": ("bf16", "nvfp4")}
# SGLang: the runner backend it accepts next for a quantization once TRT-LLM is off (its own
# asserts in server_args); anything else -> triton.
_SGLANG_NEXT = {"modelopt_fp4": "flashinfer_cutlass", "nvfp4": "flashinfer_cutlass",
                "modelopt_mixed": "flashinfer_cutlass", "mxfp8": "cutlass"}


def op_of(framework: str, quantization, speculative: bool = False) -> str | None:
    """The TRT-LLM MoE op a ``framework`` checkpoint of ``quantization`` runs (None: unknown);
    ``speculative``: the drafter's MoE where the framework runs it in BF16."""
    table = QUANT_OPS[framework]
    main = table.get(quantization) if quantization in table else None
    if speculative and main in _DRAFT_BF16.get(framework, ()):
        return "bf16"
    return main


def fallback_backend(framework: str, backend: str, quantization) -> str:
    """The MoE runner backend ``framework`` accepts next for ``quantization`` in place of a
    TRT-LLM one (any other backend is returned as is)."""
    if framework != "sglang" or not backend.startswith(TRTLLM):
        return backend
    return _SGLANG_NEXT.get(quantization, "triton")


@dataclass(frozen=True)
class MoeFacts:
    """What an adapter read from the live server, framework-free."""

    framework: str  # "vllm" | "sglang"
    machine: str | None  # the host CPU (platform.machine())
    flashinfer_version: str | None  # None: not installed
    sm: int | None = None  # the GPU's major*10+minor; None: not read (taken as reaching the path)
    op: str | None = None  # the op the experts run (guard_core.flashinfer.moe_evidence.OPS); None: the shared gate
    can_skip_autotune: bool | None = None  # the line can skip one op's autotune sweep; None: not asked
    missing: tuple = ()  # what the adapter could not read ("gpu", ...)


class Note(NamedTuple):
    level: str | None  # "warning" | "info" | "debug"; None: nothing to say
    line: str


@dataclass(frozen=True)
class MoeOutcome:
    decision: MoeDecision
    facts: MoeFacts

    @property
    def block(self) -> bool:
        return self.decision.block

    @property
    def action(self) -> str:
        return self.decision.action

    @property
    def reason(self) -> str:
        return self.decision.reason

    @property
    def needed(self) -> str | None:
        """What a missing patch target names: the reason, where the guard blocks."""
        return self.decision.reason if self.decision.block else None

    def line(self, detail: str) -> str:
        return self.decision.line(detail)

    def stand_down(self) -> Note | None:
        """None where the adapter patches (the decision blocks or warns); else its one line."""
        if self.decision.block or self.decision.action == "warn":
            return None
        return Note("debug" if unaffected_moe_host(self.decision) else "info", f"moe: ok, {self.decision.reason}")

    def note(self, text: str | None = None) -> Note:
        """What to say where the server's TRT-LLM backend stays (``text``: what stays, in the
        adapter's words; for ``skip_autotune`` how the sweep is skipped)."""
        d = self.decision
        if d.action in ("warn", "info"):
            advice = moe_advice(d)
            return Note("warning" if d.action == "warn" else "info",
                        d.line(f"{text}; {advice}" if text else advice))
        if text is None:
            return Note(None, "")
        if d.action == "skip_autotune":
            return Note("info", d.line(text))
        return Note("debug" if unaffected_moe_host(d) else "info", d.line(text))


def decide(facts: MoeFacts, settings) -> MoeOutcome:
    """The MoE decision for ``facts`` under ``settings`` (a guard_core.runtime.settings.Settings)."""
    d = decide_moe(settings, machine=facts.machine, flashinfer_version=facts.flashinfer_version, gpu=facts.sm,
                   op=facts.op, can_skip_autotune=facts.can_skip_autotune)
    return MoeOutcome(d, facts)
