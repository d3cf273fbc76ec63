"""``flashinfer-guard plan``: the decision the guard makes inside the server, made offline.

One path of named stages, each a function of the one before (``build``):
``read_command`` (the launch command after ``--``, ``launch_command.py``) ->
``resolve_server`` (the model's config from a path, the local Hugging Face cache or the
presets; the simulated line's defaults on the simulated GPU, ``server_defaults.py``; the
environment the server process sees and the FLASHINFER_GUARD_* switches in it) ->
``read_model`` (the attention groups one rank plans, the server's own reader where
installed) -> ``build_facts`` (one ``workspace_decision.WorkspaceFacts`` per group, the
record the adapters build) -> ``decide`` (``workspace_decision.need``/``decide``, the
fixed-split pair, ``moe_decision.decide``: the adapters' own calls) -> ``report`` (a dict,
the ``--json`` output; ``print_report`` renders it). Nothing here sizes or judges:
``tests/core/test_plan_one_path.py``.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from typing import Any

from guard_core.decide.records import moe_verdict
from guard_core.flashinfer.planner import family
from guard_core.gpus import find_spec
from guard_core.deployment.groups import server_view
from guard_core.deployment.hf_cache import find_config, looks_like_model_id
from guard_core.deployment.launch_command import LaunchError, attention_backend_note, parse_launch
from guard_core.flashinfer.planner_choice import PlannerFacts, dtype_bytes, dtype_kind, vllm_query_dtypes
from guard_core.deployment.presets import DEFAULT_MODEL, ModelError, ModelFacts, find_preset, load_model
from guard_core.flashinfer.releases import NATIVE_VAR
from guard_core.deployment.server_defaults import (derive, framework_label, gpu_memory, is_aarch64_gpu,
                              sglang_tensor_core_decode, short_line, vllm_per_phase_builder, server_workspace,
                              Deployment)
from guard_core.runtime.settings import MASTER, MOE, Settings, load_settings
from guard_core.flashinfer.sizing import INT_WORKSPACE_BYTES, AttentionLayout
from guard_core.units import fmt_size
from guard_core.versions import is_version, parse_version

__all__ = ["PlanUsageError", "build", "print_report", "split_launch"]


class PlanUsageError(ValueError):
    """A bad input: one line for the user, exit 2."""


def split_launch(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """``plan [opts] -- CMD ...`` -> (plan argv, launch command or None)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def _groups_max_len(facts) -> int | None:
    """The max length the groups reader found (ChatGLM's seq_length, a nested language_config)."""
    mg = getattr(facts, "groups", None)
    return getattr(mg, "max_len", None)


def _max_len_of(path: str) -> int | None:
    """max_position_embeddings of a config.json (text_config first), or None."""
    try:
        if os.path.getsize(path) > (4 << 20):
            return None
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(cfg, dict):
        return None
    for scope in (cfg.get("text_config"), cfg.get("llm_config"), cfg):
        if isinstance(scope, dict):
            v = scope.get("max_position_embeddings")
            if type(v) is int and 0 < v <= (1 << 27):
                return v
    return None


def _read_by_chain(spec: str, path: str, framework: str, mode: str, environ) -> tuple[ModelFacts, str]:
    """The model's facts from the first reader that can read it (guard_core.deployment.model_readers):
    the built-in reader is tried first only because it is cheap; where it cannot read, the
    installed server's own config code and then transformers' config classes are asked, and
    only when every one refuses does the run end, in one line (issue 26)."""
    try:
        return load_model(spec), ""
    except ModelError as exc:
        if mode == "builtin" or not os.path.isfile(path):
            raise
        from guard_core.deployment.model_readers import facts_by_chain

        facts, reader, _ = facts_by_chain(path, framework, mode, environ, first_error=exc)
        label = {"server": f"{framework}'s own config code", "transformers": "transformers' config classes"}
        return facts, f" (read by {label.get(reader, reader)}; the built-in reader could not: {exc})"


def resolve_model(name: str, environ=None, framework: str = "vllm",
                  mode: str = "auto") -> tuple[ModelFacts, str, int | None, str | None]:
    """(facts, where they came from, the model's max length or None, the config.json path or None)."""
    if os.path.isdir(name) or name.endswith(".json") or os.path.exists(name):
        path = os.path.join(name, "config.json") if os.path.isdir(name) else name
        facts, how = _read_by_chain(name, path, framework, mode, environ)
        return facts, f"config.json at {path}{how}", _max_len_of(path) or _groups_max_len(facts), path
    looked: list[str] = []
    if looks_like_model_id(name):
        path, looked = find_config(name, environ=environ)
        if path:
            facts, how = _read_by_chain(path, path, framework, mode, environ)
            return (facts, f"local Hugging Face cache: {path}{how}", _max_len_of(path) or _groups_max_len(facts),
                    path)
    preset = find_preset(name)
    if preset is not None:
        how = "embedded preset" if preset.name == name else f"embedded preset {preset.name}"
        return preset, how, None, None
    where = f"the local Hugging Face cache ({', '.join(looked)}) and " if looked else ""
    raise PlanUsageError(f"unknown model {name!r}: not found in {where}the presets; give a config.json path "
                         f"(or a directory holding one), or a preset: flashinfer-guard presets")


def _pick(flag_value, cmd_value, name: str, notes: list, flag: str):
    """A plan flag beats the launch command; say so when they differ."""
    if flag_value is not None and cmd_value is not None and flag_value != cmd_value:
        notes.append(f"{flag} {flag_value} replaces the command's {name} {cmd_value}")
    return flag_value if flag_value is not None else cmd_value


@dataclass
class Command:
    """Stage 1: the launch command after ``--`` as its server reads it (None without one)."""

    launch: Any
    framework: str
    notes: list


@dataclass
class ServerConfig:
    """Stage 2: the deployment the server resolves: the model's config, the GPU, the
    line's defaults, the environment the server sees and the guard's switches in it."""

    model: Any  # presets.ModelFacts
    model_source: str
    model_path: str | None
    gpu: Any
    gpu_key: str | None
    defaults: Any  # server_defaults.Defaults
    kv_dtype: str
    environ: dict  # the environment the server process sees
    environ_why: str
    settings: Settings  # the FLASHINFER_GUARD_* switches in that environment
    deterministic: bool
    record: dict  # what every plan says, sized or not

    @property
    def line(self) -> str:
        return self.defaults.line

    @property
    def flashinfer(self) -> str:
        return self.defaults.get("flashinfer")


@dataclass
class ModelView:
    """Stage 3: the attention groups one rank plans, and who read them."""

    groups: Any  # model_groups (all layers)
    rank_groups: list
    reader: dict
    tp: int
    dcp: int
    not_applicable: str | None = None


@dataclass
class FactsSet:
    """Stage 4: the facts records the adapter builds (one per attention group), and the sizes
    the server allocates: its own, the user's native one, the buffer checked."""

    groups: list  # [(group, runner, WorkspaceFacts)]: runner "" or SGLang's "target" / "draft"
    limits: Any
    kv_bytes: int
    planner_info: dict
    server_bytes: int
    server_source: str
    user_bytes: int | None
    buffer: int
    fixed_info: dict | None


@dataclass
class Decided:
    """Stage 5: workspace_decision's need per group and its decisions: ``verdict`` (the
    server on its own: auto against the buffer) and ``guard`` (the switches it runs with)."""

    needs: list  # [(group, runner, WorkspaceFacts, WorkspaceNeed)]
    top: tuple
    verdict: Any  # WorkspaceOutcome
    guard: Any  # WorkspaceOutcome or None (the guard off)
    fixed_split: Any = None  # (verdict assessment, guard assessment)


def build(a, resolve_gpu, environ=None) -> dict:
    """The plan for parsed options ``a`` (``a.launch``: the command after ``--`` or None).

    One path, each stage a function of the one before: read the command -> resolve the
    server's config -> read the model -> the facts the adapter builds -> decide (through
    ``guard_core.decide.workspace``, as the adapter does) -> report. Nothing here sizes
    or judges on its own."""
    cmd = read_command(a, environ)
    server = resolve_server(a, cmd, resolve_gpu, environ)
    if server.model.uses_mla:
        return dict(server.record, verdict="not_applicable", notes=cmd.notes,
                    reason="MLA model: FlashInfer's MLA planner uses its own buffer, not the one guarded here")
    model = read_model(a, cmd, server)
    if model.not_applicable:
        return dict(server.record, verdict="not_applicable", reason=model.not_applicable, notes=cmd.notes)
    facts = build_facts(a, cmd, server, model)
    decided = decide(server, facts)
    return report(a, cmd, server, model, facts, decided)


