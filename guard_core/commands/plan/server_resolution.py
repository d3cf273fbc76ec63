"""Stage 4 by the server itself, ``server_facts``: the installed server resolves the launch command
offline and its adapter's own code reads the facts (issue 26, "What to build" 2).

Where ``<framework>_guard.server_resolution`` can run (the framework installed in this interpreter
at the simulated line, a local config.json, a GPU from the table), ``plan`` sends it one JSON
request in a subprocess (its imports and log lines stay out of plan's output) and reads one
answer line, ``FLASHINFER_GUARD_RESOLVED {json}``:

- request: ``{"tokens": the server's arguments, "model": a directory holding config.json, "gpu":
  the table key, "trtllm": --trtllm-attention (true/false/null), "flags": {plan's flag (``_FLAGS``):
  value}}``, the flags given to ``plan`` over the command's options;
- answer: ``{"ok": true, "label": "<Server> <version>", "builders": [{"facts": a
  WorkspaceFacts as a dict, "server_bytes", "user_bytes", "group": the layer group, "runner": ""
  or SGLang's "target"/"draft" (optional)}],
  "resolved": {the settings the server resolved}}``, or ``{"ok": false, "refusal": one line}``, with
  ``"refuses": true, "label", "message"`` where the server itself would refuse to start with the
  deployment (plan exits 2: "<Server> <version> would refuse to start: <its message>"), or ``"ours":
  true`` where our own call into the server failed (its one line says so; plan falls back to its rules).

The facts become the ``FactsSet`` the next stage (``decide``) takes, exactly as ``build_facts``'s
would; any refusal, a timeout or a missing module falls through to the built-in rules
(``build_facts``) with one note saying why. ``--resolution builtin`` skips this stage,
``--resolution server`` requires it. ``vllm_guard.server_resolution`` answers for vLLM.
"""

from __future__ import annotations

import json
import os

from guard_core.commands.plan.records import Command, FactsSet, ModelView, PlanUsageError, ServerConfig
from guard_core.deployment.server_defaults import framework_label

__all__ = ["server_facts", "RESOLUTION_TIMEOUT_S", "MARK"]

MARK = "FLASHINFER_GUARD_RESOLVED "
RESOLUTION_TIMEOUT_S = 300

# plan's own flags the server's module applies over the command's options (each maps them to its own
# option: vllm_guard.server_resolution.FLAG_OPTIONS)
_FLAGS = ("tp", "dcp", "max_num_seqs", "max_batched_tokens", "max_model_len", "kv_cache_dtype", "page_size",
          "max_capture_batch", "capture_sizes", "draft_tokens", "no_cuda_graph")
# what-ifs outside the server's config: plan sizes them with its own rules
_WHAT_IFS = (("kv_dtype_bytes", "--kv-dtype-bytes"), ("v_head_dim", "--v-head-dim"), ("sms", "--sms"),
             ("cc", "--cc"), ("deterministic", "--deterministic"))

# what each server's own resolution needs that plan must settle first (issue 42 item 5: a rule of
# one server is not applied to the other): vLLM's FlashInfer backend asks FlashInfer whether its
# TRT-LLM attention cubins load on an SM10x host (vllm/utils/flashinfer.py supports_trtllm_attention,
# read by FlashInferMetadataBuilder), which the simulated GPU cannot answer; SGLang's resolution asks
# no such thing: it picks its attention backend from the GPU's compute capability (the simulated
# one) and the command, and its FlashInfer backend plans with FlashInfer's planners on any GPU, so
# it runs on SM10x (plan's default GPU, B300) without the flag.
_SERVER_RULES = {
    "vllm": {"trtllm_on_sm10x": ("TRT-LLM attention on SM10x depends on FlashInfer's cubins on the server host; "
                                 "--trtllm-attention on|off settles it")},
    "sglang": {},
}


