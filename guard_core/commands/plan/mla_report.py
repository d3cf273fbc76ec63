"""Stage 6 for an MLA model, ``mla_report``: the plan's record from the MLA decision (the MLA
path per batch kind, the largest works against the release's capacity, the verdict, what to
change), and ``print_mla`` for the text report.
"""

from __future__ import annotations

from guard_core.commands.plan.records import Command, ServerConfig
from guard_core.decide.mla import PR

__all__ = ["mla_report", "mla_not_applicable", "print_mla"]

_OVER = ("past the MLA planner's per-work stride its arrays spill into each other: silently wrong attention "
         f"rows first, then an illegal memory access ({PR}, open; no release through 0.7.4 has it)")


def _guard(server: ServerConfig) -> str:
    """What the guard does in the server for MLA under the switches it sees."""
    s = server.settings
    if server.guard_off or not s.enabled:
        return f"off in the server ({server.guard_off or 'FLASHINFER_GUARD=0'}): nothing checks the MLA works count"
    if s.mla == "off" or s.workspace == "off":
        why = "FLASHINFER_GUARD_MLA=off" if s.mla == "off" else "FLASHINFER_GUARD_WORKSPACE=off (the net rides on it)"
        return f"the MLA net is off ({why}): nothing checks the MLA works count"
    return ("the net after each BatchMLAPagedAttentionWrapper.plan and each SGLang CUDA-graph replay plan "
            "(fast_mla_decode_plan / fast_mla_prefill_plan) raises one clear error before the kernel runs "
            "when the works pass the capacity (fails closed); nothing acts at start-up yet (issue 38 item 2)")


def mla_not_applicable(cmd: Command, server: ServerConfig, mfs) -> dict:
    r = mfs.route
    return dict(server.record, verdict="not_applicable", area="mla", notes=cmd.notes,
                reason=f"MLA model: {r.not_applicable}",
                mla={"backend": r.backend, "backend_source": r.backend_source, "paths": []})


def mla_report(a, cmd: Command, server: ServerConfig, mfs, outcome) -> dict:
    """The record (``--json``) of an MLA deployment's plan."""
    r = mfs.route
    paths = [p.as_dict() for p in outcome.paths]
    remedies = [f"{p.path.kind}: {p.remedy()}" for p in outcome.paths if p.over]
    return dict(server.record, verdict="overflow" if outcome.over else "ok", area="mla", notes=cmd.notes,
                mla={"backend": r.backend, "backend_source": r.backend_source, "capacity": outcome.capacity,
                     "flashinfer": outcome.facts.flashinfer_version, "num_sms": outcome.facts.num_sms,
                     "limits": mfs.limits, "paths": paths, "line": outcome.line(), "remedies": remedies,
                     "consequence": _OVER if outcome.over else None, "guard": _guard(server),
                     "evidence": "docs/mla-guard.md (MLAPlan file:line per release; the mirror checked against "
                                 "the compiled planner; works <= tiles + C)"})


def print_mla(r: dict, w) -> None:
    """The MLA answer as text."""
    m = r["mla"]
    w(f"model      {r['model']['name']} ({r['model_source']}): MLA\n")
    w(f"backend    {m['backend']} ({m['backend_source']})\n")
    if r["verdict"] == "not_applicable":
        w(f"verdict    not applicable: {r['reason']}\n")
        return
    for k, v in m["limits"].items():
        w(f"  {k:<15}{v['value']:,} ({v['source']})\n")
    w(f"capacity   {m['capacity']:,} works per MLA plan (FlashInfer {m['flashinfer']}'s MLAPlan stride)\n")
    for p in m["paths"]:
        state = "OVER" if p["over"] else "fits"
        w(f"path       {p['kind']:<7} {p['heads']} heads, up to {p['worst_batch']['requests']:,} requests / "
          f"{p['worst_batch']['tokens']:,} tokens: largest {p['largest_works']:,} works, {state} "
          f"[{p['source']}]\n")
        w(f"             {p['basis']}; the mirror reaches {p['mirror_reached'] if p['mirror_reached'] is not None else '-'}"
          f" on one such batch\n")
    if r["verdict"] == "ok":
        w(f"verdict    OK: every MLA plan stays within {m['capacity']:,} works\n")
    else:
        w(f"verdict    OVER: {m['consequence']}\n")
        for rem in m["remedies"]:
            w(f"remedy     {rem}\n")
    w(f"guard      {m['guard']}\n")
    w(f"evidence   {m['evidence']}\n")
    for note in r.get("notes", []):
        w(f"note       {note}\n")