def read_command(a, environ) -> Command:
    """Stage 1: the launch command (``_read_launch``) and the framework it starts."""
    notes: list[str] = []
    L = _read_launch(a, environ, notes)
    fw = a.framework or (L.framework if L else "vllm")
    if L and a.framework and a.framework != L.framework:
        raise PlanUsageError(f"--framework {a.framework} contradicts the launch command, which starts "
                             f"{framework_label(L.framework)}")
    return Command(L, fw, notes)


def resolve_server(a, cmd: Command, resolve_gpu, environ) -> ServerConfig:
    """Stage 2: the model's config, the GPU, the line's defaults on it (flags over the
    command), the environment the server sees and the guard's switches there."""
    L, fw, notes = cmd.launch, cmd.framework, cmd.notes
    model, model_source, model_max_len, model_path, model_name = _plan_model(a, L, environ, notes)
    gpu = resolve_gpu(a)
    spec = find_spec(a.gpu or "b300") if (a.gpu or a.sms is None) else None
    gpu_key = spec.key if spec else None
    d, kv_dtype = _deployment(a, L, fw, gpu, gpu_key, model, model_max_len, model_name, environ, notes)
    try:
        defaults = derive(d)
    except ValueError as exc:
        raise PlanUsageError(str(exc)) from None
    notes += defaults.notes
    env, env_why = _server_environ(L, environ)
    settings = load_settings(env)
    notes += [f"{w} (in the environment the server sees)" for w in settings.warnings]
    det = fw == "sglang" and bool(getattr(a, "deterministic", False) or (L and L.deterministic))
    if getattr(a, "deterministic", False) and fw != "sglang":
        raise PlanUsageError("--deterministic is SGLang's --enable-deterministic-inference; vLLM's batch-invariant "
                             "mode plans without split-KV (docs/deterministic.md)")
    record = _base_record(a, L, fw, gpu, gpu_key, model, model_source, defaults, settings)
    record["environment"] = env_why
    return ServerConfig(model, model_source, model_path, gpu, gpu_key, defaults, kv_dtype, env, env_why, settings,
                        det, record)


def read_model(a, cmd: Command, server: ServerConfig) -> ModelView:
    """Stage 3: the attention groups one rank plans (the server's own reader where installed)."""
    if cmd.launch:
        _launch_notes(cmd.launch, server.kv_dtype, cmd.notes)
    tp_v = server.defaults.get("attn_tp") or server.defaults.get("tp") or 1
    dcp_v = server.defaults.get("dcp") or 1
    mg = server.model.model_groups()
    rank_groups, reader, not_applicable = _rank_groups(a, cmd.framework, mg, server.model_path, tp_v,
                                                       server.environ)
    return ModelView(mg, rank_groups, reader, tp_v, dcp_v, not_applicable)


def build_facts(a, cmd: Command, server: ServerConfig, model: ModelView) -> FactsSet:
    """Stage 4: one ``WorkspaceFacts`` per attention group, as the adapter reads its builder
    (layout, limits, planner facts), and the sizes the server allocates."""
    from guard_core.decide.workspace import WorkspaceFacts

    L, fw, notes, defaults = cmd.launch, cmd.framework, cmd.notes, server.defaults
    kv_dtype = _kv_dtype_for_bytes(a, server.kv_dtype, notes)
    kv_kind = dtype_kind(kv_dtype)
    kv_bytes = a.kv_dtype_bytes or dtype_bytes(kv_kind) or 2
    pfacts, pl_info = _planner_facts(a, fw, server.gpu, server.line, kv_dtype, kv_kind, model.rank_groups,
                                     model.dcp, server.deterministic)
    runners = _limits(fw, server, model, pfacts, notes)
    limits = runners[0][1]
    fixed_info = None
    if server.deterministic:
        limits, fixed_info = _deterministic_limits(a, L, limits, server.gpu, server.environ, notes)
        _check_kv_pool(fixed_info.get("kv_pool_tokens"), server.line)
        runners = [("", limits)]
    given = None
    if a.decode_planner or a.prefill_planner or a.decode_blocks_per_sm:
        given = (a.prefill_planner, a.decode_planner, a.decode_blocks_per_sm)
    page = defaults.get("page_size")
    groups = [(g, runner, WorkspaceFacts(fw, server.flashinfer, server.gpu, _group_layout(g, page, kv_bytes), lim,
                                         pfacts, planners_given=given))
              for g in model.rank_groups for runner, lim in runners]
    top = max(model.rank_groups, key=lambda g: (g.num_qo_heads * (g.head_dim_vo + 1), g.head_dim_qk))
    server_bytes, server_src, user, buffer = _buffers(a, L, fw, server.line, server.model, limits, top.num_qo_heads,
                                                      top.head_dim_qk, server.deterministic)
    return FactsSet(groups, limits, kv_bytes, pl_info, server_bytes, server_src, user, buffer, fixed_info)


def _limits(fw, server: ServerConfig, model: ModelView, pfacts, notes: list):
    """The serving limits the adapter reads from the server: vLLM's builder through the core's
    one rule (``workspace_decision.vllm_graph_limits``: which graphs vLLM captures on this line)."""
    from guard_core.decide.workspace import vllm_graph_limits, vllm_reorder_batch_threshold, vllm_spec_decode_graphs

    defaults = server.defaults
    draft = defaults.get("draft_tokens") or 0
    if fw != "vllm":
        return _sglang_runners(server, draft, notes)
    spec_as_decode = _vllm_spec_as_decode(server, pfacts)
    threshold = vllm_reorder_batch_threshold(draft, spec_as_decode, model.dcp)
    capture = defaults.decode_graph_sizes
    if vllm_spec_decode_graphs(draft, spec_as_decode, model.dcp) is False and capture:
        capture = ()
        notes.append(f"speculative decoding without a FlashInfer builder that decodes {1 + draft}-token batches: vLLM "
                     "drops its FULL decode CUDA graphs to PIECEWISE (resolve_cudagraph_mode_and_sizes), so "
                     "FlashInfer plans every batch eagerly, verify batches as prefills")
    return [("", vllm_graph_limits(capture_sizes=capture, max_num_seqs=defaults.get("max_num_seqs"),
                                   max_num_batched_tokens=defaults.get("max_batched_tokens"), draft_tokens=draft,
                                   max_model_len=defaults.get("max_model_len"), reorder_batch_threshold=threshold,
                                   fa2_native_decode=_vllm_fa2_native_decode(server)))]


_RUNNER = {"target": "the target model's runner", "draft": "the draft model's runner, sized with the target's shape"}


def _sglang_runners(server: ServerConfig, draft: int, notes: list) -> list:
    """SGLang's model runners, each with its own backend and limits (``sglang_runner_limits``,
    the adapter's reading): one without speculation; with it the target (verify graphs of the
    draft tokens + 1) and, for the EAGLE family, the draft worker (topk x bs decode requests)."""
    from guard_core.decide.workspace import sglang_runner_limits

    defaults = server.defaults
    base = dict(capture_sizes=defaults.decode_graph_sizes, max_num_seqs=defaults.get("max_num_seqs"),
                chunk=defaults.get("max_batched_tokens"), max_model_len=defaults.get("max_model_len"),
                request_pool=defaults.get("request_pool"))
    if not draft and "eagle_topk" not in defaults.values:
        return [("", sglang_runner_limits(**base, speculative=False))]
    out = [("target", sglang_runner_limits(**base, speculative=True, verify_q=draft + 1))]
    if "eagle_topk" in defaults.values:
        topk = defaults.get("eagle_topk")
        out.append(("draft", sglang_runner_limits(**base, speculative=True, draft_runner=True, topk=topk)))
        notes.append(f"the draft worker decodes topk x bs = {topk} x bs requests per step (SGLang's multi-step draft "
                     "backend, flashinfer_backend.py 0.5.5:1446, 0.5.23:2501); sized with the target's attention shape")
    return out


def _vllm_fa2_native_decode(server: ServerConfig) -> bool:
    """vLLM's ``use_fa2_native_decode`` on the simulated line and GPU: from 0.33, below SM90
    (``_use_fa2_native_decode``, v1/attention/backends/flashinfer.py 0.33.0:118-120; absent in 0.32.0)."""
    cc = tuple(server.gpu.cc)
    return bool(is_version(server.line) and parse_version(server.line) >= parse_version("0.33.0") and cc < (9, 0))


def _vllm_spec_as_decode(server: ServerConfig, pfacts) -> bool | None:
    """``supports_spec_as_decode`` of vLLM's FlashInfer builder on the simulated line and GPU
    (see ``workspace_decision.vllm_reorder_batch_threshold``): TRT-LLM decode (the planner
    facts' TRT-LLM attention; None: unknown), and from 0.33 FA2's native decode below SM90."""
    if _vllm_fa2_native_decode(server):
        return True
    return pfacts.trtllm_attention


