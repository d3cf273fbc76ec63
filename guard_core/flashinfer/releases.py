"""What this flashinfer-guard was checked against, and what it knows per FlashInfer release.

Two declarations, in the manner of OpenTelemetry's instrumentation dependency
declarations, read by the adapters, ``flashinfer-guard doctor`` and the sizing
model alike:

* ``CHECKED_LINES``: the vLLM and SGLang release lines the adapters are tested
  inside (tests/vllm, tests/sglang, ci/matrix.sh). Outside them the guards still
  act - their targets are found by feature, never by version string - and say
  so once per process (``line_note``). The one list of lines: ci/matrix.sh and
  ci/matrix_report.py read it (``python3 -m guard_core.flashinfer.releases --lines``), and
  tests/core/test_ci_lines.py ties the locks and the default CI runs to it.
* ``FLASHINFER_RELEASES``: the one table of FlashInfer release knowledge: the
  planner sizing families, the GQA groups the CUDA-core decode kernels are
  compiled for, which callers pass ``uniform_q_len`` to the planner, and the
  first release whose TRT-LLM fused MoE the MoE guard trusts on aarch64.
  ``guard_core.flashinfer.planner`` derives its families and feature flags from
  it. ``FLASHINFER_CHECKED`` are the releases whose real planner code the
  conformance suite (tests/conformance) compiles and compares byte for byte;
  a newer FlashInfer is sized with the newest family and the decision says
  "extrapolated from FlashInfer <last checked>" (``flashinfer_extrapolation``).

This module is on every server's start-up path (settings may read the MoE
default from it): plain tuples, no imports at module level beyond ``versions``
done lazily.
"""

from __future__ import annotations

__all__ = ["CHECKED_LINES", "FLASHINFER_CHECKED", "FLASHINFER_MATRIX_CHECKED", "FLASHINFER_RELEASES", "MOE_FIXED_IN",
           "NATIVE_VAR", "announce", "decode_group_sizes", "decode_passes_uniform_q_len", "describe", "families",
           "family", "flashinfer_extrapolation", "has", "line_label", "line_note", "line_status", "matrix_lines",
           "unaffected_moe_host", "unchecked_reason", "workspace_guard_needed"]

# --------------------------------------------------------------- framework lines

CHECKED_LINES = {
    "vllm": ("0.19.1", "0.23.0", "0.26.0", "0.29.0", "0.32.0", "0.33.0", "0.34.0"),
    "sglang": ("0.5.5", "0.5.11", "0.5.15", "0.5.20", "0.5.22", "0.5.23"),
}
# vLLM 0.34.0 is checked with FlashInfer 0.7.4, not the 0.7.3 its wheel pins (Requires-Dist
# flashinfer-python==0.7.3, absent from the registry; ci/lock.sh overrides it with 0.7.4, which
# installs and imports beside it): the pair (0.34.0, 0.7.4) is the one its lock installs and the
# one guard_core.deployment.deployment_record.FLASHINFER_PINS records. There the workspace guard
# stands down (FlashInfer >= 0.7.1, sized with the >=0.7.4 family, checked by the conformance
# suite), the MoE guard stands down (>= 0.6.16) and Model Runner V1 is gone (vllm_guard.runner).
# How many release components name a line: vLLM 0.33.x is one line, SGLang 0.5.23 another.
LINE_PARTS = {"vllm": 2, "sglang": 3}
DISPLAY = {"vllm": "vLLM", "sglang": "SGLang", "flashinfer": "FlashInfer"}
DISTRIBUTION = {"vllm": "vllm", "sglang": "sglang"}
# Each server's own workspace-size variable (the one place: server_defaults, launch_command and both adapters read it here).
NATIVE_VAR = {"vllm": "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", "sglang": "SGLANG_FLASHINFER_WORKSPACE_SIZE"}

# ------------------------------------------------------------ FlashInfer releases

# Releases whose scheduler.cuh/utils.cuh the conformance suite compiles and checks
# the planner model against (tests/conformance/oracle.py RELEASES).
FLASHINFER_CHECKED = ("0.5.0", "0.6.12", "0.6.14", "0.6.16", "0.7.0.post1", "0.7.2.post1", "0.7.4")
# The other FlashInfer pins of the checked lines (ci/locks/): ci/matrix.sh runs the same
# conformance suite on each line against that line's installed headers.
FLASHINFER_MATRIX_CHECKED = ("0.6.6", "0.6.8.post1", "0.6.18", "0.7.1", "0.7.2")

# Sizing family of every release before the first row that names one.
BASE_FAMILY = "<=0.6.13"
# GQA groups the CUDA-core decode kernels are dispatched for before any row adds one
# (DISPATCH_GQA_GROUP_SIZE in utils.cuh).
BASE_DECODE_GROUPS = (1, 2, 3, 4, 8)

