"""A launch command resolved by SGLang itself, for ``flashinfer-guard plan`` (offline, simulated GPU).

    python -m sglang_guard.plan_resolve '{"argv": [...], "model_dir": ..., "gpu": {...}}'

prints one ``FLASHINFER_GUARD_RESOLVED {json}`` line (never a traceback; SGLang's own log lines
go to stderr). Run by ``guard_core/commands/plan/server_resolution.py`` in a subprocess of the
interpreter ``plan`` runs in, where SGLang is installed:

1. the simulated GPU (``simulated_device``: memory, compute capability, name; ``sgl_kernel``
   stood in where it cannot load);
2. SGLang's own parser and resolution: ``prepare_server_args`` (``ServerArgs.add_cli_args`` +
   ``ServerArgs.from_cli_args``, the launcher's own call, ``--config`` merged as it merges it), so
   ``__post_init__`` / the resolution hooks pick capture sizes, chunked prefill, memory fraction,
   speculative steps/topk/draft tokens, page size, DP attention; ``--device cuda`` on the
   simulated GPU, dummy weights, no tokenizer, never remote code;
3. SGLang's ``ModelConfig.from_server_args`` (``--json-model-override-args`` applied by SGLang),
   the attention-TP size by SGLang's ``compute_dp_attention_world_info`` (DP attention divides the
   heads), the runner's KV dtype by SGLang's ``configure_kv_cache_dtype``;
4. the facts read from those objects by the adapter's own reader (``workspace_facts.read``),
   for the target runner and, with an EAGLE-family algorithm, the draft worker's runner (sized
   with the target's shape, as the adapter sizes it there): the ``WorkspaceFacts`` the adapter
   hands to ``guard_core.decide.workspace`` inside the server, as JSON.

Nothing here decides: ``plan`` runs the core decision on these facts.
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["resolve", "main", "MARK"]

MARK = "FLASHINFER_GUARD_RESOLVED "
EAGLE_FAMILY = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")


def _resolved(sa, bag: str, name: str):
    """A resolved value: 0.5.19+'s runtime-context bag (get_spec(), get_schedule() ...), else ServerArgs."""
    try:
        import sglang.srt.runtime_context as rc

        return getattr(getattr(rc, "get_" + bag)(), name)
    except Exception:
        return getattr(sa, name, None)


def _server_args(argv: list[str], gpu: dict):
    import importlib

    from . import simulated_device

    import sglang.srt.server_args as sa_mod

    for extra in ("sglang.srt.arg_groups.memory_hook", "sglang.srt.arg_groups.cuda_graph_hook"):
        try:  # 0.5.2x reads the GPU memory in its resolution hooks
            importlib.import_module(extra)
        except ImportError:
            pass
    simulated_device.point(gpu)
    sa = sa_mod.prepare_server_args(list(argv))
    if hasattr(sa, "resolve_once"):  # 0.5.2x: the resolution pipeline
        sa.resolve_once()
    try:  # 0.5.19+: the resolved bags a scheduler publishes from its ServerArgs
        from sglang.srt.runtime_context import get_context

        get_context().set_server_args(sa)
    except ImportError:
        pass
    return sa


def _sglangs_refusal(exc: BaseException) -> dict | None:
    """SGLang refusing the deployment in its own config checks (``ServerArgs.__post_init__`` /
    ``check_server_args`` asserts, ``ModelConfig``'s ValueErrors, e.g. a ``--context-length`` over
    the model's, configs/model_config.py 0.5.23 ``_derive_context_length``): the server would not
    start (``refuses``: plan exits 2 with its message). Only where SGLang's own code raised it (the
    innermost frame in the ``sglang`` package) and it is not our call's error; else None."""
    from guard_core.deployment.our_call import our_call_error

    if our_call_error(exc) is not None:
        return None
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    mod = tb.tb_frame.f_globals.get("__name__", "") if tb is not None else ""
    if not (mod == "sglang" or mod.startswith("sglang.")):
        return None
    label = f"SGLang {_version() or ''}".strip()
    msg = " ".join(str(exc).split())[:400]
    if not msg:  # a bare assert (server_args.py's DP-attention checks): the check itself, where it stands
        import linecache

        code = tb.tb_frame.f_code.co_filename
        text = " ".join(linecache.getline(code, tb.tb_lineno).split())
        where = code[code.rfind("sglang/"):] if "sglang/" in code else os.path.basename(code)
        msg = f"{type(exc).__name__} at {where}:{tb.tb_lineno}" + (f": {text}" if text else "")
    return {"ok": False, "refuses": True, "label": label, "message": msg,
            "refusal": f"{label} refuses the config: {type(exc).__name__}: {msg}"}