def decide(server: ServerConfig, fs: FactsSet) -> Decided:
    """Stage 5: ``workspace_decision.need`` per group (the largest need wins, as the groups'
    builders share the buffer or each allocate the same default), then its ``decide`` (or the
    fixed-split ``assess_fixed_split``/``decide_fixed_split``) twice: as the server runs on
    its own (auto against the buffer: the verdict) and with the switches the guard reads there."""
    from guard_core.decide import workspace as wd

    needs = [(g, runner, f, wd.need(f)) for g, runner, f in fs.groups]
    top = max(needs, key=lambda r: r[3].requirement.float_bytes)
    _g, _runner, facts, computed = top
    alone = Settings(workspace="auto", workspace_max=server.settings.workspace_max)
    guard_settings = server.settings if server.settings.enabled else None
    if server.deterministic:
        mem = gpu_memory(server.gpu_key)
        mem = mem[0] if mem else None
        # the longest prompt the buffer holds: the assessment with no room above the buffer
        in_buffer = Settings(workspace="auto", workspace_max=("bytes", 0))
        fa_buf = wd.assess_fixed_split(facts, computed, server_bytes=fs.buffer, settings=in_buffer, gpu_memory=mem)
        fa = wd.assess_fixed_split(facts, computed, server_bytes=fs.buffer, settings=alone, gpu_memory=mem)
        verdict = wd.decide_fixed_split(facts, computed, fa, server_bytes=fs.buffer, settings=alone)
        guard = None
        if guard_settings is not None:
            fa_g = wd.assess_fixed_split(facts, computed, server_bytes=fs.buffer, settings=guard_settings,
                                         gpu_memory=mem)
            guard = wd.decide_fixed_split(facts, computed, fa_g, server_bytes=fs.buffer, settings=guard_settings)
        return Decided(needs, top, verdict, guard, (fa_buf, fa))
    verdict = wd.decide(facts, server_bytes=fs.buffer, user_bytes=fs.user_bytes, settings=alone, computed=computed)
    guard = None
    if guard_settings is not None:
        guard = wd.decide(facts, server_bytes=fs.buffer, user_bytes=fs.user_bytes, settings=guard_settings,
                          computed=computed)
    return Decided(needs, top, verdict, guard)


def report(a, cmd: Command, server: ServerConfig, model: ModelView, fs: FactsSet, dd: Decided) -> dict:
    """Stage 6: the plan's record (the ``--json`` output), from the decisions."""
    from guard_core.decide import workspace as wd

    g_top, _runner, facts, computed = dd.top
    req = computed.requirement
    dec = dd.verdict.decision
    verdict = "ok" if dec.action == "ok" else "overflow"
    out = dict(server.record)
    pl_info = fs.planner_info
    choice = computed.choice
    if choice.missing:
        p = req.planners
        flag = ("--trtllm-attention on|off" if any("TRT-LLM" in m for m in choice.missing) else
                "--kv-cache-dtype" if any("KV" in m for m in choice.missing) else "--decode-planner/--prefill-planner")
        pl_info["notes"].append(f"unknown here: {', '.join(choice.missing)}; sized every case and kept the larger "
                                f"need ({p.decode} decode, {p.prefill} prefill); {flag} settles it")
    result = _verdict_fields(cmd.framework, fs.buffer, req, verdict, dec)
    if verdict == "overflow" and not server.deterministic:
        result["remedies"].update(wd.remedies(facts, computed, fs.buffer, graphs=bool(fs.limits.capture_sizes)))
    elif verdict == "overflow":
        result["remedies"].update(wd.remedies(facts, computed, fs.buffer, graphs=False))
        result["remedies"].pop("largest_capture_batch_that_fits", None)
    if dd.fixed_split:
        fa_buf, fa = dd.fixed_split
        info = dict(fs.fixed_info, **fa.as_dict())
        info["line"] = dd.verdict.decision.line
        info["longest_prompt_in_buffer"] = fa_buf.longest_prompt
        out["fixed_split"] = info
    out.update(_report_fields(cmd.framework, server.gpu, model, fs, dd))
    out.update(need=result.pop("need"), int_workspace_bytes=INT_WORKSPACE_BYTES, server_default_bytes=fs.server_bytes,
               server_default_source=fs.server_source, workspace_bytes=fs.buffer)
    out.update(result, notes=cmd.notes + model.reader["notes"] + list(req.notes))
    out["guard"] = _guard_fields(server, dd)
    out["kv_budget"] = _kv_budget_fields(a, cmd, server, fs, dd)
    return out


def _kv_budget_fields(a, cmd: Command, server: ServerConfig, fs: FactsSet, dd: Decided) -> dict | None:
    """Issue 28 (vLLM): the buffer's cost or gain in KV tokens and the --gpu-memory-utilization
    that keeps the unguarded KV size; the arithmetic is guard_core.decide.kv_budget's, the same the
    adapter logs. vLLM's own estimate (weights, activation peak, CUDA-graph memory) sizes the KV
    cache itself at start-up; the move does not depend on it."""
    from guard_core.decide import kv_budget
    from guard_core.deployment.server_defaults import gpu_memory

    if cmd.framework != "vllm" or dd.guard is None:
        return None
    d = dd.guard.decision
    buf = kv_budget.buffer_under_guard(d.action, int(d.allocate_bytes or 0), int(fs.server_bytes))
    rows = [(g.count, g.num_kv_heads, g.head_dim_qk, g.head_dim_vo) for g, _r, _f in fs.groups]
    per_token = kv_budget.attention_per_token_bytes(rows, fs.kv_bytes)
    util = kv_budget.launch_utilization(getattr(a, "launch", None)) or kv_budget.VLLM_DEFAULT_UTILIZATION
    mem = gpu_memory(server.gpu_key)
    kp = kv_budget.vllm_kv_plan(server.settings.reserve, buf, int(fs.server_bytes), per_token, util,
                                mem[0] if mem else None)
    return {"mode": kp.move.mode, "buffer_bytes": buf, "server_bytes": int(fs.server_bytes),
            "charge_bytes": kp.move.charge, "per_token_bytes": per_token, "kv_tokens": kp.tokens,
            "gpu_memory_utilization": util, "keep_utilization": kp.keep_utilization, "line": kp.line(),
            "estimate": "the KV size itself is vLLM's own estimate at start-up (profile run, CUDA-graph "
                        "memory); the move and its tokens are exact"}


def _guard_fields(server: ServerConfig, dd: Decided) -> dict:
    """What the guard inside the server would log and allocate (its switches as the server sees them)."""
    s = server.settings
    switches = {k: v for k, v in s.describe().items() if k in server.environ}
    if dd.guard is None:
        return {"enabled": False, "switches": switches, "line": f"{MASTER}=0: the guard stands down",
                "allocate_bytes": None}
    d = dd.guard.decision
    return {"enabled": True, "switches": switches, "action": d.action, "line": d.line,
            "allocate_bytes": d.allocate_bytes}


def _server_environ(L, environ) -> tuple[dict, str]:
    """(the environment the server process sees, why): the exported one through the launch
    command's prefixes (``launch_command.server_environment``)."""
    from guard_core.deployment.launch_command import server_environment

    exported = os.environ if environ is None else environ
    if L is None:
        return dict(exported), "the exported environment (no launch command)"
    try:
        return server_environment(L.env_ops, exported)
    except LaunchError as exc:
        raise PlanUsageError(str(exc)) from None


def _read_launch(a, environ, notes: list):
    """The launch command after ``--`` read as its server reads it (None without one); a
    version-tagged image sets the simulated line unless --framework-version does."""
    if getattr(a, "launch", None) is None:
        return None
    try:
        launch = parse_launch(a.launch, line=getattr(a, "framework_version", None),
                              reader=getattr(a, "launch_reader", None) or "auto",
                              environ=os.environ if environ is None else environ)
    except LaunchError as exc:
        raise PlanUsageError(str(exc)) from None
    if not getattr(a, "framework_version", None):
        # the image the command runs pins the server: simulate its line, not the one installed
        # here, where the tag names a release of a line read here; else say which line and why
        from guard_core.deployment.launch_command import image_tag_note, split_command
        from guard_core.deployment.server_defaults import DEFAULT_LINE

        form = split_command(list(a.launch))[1]
        line, why = image_tag_note(launch.framework, form)
        label = framework_label(launch.framework)
        if line:
            a.framework_version = line
            notes.append(f"simulating {label} {line}: the image tag of the launch command")
        elif why:
            notes.append(f"the launch command's image tag is not mapped to a line: {why}; simulating {label} "
                         f"{DEFAULT_LINE[launch.framework]}, the default line (--framework-version to change)")
    return launch


