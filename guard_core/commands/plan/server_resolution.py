"""Stage 4, the server's own way (issue 26 item 2): where the simulated server line is the one
installed in this interpreter, the launch command is resolved by the server itself and the facts
are read from its objects by the adapter's own reader, in a subprocess
(``<framework>_guard.plan_resolve``; its imports and log lines stay out of plan's output, one
``FLASHINFER_GUARD_RESOLVED {json}`` answer line). The answer is the adapter's ``WorkspaceFacts``
per model runner; ``plan`` decides on them with the same core calls as on its own facts
(``decide`` stage). Where the server cannot resolve (not installed, another line simulated, a
plan flag that replaces a command value, a refusal, no answer in time), ``build_facts``'s
per-line rules answer and the record says why, in one line.

The answer's schema is framework-free: ``{"ok": true, "facts": [{"runner", "num_layers",
"fixed_split", "layout", "limits", "planner_facts", "kv_dtype_bytes_options", "missing", and
optionally "group": {"kind", "count", "window", "sinks"}}],
"resolved": {..., "architecture", "deterministic"}}`` or ``{"ok": false, "refusal": "..."}``.
"""

from __future__ import annotations

import os

from guard_core.commands.plan.records import Command, FactsSet, ModelView, ServerConfig

__all__ = ["RESOLVERS", "server_facts", "with_resolution"]

# the module a framework's adapter answers with (python -m <module> '<json request>')
RESOLVERS = {"sglang": "sglang_guard.plan_resolve"}
TIMEOUT_S = 300  # a resolution takes 10-20 s of CPU (the server's imports); a loaded host needs more
MARK = "FLASHINFER_GUARD_RESOLVED "
# plan flags that replace a value of the launch command: the server is not asked (its command
# would not be the one planned)
_REPLACING_FLAGS = ("tp", "dcp", "max_num_seqs", "max_batched_tokens", "max_model_len", "draft_tokens",
                    "capture_sizes", "max_capture_batch", "page_size", "no_cuda_graph", "kv_cache_dtype",
                    "kv_dtype_bytes", "deterministic", "kv_pool_tokens", "v_head_dim", "sms", "cc")
# what the resolver process inherits beside the server's own environment (to run at all)
_HOST_VARS = ("PATH", "HOME", "TMPDIR", "LD_LIBRARY_PATH", "HF_HOME", "HF_HUB_CACHE", "XDG_CACHE_HOME")


def server_facts(a, cmd: Command, server: ServerConfig, model: ModelView) -> tuple[FactsSet | None, dict]:
    """(the facts from the server's own resolution or None, the record of the resolution used)."""
    from guard_core.deployment.server_defaults import framework_label

    label = framework_label(cmd.framework)
    why = _why_not(a, cmd, server)
    if why is None:
        answer = _ask(a, cmd, server)
        if answer.get("ok"):
            try:
                fs = _facts_set(a, cmd, server, answer)
            except (KeyError, TypeError, ValueError) as exc:
                why = f"{label}'s answer could not be read ({type(exc).__name__}: {exc})"[:300]
            else:
                by = (f"{label} {server.line}'s own ServerArgs and ModelConfig on a simulated {server.gpu.name}, "
                      "facts read by the adapter's reader")
                return fs, {"by": "server", "text": by, "resolved": answer.get("resolved", {})}
        else:
            why = answer.get("refusal") or "no answer"
    return None, {"by": "rules", "text": f"{label} {server.line}'s rules in flashinfer-guard (per-line defaults)",
                  "why": why}


def _why_not(a, cmd: Command, server: ServerConfig) -> str | None:
    """Why the server is not asked (None: it is)."""
    from guard_core.deployment.server_defaults import framework_label, installed_line

    fw, label = cmd.framework, framework_label(cmd.framework)
    if cmd.launch is None:
        return "no launch command"
    if fw not in RESOLVERS:
        return f"no resolver for {label} yet"
    if getattr(a, "launch_reader", "auto") == "builtin":
        return "--launch-reader builtin"
    installed = installed_line(fw)
    if installed is None:
        return f"{label} is not installed in this environment"
    if installed != server.line:
        return f"{label} {installed} is installed here; the plan simulates {server.line}"
    given = [f"--{n.replace('_', '-')}" for n in _REPLACING_FLAGS if getattr(a, n, None) not in (None, False)]
    if given:
        return f"plan's {', '.join(given)} replace{'s' if len(given) == 1 else ''} the command's value"
    if server.gpu_key is None:
        return "a GPU outside the table (its memory is unknown)"
    if server.deterministic:
        return "deterministic inference (its fixed-split facts come from the per-line rules)"
    if not server.model_path:
        return "the model's config.json is not on disk here"
    return None