def server_facts(a, cmd: Command, server: ServerConfig, model: ModelView) -> FactsSet | None:
    """Stage 4 resolved by the server (module doc), or None: the built-in rules decide, and
    ``server.record["resolution"]`` says which was used and why (one line in the printed plan)."""
    fw = cmd.framework
    builtin = f"built-in rules for {framework_label(fw)} {server.line}"
    mode = getattr(a, "resolution", None) or "auto"
    why = _cannot_run(a, fw, server, mode)
    if why is None:
        ans = _ask(fw, _request(a, cmd, server), server.environ)
        if ans.get("ok") and server.deterministic and not any(b.get("fixed_split") for b in ans.get("builders") or ()):
            ans = {"ok": False, "refusal": f"{ans.get('label')}'s resolution read no fixed splits for "
                                          "--enable-deterministic-inference (the built-in rules size that mode)"}
        if ans.get("ok") and ans.get("builders"):
            fs = _facts_set(a, cmd, server, model, ans)
            server.record["resolution"] = {"used": f"{ans['label']}'s own engine config", "server": True,
                                           "resolved": ans.get("resolved")}
            _settings_from(server.record, ans)
            return fs
        if ans.get("refuses") and not ans.get("ours"):
            # the server's own resolution refuses the deployment: it would not start (exit 2, its message)
            raise PlanUsageError(f"{ans.get('label') or framework_label(fw)} would refuse to start: "
                                 f"{ans.get('message') or ans.get('refusal')}")
        why = ans.get("refusal") or ("an MLA model" if ans.get("mla") else "no answer")
    if mode == "server":
        raise PlanUsageError(f"--resolution server: {why}")
    server.record["resolution"] = {"used": builtin, "server": False, "why": why}
    return None


def _cannot_run(a, fw: str, server: ServerConfig, mode: str) -> str | None:
    """Why the server cannot resolve this plan here (None: it can)."""
    import importlib.util

    from guard_core.deployment.deployment_record import installed_line

    if mode == "builtin":
        return "--resolution builtin"
    reader = getattr(a, "model_reader", None) or "auto"
    if mode == "auto" and reader != "auto":
        return f"--model-reader {reader} (the server's resolution reads the model with the server's own code)"
    installed = installed_line(fw)
    if installed is None or importlib.util.find_spec(fw) is None:
        return f"not installed here: {framework_label(fw)}"
    if installed != server.line:
        return f"{framework_label(fw)} {installed} is installed here, the plan simulates {server.line}"
    if importlib.util.find_spec(f"{fw}_guard.server_resolution") is None:
        return f"no {fw}_guard.server_resolution in this install"
    if not server.model_path:
        return "no local config.json for the server to read (a preset or an uncached model)"
    for attr, flag in _WHAT_IFS:
        if getattr(a, attr, None):
            return f"{flag} is a what-if outside the server's config"
    if not server.gpu_key:
        return "a GPU outside the table"
    rule = _SERVER_RULES.get(fw, {}).get("trtllm_on_sm10x")
    if rule and server.gpu.cc[0] == 10 and getattr(a, "trtllm_attention", None) is None:
        return rule
    return None


def _request(a, cmd: Command, server: ServerConfig) -> dict:
    """The request: the server's arguments as the command gives them, plan's flags over them."""
    tokens = []
    if cmd.launch is not None and getattr(a, "launch", None):
        from guard_core.deployment.launch_command import split_command

        tokens = list(split_command(list(a.launch))[2])
    flags = {f: getattr(a, f, None) for f in _FLAGS}
    flags = {f: v for f, v in flags.items() if v is not None and v is not False}  # 0 draft tokens is a value
    if "capture_sizes" in flags:
        flags["capture_sizes"] = list(flags["capture_sizes"])
    trt = {"on": True, "off": False}.get(getattr(a, "trtllm_attention", None))
    model = server.model_path
    if os.path.basename(model) == "config.json":
        model = os.path.dirname(model) or "."
    return {"tokens": tokens, "model": model, "gpu": server.gpu_key, "trtllm": trt, "flags": flags}


def _ask(fw: str, req: dict, environ: dict) -> dict:
    """Run ``<fw>_guard.server_resolution`` in a subprocess of this interpreter, offline, in the
    environment the server sees (the guard itself off there: it only reads)."""
    from guard_core.deployment.guard_module import config_copy, run_guard_module, server_process_env

    # the environment the server sees (docker -e only, env -i, env -u: commands/plan/server.server_environ),
    # the same as the model reader's: inside plan's session both run in one process (guard_module.session)
    env = server_process_env(environ)
    try:
        # the server reads a directory's config.json: a file is read from a private copy named so
        with config_copy(req["model"], always=True) as (_, tmp):
            return run_guard_module(f"{fw}_guard.server_resolution", [], env, MARK, RESOLUTION_TIMEOUT_S,
                                    framework_label(fw), stdin=json.dumps(dict(req, model=tmp or req["model"])))
    except OSError as exc:
        return {"ok": False, "refusal": f"cannot copy {req['model']} ({type(exc).__name__})"}


