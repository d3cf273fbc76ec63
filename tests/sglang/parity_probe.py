"""Parity search (issue 26), the adapter's side: one deployment inside the installed SGLang.

    python tests/sglang/parity_probe.py '{"gpu": ..., "argv": [...], "attn_tp": N, "attn_dp": M}'

Run as its own process (a forked child of the warm scenario interpreter,
tests/common/forkserver.py) with the launch command's environment prefix in its
environment. SGLang reads the launch command's options itself
(``sglang.srt.server_args.prepare_server_args``, the launcher's own call) with
``--device cuda`` on a simulated GPU (``get_device_memory_capacity`` answers the table
GPU's memory, as tests/sglang/test_defaults_crosscheck.py does), so ``ServerArgs``
takes its post-init defaults for that GPU (capture list, chunked prefill, EAGLE's
steps/topk/draft tokens, DP attention); SGLang's ``ModelConfig`` reads the model;
the guard is loaded through SGLang's own route (scenarios.load_guard) and the real
``FlashInferAttnBackend`` is built on the CPU (tests/sglang/_cpu.py) for the target
runner and, with EAGLE, the draft worker's backends for a draft-worker runner (the
draft-extend ``FlashInferAttnBackend`` and, with more than one step,
``FlashInferMultiStepDraftBackend``). What the adapter gathered and decided for each backend
(``sglang_guard.workspace.decisions()``) is printed as ``RESULT {json}``.

Faked (nothing else): what _cpu.py stands in (sgl_kernel, the FlashInfer wrapper
classes, the model runner object, the attention-TP group of attn_tp ranks), the GPU's
memory and ``guard_core.gpus.detect_gpu`` (the table GPU), ``is_sm100_supported`` in
the backend module (the table GPU's answer). The runner's request pool holds SGLang's
``_resolve_max_num_reqs`` answer where the command bounds it
(``min(max_running_requests // dp_size, estimated)``, model_runner_kv_cache_mixin.py
0.5.11:698-717, with ``estimated`` >= 2048 and ``dp_size`` the DP-attention size;
``min(max(1, max_running_requests // attn_dp_size), token_capacity // 2)``,
mem_cache/kv_cache_configurator.py 0.5.23:3119-3131), with max running requests as SGLang
resolved them (speculation sets 48 where the command gives none), else 4096 (the upper end of that
estimate; the pool itself is sized from the KV memory of the real GPU).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
for p in (REPO, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)
import _cpu  # noqa: E402


def _point_memory(mib: int) -> None:
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if name.startswith("sglang") and getattr(mod, "get_device_memory_capacity", None) is not None:
            mod.get_device_memory_capacity = lambda device=None: mib


def _server_args(argv: list[str], mib: int):
    import importlib

    import sglang.srt.server_args as sa_mod

    for extra in ("sglang.srt.arg_groups.memory_hook", "sglang.srt.arg_groups.cuda_graph_hook"):
        try:  # 0.5.2x reads the GPU memory in its resolution hooks
            importlib.import_module(extra)
        except ImportError:
            pass
    _point_memory(mib)
    sa = sa_mod.prepare_server_args(list(argv) + ["--device", "cuda", "--load-format", "dummy",
                                                  "--skip-tokenizer-init"])
    if hasattr(sa, "resolve_once"):
        sa.resolve_once()
    _cpu.runtime_context(sa)  # 0.5.2x: the resolved bags (get_schedule(), ...) a scheduler publishes
    return sa


def _spec(sa, name):
    try:
        from sglang.srt.runtime_context import get_spec

        return getattr(get_spec(), name)
    except Exception:
        return getattr(sa, name, None)


def _kv_dtype(sa):
    import torch

    return {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}.get(str(sa.kv_cache_dtype),
                                                                               torch.bfloat16)


def _schedule(sa, name):
    """A resolved scheduling value: 0.5.2x's config bag (get_schedule()), else the ServerArgs field."""
    try:
        from sglang.srt.runtime_context import get_schedule

        return getattr(get_schedule(), name)
    except Exception:
        return getattr(sa, name, None)


def _pool(sa, attn_dp: int) -> int:
    """The request pool the runner would hold: max running requests as SGLang resolved them
    (speculation sets 48 where none is given), divided by the DP-attention size."""
    mrr = _schedule(sa, "max_running_requests")
    if mrr:
        return max(1, min(int(mrr) // max(1, int(attn_dp)), 4096))
    return 4096


def _runner(sa, mc, attn_dp, draft=False):
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    runner = _cpu.model_runner(sa, mc, kv_cache_dtype=_kv_dtype(sa), pool_size=_pool(sa, attn_dp))
    runner.spec_algorithm = SpeculativeAlgorithm.from_string(sa.speculative_algorithm)
    runner.is_draft_worker = draft
    return runner


def run(d: dict) -> dict:
    import scenarios as sc
    from guard_core import gpus
    from guard_core.deployment.server_defaults import GPU_MEMORY

    out = sc.load_guard()
    spec = gpus.find_spec(d["gpu"])
    gpu = _cpu.use_table_gpu(d["gpu"])
    sa = _server_args(d["argv"], GPU_MEMORY[spec.key][1])
    sc.setup_logging(sa)
    from sglang.srt.configs.model_config import ModelConfig

    mc = ModelConfig.from_server_args(sa)
    fb = _cpu.import_backend_module()
    _cpu.replace_flashinfer_wrappers(fb)
    if hasattr(fb, "is_sm100_supported"):
        fb.is_sm100_supported = lambda *a, **k: gpu.cc[0] == 10
    _cpu.set_attention_tp_size(int(d.get("attn_tp", 1)))
    runner = _runner(sa, mc, d.get("attn_dp", 1))
    fb.FlashInferAttnBackend(runner)
    algo = str(_spec(sa, "speculative_algorithm") or "").upper()
    if algo in ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE"):
        topk, steps = int(_spec(sa, "speculative_eagle_topk") or 1), int(_spec(sa, "speculative_num_steps") or 1)
        # the EAGLE worker's draft backends (speculative/draft_utils.py DraftBackendFactory, 0.5.11:39-41,
        # 67-69, 110-117, 208-214; 0.5.23:221-234): the draft-extend FlashInferAttnBackend on the
        # draft runner, and the multi-step draft decode backend where there is more than one step
        draft_runner = _runner(sa, mc, d.get("attn_dp", 1), draft=True)
        fb.FlashInferAttnBackend(draft_runner, skip_prefill=False)
        if steps > 1:
            fb.FlashInferMultiStepDraftBackend(draft_runner, topk, steps)
        out["eagle"] = {"topk": topk, "steps": steps,
                        "draft_tokens": int(_spec(sa, "speculative_num_draft_tokens") or 0)}
    import sglang_guard.workspace as ws

    recs = []
    for r in ws.decisions():
        req = r.need.requirement if r.need is not None else None
        recs.append({"need": req.float_bytes if req is not None else None,
                     "server_bytes": list(r.server_bytes), "action": r.outcome.action if r.outcome else None,
                     "line": r.outcome.line if r.outcome else None, "missing": list(r.facts.missing)})
    out["records"] = recs
    out["resolved"] = {k: _schedule(sa, k) for k in ("chunked_prefill_size", "max_running_requests")}
    out["resolved"]["pool"] = runner.req_to_token_pool.size
    return out


def main() -> None:
    _cpu.install_cuda_only_stand_ins()
    d = json.loads(sys.argv[1])
    os.chdir(tempfile.mkdtemp())
    result = run(d)
    sys.stdout.flush()
    print("RESULT " + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main()