def _plan_model(a, L, environ, notes: list):
    """(facts, source, the config's max length, config path, the model name or None for raw heads)."""
    raw = (a.qo_heads, a.kv_heads, a.head_dim)
    if any(v is not None for v in raw):
        if a.model:
            raise PlanUsageError("give either --model or --qo-heads/--kv-heads/--head-dim, not both")
        if None in raw:
            raise PlanUsageError("--qo-heads, --kv-heads and --head-dim go together")
        if a.qo_heads % a.kv_heads:
            raise PlanUsageError(f"--qo-heads {a.qo_heads} must be a multiple of --kv-heads {a.kv_heads}")
        facts = ModelFacts("custom", "custom", "custom", a.qo_heads, a.kv_heads, a.head_dim, a.v_head_dim)
        return facts, "given heads", None, None, None
    name = a.model or (L.model if L else None)
    if a.model and L and L.model and a.model != L.model:
        notes.append(f"--model {a.model} replaces the command's model {L.model}")
    model_source_default = name is None
    if name is None:
        name = DEFAULT_MODEL
    try:
        facts, model_source, model_max_len, model_path = resolve_model(
            name, environ, a.framework or (L.framework if L else "vllm"), getattr(a, "model_reader", None) or "auto")
    except ModelError as exc:
        raise PlanUsageError(str(exc)) from None
    if model_source_default:
        model_source = "the default model, the vLLM seed's"
    model_source = f"{name}: {model_source}" if name != facts.name else model_source
    if L is not None and L.model_overrides:
        facts, model_source, model_max_len, model_path = _overridden(L.model_overrides, facts, model_source,
                                                                     model_max_len, model_path, notes)
    return facts, model_source, model_max_len, model_path, name


def _overridden(ov: dict, facts, source: str, max_len, path, notes: list):
    """The model with the command's --hf-overrides / --json-model-override-args applied as the
    server applies them (``launch_command.apply_model_overrides``); the merged config is written
    to a private temporary file, which the server's own reader reads too."""
    import atexit
    import shutil
    import tempfile

    from guard_core.deployment.launch_command import apply_model_overrides
    from guard_core.deployment.presets import facts_from_config, read_config

    if not path:
        notes.append(f"{ov['option']} not applied: the model {facts.name} is a preset without a config.json")
        return facts, source, max_len, path
    try:
        merged = apply_model_overrides(read_config(path), ov)
        d = tempfile.mkdtemp(prefix="flashinfer-guard-plan-")
        atexit.register(shutil.rmtree, d, True)
        new_path = os.path.join(d, "config.json")
        with open(new_path, "w", encoding="utf-8") as fh:
            json.dump(merged, fh)
        new = facts_from_config(merged, path)
    except (ModelError, OSError, TypeError, ValueError) as exc:
        raise PlanUsageError(f"{ov['option']} in the launch command: {exc}") from None
    return (new, f"{source}, with {ov['option']} applied", _max_len_of(new_path) or _groups_max_len(new) or max_len,
            new_path)


def _deployment(a, L, fw, gpu, gpu_key, facts, model_max_len, model_name, environ, notes: list):
    """(Deployment, KV-cache dtype): each limit from its flag, else the command (``_pick``)."""
    tp = _pick(a.tp, L.tp if L else None, "tensor parallel size", notes, "--tp")
    dcp = _pick(a.dcp, L.dcp if L else None, "decode context parallel size", notes, "--dcp")
    seqs = _pick(a.max_num_seqs, L.max_num_seqs if L else None,
                 "max seqs" if fw == "vllm" else "max running requests", notes, "--max-num-seqs")
    tokens = _pick(a.max_batched_tokens, L.max_batched_tokens if L else None,
                   "max batched tokens" if fw == "vllm" else "chunked prefill size", notes, "--max-batched-tokens")
    mlen = _pick(a.max_model_len, L.max_model_len if L else None, "max model len", notes, "--max-model-len")
    cmd_k = L.draft_tokens if L else None
    if L and L.draft_tokens_from_model and cmd_k is None:
        cmd_k, how = _mtp_depth(model_name, environ)
        notes.append(f"speculative method {L.speculative} without num_speculative_tokens: vLLM runs the draft "
                     f"model's MTP depth (vllm/config/speculative.py n_predict): {cmd_k} ({how})")
    k = _pick(a.draft_tokens, cmd_k, "draft tokens", notes, "--draft-tokens")
    sizes = _pick(a.capture_sizes, L.capture_sizes if L else None, "capture sizes", notes, "--capture-sizes")
    max_cap = _pick(a.max_capture_batch, L.max_capture if L else None, "capture ceiling", notes,
                    "--max-capture-batch")
    page = _pick(a.page_size, L.page_size if L else None, "page size", notes, "--page-size")
    eager = bool(a.no_cuda_graph or (L.eager if L else False))
    kv_dtype = getattr(a, "kv_cache_dtype", None) or (L.kv_cache_dtype if L else None)
    if getattr(a, "kv_cache_dtype", None) and L and L.kv_cache_dtype and a.kv_cache_dtype != L.kv_cache_dtype:
        notes.append(f"--kv-cache-dtype {a.kv_cache_dtype} replaces the command's {L.kv_cache_dtype}")
    kv_dtype = kv_dtype or "auto"
    if sizes and max_cap and not (L and L.capture_sizes and L.max_capture):
        notes.append(f"capture ceiling {max_cap} ignored: explicit capture sizes {min(sizes)}..{max(sizes)} decide")
        max_cap = None
    d = Deployment(framework=fw, line=a.framework_version, gpu_key=gpu_key, cc=gpu.cc, gpu_name=gpu.name,
                   tp=tp, pp=L.pp if L else None, dp=L.dp if L else None, dcp=dcp,
                   attn_dp=L.attn_dp if L and fw == "sglang" else None,
                   expert_parallel=bool(L and (L.expert_parallel or (L.ep or 1) > 1)),
                   all2all_backend=L.all2all_backend if L else None, max_num_seqs=seqs, max_batched_tokens=tokens,
                   max_model_len=mlen, model_max_len=model_max_len, draft_tokens=k,
                   speculative=bool(L and L.speculative) or bool(k), capture_sizes=sizes, max_capture=max_cap,
                   speculative_algorithm=L.speculative if L and fw == "sglang" else None,
                   eagle_topk=L.eagle_topk if L else None, spec_steps=L.spec_steps if L else None,
                   eager=eager, chunked_prefill=L.chunked_prefill if L else None,
                   disable_graph_padding=bool(L and L.disable_graph_padding), page_size=page,
                   flashinfer=a.flashinfer, architecture=facts.architecture, source="command" if L else "flag")
    return d, kv_dtype


def _base_record(a, launch, fw, gpu, gpu_key, facts, model_source, defaults, settings) -> dict:
    """What every plan says, sized or not: the model, the simulated line and GPU, FlashInfer, MoE."""
    line = defaults.line
    fi = defaults.get("flashinfer")
    label = f"{framework_label(fw)} {short_line(line)}"
    header = {"framework": fw, "line": line, "line_source": defaults.line_source, "label": label,
              "gpu": {"name": gpu.name, "key": gpu_key, "num_sms": gpu.num_sms, "cc": f"{gpu.cc[0]}.{gpu.cc[1]}",
                      "memory_gib": round(gpu_memory(gpu_key)[0] / (1 << 30), 1) if gpu_memory(gpu_key) else None}}
    moe = _moe(a, fw, gpu_key, fi, settings, launch.quantization if launch else None)
    return {"model": facts.as_dict(), "model_source": model_source, "framework": fw, "framework_version": line,
            "simulated": header, "flashinfer": fi, "flashinfer_source": defaults.values["flashinfer"].source,
            "flashinfer_family": family(fi), "moe": moe, "defaults": defaults.as_dict(),
            "launch": launch.as_dict() if launch else None,
            "ignored_options": list(launch.ignored) if launch else [],
            "not_read_options": list(launch.not_read) if launch else []}


def _launch_notes(L, kv_dtype: str, notes: list) -> None:
    """The command's attention backend, quantization and reader notes."""
    n = attention_backend_note(L)
    if n:
        notes.append(n)
    if L.quantization:
        notes.append(f"quantization {L.quantization}: weights only here; the KV cache is "
                     f"{kv_dtype if kv_dtype != 'auto' else 'the model dtype (auto) unless the checkpoint sets an FP8 KV cache'}")
    notes += L.notes