def _facts_set(a, cmd: Command, server: ServerConfig, model: ModelView, ans: dict) -> FactsSet:
    """The answer as the ``FactsSet`` ``build_facts`` would give: the server's facts per builder,
    its buffer and the user's, plan's --workspace and planner flags over them."""
    from guard_core.deployment.server_reader import rank_groups_from

    given = None
    if a.decode_planner or a.prefill_planner or a.decode_blocks_per_sm:
        given = (a.prefill_planner, a.decode_planner, a.decode_blocks_per_sm)
    groups = []
    for b in ans["builders"]:
        f = _workspace_facts(b["facts"], server, given)
        groups.append((rank_groups_from([b["group"]])[0], b.get("runner", ""), f, b))
    top = max(groups, key=lambda r: r[3]["server_bytes"])
    srv, user = int(top[3]["server_bytes"]), top[3].get("user_bytes")
    buffer = srv
    if a.workspace:
        from guard_core.runtime.settings import parse_size

        buffer = parse_size(a.workspace)
        if buffer is None:
            raise PlanUsageError(f"--workspace must be a size such as 394MiB, 1GiB or a byte count, got {a.workspace!r}")
    pf = top[2].planner_facts
    trt = pf.trtllm_attention
    pl_info = {"tcd": pf.tensor_core_decode, "tcd_why": f"tensor-core decode as {ans['label']}'s backend sets it",
               "trt_src": f"TRT-LLM attention {'usable' if trt else 'not used' if trt is False else 'unknown'} "
                          f"({ans['label']}'s backend)", "notes": []}
    if a.decode_planner or a.prefill_planner:
        pl_info["notes"].append("planner given: " + ", ".join(
            f"{n} {v}" for n, v in (("decode", a.decode_planner), ("prefill", a.prefill_planner)) if v))
    model.rank_groups = [g for g, _r, _f, _b in groups]
    src = f"{ans['label']}'s own size (" + (top[3].get("server_source") or "the adapter's reading of its builder") + ")"
    if user is not None:
        src += "; the user's own size"
    fixed_info = None
    if any(b.get("fixed_split") for _g, _r, _f, b in groups):
        # SGLang's deterministic inference as its own resolution read it: the fixed splits the
        # backend plans with (its limits), sized by the same fixed-split decision as the rules'
        server.deterministic = True
        fixed_info = _fixed_info(top[2].limits, server.environ)
    return FactsSet([(g, r, f) for g, r, f, _b in groups], top[2].limits, top[2].layout.kv_dtype_bytes, pl_info,
                    srv, src, user, buffer, fixed_info)


def _fixed_info(limits, environ: dict) -> dict:
    """The deterministic mode's record (``facts._deterministic_limits``'s) from the server's limits."""
    from guard_core.deployment.launch_command import READ_ENV

    env = {k: environ[k] for k in READ_ENV if k in environ and "SPLIT_TILE" in k}
    return {"mode": "deterministic", "prefill_split_tile_size": limits.fixed_split_prefill,
            "decode_split_tile_size": limits.fixed_split_decode,
            "split_source": ", ".join(f"{k}={v}" for k, v in env.items()) or "SGLang's defaults",
            "kv_pool_tokens": limits.kv_pool_tokens}


def _workspace_facts(d: dict, server: ServerConfig, given):
    """A ``WorkspaceFacts`` from the answer's dict (JSON lists back to tuples), with plan's GPU."""
    from dataclasses import replace

    from guard_core.decide.workspace import WorkspaceFacts
    from guard_core.flashinfer.planner_choice import PlannerFacts
    from guard_core.flashinfer.sizing import AttentionLayout, ServingLimits

    def tup(x):
        return {k: tuple(v) if isinstance(v, list) else v for k, v in x.items()}

    f = WorkspaceFacts(d["framework"], d["flashinfer_version"], server.gpu, AttentionLayout(**d["layout"]),
                       ServingLimits(**tup(d["limits"])), PlannerFacts(**tup(d["planner_facts"])),
                       tuple(d["kv_dtype_bytes_options"]) if d.get("kv_dtype_bytes_options") else None,
                       tuple(d.get("missing") or ()))
    return replace(f, flashinfer_version=server.flashinfer or f.flashinfer_version, planners_given=given)


def _settings_from(record: dict, ans: dict) -> None:
    """The settings table shows what the server resolved, each sourced to it."""
    res = ans.get("resolved") or {}
    vals = (record.get("defaults") or {}).get("values")
    if not isinstance(vals, dict):
        return
    src = f"{ans['label']}'s own engine config"
    pairs = {"tp": res.get("tp"), "dcp": res.get("dcp"), "max_num_seqs": res.get("max_num_seqs"),
             "max_batched_tokens": res.get("max_batched_tokens"), "max_model_len": res.get("max_model_len"),
             "draft_tokens": res.get("draft_tokens"), "page_size": res.get("page_size"),
             "max_capture": res.get("max_capture"), "capture_sizes": res.get("cudagraph_capture_sizes")}
    for k, v in pairs.items():
        if v is not None:
            vals[k] = dict(vals.get(k) or {}, value=v, source=src)
