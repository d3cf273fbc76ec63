"""vLLM's own resolution of a launch command, offline, for ``flashinfer-guard plan`` (issue 26, item 2).

    python -m vllm_guard.server_resolution < request.json

prints one line ``FLASHINFER_GUARD_RESOLVED {json}`` (a list of requests: one line each) (vLLM's own log lines go before it and are
dropped by the caller, ``guard_core.commands.plan.server_resolution``); never a traceback.

The request: ``{"tokens": [the server's arguments], "model": local directory with config.json,
"gpu": table key, "trtllm": true|false|null, "flags": {plan's flag: value}}`` (``FLAG_OPTIONS``;
``draft_tokens``: the command's speculative config with that many tokens, else vLLM's n-gram drafter). The path is
the server's own, step by step:

1. the arguments are parsed by vLLM's ``vllm serve`` parser (``FlexibleArgumentParser`` +
   ``ServeSubcommand.subparser_init``, which ``make_arg_parser`` also builds for ``python -m
   vllm.entrypoints.openai.api_server``; built by ``guard_core.deployment.server_parsers``);
2. ``EngineArgs.from_cli_args`` (vllm/entrypoints/cli/serve.py: ``args.model = args.model_tag``),
   with the local config directory as the model, no tokenizer, never remote code, and plan's own
   flags over the command's;
3. ``create_engine_config(UsageContext.OPENAI_API_SERVER)`` on the simulated GPU
   (``vllm_guard.simulated_device``): vLLM's defaults per GPU, each model's
   ``verify_and_update_config`` (gpt-oss: capture ceiling 1024), the speculative config, the
   capture list;
4. the model's attention layers (``vllm_guard.model_reader.read_config`` on that ``ModelConfig``:
   one vLLM ``Attention`` per layer shape, FlashInfer's backend, the model's windows and sinks)
   and their KV-cache specs; the KV-cache layout (0.32+ ``resolve_kv_cache_layout``) and the
   CUDA-graph mode and sizes (``resolve_cudagraph_mode_and_sizes``, called as the model runner
   calls it) resolved by vLLM;
5. vLLM's real ``FlashInferMetadataBuilder`` per KV-cache group, on the CPU, read by the adapter's
   own code (``vllm_guard.workspace_facts.read_facts`` and ``server_bytes``).

The answer carries those facts, vLLM's buffer and the user's, and the settings vLLM resolved;
``plan`` decides with them as the adapter does. Any refusal (vLLM's parser, its config, its
builder) is ``{"ok": false, "refusal": one line}``; with ``"refuses": true`` (and ``"label"``,
``"message"``) where vLLM itself would refuse to start with the deployment (its config validation; its
FlashInfer builder where the command chose FlashInfer), with ``"ours": true`` where our own call into
vLLM failed (a changed signature, a moved function: ``guard_core.deployment.our_call``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys

from vllm_guard.runner import uses_v2_runner

__all__ = ["MARK", "resolve", "main"]

MARK = "FLASHINFER_GUARD_RESOLVED "
# plan's flags -> the ``vllm serve`` option (its argparse dest, an EngineArgs field) each replaces
FLAG_OPTIONS = {"tp": "tensor_parallel_size", "dcp": "decode_context_parallel_size", "max_num_seqs": "max_num_seqs",
                "max_batched_tokens": "max_num_batched_tokens", "max_model_len": "max_model_len",
                "kv_cache_dtype": "kv_cache_dtype", "page_size": "block_size",
                "max_capture_batch": "max_cudagraph_capture_size", "capture_sizes": "cudagraph_capture_sizes",
                "no_cuda_graph": "enforce_eager"}


def _one_line(what: str, exc: BaseException) -> str:
    return f"{what}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:400]


class _NotBuiltHere(ValueError):
    """A deployment this resolution does not build (ours to say, not vLLM's refusal)."""


def _failed(what: str, exc: BaseException, label: str, refuses: bool = False) -> dict:
    """The answer for a failure: OUR call into vLLM (a changed signature, a moved function:
    ``guard_core.deployment.our_call``) is our error, said as such, and plan falls back to its rules;
    else ``what`` vLLM did, and ``refuses``: vLLM itself would refuse to start with this deployment
    (plan exits 2 with vLLM's message); without it plan falls back to its rules."""
    from guard_core.deployment.our_call import our_call_error

    ours = our_call_error(exc)
    if ours is not None:
        return {"ok": False, "ours": True,
                "refusal": f"flashinfer-guard's own call into {label} failed (our error, not {label}'s refusal): "
                           f"{ours}"[:500]}
    ans = {"ok": False, "refusal": _one_line(what, exc)}
    if refuses:
        ans.update(refuses=True, label=label, message=" ".join(str(exc).split())[:400] or type(exc).__name__)
    return ans


def _flashinfer_chosen(vc) -> bool:
    """The command (or VLLM_ATTENTION_BACKEND) chose FlashInfer's attention backend: vLLM then runs
    this builder or refuses to start; otherwise its selector picks another backend where this one
    cannot serve the model."""
    backend = getattr(getattr(vc, "attention_config", None), "backend", None)
    name = str(getattr(backend, "name", backend) or os.environ.get("VLLM_ATTENTION_BACKEND") or "")
    return name.upper() == "FLASHINFER"


def _engine_args(req: dict):
    """Steps 1-2: vLLM's parser, ``EngineArgs.from_cli_args``, plan's flags over the command's."""
    import contextlib
    import io

    from vllm.engine.arg_utils import EngineArgs

    from guard_core.deployment.server_parsers import _vllm_parser

    top, _serve = _vllm_parser()
    sink = io.StringIO()

    def refuse(message=None, *a, **k):
        raise ValueError(message if isinstance(message, str) else "the parser exits")

    top.error = top.exit = _serve.error = _serve.exit = refuse
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        ns = top.parse_args(["serve", *req.get("tokens", [])])
    # vllm/entrypoints/cli/serve.py ServeSubcommand.cmd: the positional model tag is the model;
    # here the local config directory, without a tokenizer and never with remote code
    ns.model = ns.model_tag = req["model"]
    ns.tokenizer, ns.skip_tokenizer_init, ns.trust_remote_code = None, True, False
    for flag, v in (req.get("flags") or {}).items():
        if flag == "draft_tokens":
            ns.speculative_config = _speculative(getattr(ns, "speculative_config", None), int(v))
        elif flag in FLAG_OPTIONS:
            setattr(ns, FLAG_OPTIONS[flag], list(v) if isinstance(v, list) else v)
        else:
            raise ValueError(f"plan's flag {flag} has no vLLM option here")
    ea = EngineArgs.from_cli_args(ns)
    return ea


def _speculative(given, k: int):
    """plan's ``--draft-tokens K``: the command's speculative config with K tokens, else vLLM's
    n-gram drafter (no draft model to load); 0 turns speculation off."""
    if k == 0:
        return None
    cfg = dict(given) if isinstance(given, dict) else {"method": "ngram", "prompt_lookup_max": 4,
                                                       "prompt_lookup_min": 2}
    cfg["num_speculative_tokens"] = k
    return cfg


def _attention_layers(vc, rows):
    """Step 4: one vLLM ``Attention`` per layer shape the model reader found (per rank), with
    FlashInfer's backend, the layer's window and sinks; [(layer names, KV-cache spec)]."""
    import torch
    from vllm.config import set_current_vllm_config
    from vllm.v1.attention.backends.flashinfer import FlashInferBackend

    try:
        from vllm.model_executor.layers.attention import Attention
    except ImportError:  # <= 0.2x layout
        from vllm.attention.layer import Attention

    groups: dict = {}
    with set_current_vllm_config(vc):
        for i, r in enumerate(rows):
            if r["head_dim_vo"] != r["head_dim_qk"]:
                raise _NotBuiltHere(f"a layer with value head dim {r['head_dim_vo']} != {r['head_dim_qk']} is not "
                                    "built here")
            kw = {}
            if r.get("sinks"):
                # vllm models/gpt_oss.py OAIAttention: sinks, one per query head
                kw["sinks"] = torch.zeros(r["num_qo_heads"], dtype=torch.float32)
            hd = int(r["head_dim_qk"])
            layer = Attention(num_heads=int(r["num_qo_heads"]), head_size=hd, scale=hd ** -0.5,
                              num_kv_heads=int(r["num_kv_heads"]), cache_config=vc.cache_config,
                              per_layer_sliding_window=r.get("window") if r["kind"] == "sliding" else None,
                              attn_backend=FlashInferBackend, prefix=f"model.layers.{i}.self_attn.attn", **kw)
            groups.setdefault(layer.get_kv_cache_spec(vc), []).append((layer.layer_name, r))
    return [(names, spec) for spec, names in groups.items()]


def _resolve_graphs(vc, specs) -> str:
    """Step 4: the KV-cache layout and the CUDA-graph mode and sizes, as vLLM resolves them
    before any builder: ``resolve_kv_cache_layout`` (0.32+, v1/attention/backends/utils.py),
    then ``resolve_cudagraph_mode_and_sizes`` with the least CUDA-graph support of the groups'
    builders, called as the model runner does (0.23.0 v1/worker/gpu_model_runner.py:6845: the TP
    size; 0.33.0 :6786 V1 with ``use_v2_model_runner=False``, v1/worker/gpu/model_runner.py:756
    V2 with True, the worker picking by ``vllm_config.use_v2_model_runner``; 0.34.0 has V2 alone and
    no such parameter: config/compilation.py 0.34.0:1535-1544, called by v1/worker/gpu/model_runner.py
    0.34.0:792-800 with everything after the query length by keyword). Every argument after the
    three leading ones is passed by keyword, each only where the signature names it: a parameter
    removed (0.34.0 dropped ``use_v2_model_runner``, 0.32 ``tensor_parallel_size``) can no longer
    shift the others (``got multiple values for argument 'kv_cache_config'``)."""
    import inspect

    from vllm.v1.attention.backends.flashinfer import FlashInferBackend, FlashInferMetadataBuilder

    try:
        from vllm.v1.attention.backends.utils import get_supported_kv_cache_layouts, resolve_kv_cache_layout
    except ImportError:
        pass
    else:
        if getattr(vc.cache_config, "kv_cache_layout", None) is None:
            names = [layout.name for layout in get_supported_kv_cache_layouts([FlashInferBackend])]
            resolve_kv_cache_layout(vc, [names], specs)
    cc = vc.compilation_config
    if str(getattr(cc.cudagraph_mode, "name", cc.cudagraph_mode)) == "NONE":
        return "NONE"
    if not hasattr(cc, "resolve_cudagraph_mode_and_sizes"):
        raise ValueError("this vLLM resolves its CUDA-graph mode inside the model runner (before 0.20)")
    least = min((FlashInferMetadataBuilder.get_cudagraph_support(vc, s) for s in specs), key=lambda s: s.value)
    spec_cfg = vc.speculative_config
    q = 1 + (int(spec_cfg.num_speculative_tokens or 0) if spec_cfg is not None else 0)
    params = inspect.signature(cc.resolve_cudagraph_mode_and_sizes).parameters
    offered = {"kv_cache_config": None, "max_num_reqs": vc.scheduler_config.max_num_seqs,
               "use_v2_model_runner": uses_v2_runner(vc),
               "tensor_parallel_size": vc.parallel_config.tensor_parallel_size}
    kw = {k: v for k, v in offered.items() if k in params}
    mode = cc.resolve_cudagraph_mode_and_sizes(least, "FlashInferBackend", q, **kw)
    return str(getattr(mode, "name", mode))


def _facts_dict(facts) -> dict:
    d = {f.name: getattr(facts, f.name) for f in dataclasses.fields(facts) if f.name != "gpu"}
    for k in ("layout", "limits", "planner_facts"):
        if d.get(k) is not None:
            d[k] = dataclasses.asdict(d[k])
    return d


def resolve(req: dict) -> dict:
    """Steps 1-5 (module doc); the answer, or a refusal in one line."""
    os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        from vllm import __version__ as line
        from vllm.usage.usage_lib import UsageContext

        from vllm_guard.model_reader import _inspect_in_this_process, read_config
        from vllm_guard.simulated_device import simulate
        simulate(req["gpu"], req.get("trtllm"))
        _inspect_in_this_process()
    except Exception as exc:
        return _failed("vLLM could not be loaded", exc, _label())
    label = f"vLLM {line}"
    try:
        ea = _engine_args(req)
    except Exception as exc:
        return _failed(f"{label}'s parser refuses the command", exc, label)
    try:
        vc = ea.create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    except Exception as exc:
        # vLLM's validation of the deployment (a ValueError, pydantic's ValidationError included): the
        # server refuses to start with it; anything else may be this offline process's, not the server's
        return _failed(f"{label} refuses the config", exc, label, refuses=isinstance(exc, ValueError))
    return _builders(vc, label, read_config, req["gpu"])


def _label() -> str:
    from importlib import metadata

    try:
        return f"vLLM {metadata.version('vllm')}"
    except Exception:
        return "vLLM"


def _builders(vc, label: str, read_config, gpu_key: str) -> dict:
    """Step 5 and the answer: the builders read by the adapter's own code."""
    import torch
    import vllm.v1.attention.backends.flashinfer as m
    from vllm.config import set_current_vllm_config

    from guard_core import gpus
    from guard_core.versions import flashinfer_version
    from vllm_guard.workspace_facts import read_facts, server_bytes

    mc, pc = vc.model_config, vc.parallel_config
    tp = int(pc.tensor_parallel_size)
    resolved = _resolved(vc)
    if mc.use_mla:
        return {"ok": True, "label": label, "mla": True, "builders": [], "resolved": resolved}
    read = read_config(mc, (tp,))
    rows = read.get("groups", {}).get(str(tp))
    if not isinstance(rows, list):
        return {"ok": False, "refusal": f"{label}'s model reading: {(rows or {}).get('refusal', 'no groups')}"}
    rows = [r for r in rows if r["kind"] in ("full", "sliding", "chunked")]
    if not rows:
        return {"ok": False, "refusal": f"{label}: no attention layer FlashInfer plans"}
    try:
        groups = _attention_layers(vc, rows)
        out = []
        with set_current_vllm_config(vc):
            resolved["cudagraph_mode"] = _resolve_graphs(vc, [s for _, s in groups])
            resolved["cudagraph_capture_sizes"] = list(vc.compilation_config.cudagraph_capture_sizes or [])
            for named, spec in groups:
                b = m.FlashInferMetadataBuilder(spec, [n for n, _ in named], vc, torch.device("cpu"))
                srv, user = server_bytes(b, m)
                if srv is None:
                    return {"ok": False, "refusal": f"{label}: VLLM_BATCH_INVARIANT plans with fixed splits "
                                                    "(the built-in rules size that mode)"}
                facts = read_facts(b, gpus.lookup_gpu(gpu_key), flashinfer_version() or "")
                out.append({"facts": _facts_dict(facts), "server_bytes": int(srv), "user_bytes": user,
                            "group": dict(named[0][1], count=sum(int(r["count"]) for _, r in named))})
    except _NotBuiltHere as exc:
        return {"ok": False, "refusal": f"{label}: {exc}", "resolved": resolved}
    except Exception as exc:
        # vLLM's own builder refuses the deployment (gpt-oss's attention sinks without TRT-LLM attention,
        # v1/attention/backends/flashinfer.py 0.23.0:680-685): where the command chose FlashInfer, vLLM
        # would refuse to start; else its backend selector picks another backend for this model
        ans = _failed(f"{label}'s FlashInfer builder refuses", exc, label, refuses=_flashinfer_chosen(vc))
        return dict(ans, resolved=resolved)
    return {"ok": True, "label": label, "builders": out, "resolved": resolved}


def _resolved(vc) -> dict:
    """The settings vLLM resolved, for the plan's report."""
    sc, cc, spec = vc.scheduler_config, vc.compilation_config, vc.speculative_config
    return {"tp": int(vc.parallel_config.tensor_parallel_size),
            "dcp": int(getattr(vc.parallel_config, "decode_context_parallel_size", 1) or 1),
            "max_num_seqs": int(sc.max_num_seqs), "max_batched_tokens": int(sc.max_num_batched_tokens),
            "max_model_len": int(vc.model_config.max_model_len),
            "draft_tokens": int(spec.num_speculative_tokens or 0) if spec is not None else 0,
            "page_size": int(vc.cache_config.block_size or 0) or None,
            "kv_cache_dtype": str(vc.cache_config.cache_dtype),
            "max_capture": getattr(cc, "max_cudagraph_capture_size", None),
            "architecture": (vc.model_config.architectures or ["?"])[0],
            # the model runner the worker builds (v1/worker/gpu_worker.py picks by this property)
            # (0.23-0.33; 0.34.0 has V2 alone: vllm_guard.runner)
            "runner": "v2" if uses_v2_runner(vc) else "v1"}


def main() -> int:
    """One request (a JSON object) -> one answer line; a JSON list of requests -> one line each, in
    order, from one process (vLLM imported once)."""
    try:
        reqs = json.loads(sys.stdin.read())
    except Exception as exc:  # never a traceback: one line
        reqs = [exc]
    for req in reqs if isinstance(reqs, list) else [reqs]:
        try:
            if isinstance(req, Exception):
                raise req
            ans = resolve(req)
        except Exception as exc:
            ans = _failed("vLLM's resolution failed", exc, _label())
        sys.stdout.write(MARK + json.dumps(ans, default=str) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
