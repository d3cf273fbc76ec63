"""Issue 27 item 5, SGLang side: inside SGLang's FlashInferAttnBackend.__init__ the guard asks
FlashInfer's own ``BatchPrefillWithPagedKVCacheWrapper.workspace_size()`` for its eager witnesses
(sglang_guard/workspace_ask.py), only where the FA2 prefill module SGLang plans with is already
loaded: the larger figure wins, a disagreement is one warning naming both.

Run through SGLang's own backends (EAGLE topk 4: the target backend, then the draft worker's
multi-step backends after the target's CUDA-graph capture) on FlashInfer's real wrappers; the
stand-ins (tests/realcalls/standin.py): the compiled modules are FlashInfer's host planner, and a
loaded module is FlashInfer's JIT registry entry its getter leaves (``_register_loaded``: nothing
compiles on a CPU). FlashInfer >= 0.6.15 has the method; the SGLang line with it is 0.5.23
(FlashInfer 0.7.2); on older lines the tests hold that nothing is asked and nothing changes."""

from __future__ import annotations

import re

from conftest import FLASHINFER, _key

HAS_METHOD = _key(FLASHINFER) >= (0, 6, 15)  # FlashInfer PR #3741; older lines: never asked, nothing changes

OPTS = dict(model="llama8b", draft_tokens=4, topk=4, draft_steps=3, phases=["capture"], context=4096, kv_width=4200,
            max_bs=8)  # a short capture list keeps the two runs cheap


def _run(**extra):
    from test_realcalls import realcalls

    return realcalls(**OPTS, **extra)


def test_target_backend_not_asked_before_its_module_is_loaded():
    """The first backend is sized before any plan: FlashInfer's getter is never called during its
    decision (no module built or loaded on our account), and the record says why it was not asked."""
    r = _run().result
    assert r["getter_calls_after_init"] == 0
    asked = r["prediction"]["flashinfer_asked"]
    why = "not loaded" if HAS_METHOD else "no workspace_size()"
    assert "asked" not in asked and why in asked["skipped"], asked


def test_draft_backends_asked_once_loaded_and_flashinfer_agrees():
    """After the target's capture loaded the variant, each draft backend's eager witnesses are asked;
    FlashInfer's figure equals the guard's for each, so no warning and the need is unchanged."""
    run = _run()
    d = run.result["draft"]["prediction"]
    if not HAS_METHOD:
        assert d["flashinfer_asked"] == {"skipped": "FlashInfer has no workspace_size()"}, d["flashinfer_asked"]
        return
    assert d["flashinfer_asked"].get("asked"), d["flashinfer_asked"]
    for name, fi, guard in d["flashinfer_asked"]["asked"]:
        assert fi == guard, (name, fi, guard)
    assert not [ln for ln in run.guard_lines if "workspace_size()" in ln]


def test_a_disagreement_is_one_warning_and_the_larger_figure_wins():
    """FlashInfer's answer doubled (fault injection on the stand-in's size-only planner): one
    warning naming both numbers, and the draft's need is the larger of the two figures."""
    base = _run().result["draft"]["prediction"]
    run = _run(ws_fault=2.0)
    d = run.result["draft"]["prediction"]
    if not HAS_METHOD:  # nothing to ask: the guard's figure stands, no warning
        assert d["float_bytes"] == base["float_bytes"]
        assert not [ln for ln in run.guard_lines if "workspace_size()" in ln]
        return
    asked = d["flashinfer_asked"]["asked"]
    assert all(fi == 2 * guard for _, fi, guard in asked), asked
    lines = [ln for ln in run.guard_lines if "workspace_size()" in ln]
    assert len(lines) == 1, lines
    fi_max = max(fi for _, fi, _ in asked)
    assert d["float_bytes"] == max(base["float_bytes"], fi_max)
    nums = [int(x.replace(",", "")) for x in re.findall(r"([0-9][0-9,]+) B", lines[0])]
    assert any(n in (fi for _, fi, _ in asked) for n in nums) and any(n in (g for _, _, g in asked) for n in nums)