def _rank_groups(a, fw, mg, model_path, tp_v: int, environ):
    """(the attention groups one rank plans, the model reader's record, why nothing is
    sized or None): the server's own reader where it is installed, else the built-in one."""
    try:
        rank_groups = list(server_view([g for g in mg.per_rank(tp_v) if g.kind != "mla"], fw))
    except ValueError as exc:  # GroupsError: heads not divisible by --tp
        raise PlanUsageError(str(exc)) from None
    reader = {"name": mg.source, "notes": []}
    srv = _server_reading(a, fw, model_path, tp_v, environ)
    if srv is not None:
        reader["server"] = srv.get("label")
        if srv.get("ok"):
            srv_groups = list(server_view([g for g in srv["groups"] if g.kind != "mla"], fw))
            if not srv_groups and srv.get("use_mla"):
                return rank_groups, reader, (f"MLA model ({srv['label']}): FlashInfer's MLA planner "
                                             "uses its own buffer, not the one guarded here")
            same = sorted(g.key for g in srv_groups) == sorted(g.key for g in rank_groups)
            if not same:
                reader["notes"].append(
                    f"{mg.source} read {_groups_text(rank_groups)}; {srv['label']} reads "
                    f"{_groups_text(srv_groups)}: sized as {srv['label']} reads it")
            rank_groups = srv_groups
            reader["name"] = srv["label"]
            reader["agrees"] = same
        else:
            reader["notes"].append(f"{srv.get('label', fw)} could not read the model ({srv.get('refusal')}); "
                                   f"the groups read by {mg.source} are used")
    if not rank_groups:
        return rank_groups, reader, "no attention layer runs through the guarded planners"
    if a.v_head_dim:
        rank_groups = [replace(g, head_dim_vo=a.v_head_dim) for g in rank_groups]
    return rank_groups, reader, None


def _planner_facts(a, fw, gpu, line, kv_dtype, kv_kind, rank_groups, dcp_v: int, det: bool):
    """(PlannerFacts, what the report says about them): the facts the adapter reads from the
    builder (TRT-LLM attention, tensor-core decode, the query dtype per phase), for the
    core's one planner choice."""
    top = max(rank_groups, key=lambda g: (g.num_qo_heads * (g.head_dim_vo + 1), g.head_dim_qk))
    q, kv = top.num_qo_heads, top.num_kv_heads
    if fw == "vllm":
        trt = {"on": True, "off": False}.get(getattr(a, "trtllm_attention", None))
        if trt is not None:
            trt_src = f"TRT-LLM attention {a.trtllm_attention} (given)"
        elif gpu.cc[0] == 10:
            trt_src = "TRT-LLM attention unknown (SM10x: usable when FlashInfer's cubins are present)"
        else:
            trt, trt_src = False, f"no TRT-LLM attention off SM10x (cc {gpu.cc[0]}.{gpu.cc[1]})"
        tcd, tcd_why = True, "vLLM always decodes with tensor cores"
    else:
        trt, trt_src = False, ""
        tcd, tcd_why = sglang_tensor_core_decode(kv_kind, q, kv)
    if det:
        # flashinfer_backend.py: decode_use_tensor_cores = True in this mode (0.5.5:175, 0.5.23:443)
        tcd, tcd_why = True, "deterministic inference forces tensor-core decode"
    q_prefill = q_decode = "derive"
    if fw == "vllm" and vllm_per_phase_builder(line):
        # vLLM 0.26+ sets the query dtype per phase itself (get_q_data_type); the rule gives
        # dtype kinds, the planner choice takes dtype names: an FP8 query is the KV cache's own
        # dtype (q_data_type = kv_cache_dtype; e4m3 or e5m2 matters to the TRT-LLM prefill rule)
        qp_kind, qd_kind = vllm_query_dtypes(gpu.cc, kv_kind, getattr(a, "trtllm_attention", None) == "off")
        q_prefill, q_decode = (kv_dtype if k == "fp8" else _KIND_NAME.get(k, k) for k in (qp_kind, qd_kind))
    pfacts = PlannerFacts(framework=fw, cc=gpu.cc, kv_dtype=kv_dtype, trtllm_attention=trt,
                          dcp_size=dcp_v, tensor_core_decode=tcd, q_prefill=q_prefill, q_decode=q_decode)
    notes = []
    if a.decode_planner or a.prefill_planner:
        notes.append("planner given: " + ", ".join(
            f"{n} {v}" for n, v in (("decode", a.decode_planner), ("prefill", a.prefill_planner)) if v))
    return pfacts, {"tcd": tcd, "tcd_why": tcd_why, "trt_src": trt_src, "notes": notes}


def _buffers(a, L, fw, line, facts, limits, q: int, dqk: int, det: bool):
    """(the server's own buffer, where that size comes from, the user's native size where it
    decides (the adapter's ``user_bytes``), the buffer checked: --workspace or the server's)."""
    own = server_workspace(fw, line, architecture=facts.architecture, max_num_batched_tokens=limits.max_num_batched_tokens,
                           q_heads=q, head_dim=dqk)
    server, server_src = own.value, own.source
    user = None
    if L and L.workspace_bytes and not a.workspace:
        server, server_src = _native_buffer(fw, line, facts.architecture, L, server, server_src,
                                            limits.max_num_batched_tokens, q, dqk)
        user = L.workspace_bytes if server == L.workspace_bytes else None
    if det:
        user = None
        from guard_core.decide.fixed_split import SGLANG_FORCED_BYTES

        server = SGLANG_FORCED_BYTES
        server_src = ("--enable-deterministic-inference: SGLang forces SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB, over "
                      "a user's export (flashinfer_backend.py 0.5.5:183, 0.5.20:423, 0.5.23:451; PR #30244 open)")
    if a.workspace:
        from guard_core.runtime.settings import parse_size
        buffer = parse_size(a.workspace)
        if buffer is None:
            raise PlanUsageError(f"--workspace must be a size such as 394MiB, 1GiB or a byte count, got {a.workspace!r}")
    else:
        buffer = server
    return server, server_src, user, buffer


def _verdict_fields(fw, buffer: int, req, verdict: str, dec) -> dict:
    """The verdict's fields from the decision: the need, the allocation FlashInfer's error
    names, and the remedy size (what the decision raises to)."""
    dom = req.dominant
    overflow = dom.plan.first_overflow(buffer) if dom and verdict == "overflow" else None
    largest = dom.dominant_allocation if dom else None
    overflow_reason = None
    if overflow and largest and overflow["allocation"] != largest.name:
        overflow_reason = (f"FlashInfer allocates {largest.name} ({largest.bytes:,} B) first and it fits; it leaves "
                           f"{overflow['available']:,} B of the {buffer:,} B buffer, too little for the next one, "
                           f"{overflow['allocation']} ({overflow['bytes']:,} B), so the error names "
                           f"{overflow['allocation']}; what must fit is the sum, {req.float_bytes:,} B")
    remedies: dict = {}
    if verdict == "overflow":
        size = dec.numbers.get("allocate_bytes", dec.allocate_bytes)
        if dec.inputs.get("mode") == "fixed_split":
            # SGLang's .set(2 GiB) overwrites an export in this mode (PR #30244 open), and its
            # CUDA graphs plan no split (disable_split_kv): neither remedy applies
            remedies.update(workspace_bytes=size, env=None)
        else:
            remedies.update(workspace_bytes=size, env=f"{NATIVE_VAR[fw]}={size}")
    return {"need": {"float_bytes": req.float_bytes, "int_bytes": req.int_bytes,
                     "scenario": dom.name if dom else None, "batch": dom.batch if dom else None,
                     "allocation": largest.name if largest else None,
                     "allocation_bytes": largest.bytes if largest else None},
            "verdict": verdict, "overflow": overflow, "overflow_reason": overflow_reason, "remedies": remedies,
            "decision": dec.as_dict()}


def _candidate_rows(facts, computed) -> list:
    """Each candidate planner pair of the top group with its need (``need`` of facts with that pair given)."""
    from dataclasses import replace as _replace

    from guard_core.decide.workspace import need

    choice = computed.choice
    if len(choice.candidates) < 2:
        c = computed.requirement.planners
        return [{"decode": c.decode, "prefill": c.prefill, "float_bytes": computed.requirement.float_bytes,
                 "reason": choice.reasons[0] if choice.reasons else ""}]
    rows = []
    for i, c in enumerate(choice.candidates):
        r = need(_replace(facts, planners_given=(c.prefill, c.decode, c.decode_blocks_per_sm))).requirement
        rows.append({"decode": r.planners.decode, "prefill": r.planners.prefill, "float_bytes": r.float_bytes,
                     "reason": choice.reasons[i] if i < len(choice.reasons) else ""})
    return rows


