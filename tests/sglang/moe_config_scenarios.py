"""MoE runner backend at configuration time, in the main process (one scenario per process).

    python tests/sglang/moe_config_scenarios.py NAME '{"machine": "aarch64", ...}'

Prints ``RESULT <json>`` as its last stdout line: the ``moe_runner_backend`` /
``speculative_moe_runner_backend`` this SGLang resolved for the ServerArgs (what
it prints and hands to every other process), read the way the line reads it:
the fields after ``__post_init__`` up to 0.5.15, ``resolution_result`` after
``resolve_once()`` from 0.5.20 (the record itself is sealed there and keeps the
caller's input).

What is faked (nothing else): the CPU architecture (``platform.machine``) and,
for the model-chosen case, an SM100 GPU where this line's configuration code asks
for one (``is_sm100_supported``/``is_cuda`` in ``server_args`` up to 0.5.15,
``get_platform().is_sm100`` in the argument-resolution modules from 0.5.20).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _cpu  # noqa: E402
import scenarios as base  # noqa: E402

FIELDS = ("moe_runner_backend", "speculative_moe_runner_backend", "quantization")


class _SM100Platform:
    """The real platform object, reporting an SM100 (Blackwell) GPU."""

    def __init__(self, real):
        self._real = real

    def __getattr__(self, name):
        if name in ("is_sm100", "is_blackwell", "is_sm100_supported"):
            return True
        if name in ("is_cuda", "is_cuda_alike"):
            return True
        return getattr(self._real, name)


def fake_sm100():
    """Make this line's configuration code see an SM100 GPU (see the module docstring)."""
    import importlib

    for name in ("sglang.srt.server_args", "sglang.srt.arg_groups.overrides", "sglang.srt.arg_groups.moe_hook",
                 "sglang.srt.arg_groups.model_override_base"):
        try:
            mod = importlib.import_module(name)
        except Exception:
            continue
        real = getattr(mod, "get_platform", None)
        if callable(real):
            sm100 = _SM100Platform(real())
            mod.get_platform = lambda sm100=sm100: sm100
        for fn in ("is_sm100_supported", "is_cuda"):
            if hasattr(mod, fn):
                setattr(mod, fn, lambda *a, **k: True)


def resolved(sa) -> dict:
    try:
        from sglang.srt.arg_groups.overrides import resolution_result
    except ImportError:
        resolution_result = None
    if resolution_result is not None and hasattr(sa, "resolve_once"):
        return {f: resolution_result(sa, f) for f in FIELDS}
    return {f: getattr(sa, f, None) for f in FIELDS}


def build(opts) -> dict:
    base.fake_moe_inputs(opts)
    out = base.load_guard()
    base.setup_logging()
    machine = opts.get("machine", "aarch64")
    kw = {"attention_backend": "triton"}
    if opts.get("explicit"):
        kw.update(moe_runner_backend="flashinfer_trtllm", quantization="fp8")
    if opts.get("sm100"):
        fake_sm100()
    base.fake_machine(machine)
    sa = base.server_args(_cpu.write_model(tempfile.mkdtemp(), "ds", base.DEEPSEEK_V3_FP8), **kw)
    if callable(getattr(sa, "resolve_once", None)):
        sa.resolve_once()
    out["resolved"] = resolved(sa)
    out["input"] = getattr(sa, "_raw_input", {}).get("moe_runner_backend") if hasattr(sa, "_raw_input") else None
    stash = getattr(sa, "_resolved_overrides", None) or []
    out["declared_by_guard"] = [d for s, d in stash if s == "flashinfer_guard"]
    return out


def main():
    opts = json.loads(sys.argv[2]) if len(sys.argv) > 2 else {}
    _cpu.install_cuda_only_stand_ins()
    result = build(opts)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
