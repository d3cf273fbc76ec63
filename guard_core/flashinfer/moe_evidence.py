"""What is known about FlashInfer's TRT-LLM (trtllm-gen) routed fused MoE faults, as data.

One table, read by the MoE decision (``guard_core.decide.records.decide_moe``), both
adapters, ``flashinfer-guard doctor`` and ``flashinfer-guard plan``. Each row is
(GPU family, MoE ops, FlashInfer release range, phase, host where it matters) ->
risk, with the sources it rests on and what the guard does about it by default
and under ``FLASHINFER_GUARD_MOE=strict``. Read 2026-12-01 from the upstream
threads named in each row (shared/reference/moe-evidence.md lists them).

Who can reach the path at all (``REACH``): only compute capability 10.x.
vLLM's TRT-LLM experts ask ``is_device_capability_family(100)`` (vLLM 0.33
``experts/trtllm_bf16_moe.py:95-102``, ``trtllm_fp8_moe.py:165``,
``trtllm_nvfp4_moe.py:204``); FlashInfer 0.7.4 allowlists
``_TRTLLM_ROUTED_ARCHS = (100, 103, 107)`` (``fused_moe/api.py:541-545``); SGLang
picks ``flashinfer_trtllm`` on ``is_sm100`` (major 10). SM110/SM120/SM121 MoE
faults are in other backends (b12x, CUTLASS: FlashInfer #5446, #3170, #2776), so no
row names them and the guard never acts there, whatever the host.

The host CPU is not the cause: the trtllm-gen MoE cubins are one multi-architecture
package for every host in FlashInfer 0.6.12-0.7.4 (``flashinfer/artifacts.py``; only
the DSL_FMHA checksums are per CPU architecture), and the fix (#4237) is a host-side
allocation pad. The Grace row exists because the reports, and the product's promised
default, are there.

This module imports nothing from the rest of guard_core except ``versions``
(lazily): it is on every server's start-up path.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ACTIONS", "ARM_MACHINES", "BF16_AUTOTUNE_OP", "OPS", "PHASES", "REACH_MAJOR", "TABLE", "applicable",
           "family_label", "reaches", "sm_of"]

# The MoE ops of FlashInfer's trtllm-gen routed path (the autotuner names them
# flashinfer::trtllm_bf16_moe, ..._fp8_per_tensor_scale_moe, ..._fp8_block_scale_moe,
# ..._fp4_block_scale_moe (NVFP4 and MXFP4), ..._mxint4_block_scale_moe: FlashInfer 0.6.12
# fused_moe/core.py:1573, 1747, 1968, 2203, 2414).
OPS = ("bf16", "fp8", "nvfp4", "mxfp4", "mxint4")
PHASES = ("autotune", "serving")  # autotune: the start-up sweep; serving: live traffic and graph capture
ARM_MACHINES = ("aarch64", "arm64", "armv8l", "armv8b")

# The autotuner op name of the BF16 routed MoE (FlashInfer 0.6.12 fused_moe/core.py:1573
# `tuner.choose_one("flashinfer::trtllm_bf16_moe", ...)`); vLLM's and SGLang's skip lists
# take it verbatim (vLLM 0.33 envs.py:1801-1809 and warmup/kernel_warmup.py:299-301;
# SGLang 0.5.23 model_executor/runner/flashinfer_autotune.py:53-56).
BF16_AUTOTUNE_OP = "flashinfer::trtllm_bf16_moe"

# Compute capabilities that reach the TRT-LLM routed MoE: the 10.x family (see the
# module docstring for the sources). SM 100 B200/GB200, 103 B300/GB300, 107.
REACH_MAJOR = 10
REACH_SOURCES = (
    "vLLM 0.33 experts/trtllm_{bf16,fp8,nvfp4}_moe.py: _supports_current_device = is_device_capability_family(100)",
    "FlashInfer 0.7.4 fused_moe/api.py:541-545 _TRTLLM_ROUTED_ARCHS = (100, 103, 107)",
    "SGLang: flashinfer_trtllm chosen on get_platform().is_sm100 (major 10; utils/common.py:309-313)",
)

# Actions, weakest to strongest. "block": the TRT-LLM routed MoE is not chosen for the
# ops of the row; "skip_autotune": under strict, the op's start-up autotune sweep is
# skipped where the line can (else "block"); "warn"/"info": one start-up line.
ACTIONS = ("none", "info", "warn", "skip_autotune", "block")


@dataclass(frozen=True)
class EvidenceRow:
    id: str
    risk: str  # what goes wrong, one line
    sms: tuple  # compute capabilities (major*10+minor) the reports come from; a row applies to the whole
    #             SM10x family (one sm100f cubin family), REACH decides where
    ops: tuple  # subset of OPS
    flashinfer_from: str | None  # first affected release (None: every release before the fix)
    flashinfer_fixed_in: str | None  # first release with the fix (None: open)
    phases: tuple  # subset of PHASES
    hosts: tuple | None  # CPU architectures the row is about; None: any host
    default: str  # action under FLASHINFER_GUARD_MOE=auto
    strict: str  # action under FLASHINFER_GUARD_MOE=strict
    sources: tuple  # issue / PR / file:line, each one string
    cite: str  # the sources in a few words, for log lines
    status: str  # "fixed" | "open"
    why: str  # why the defaults are what they are

    @property
    def every_op(self) -> bool:
        return set(self.ops) == set(OPS)

    def short(self) -> str:
        rng = _range(self.flashinfer_from, self.flashinfer_fixed_in)
        host = "any host" if self.hosts is None else "/".join(self.hosts[:1])
        ops = "every op" if self.every_op else "/".join(self.ops)
        return f"{self.id} ({ops}, SM10x, FlashInfer {rng}, {'+'.join(self.phases)}, {host}; {self.cite})"


def _range(lo: str | None, hi: str | None) -> str:
    if lo and hi:
        return f"{lo} to <{hi}"
    if hi:
        return f"<{hi}"
    if lo:
        return f">={lo} (open)"
    return "every release"


ROUTE_MAP_FIX = "0.6.16"  # FlashInfer #4288, the cherry-pick of #4237 (first tag with it: v0.6.16)

TABLE: tuple[EvidenceRow, ...] = (
    EvidenceRow(
        id="route-map-oob",
        risk=("routed dynamic-batch GEMMs (Bmm_*_dynB) read one int32 past the route map on every launch; "
              "CUDA illegal address whenever the allocation ends at a mapped-region boundary"),
        sms=(100, 103, 107), ops=OPS, flashinfer_from=None, flashinfer_fixed_in=ROUTE_MAP_FIX,
        phases=("autotune", "serving"), hosts=None, default="warn", strict="block",
        sources=(
            "FlashInfer #4237 (main 8b6af1aaa, 2026-07-29: pad the route map by one element; B200 Kimi-K2.5 NVFP4 "
            "TP4 on 0.6.15.post1: compute-sanitizer 40 -> 0 invalid reads, autotune crash loop 3/3 -> 0/6)",
            "FlashInfer #4288 (cherry-pick 589e326c7 into v0.6.16)",
            "FlashInfer 0.7.4 csrc/trtllm_fused_moe_kernel_launcher.cu:1581-1584 (the pad, in the launcher base "
            "class: bf16, fp8, nvfp4, mxfp4, mxint4)",
        ),
        cite="FlashInfer #4237/#4288, fixed in 0.6.16",
        status="fixed",
        why=("a known out-of-bounds read on every host; the default warns (does not change the backend: the read "
             "faults only where an allocation ends at a region boundary, and blocking every B200/B300 x86 "
             "deployment would slow servers that run); strict blocks"),
    ),
    EvidenceRow(
        id="route-map-oob-grace",
        risk="the same out-of-bounds read, reported as autotune crashes on Grace (GB200/GB300)",
        sms=(100, 103), ops=OPS, flashinfer_from=None, flashinfer_fixed_in=ROUTE_MAP_FIX,
        phases=("autotune", "serving"), hosts=ARM_MACHINES, default="block", strict="block",
        sources=(
            "vLLM #46861 (GB200 aarch64, vLLM 0.23.0 / FlashInfer 0.6.12: trtllm_bf16_moe autotune IMA)",
            "vLLM #45285 (GB200 aarch64, vLLM 0.22.1rc1: trtllm_bf16_moe autotune IMA with --enforce-eager)",
            "FlashInfer #3530 (GB200/GB300 Qwen3.5-397B NVFP4 TP8: MoE autotune crash; named by #4237)",
        ),
        cite="vLLM #46861, #45285, FlashInfer #3530; cause FlashInfer #4237, fixed in 0.6.16",
        status="fixed",
        why=("the reports concentrate on Grace and the guard has blocked there since its first release: "
             "kept as the default (every report is before 0.6.16)"),
    ),
    EvidenceRow(
        id="bf16-open",
        risk="BF16 routed MoE (trtllm_bf16_moe, dynB GEMMs) illegal memory access still reported after the fix",
        sms=(100, 103), ops=("bf16",), flashinfer_from=ROUTE_MAP_FIX, flashinfer_fixed_in=None,
        phases=("autotune", "serving"), hosts=None, default="info", strict="skip_autotune",
        sources=(
            "FlashInfer #4919 / SGLang #30209 (8x B300 SM103, FlashInfer 0.6.17: BF16 NextN/MTP drafter MoE of an "
            "FP4 checkpoint, production IMA every 3-12 h; open)",
            "vllm-omni #7004 (B200, FlashInfer 0.6.16.post3: trtllm_bf16_moe autotune; open)",
            "FlashInfer #4157 (B200 0.6.14, B300 3/3 in a later comment: BF16 autotune at m=1; open; not reproduced "
            "on B200 at main d70a043f)",
            "vLLM PR #46238 (open: no bf16 autotune on SM100 at warm-up); vLLM 0.29+ VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS "
            "(PR #48268)",
        ),
        cite="open: FlashInfer #4919, #4157, SGLang #30209, vllm-omni #7004",
        status="open",
        why=("open reports without a cause or fix: the default only says so (it never makes a healthy server "
             "slower); strict skips the BF16 autotune sweep where the line can, else blocks the BF16 routed MoE"),
    ),
)


def _key(version: str):
    from guard_core.versions import parse_version

    return parse_version(version)


def reaches(sm: int | None) -> bool:
    """Whether a GPU of compute capability ``sm`` (major*10+minor) can reach the path;
    None (unknown GPU) counts as reaching it (the larger risk)."""
    return sm is None or sm // 10 == REACH_MAJOR


def in_range(row: EvidenceRow, flashinfer_version: str) -> bool:
    """Whether FlashInfer ``flashinfer_version`` lies in the row's release range
    (raises on a version that does not parse)."""
    v = _key(flashinfer_version)
    if row.flashinfer_from is not None and v < _key(row.flashinfer_from):
        return False
    if row.flashinfer_fixed_in is not None and v >= _key(row.flashinfer_fixed_in):
        return False
    return True


def applicable(*, sm: int | None, flashinfer_version: str | None, machine: str | None = None,
               op: str | None = None, fixed_in: str | None = None) -> tuple:
    """The rows that apply to a deployment: GPU ``sm`` (None: unknown, assumed to reach
    the path), FlashInfer release, host CPU ``machine`` (None: rows of any host only
    match; host-specific rows need the host), and ``op`` (None: any op; a row for one
    op applies when that op may run). ``fixed_in`` moves the end of the rows whose fix
    is the route-map pad (``FLASHINFER_GUARD_MOE_FIXED_IN``). Never raises; an unparsable
    or missing version matches nothing."""
    if not flashinfer_version or not reaches(sm):
        return ()
    out = []
    for row in TABLE:
        try:
            r = row
            if fixed_in and fixed_in != ROUTE_MAP_FIX:
                from dataclasses import replace

                if row.flashinfer_fixed_in == ROUTE_MAP_FIX:
                    r = replace(row, flashinfer_fixed_in=fixed_in)
                if row.flashinfer_from == ROUTE_MAP_FIX:
                    r = replace(r, flashinfer_from=fixed_in)
            if not in_range(r, flashinfer_version):
                continue
        except Exception:
            continue
        if row.hosts is not None and not (machine and str(machine).lower() in row.hosts):
            continue
        if op is not None and op not in row.ops:
            continue
        out.append(row)
    return tuple(out)


def row(row_id: str) -> EvidenceRow:
    for r in TABLE:
        if r.id == row_id:
            return r
    raise KeyError(row_id)


def sm_of(cc) -> int | None:
    """(major, minor) -> major*10+minor; None when unknown or malformed."""
    try:
        major, minor = int(cc[0]), int(cc[1])
    except Exception:
        return None
    return major * 10 + minor


def family_label(sm: int | None) -> str:
    if sm is None:
        return "GPU unknown (assumed SM10x)"
    return f"SM{sm}"