def _report_fields(fw, gpu, model: ModelView, fs: FactsSet, dd: Decided) -> dict:
    """The sized plan's fields: GPU, layout, limits, planners, groups, scenarios."""
    g_top, _runner, facts, computed = dd.top
    req = computed.requirement
    layout, planners, limits, pl_info = req.layout, req.planners, facts.limits, fs.planner_info
    kv, dqk, dvo = g_top.num_kv_heads, g_top.head_dim_qk, g_top.head_dim_vo
    scen = [dict(s.as_dict(), description=describe_scenario(s, layout, gpu, fw)) for s in req.scenarios]
    return {
        "gpu": {"name": gpu.name, "num_sms": gpu.num_sms, "cc": f"{gpu.cc[0]}.{gpu.cc[1]}"},
        "layout": {"tp": model.tp, "dcp": model.dcp, "num_qo_heads": layout.num_qo_heads, "num_kv_heads": kv,
                   "head_dim_qk": dqk, "head_dim_vo": dvo, "page_size": layout.page_size,
                   "kv_dtype_bytes": fs.kv_bytes, "kv_cache_dtype": facts.planner_facts.kv_dtype},
        "limits": {"capture_sizes": list(limits.capture_sizes), "max_num_seqs": limits.max_num_seqs,
                   "max_batched_tokens": limits.max_num_batched_tokens, "draft_tokens": limits.draft_tokens,
                   "max_model_len": limits.max_model_len},
        "planners": {"decode": planners.decode, "prefill": planners.prefill, "tensor_core_decode": pl_info["tcd"],
                     "tensor_core_decode_reason": pl_info["tcd_why"], "trtllm_attention": pl_info["trt_src"]},
        "groups": [dict(g.as_dict(), label=_kind_label(g, model.groups) + (f" ({_RUNNER[runner]})" if runner else ""),
                        runner=runner, need_bytes=n.requirement.float_bytes,
                        scenario=n.requirement.dominant.name if n.requirement.dominant else None,
                        batch=n.requirement.dominant.batch if n.requirement.dominant else None,
                        decode=n.requirement.planners.decode, prefill=n.requirement.planners.prefill,
                        dominant=f is facts)
                   for g, runner, f, n in dd.needs],
        "model_reader": model.reader,
        "planner_candidates": _candidate_rows(facts, computed), "planner_missing": list(computed.choice.missing),
        "planner_notes": pl_info["notes"],
        "scenarios": scen,
    }


def _check_kv_pool(pool, line) -> None:
    """A KV pool SGLang would refuse at start-up is refused here too (not sized to "need 0")."""
    from guard_core.decide.fixed_split import sglang_min_kv_pool_tokens

    least = sglang_min_kv_pool_tokens(line)
    if pool is not None and pool < least:
        raise PlanUsageError(f"a KV pool of {pool} tokens (--kv-pool-tokens / --max-total-tokens): SGLang {line} "
                             f"refuses to start under {least} (\"Memory pool size is too small\", "
                             "managers/tp_worker.py)")


def _deterministic_limits(a, L, limits, gpu, environ: dict, notes):
    """SGLang --enable-deterministic-inference: the split tile sizes (from the command's
    leading assignments, else SGLang's defaults 4096 / 2048), disable_split_kv graphs, the
    KV pool when given; the longest context is required."""
    from dataclasses import replace

    from guard_core.decide.fixed_split import split_sizes_from_env

    from guard_core.deployment.launch_command import READ_ENV

    env = {k: environ[k] for k in READ_ENV if k in environ}
    prefill, decode, env_notes = split_sizes_from_env(env)
    notes.extend(env_notes)
    if not limits.max_model_len:
        raise PlanUsageError("deterministic inference sizes the workspace by the longest prompt: give --max-model-len "
                             "(--context-length in the command) or a model whose config.json has "
                             "max_position_embeddings")
    pool = getattr(a, "kv_pool_tokens", None) or (L.kv_pool_tokens if L else None)
    if gpu.cc[0] not in (10, 12) and not (L and "flashinfer" in " ".join(
            b for b in (L.attention_backend, L.decode_attention_backend, L.prefill_attention_backend) if b)):
        notes.append(f"deterministic inference on cc {gpu.cc[0]}.{gpu.cc[1]}: SGLang picks fa3 unless "
                     "--attention-backend flashinfer (0.5.5 server_args.py:1800-1812); the figures hold with FlashInfer")
    if pool is None:
        notes.append("deterministic decode sized for one full-context request plus one-token requests; give "
                     "--kv-pool-tokens (SGLang's max_total_num_tokens) for the pool's bound")
    limits = replace(limits, fixed_split_prefill=prefill, fixed_split_decode=decode, disable_graph_kv_split=True,
                     kv_pool_tokens=pool)
    info = {"mode": "deterministic", "prefill_split_tile_size": prefill, "decode_split_tile_size": decode,
            "split_source": ", ".join(f"{k}={v}" for k, v in env.items()) or "SGLang's defaults",
            "kv_pool_tokens": pool}
    return limits, info


_KIND_NAME = {"16bit": "bfloat16", "fp8": "fp8_e4m3", "fp4": "nvfp4", "32bit": "float32"}


def _kv_dtype_for_bytes(a, kv_dtype: str, notes: list) -> str:
    """``--kv-dtype-bytes 1`` without a KV-cache dtype is an FP8 cache: the planner
    choice must see the same dtype ``--kv-cache-dtype fp8`` gives (FA2 vs FA3 on SM90)."""
    b = getattr(a, "kv_dtype_bytes", None)
    if b is None or kv_dtype not in (None, "auto"):
        return kv_dtype
    if b == 1:
        notes.append("--kv-dtype-bytes 1: an FP8 KV cache (as --kv-cache-dtype fp8)")
        return "fp8"
    return kv_dtype


def _group_layout(g, page_size: int, kv_bytes: int) -> AttentionLayout:
    """The per-rank layout FlashInfer plans for one group. Sliding layers plan with
    ``window_left = window - 1`` (vLLM's builder window_left; the prefill plans
    clip by it). Chunked local attention (Llama 4) is sized as full attention:
    its virtual batches never need more than a full-attention batch of the same tokens."""
    window_left = (g.window - 1) if (g.kind == "sliding" and g.window) else -1
    return AttentionLayout(g.num_qo_heads, g.num_kv_heads, g.head_dim_qk, g.head_dim_vo,
                           page_size, kv_bytes, window_left)


def _groups_text(groups) -> str:
    return "; ".join(f"{g.count} x {g.kind} {g.num_qo_heads}/{g.num_kv_heads}/{g.head_dim_qk}"
                     + (f"/{g.head_dim_vo}" if g.head_dim_vo != g.head_dim_qk else "") for g in groups)


def _kind_label(g, mg) -> str:
    from guard_core.deployment.groups import kind_label
    base = kind_label(g.kind, g.window) + (" (sized as full)" if g.kind == "chunked" else "")
    if mg is not None and mg.other_layers:
        total = mg.num_layers or sum(n for _, n in mg.other_layers) + mg.attention_layers
        base += f" (hybrid share: {g.count} of {total} layers)"
    if g.sinks:
        base += ", attention sinks"
    return base


def _server_reading(a, fw: str, model_path, tp: int, environ=None):
    """The model's groups as the simulated server reads them, where it is installed
    here (``--model-reader``: auto | builtin | server). Runs the adapter's reader in a
    subprocess of this interpreter (offline, no tokenizer); None when not asked or
    not installed."""
    mode = getattr(a, "model_reader", None) or "auto"
    if mode == "builtin" or not model_path:
        return None
    import importlib.util

    if importlib.util.find_spec(fw) is None:
        if mode == "server":
            raise PlanUsageError(f"--model-reader server: {fw} is not installed in this environment")
        return None
    from guard_core.deployment.server_reader import read_with_server

    return read_with_server(fw, model_path, tp, environ=environ)


def _native_buffer(fw, line, architecture, L, server, server_src, tokens, q, dqk):
    """The buffer the server allocates with its own workspace variable set (issue #22)."""
    from guard_core.deployment.server_defaults import SGLANG_LARGE, sglang_default_workspace, vllm_workspace
    user = L.workspace_bytes
    if fw == "vllm":
        own = vllm_workspace(line, tokens, q, dqk, user=user, user_source=L.workspace_source)
        return own.value, own.source
    if sglang_default_workspace(line, architecture) == SGLANG_LARGE:
        # SGLang sets the variable to 512 MiB for its fixed architecture list, over the user's value
        # (layers/attention/flashinfer_backend.py: envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.set(512 MiB))
        return server, f"{server_src}; {L.workspace_source} is overridden by SGLang for {architecture}"
    return user, L.workspace_source