def _attention_tp(sa) -> tuple[int, int]:
    """(attention-TP size, attention-DP size) as SGLang computes them for rank 0
    (layers/dp_attention.py ``compute_dp_attention_world_info``: 0.5.5:227-235 ``tp // dp`` with DP
    attention; 0.5.11:240-254; 0.5.23:445-460 ``derive_attn_tp_size``)."""
    import inspect

    from sglang.srt.layers import dp_attention as dpa

    tp, dp = int(sa.tp_size), int(getattr(sa, "dp_size", 1) or 1)
    enable = bool(getattr(sa, "enable_dp_attention", False))
    cp = int(getattr(sa, "attn_cp_size", 1) or 1)
    fn = dpa.compute_dp_attention_world_info
    params = list(inspect.signature(fn).parameters)
    if params[0] == "enable_dp_attention":
        res = fn(enable, 0, tp, dp, cp) if "attn_cp_size" in params else fn(enable, 0, tp, dp)
        attn_dp = dp if enable else 1
    else:  # 0.5.23: the attention-DP width is ServerArgs' own
        attn_dp = int(_resolved(sa, "parallel", "attn_dp_size") or (dp if enable else 1))
        res = fn(0, tp, attn_dp, cp) if "attn_cp_size" in params else fn(0, tp, attn_dp)
    return int(res[1]), int(attn_dp)


def _set_attention_tp(size: int) -> None:
    """What SGLang sets while initialising torch.distributed, for one rank of ``size``: the
    attention-TP group (parallel_state ``_ATTN_TP``/``_ATTN_CP`` 0.5.11+; dp_attention's globals
    0.5.5). No process group is created."""
    import types

    from sglang.srt.layers import dp_attention as dpa

    try:
        import sglang.srt.distributed.parallel_state as ps

        if hasattr(ps, "_ATTN_TP"):
            ps._ATTN_TP = types.SimpleNamespace(world_size=size, rank_in_group=0, rank=0)
        if hasattr(ps, "_ATTN_CP"):
            ps._ATTN_CP = types.SimpleNamespace(world_size=1, rank_in_group=0, rank=0)
    except ImportError:
        pass
    if hasattr(dpa, "_ATTN_TP_SIZE"):
        dpa._ATTN_TP_SIZE, dpa._ATTN_TP_RANK, dpa._ATTN_DP_SIZE, dpa._ATTN_DP_RANK = size, 0, 1, 0
    try:  # 0.5.23: the parallel context the backend reads (runtime_context.get_parallel())
        from sglang.srt.runtime_context import get_parallel

        par = get_parallel()
        if getattr(par, "attn_tp_size", None) in (None, 0):
            par.attn_tp_size = size
    except Exception:
        pass


def _kv_dtype(runner):
    """The runner's KV-cache dtype by SGLang's own ``ModelRunner.configure_kv_cache_dtype``
    (0.5.11+); 0.5.5's inline rule (model_runner.py 0.5.5:1509-1542) where the method is absent."""
    import torch

    try:
        from sglang.srt.model_executor.model_runner import ModelRunner

        ModelRunner.configure_kv_cache_dtype(runner)
        if runner.kv_cache_dtype is not None:
            return runner.kv_cache_dtype
    except Exception:
        pass
    name = str(runner.server_args.kv_cache_dtype)
    return {"fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2, "bf16": torch.bfloat16,
            "bfloat16": torch.bfloat16}.get(name, runner.dtype)


def _runner(sa, mc, pool, draft: bool):
    """The attributes of a ModelRunner the adapter's reader takes (``workspace_facts``)."""
    import types

    r = types.SimpleNamespace(server_args=sa, model_config=mc, dtype=mc.dtype, kv_cache_dtype=None, device="cuda",
                              gpu_id=0, page_size=sa.page_size or 1, is_draft_worker=draft, sliding_window_size=None,
                              req_to_token_pool=types.SimpleNamespace(size=pool) if pool else None,
                              max_total_num_tokens=getattr(sa, "max_total_tokens", None), use_mla_backend=False,
                              spec_algorithm=None)
    r.kv_cache_dtype = _kv_dtype(r)
    return r


def _facts_json(bf, runner_label: str, num_layers: int) -> dict:
    from dataclasses import asdict

    f = bf.workspace
    return {"runner": runner_label, "num_layers": num_layers, "fixed_split": bool(bf.fixed_split),
            "layout": asdict(f.layout), "limits": asdict(f.limits), "planner_facts": asdict(f.planner_facts),
            "kv_dtype_bytes_options": list(f.kv_dtype_bytes_options) if f.kv_dtype_bytes_options else None,
            "missing": list(f.missing)}