def _ask(a, cmd: Command, server: ServerConfig) -> dict:
    """The resolver's answer, or ``{"ok": False, "refusal"}`` (never raises)."""
    import json
    import shutil
    import subprocess
    import sys
    import tempfile

    from guard_core.deployment.launch_command import split_command
    from guard_core.gpus import gpu_memory

    fw = cmd.framework
    try:
        tokens = split_command(list(a.launch))[2]
    except Exception as exc:
        return {"ok": False, "refusal": f"the command's server arguments could not be split ({type(exc).__name__})"}
    path, tmp = server.model_path, None
    if os.path.isfile(path):
        if os.path.basename(path) == "config.json":
            path = os.path.dirname(path) or "."
        else:  # the server reads a directory's config.json: a private copy so named
            tmp = tempfile.mkdtemp(prefix="flashinfer-guard-resolve-")
            try:
                shutil.copyfile(path, os.path.join(tmp, "config.json"))
            except OSError as exc:
                shutil.rmtree(tmp, True)
                return {"ok": False, "refusal": f"cannot copy {path} ({type(exc).__name__})"}
            path = tmp
    mem = gpu_memory(server.gpu_key)
    g = server.gpu
    req = {"argv": tokens, "model_dir": os.path.abspath(path), "line": server.line,
           "gpu": {"name": g.name, "key": server.gpu_key, "cc": list(g.cc),
                   "memory_mib": mem[1] if mem else None}}
    try:
        p = subprocess.run([sys.executable, "-m", RESOLVERS[fw], json.dumps(req)], capture_output=True, text=True,
                           timeout=TIMEOUT_S, env=_environ(server.environ))
    except subprocess.TimeoutExpired:
        return {"ok": False, "refusal": f"{RESOLVERS[fw]} gave no answer within {TIMEOUT_S} s"}
    except (OSError, subprocess.SubprocessError) as exc:
        return {"ok": False, "refusal": f"{RESOLVERS[fw]} did not run ({type(exc).__name__})"}
    finally:
        if tmp:
            shutil.rmtree(tmp, True)
    for line in reversed((p.stdout or "").splitlines()):
        if line.startswith(MARK):
            try:
                res = json.loads(line[len(MARK):])
            except ValueError:
                break
            return res if isinstance(res, dict) else {"ok": False, "refusal": "an answer that is not a record"}
    tail = " ".join((p.stderr or "").strip().splitlines()[-1:])[:200]
    return {"ok": False, "refusal": f"{RESOLVERS[fw]} gave no answer (exit {p.returncode}: {tail})"}


def _environ(server_env: dict) -> dict:
    """The server's environment, with what a Python process needs to start, this checkout on
    the path, offline, and the guard itself off (plan decides; the resolver only reads)."""
    import guard_core

    env = dict(server_env)
    for k in _HOST_VARS:
        if k in os.environ and k not in env:
            env[k] = os.environ[k]
    here = os.path.dirname(os.path.dirname(os.path.abspath(guard_core.__file__)))
    env["PYTHONPATH"] = here + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", FLASHINFER_GUARD="0")
    return env


def _tuples(d: dict) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}


