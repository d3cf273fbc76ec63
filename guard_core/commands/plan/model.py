"""Stage 3, ``read_model``: the attention groups one rank plans, read by the server's own reader
where it is installed here, else by the built-in one, and the command's notes on the model.
"""

from __future__ import annotations

from dataclasses import replace

from guard_core.commands.plan.records import Command, ModelView, PlanUsageError, ServerConfig
from guard_core.deployment.groups import server_view
from guard_core.deployment.launch_command import attention_backend_note

__all__ = ["read_model"]

_MLA = "MLA model: answered by the MLA stages (mla_facts, decide_mla, mla_report)"


def read_model(a, cmd: Command, server: ServerConfig) -> ModelView:
    """Stage 3: the attention groups one rank plans (the server's own reader where installed)."""
    if cmd.launch:
        _launch_notes(cmd.launch, server.kv_dtype, cmd.notes)
    tp_v = server.defaults.get("attn_tp") or server.defaults.get("tp") or 1
    dcp_v = server.defaults.get("dcp") or 1
    mg = server.model.model_groups()
    rank_groups, reader, not_applicable = _rank_groups(a, cmd.framework, mg, server.model_path, tp_v,
                                                       server.environ)
    return ModelView(mg, rank_groups, reader, tp_v, dcp_v, not_applicable, mla=not_applicable == _MLA)


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
                # the server's own reader reads MLA: the plan answers through the MLA stages
                reader["server_reads_mla"] = srv["label"]
                return rank_groups, reader, _MLA
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


def _groups_text(groups) -> str:
    return "; ".join(f"{g.count} x {g.kind} {g.num_qo_heads}/{g.num_kv_heads}/{g.head_dim_qk}"
                     + (f"/{g.head_dim_vo}" if g.head_dim_vo != g.head_dim_qk else "") for g in groups)


def _server_reading(a, fw: str, model_path, tp: int, environ=None):
    """The model's groups as the simulated server reads them, where it is installed
    here (``--model-reader``: auto | builtin | server). Runs the adapter's reader in a
    subprocess of this interpreter (offline, no tokenizer); None when not asked or
    not installed."""
    mode = getattr(a, "model_reader", None) or "auto"
    if mode in ("builtin", "transformers") or not model_path:
        return None
    import importlib.util

    if importlib.util.find_spec(fw) is None:
        if mode == "server":
            raise PlanUsageError(f"--model-reader server: {fw} is not installed in this environment")
        return None
    from guard_core.deployment.server_reader import read_with_server

    return read_with_server(fw, model_path, tp, environ=environ)