# The table: (first release, feature, sizing family that starts here or None,
# value or None, what changes). A release has a feature when it is at or after
# the row's first release; a newer, unchecked release has every feature.
FLASHINFER_RELEASES = (
    ("0.5.1", "colocated", None, None,
     "PrefillPlan takes num_colocated_ctas (max grid = 2 * SMs - colocated CTAs)"),
    ("0.6.14", "vo512_rule", "0.6.14-0.6.15", None,
     "FA2DetermineCtaTileQ: value head dim >= 512 -> query tile 16 / 32"),
    ("0.6.15", "fa3_head_dim_gate", None, None,
     "determine_attention_backend picks FA3 only for head dims 64/128/256 and 192/128 "
     "(is_fa3_prefill_head_dim_supported, flashinfer/utils.py; absent in 0.6.14)"),
    ("0.6.16", "uniform_q_len", "0.6.16-0.6.17", None,
     "PrefillPlan takes uniform_q_len for CUDA-graph plans"),
    ("0.6.16", "moe_trtllm_aarch64_ok", None, None,
     "TRT-LLM fused MoE trusted on aarch64 (default of FLASHINFER_GUARD_MOE_FIXED_IN)"),
    ("0.6.18", "qk512_and_smem", "0.6.18-0.7.0.post1", None,
     "query head dim >= 512 -> query tile 16; shared-memory fallback by KV dtype"),
    ("0.6.18", "decode_group", None, 6,
     "CUDA-core decode kernels compiled for GQA group 6"),
    ("0.7.1", "rows_by_query", "0.7.1-0.7.2.post1", None,
     "PR #5177: split-KV scratch rows ceil(padded * cta_tile_q / gqa_group)"),
    ("0.7.1", "decode_group", None, 16,
     "CUDA-core decode kernels compiled for GQA group 16"),
    ("0.7.4", "fixed_uniform_q_len", ">=0.7.4", None,
     "PrefillPlan takes fixed_uniform_q_len: no split past the split budget"),
    ("0.7.4", "decode_passes_uniform_q_len", None, None,
     "FlashInfer's own tensor-core decode plan passes uniform_q_len=1, fixed_uniform_q_len=True"),
)

# Who plans tensor-core decode through FlashInfer's own decode wrapper (so follows the
# release's uniform_q_len arguments):
# - SGLang: its fast_decode_plan is FlashInfer's function (imported by name);
# - vLLM: its fast_plan_decode is no copy of the planner call: eager and the first
#   (warm-up) call run the wrapper's own ``self.plan(...)``, CUDA-graph plans call
#   FlashInfer's ``fast_decode_plan`` (imported from flashinfer.decode) -- vLLM 0.23.0
#   v1/attention/backends/flashinfer.py:17,1903,1932; 0.32.0 :20,2720,2749; 0.33.0
#   :20,2904,2934; 0.34.0 :20,2935,2965. tests/vllm/test_fast_decode_rule.py reads this in each
#   locked wheel.
# Up to FlashInfer 0.7.2.post1 both pass uniform_q_len 0 for one-token decode
# (decode.py 0.7.2.post1:5044 ``q_len_per_req if q_len_per_req > 1 else 0``); 0.7.4 passes
# q_len_per_req (1) and fixed_uniform_q_len True (decode.py 0.7.4:5835-5836).
FOLLOWS_FLASHINFER_DECODE = ("sglang", "vllm")


def _key(version: str) -> tuple:
    from guard_core.versions import parse_version

    return parse_version(version)


def first_release(feature: str) -> str:
    """The first FlashInfer release with ``feature`` (the table's first row naming it)."""
    for first, name, _fam, _val, _what in FLASHINFER_RELEASES:
        if name == feature:
            return first
    raise KeyError(feature)


MOE_FIXED_IN = first_release("moe_trtllm_aarch64_ok")
"""Default of FLASHINFER_GUARD_MOE_FIXED_IN: the first FlashInfer the MoE guard trusts on aarch64."""


def families() -> tuple:
    """((first release, family name), ...) ascending, the first being ("0.0", BASE_FAMILY)."""
    return (("0.0", BASE_FAMILY),) + tuple((first, fam) for first, _n, fam, _v, _w in FLASHINFER_RELEASES if fam)


def family(version: str) -> str:
    """The sizing family of FlashInfer ``version`` (the last table row naming a family at or before it)."""
    key = _key(version)
    name = BASE_FAMILY
    for first, fam in families():
        if key >= _key(first):
            name = fam
    return name


def has(version: str, feature: str) -> bool:
    """Whether FlashInfer ``version`` has ``feature`` (raises InvalidVersion on a bad string)."""
    return _key(version) >= _key(first_release(feature))


