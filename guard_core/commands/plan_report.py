"""``flashinfer-guard plan``: the decision the guard makes inside the server, made offline.

One path of named stages, each a function of the one before (``build``):
``read_command`` (the launch command after ``--``, ``launch_command.py``) ->
``resolve_server`` (the model's config from a path, the local Hugging Face cache or the
presets; the simulated line's defaults on the simulated GPU, ``server_defaults.py``; the
environment the server process sees and the FLASHINFER_GUARD_* switches in it) ->
``read_model`` (the attention groups one rank plans, the server's own reader where
installed) -> ``server_facts`` (where the server is installed at the simulated line: its own
resolution of the command on a simulated GPU, read by the adapter's code; else) ``build_facts`` (one ``workspace_decision.WorkspaceFacts`` per group, the
record the adapters build) -> ``decide`` (``workspace_decision.need``/``decide``, the
fixed-split pair, ``moe_decision.decide``: the adapters' own calls) -> ``report`` (a dict,
the ``--json`` output; ``print_report`` renders it). Nothing here sizes or judges:
``tests/core/test_plan_one_path.py``.

This module is the plan's one entry (the CLI and the tests import it); each stage lives in its
own module of ``guard_core.commands.plan``: ``command``, ``server`` (with ``model_source``),
``model``, ``facts``, ``decide``, ``report``, and ``printing`` for ``print_report``; the records
they hand on are in ``records``.
"""

from __future__ import annotations

from guard_core.commands.plan.command import read_command, split_launch
from guard_core.commands.plan.decide import decide, decide_mla
from guard_core.commands.plan.facts import build_facts
from guard_core.commands.plan.mla_facts import mla_facts
from guard_core.commands.plan.mla_report import mla_not_applicable, mla_report
from guard_core.commands.plan.model import read_model
from guard_core.commands.plan.model_source import resolve_model
from guard_core.commands.plan.printing import print_report
from guard_core.commands.plan.records import Command, Decided, FactsSet, ModelView, PlanUsageError, ServerConfig
from guard_core.commands.plan.report import describe_scenario, report
from guard_core.commands.plan.server import PLAN_FLAGS, resolve_server
from guard_core.commands.plan import server_resolution as server_resolution_stage
from guard_core.commands.plan.server_resolution import server_facts

__all__ = ["PlanUsageError", "build", "print_report", "split_launch",
           # the stages, in order, and their records
           "read_command", "resolve_server", "read_model", "server_facts", "build_facts", "decide", "report",
           "mla_facts", "decide_mla", "mla_report",
           "Command", "ServerConfig", "ModelView", "FactsSet", "Decided", "resolve_model", "describe_scenario",
           # plan's own flags over the launch command's ServerShape
           "PLAN_FLAGS",
           # the server-resolution stage's module: its ``_ask`` (the subprocess) is the seam the parity probe
           # replaces with the same resolve() in its own vLLM process (tests/vllm/parity_probe.py)
           "server_resolution_stage"]


def build(a, resolve_gpu, environ=None) -> dict:
    """The plan for parsed options ``a`` (``a.launch``: the command after ``--`` or None).

    One path, each stage a function of the one before: read the command -> resolve the
    server's config -> read the model -> the facts the adapter builds -> decide (through
    ``guard_core.decide.workspace``, as the adapter does) -> report. Nothing here sizes
    or judges on its own. The server's code (model reader, resolution) runs in one process per
    plan (``guard_module.session``)."""
    from guard_core.deployment.guard_module import session

    with session():
        return _build(a, resolve_gpu, environ)


def _build(a, resolve_gpu, environ=None) -> dict:
    cmd = read_command(a, environ)
    server = resolve_server(a, cmd, resolve_gpu, environ)
    if server.model.uses_mla:
        return _build_mla(a, cmd, server)
    model = read_model(a, cmd, server)
    if model.mla:  # the server's own reader found MLA where the built-in one did not
        return _build_mla(a, cmd, server)
    if model.not_applicable:
        return dict(server.record, verdict="not_applicable", reason=model.not_applicable, notes=cmd.notes)
    # the facts as the installed server resolves them (server_resolution), else the built-in rules
    facts = server_facts(a, cmd, server, model) or build_facts(a, cmd, server, model)
    decided = decide(server, facts)
    return report(a, cmd, server, model, facts, decided)


def _build_mla(a, cmd, server) -> dict:
    """An MLA model: the paths through FlashInfer's MLA planner (``mla_facts``) -> the MLA decision
    (``decide_mla``, ``guard_core.decide.mla``) -> the record (``mla_report``); "not applicable",
    with why, where the server plans none of its batches there."""
    mfs = mla_facts(a, cmd, server)
    if mfs.facts is None:
        return mla_not_applicable(cmd, server, mfs)
    return mla_report(a, cmd, server, mfs, decide_mla(mfs))