def _mtp_depth(name, environ) -> tuple[int, str]:
    """The MTP depth of a model (num_nextn_predict_layers / mtp_num_hidden_layers), else 1."""
    path = None
    if name:
        if os.path.isdir(name):
            path = os.path.join(name, "config.json")
        elif name.endswith(".json") and os.path.exists(name):
            path = name
        elif looks_like_model_id(name):
            path, _ = find_config(name, environ=environ)
    try:
        if path and os.path.getsize(path) <= (4 << 20):
            with open(path, encoding="utf-8") as fh:
                cfg = json.load(fh)
            for scope in (cfg.get("text_config"), cfg):
                if isinstance(scope, dict):
                    for key in ("num_nextn_predict_layers", "mtp_num_hidden_layers", "n_predict"):
                        v = scope.get(key)
                        if type(v) is int and 0 < v <= 16:
                            return v, f"{key} in {path}"
    except (OSError, ValueError, AttributeError):
        pass
    return 1, "the model's config is not readable here; assumed 1, the depth of every published MTP checkpoint"


def _moe(a, fw, gpu_key, fi, settings, quantization) -> dict:
    """The MoE guard: ``moe_decision.decide`` for the command's quantization (the op its
    TRT-LLM experts run), and the verdict per op, under the switches the server sees."""
    from guard_core.decide.moe import MoeFacts, decide as moe_decide, op_of

    arch = getattr(a, "host_arch", None)
    if arch:
        src = "given"
    elif is_aarch64_gpu(gpu_key):
        arch, src = "aarch64", f"{gpu_key.upper()} systems have Grace/Arm hosts"
    else:
        arch, src = "x86_64", "assumed for this GPU; --host-arch aarch64 for a Grace host"
    spec = find_spec(gpu_key) if gpu_key else None
    v = moe_verdict(settings, machine=arch, flashinfer_version=fi, gpu=spec.cc if spec else None)
    op = op_of(fw, quantization)
    d = moe_decide(MoeFacts(fw, arch, fi, v["sm"], op), settings).decision
    return {"host_arch": arch, "host_arch_source": src, "block": v["block"], "reason": v["reason"],
            "gpu": v["gpu"], "ops": v["ops"], "rows": v["rows"], "setting": settings.moe,
            "decision": {"op": op or "unknown (every op)", "action": d.action, "block": d.block, "reason": d.reason},
            "verdict": (f"{v['gpu']}: {v['summary']} ({v['reason']})" if v["rows"] or v["block"]
                        else f"stands down ({v['reason']})")
            + (f" [{MOE}={settings.moe}]" if settings.moe != "auto" else "")}


def describe_scenario(s, layout, gpu, fw) -> str:
    g = layout.gqa_group
    if s.name == "cuda_graph_decode":
        return f"CUDA-graph capture of a decode batch of {s.batch} requests, one query token each"
    if s.name == "cuda_graph_verify":
        return f"CUDA-graph speculative verify: {s.batch} requests x {s.q_len} query tokens"
    if s.name == "fixed_split_prefill":
        return (f"fixed-split prefill: a {s.q_len}-token prompt chunk against the longest context, its KV cut into "
                f"fixed chunks (no SM cap): {s.plan.padded_batch_size} (query tile, KV chunk) pairs x "
                f"{s.plan.cta_tile_q} rows")
    if s.name == "fixed_split_decode":
        return (f"fixed-split decode of {s.batch} requests: {s.plan.padded_batch_size} KV chunks in all "
                f"(no SM cap)")
    cap = (2 * gpu.num_sms) // layout.num_kv_heads
    if s.name == "eager_decode":
        return (f"eager decode of {s.batch} requests with KV caches long enough that the planner splits them into "
                f"its maximum of {cap} chunks (2 x {gpu.num_sms} SMs / {layout.num_kv_heads} KV heads)")
    if s.name == "eager_prefill":
        if s.plan.split_kv:
            return (f"eager prefill worst case: {s.batch} request(s) of {s.q_len} query token(s) "
                    f"({s.q_len * g} rows with the GQA group {g}) against a long KV cache: one short prompt against a "
                    f"long KV cache makes the planner split the KV into its maximum of {cap} chunks, each with its own "
                    f"scratch rows")
        return f"eager prefill of {s.batch} x {s.q_len} tokens (no split-KV; int buffer only)"
    return s.name


def print_report(r: dict, show_all: bool, out=sys.stdout) -> None:
    """The plan as text, in the order a reader checks it: what is simulated, the model and its
    groups, the settings with their sources, the planners, the scenarios, the need against the
    server's buffer, the verdict and remedies, then notes and the options not read."""
    w = out.write
    _print_header(r, w)
    if r["verdict"] == "not_applicable":
        _print_not_applicable(r, w)
        return
    _print_model(r, w)
    _print_settings(r, w)
    _print_planners(r, w)
    _print_scenarios(r, show_all, w)
    n = _print_need(r, w)
    if r["verdict"] == "ok":
        w(f"verdict    OK: the need fits with {fmt_size(r['workspace_bytes'] - n['float_bytes'])} to spare"
          f"{_buffer_why(r)}\n")
    else:
        _print_overflow(r, n, w)
        _print_remedies(r, w)
    _print_fixed_split(r, w)
    _print_guard(r, w)
    _print_tail(r, w)


def _print_header(r: dict, w) -> None:
    sim = r["simulated"]
    g = sim["gpu"]
    mem = f", {g['memory_gib']:.0f} GiB" if g.get("memory_gib") else ""
    w(f"simulating {sim['label']} ({sim['line_source']}) on {g['name']}: {g['num_sms']} SMs, cc {g['cc']}{mem}\n")
    w(f"flashinfer {r['flashinfer']} ({r['flashinfer_source']}; sizing family {r['flashinfer_family']})\n")
    if r.get("launch"):
        la = r["launch"]
        w(f"command    {la['form']} ({framework_label(la['framework'])})\n")


def _print_not_applicable(r: dict, w) -> None:
    w(f"model      {r['model']['name']} ({r['model_source']})\n{r['model']['name']}: {r['reason']}\n")
    for line in (r["model"].get("groups") or {}).get("lines", []):
        w(f"  group    {line}\n")
    _moe_line(r, w)
    for note in r.get("notes", []):
        w(f"note       {note}\n")


def _print_model(r: dict, w) -> None:
    m, l = r["model"], r["layout"]
    hd = f"head_dim {l['head_dim_qk']}" + (f"/{l['head_dim_vo']}" if l["head_dim_vo"] != l["head_dim_qk"] else "")
    w(f"model      {m['name']} ({r['model_source']}): {l['num_qo_heads']} q / {l['num_kv_heads']} kv heads per rank "
      f"(tp {l['tp']}{', dcp ' + str(l['dcp']) if l['dcp'] > 1 else ''}), {hd}, KV cache {l['kv_cache_dtype']}\n")
    rd = r.get("model_reader") or {}
    w(f"groups     read by {rd.get('name', 'the built-in reader')}"
      + (f" (the built-in reader {'agrees' if rd.get('agrees') else 'disagrees'})" if "agrees" in rd else "")
      + "; per rank, each sized:\n")
    for gr in r.get("groups", []):
        ghd = f"head_dim {gr['head_dim_qk']}" + (f"/{gr['head_dim_vo']}" if gr["head_dim_vo"] != gr["head_dim_qk"] else "")
        w(f"  {gr['count']:>4} layers {gr['label']}: {gr['num_qo_heads']} q / {gr['num_kv_heads']} kv heads, {ghd}; "
          f"need {fmt_size(gr['need_bytes'])} at {gr['scenario']} {gr['batch']} (decode {gr['decode']}, prefill "
          f"{gr['prefill']}){'  <- largest' if gr['dominant'] and len(r['groups']) > 1 else ''}\n")
    for kind, n in (r["model"].get("groups") or {}).get("other", []):
        w(f"  {n:>4} layers {kind}: outside FlashInfer's attention planners\n")


def _print_settings(r: dict, w) -> None:
    w("settings   (each with where it comes from)\n")
    vals = r["defaults"]["values"]
    order = [("tp", "tensor parallel"), ("dp", "data parallel"), ("pp", "pipeline parallel"), ("dcp", "decode context parallel"),
             ("max_num_seqs", "max seqs" if r["framework"] == "vllm" else "max running requests"),
             ("max_batched_tokens", "max batched tokens" if r["framework"] == "vllm" else "chunked prefill size"),
             ("max_model_len", "max model len"), ("draft_tokens", "draft tokens"), ("page_size", "page size"),
             ("max_capture", "capture ceiling"), ("capture_sizes", "capture sizes")]
    for key, name in order:
        if key not in vals:
            continue
        v = vals[key]
        val = v["value"]
        if key == "capture_sizes":
            val = f"{val[0]}..{val[-1]} ({len(val)} sizes)" if val else "none"
        w(f"  {name:<24} {str(val):<14} {v['source']}\n")
    dg = r["limits"]["capture_sizes"]
    if dg and vals.get("capture_sizes") and len(dg) != len(vals["capture_sizes"]["value"]):
        w(f"  {'decode graphs planned':<24} {str(dg[0]) + '..' + str(dg[-1]):<14} FlashInfer decode plans up to "
          f"(1 + draft tokens) x max seqs\n")