def resolve(req: dict) -> dict:
    """SGLang's own resolution of ``req["argv"]`` on ``req["gpu"]``, read by the adapter's reader."""
    from . import simulated_device

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    stood_in = simulated_device.install_kernel_stand_in()
    argv = [t for t in req["argv"] if t != "--trust-remote-code"]
    argv += ["--model-path", req["model_dir"], "--device", "cuda", "--load-format", "dummy",
             "--skip-tokenizer-init"]
    try:
        sa = _server_args(argv, req["gpu"])
        from sglang.srt.configs.model_config import ModelConfig

        mc = ModelConfig.from_server_args(sa)
    except (ValueError, AssertionError) as exc:
        refused = _sglangs_refusal(exc)
        if refused is None:
            raise
        return refused
    attn_tp, attn_dp = _attention_tp(sa)
    _set_attention_tp(attn_tp)
    from guard_core.deployment.sglang_defaults import sglang_request_pool

    from . import workspace_facts

    line = req.get("line") or ""
    mrr = _resolved(sa, "schedule", "max_running_requests")
    pool, pool_src = sglang_request_pool(line, int(mrr) if mrr else None, attn_dp)
    if pool is None:
        # sized from the KV memory at start-up (an estimate of 2048-4096 requests,
        # model_runner_kv_cache_mixin.py 0.5.11:698-717): its upper end, as plan's rules take it
        pool = min(max(1, int(mrr) // attn_dp), 4096) if mrr else 4096
        pool_src += f"; taken as {pool}"
    module = _backend_module()
    simulated_device.point(req["gpu"])
    algo = str(_resolved(sa, "spec", "speculative_algorithm") or "").upper()
    runners = [("target" if algo else "", False)]
    if algo in EAGLE_FAMILY:
        runners.append(("draft", True))
    n_layers = int(getattr(mc, "num_hidden_layers", 0) or 0)
    facts = []
    for label, draft in runners:
        bf = workspace_facts.read(module, _runner(sa, mc, pool, draft))
        if bf is None:
            return {"ok": False, "refusal": "the adapter's reader found nothing to size (FlashInfer not installed)"}
        facts.append(_facts_json(bf, label, n_layers))
    backends = sorted(workspace_facts.attention_backends(types_ns(sa)))
    return {"ok": True, "facts": facts, "sglang": _version(), "kernel_stand_in": stood_in,
            "resolved": {"tp": int(sa.tp_size), "attn_tp": attn_tp, "attn_dp": attn_dp,
                         "page_size": sa.page_size, "kv_cache_dtype": str(sa.kv_cache_dtype),
                         "chunked_prefill_size": _resolved(sa, "schedule", "chunked_prefill_size"),
                         "max_running_requests": mrr, "request_pool": pool, "request_pool_source": pool_src,
                         "speculative_algorithm": algo or None,
                         "speculative_num_steps": _resolved(sa, "spec", "speculative_num_steps"),
                         "speculative_eagle_topk": _resolved(sa, "spec", "speculative_eagle_topk"),
                         "speculative_num_draft_tokens": _resolved(sa, "spec", "speculative_num_draft_tokens"),
                         "context_len": int(getattr(mc, "context_len", 0) or 0) or None,
                         "architecture": (getattr(mc.hf_config, "architectures", None) or [None])[0],
                         "deterministic": workspace_facts.deterministic(types_ns(sa)),
                         "attention_backends": backends}}


def types_ns(sa):
    import types

    return types.SimpleNamespace(server_args=sa)


def _backend_module():
    """SGLang's flashinfer_backend (its ``should_use_tensor_core``); None where it cannot be
    imported here (the adapter's reader then names the tensor-core decision as missing)."""
    try:
        import sglang.srt.layers.attention.flashinfer_backend as fb

        return fb
    except Exception:
        return None


def _version():
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except Exception:
        return None


def answer_line(produce) -> int:
    """Print ``produce()``'s answer as the one ``MARK`` line; anything raised (SystemExit from
    SGLang's parser included) is the answer's one-line refusal, never a traceback; raised at our own
    call into SGLang (``guard_core.deployment.our_call``), it says that the error is ours."""
    try:
        res = produce()
    except BaseException as exc:
        from guard_core.deployment.our_call import our_call_error

        ours = our_call_error(exc)
        msg = " ".join(str(exc).split())[:400]
        if ours is not None:  # OUR call into SGLang failed (a changed signature, a moved function)
            label = f"SGLang {_version() or ''}".strip()
            res = {"ok": False, "ours": True,
                   "refusal": f"flashinfer-guard's own call into {label} failed (our error, not {label}'s refusal): "
                              f"{ours}"[:500]}
        else:
            res = {"ok": False, "refusal": f"SGLang refused the command: {type(exc).__name__}: {msg}"}
    sys.stdout.write(MARK + json.dumps(res, default=str) + "\n")
    sys.stdout.flush()
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    return answer_line(lambda: resolve(json.loads(argv[0])))


if __name__ == "__main__":
    sys.exit(main())