def workspace_guard_needed(version: str | None) -> str | None:
    """Why the workspace guard is needed with FlashInfer ``version`` (releases before
    PR #5177 size the split-KV scratch by packed rows), or None where it is not
    (or the version is unknown)."""
    fixed = first_release("rows_by_query")
    try:
        if version and _key(version) < _key(fixed):
            return f"FlashInfer {version} < {fixed} sizes its split-KV scratch by packed rows"
    except Exception:
        return None
    return None


def values(version: str, feature: str) -> tuple:
    """The values of every row of ``feature`` that ``version`` has, in table order."""
    v = _key(version)
    return tuple(val for first, name, _f, val, _w in FLASHINFER_RELEASES if name == feature and v >= _key(first))


def decode_group_sizes(version: str) -> frozenset:
    return frozenset(BASE_DECODE_GROUPS + values(version, "decode_group"))


def decode_passes_uniform_q_len(caller: str, version: str) -> bool:
    """Whether ``caller``'s tensor-core decode plan passes uniform_q_len=1 and
    fixed_uniform_q_len=True to FlashInfer ``version``'s planner."""
    return caller in FOLLOWS_FLASHINFER_DECODE and has(version, "decode_passes_uniform_q_len")


def flashinfer_extrapolation(version: str | None) -> str | None:
    """"extrapolated from FlashInfer X" when ``version`` lies outside the checked releases
    (it is then sized with the nearest checked family), else None."""
    if not version:
        return None
    try:
        v = _key(version)
        if v > _key(FLASHINFER_CHECKED[-1]):
            return f"extrapolated from FlashInfer {FLASHINFER_CHECKED[-1]}"
        if v < _key(FLASHINFER_CHECKED[0]):
            return f"extrapolated from FlashInfer {FLASHINFER_CHECKED[0]}"
    except Exception:  # an unparsable version is reported where it is parsed
        return None
    return None


# ---------------------------------------------------------------- line checks

def _line_key(framework: str, version: str) -> tuple:
    release = _key(version)[1]
    n = LINE_PARTS[framework]
    return tuple(release[:n]) + (0,) * (n - len(release[:n]))


def line_status(framework: str, version: str | None) -> str:
    """'checked' | 'within' (between two checked lines) | 'newer' | 'older' | 'unknown'."""
    if not version:
        return "unknown"
    try:
        k = _line_key(framework, version)
        lines = [_line_key(framework, v) for v in CHECKED_LINES[framework]]
    except Exception:
        return "unknown"
    if k in lines:
        return "checked"
    if k > max(lines):
        return "newer"
    if k < min(lines):
        return "older"
    return "within"


def line_note(framework: str, version: str | None) -> str | None:
    """The one line an adapter says when ``version`` lies outside the checked lines, else None."""
    status = line_status(framework, version)
    name, checked = DISPLAY[framework], CHECKED_LINES[framework]
    if status == "newer":
        return f"{name} {version} is newer than the last line checked ({checked[-1]}); acting by feature"
    if status == "older":
        return f"{name} {version} is older than the first line checked ({checked[0]}); acting by feature"
    if status == "unknown" and version:
        return f"{name} {version!r} is not a version the checked lines can place; acting by feature"
    return None


def announce(framework: str, log, version: str | None = None) -> str | None:
    """Say ``line_note`` once per process through ``log`` (a GuardLog); never raises."""
    try:
        if version is None:
            from guard_core.versions import installed_version

            version = installed_version(DISTRIBUTION[framework])
        note = line_note(framework, version)
        if note:
            log.info(f"support: {note}", key=f"support:{framework}")
        return note
    except Exception:
        return None


def describe(installed: dict | None = None) -> list[str]:
    """The declared ranges as lines (``flashinfer-guard doctor``); ``installed`` maps
    'vllm'/'sglang'/'flashinfer' to the installed versions (None: not installed)."""
    installed = installed or {}
    out = []
    for fw in ("vllm", "sglang"):
        v = installed.get(fw)
        status = line_status(fw, v) if v else None
        where = {"checked": "a checked line", "within": "between checked lines",
                 "newer": "newer than the last checked line: acting by feature",
                 "older": "older than the first checked line: acting by feature",
                 "unknown": "not placeable: acting by feature"}.get(status, "")
        tail = f" (installed {v}: {where})" if v else ""
        out.append(f"{DISPLAY[fw]} lines {', '.join(CHECKED_LINES[fw])}{tail}")
    fi = installed.get("flashinfer")
    tail = ""
    if fi:
        extra = flashinfer_extrapolation(fi)
        try:
            fam = family(fi)
        except Exception:
            fam = "?"
        tail = f" (installed {fi}: sizing family {fam}{'; ' + extra if extra else ''})"
    out.append(f"FlashInfer planner releases {', '.join(FLASHINFER_CHECKED)}{tail}")
    out.append(f"FlashInfer planner releases in the matrix {', '.join(FLASHINFER_MATRIX_CHECKED)} "
               "(ci/matrix.sh)")
    out.append(f"FlashInfer TRT-LLM fused MoE trusted on aarch64 from {MOE_FIXED_IN} "
               "(default of FLASHINFER_GUARD_MOE_FIXED_IN)")
    return out