def _print_planners(r: dict, w) -> None:
    p = r["planners"]
    why = p["tensor_core_decode_reason"] + (f"; {p['trtllm_attention']}" if p.get("trtllm_attention") else "")
    w(f"planners   decode {p['decode']}, prefill {p['prefill']} ({why})\n")
    for c in r["planner_candidates"]:
        if len(r["planner_candidates"]) > 1:
            w(f"  candidate decode {c['decode']}, prefill {c['prefill']}: {fmt_size(c['float_bytes'])} ({c['reason']})\n")
    for n in r["planner_notes"]:
        w(f"  {n}\n")
    _moe_line(r, w)


def _print_scenarios(r: dict, show_all: bool, w) -> None:
    w(f"\n{'scenario':<19} {'batch':>6} {'q_len':>5} {'float bytes':>13} {'':>10} {'int bytes':>10}  largest allocation\n")
    rows = r["scenarios"]
    if not show_all:
        keep = []
        for kind in ("cuda_graph_decode", "cuda_graph_verify"):
            ks = [s for s in rows if s["name"] == kind]
            if ks:
                keep.append(max(ks, key=lambda s: (s["float_bytes"], s["batch"])))
        keep += [s for s in rows if s["name"] not in ("cuda_graph_decode", "cuda_graph_verify")]
        rows = keep
    for s in rows:
        w(f"{s['name']:<19} {s['batch']:>6} {s['q_len']:>5} {s['float_bytes']:>13,} {fmt_size(s['float_bytes']):>10} "
          f"{s['int_bytes']:>10,}  {s['dominant_allocation'] or '-'}\n")
    if not show_all and len(rows) < len(r["scenarios"]):
        w(f"({len(r['scenarios']) - len(rows)} smaller capture sizes not shown; --all lists them)\n")
    for s in rows:
        if s["name"].startswith("eager"):
            w(f"  {s['name']}: {s['description']}\n")


def _print_need(r: dict, w) -> dict:
    n = r["need"]
    w(f"\nneed       {n['float_bytes']:,} bytes ({fmt_size(n['float_bytes'])}) float at {n['scenario']}"
      f" batch {n['batch']} (largest allocation {n['allocation']}); int {fmt_size(n['int_bytes'])} of "
      f"{fmt_size(r['int_workspace_bytes'])}\n")
    srv = r["server_default_bytes"]
    w(f"{r['framework']} allocates {srv:,} bytes ({fmt_size(srv)}): {r['server_default_source']}"
      + (f"; checking against --workspace {r['workspace_bytes']:,}" if r["workspace_bytes"] != srv else "") + "\n")
    if r.get("not_read_options"):
        w(f"assumes    the server's default for {len(r['not_read_options'])} option(s) of the command not read "
          "(listed under 'not read' below)\n")
    return n


def _print_overflow(r: dict, n: dict, w) -> None:
    o = r["overflow"]
    fx = r.get("fixed_split")
    if fx:
        w(f"verdict    OVERFLOW: FlashInfer will raise on the first prompt longer than "
          f"{fx['longest_prompt_in_buffer']:,} tokens (the need grows with the prompt; start-up passes):\n")
    else:
        w(f"verdict    OVERFLOW: FlashInfer will raise at start-up{_buffer_why(r)}:\n")
    if o:
        w(f"           Buffer overflow when allocating memory for {o['allocation']} with size {o['bytes']} "
          f"and alignment {o['alignment']}, but only {o['available']} bytes available in AlignedAllocator.\n")
        w(f"           overflowing allocation {o['allocation']} ({o['bytes']:,} B); largest allocation "
          f"{n['allocation']} ({n['allocation_bytes']:,} B)\n")
    if r.get("overflow_reason"):
        w(f"           why they differ: {r['overflow_reason']}\n")


def _buffer_why(r: dict) -> str:
    """Which buffer the verdict checked and why, where the environment decides it (a native size
    variable, or an environment the command changes: docker run, env -i, env -u)."""
    la = r.get("launch") or {}
    env = r.get("environment") or ""
    if not la.get("workspace_source") and env.startswith("the exported environment") and ";" not in env:
        return ""
    return f" (against {fmt_size(r['workspace_bytes'])}: {r['server_default_source']}; the server's environment: {env})"


def _print_remedies(r: dict, w) -> None:
    fx = r.get("fixed_split")
    rem = r["remedies"]
    w("remedies\n")
    if fx and not fx["affordable"]:
        w(f"  - pip install flashinfer-guard in the server's environment: the need is not affordable "
          f"(FLASHINFER_GUARD_WORKSPACE_MAX {fmt_size(fx['max_bytes'])}); it raises the buffer to "
          f"{fmt_size(fx['allocate_bytes'])} (prompts up to {fx['longest_prompt']:,} tokens) and says so; or\n")
    else:
        w(f"  - pip install flashinfer-guard in the server's environment: it raises the buffer to "
          f"{fmt_size(rem['workspace_bytes'])} automatically; or\n")
    if rem.get("env"):
        w(f"  - export {rem['env']}   ({fmt_size(rem['workspace_bytes'])})\n")
    else:
        w("  - (an export of SGLANG_FLASHINFER_WORKSPACE_SIZE does not help here: deterministic inference "
          "overwrites it with 2 GiB; SGLang PR #30244 is open)\n")
    if "largest_capture_batch_that_fits" in rem:
        flag = "--max-cudagraph-capture-size" if r["framework"] == "vllm" else "--cuda-graph-max-bs"
        w(f"  - or keep today's buffer and cap CUDA-graph batches at {rem['largest_capture_batch_that_fits']} "
          f"({flag})\n")
    if "flashinfer_0_7_1_need_bytes" in rem:
        w(f"  - or upgrade to FlashInfer >= 0.7.1 (PR #5177): the need drops to "
          f"{fmt_size(rem['flashinfer_0_7_1_need_bytes'])}\n")


def _print_fixed_split(r: dict, w) -> None:
    fx = r.get("fixed_split")
    if fx:
        w(f"\ndeterministic inference (splits: prefill {fx['prefill_split_tile_size']}, decode "
          f"{fx['decode_split_tile_size']} pages; {fx['split_source']}; context {fx['context']:,} tokens)\n")
        w(f"  SGLang forces {fmt_size(fx['server_bytes'])}; the need is {fx['need_bytes']:,} bytes "
          f"({fmt_size(fx['need_bytes'])}); longest prompt that fits {fmt_size(r['workspace_bytes'])}: "
          f"{fx['longest_prompt_in_buffer']:,} tokens\n")
        w(f"  affordable up to {fmt_size(fx['max_bytes'])} (FLASHINFER_GUARD_WORKSPACE_MAX): "
          + (f"the guard makes the buffer {fmt_size(fx['allocate_bytes'])}\n" if fx["affordable"] else
             f"no; the guard gives {fmt_size(fx['allocate_bytes'])}, prompts up to {fx['longest_prompt']:,} tokens, "
             "and warns:\n"))
        if not fx["affordable"]:
            w(f"  {fx['line']}\n")


def _print_guard(r: dict, w) -> None:
    g = r.get("guard")
    if g:
        sw = ", ".join(f"{k}={v}" for k, v in g["switches"].items())
        w(f"guard      inside the server{' (' + sw + ')' if sw else ''} it logs: {g['line']}\n")
    if r.get("kv_budget"):
        w(f"KV budget  {r['kv_budget']['line']} ({r['kv_budget']['estimate']})\n")
    if r.get("environment"):
        w(f"server env {r['environment']}\n")


def _print_tail(r: dict, w) -> None:
    for note in r["notes"]:
        w(f"note       {note}\n")
    if r.get("launch"):
        w(f"read by    {r['launch']['reader']}\n")
    if r.get("ignored_options"):
        w(f"ignored    (does not change the workspace): {' '.join(r['ignored_options'])}\n")
    if r.get("not_read_options"):
        w(f"not read   (the server's default assumed for each): {' '.join(r['not_read_options'])}\n")


def _moe_line(r, w):
    mo = r["moe"]
    w(f"moe guard  {mo['host_arch']} host ({mo['host_arch_source']}): {mo['verdict']}\n")
    for row in mo.get("rows", ()):
        w(f"moe row    {row['short']}: {row['risk']}; default {row['default']}, strict {row['strict']}\n")