def _facts_set(a, cmd: Command, server: ServerConfig, answer: dict) -> FactsSet:
    """The adapter's facts per runner as plan's ``FactsSet``; the server's buffer by the line's
    one rule (``server_defaults.server_workspace``, as ``build_facts``)."""
    from types import SimpleNamespace

    from guard_core.commands.plan.facts import _buffers
    from guard_core.decide.workspace import WorkspaceFacts
    from guard_core.deployment.groups import RankGroup
    from guard_core.flashinfer.planner_choice import PlannerFacts
    from guard_core.flashinfer.sizing_records import AttentionLayout, ServingLimits

    resolved = answer.get("resolved") or {}
    if resolved.get("deterministic") or any(f.get("fixed_split") for f in answer["facts"]):
        raise ValueError("SGLang resolved deterministic inference, which plan sizes with the per-line rules")
    given = None
    if a.decode_planner or a.prefill_planner or a.decode_blocks_per_sm:
        given = (a.prefill_planner, a.decode_planner, a.decode_blocks_per_sm)
    groups = []
    for f in answer["facts"]:
        lay = AttentionLayout(**f["layout"])
        wf = WorkspaceFacts(cmd.framework, server.flashinfer, server.gpu, lay, ServingLimits(**_tuples(f["limits"])),
                            PlannerFacts(**_tuples(f["planner_facts"])),
                            tuple(f["kv_dtype_bytes_options"]) if f.get("kv_dtype_bytes_options") else None,
                            tuple(f.get("missing") or ()), planners_given=given)
        grp = f.get("group") or {}  # optional: the attention group a runner's builder serves (kind, window, ...)
        g = RankGroup(grp.get("kind", "full"), lay.num_qo_heads, lay.num_kv_heads, lay.head_dim_qk, lay.head_dim_vo,
                      int(grp.get("count") or f.get("num_layers") or 1), grp.get("window"), bool(grp.get("sinks")))
        groups.append((g, f.get("runner") or "", wf))
    if not groups:
        raise ValueError("no runner in the answer")
    top = groups[0][2]
    pf = top.planner_facts
    info = {"tcd": pf.tensor_core_decode, "tcd_why": "SGLang's own should_use_tensor_core (flashinfer_backend.py)",
            "trt_src": "", "notes": []}
    arch = SimpleNamespace(architecture=resolved.get("architecture") or server.model.architecture)
    lay = top.layout
    server_bytes, src, user, buffer = _buffers(a, cmd.launch, cmd.framework, server.line, arch, top.limits,
                                               lay.num_qo_heads, lay.head_dim_qk, False)
    return FactsSet(groups, top.limits, lay.kv_dtype_bytes, info, server_bytes, src, user, buffer, None)


def with_resolution(out: dict, resolution: dict, fs: FactsSet) -> dict:
    """The report with the resolution it used; where the server resolved, the settings it
    resolved replace the per-line defaults shown (each sourced to the server)."""
    out = dict(out, resolution=resolution)
    if resolution.get("by") != "server" or not isinstance(out.get("defaults"), dict):
        return out
    r, lim = resolution.get("resolved") or {}, fs.limits
    # the server read every option itself: what the per-line reader would not have read is kept apart
    out["not_read_by_rules"], out["not_read_options"] = list(out.get("not_read_options") or []), []
    backends = r.get("attention_backends") or []
    if backends and "flashinfer" not in backends:
        out["notes"] = list(out.get("notes") or []) + [
            f"SGLang resolved the attention backend(s) {', '.join(backends)} for this command: the figures are "
            "FlashInfer's, where --attention-backend flashinfer is given"]
    src = resolution["text"].split(",")[0]
    k = r.get("speculative_num_draft_tokens")
    vals = {"tp": r.get("tp"), "attn_tp": r.get("attn_tp") if r.get("attn_dp", 1) > 1 else None,
            "max_num_seqs": r.get("max_running_requests") or lim.max_num_seqs,
            "max_batched_tokens": r.get("chunked_prefill_size"), "page_size": r.get("page_size") or 1,
            "draft_tokens": (int(k) - 1) if k else (None if r.get("speculative_algorithm") else 0),
            "eagle_topk": r.get("speculative_eagle_topk"), "spec_steps": r.get("speculative_num_steps"),
            "capture_sizes": list(lim.capture_sizes), "max_capture": max(lim.capture_sizes, default=None),
            "request_pool": r.get("request_pool")}
    values = dict(out["defaults"].get("values") or {})
    for name, v in vals.items():
        if v is None and name not in values:
            continue
        values[name] = {"value": v, "source": src if v is not None else f"{src}: left unset", "passed": True}
    out["defaults"] = dict(out["defaults"], values=values)
    return out