def line_label(framework: str, version: str | None = None) -> str:
    """'vLLM 0.23.0' (the installed line, or ``version``), for log lines naming where."""
    if version is None:
        try:
            from guard_core.versions import installed_version

            version = installed_version(DISTRIBUTION[framework])
        except Exception:
            version = None
    return f"{DISPLAY[framework]} {version}" if version else f"this {DISPLAY[framework]}"


def unaffected_moe_host(decision) -> bool:
    """A MoE stand-down where nothing applies and nothing was ever reported (auto or strict,
    no evidence row, and the host is not aarch64 or the GPU cannot reach the path): said at
    DEBUG. An aarch64 host's stand-down on a reaching GPU stays at INFO (where the guard
    used to act)."""
    try:
        from guard_core.flashinfer.moe_evidence import ARM_MACHINES, reaches

        inputs = decision.inputs
        if decision.block or getattr(decision, "action", "none") != "none":
            return False
        if inputs.get("setting") not in ("auto", "strict"):
            return False
        arm = str(inputs.get("machine") or "").lower() in ARM_MACHINES
        return not arm or not reaches(inputs.get("sm"))
    except Exception:
        return False


def unchecked_reason(framework: str, framework_version: str | None, flashinfer_version: str | None) -> str | None:
    """Why this deployment lies outside what was checked (for choices that only hold
    where the model is exact and the line tested, e.g. FLASHINFER_GUARD_WORKSPACE=exact),
    or None. ``framework``: 'vllm'/'sglang' (or their display names)."""
    fw = {v.lower(): k for k, v in DISPLAY.items()}.get(str(framework).lower(), str(framework).lower())
    if fw not in CHECKED_LINES:
        return f"{framework} is not a framework with checked lines"
    if not flashinfer_version:
        return "FlashInfer version unknown"
    try:
        _key(flashinfer_version)
    except Exception:
        return f"FlashInfer {flashinfer_version!r} is not a version"
    if flashinfer_extrapolation(flashinfer_version):
        return (f"FlashInfer {flashinfer_version} is outside the releases the planner model was checked against "
                f"({FLASHINFER_CHECKED[0]}-{FLASHINFER_CHECKED[-1]})")
    # exact shrinks only where both were checked, not between checked points (issue #22):
    # the FlashInfer release itself compiled by the conformance suite or the matrix, the line itself tested
    checked_fi = FLASHINFER_CHECKED + FLASHINFER_MATRIX_CHECKED
    if _key(flashinfer_version) not in {_key(v) for v in checked_fi}:
        return (f"FlashInfer {flashinfer_version} is not one of the releases whose planner was checked "
                f"({', '.join(checked_fi)})")
    status = line_status(fw, framework_version)
    if status == "checked":
        return None
    if status == "unknown":
        return f"{DISPLAY[fw]} version unknown"
    if status == "within":
        return (f"{DISPLAY[fw]} {framework_version} lies between the checked lines "
                f"({', '.join(CHECKED_LINES[fw])}), not on one")
    return (f"{DISPLAY[fw]} {framework_version} is outside the checked lines "
            f"({CHECKED_LINES[fw][0]}-{CHECKED_LINES[fw][-1]})")


def matrix_lines(framework: str | None = None) -> tuple[str, ...]:
    """Every checked line as ``<framework>-<line>`` (vLLM's first), the names of
    ci/locks/*.txt and ci/matrix.sh's lines; or one framework's lines alone."""
    if framework is not None:
        return tuple(CHECKED_LINES[framework])
    return tuple(f"{fw}-{line}" for fw in ("vllm", "sglang") for line in CHECKED_LINES[fw])


def main(argv=None) -> int:
    """``python3 -m guard_core.flashinfer.releases --lines [vllm|sglang]``: the checked lines, one
    space-separated line (what the CI scripts read; no import beyond this module)."""
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] != "--lines" or len(args) > 2 or (len(args) == 2 and args[1] not in CHECKED_LINES):
        print("usage: python3 -m guard_core.flashinfer.releases --lines [vllm|sglang]", file=sys.stderr)
        return 2
    print(" ".join(matrix_lines(args[1] if len(args) == 2 else None)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
