"""The server's own reading of a config: its adapter's ``model_reader`` run in a subprocess, answered as rank groups.
"""

from __future__ import annotations

import os

from guard_core.deployment.groups import RankGroup

__all__ = ["SERVER_LABEL", "rank_groups_from", "read_with_server", "reader_main", "run_server_reader"]

# ---------------------------------------------------------------------------
# the server's own reading

SERVER_LABEL = {"vllm": "vLLM's own config code", "sglang": "SGLang's own config code"}
SERVER_TIMEOUT_S = 180
_MARK = "FLASHINFER_GUARD_GROUPS "


def rank_groups_from(rows) -> tuple[RankGroup, ...]:
    return tuple(RankGroup(r["kind"], int(r["num_qo_heads"]), int(r["num_kv_heads"]), int(r["head_dim_qk"]),
                           int(r["head_dim_vo"] or r["head_dim_qk"]), int(r["count"]), r.get("window"),
                           bool(r.get("sinks"))) for r in rows)


_server_answers: dict = {}


def _answer_key(framework: str, path: str, environ, python):
    try:
        st = os.stat(path)
    except OSError:
        return None
    env = os.environ if environ is None else environ
    return (framework, os.path.realpath(path), st.st_mtime_ns, st.st_size, python,
            tuple(sorted((k, v) for k, v in env.items() if k.startswith(("VLLM_", "SGLANG_", "HF_", "TRANSFORMERS_")))))


def run_server_reader(framework: str, path: str, tps=(1,), environ=None, python: str | None = None) -> dict:
    """Run ``<framework>_guard.model_reader`` (the server's own ModelConfig, offline)
    in a subprocess of ``python`` (default: this interpreter); its JSON answer, or
    ``{"ok": False, "refusal": ...}``. Nothing of the server is imported here. One run per
    file and process: an answer already in hand that covers every TP asked is reused
    (``plan`` asks once while reading the model and again per rank)."""
    key = _answer_key(framework, path, environ, python)
    done = _server_answers.get(key) if key else None
    if done is not None and (not done.get("ok") or all(str(int(t)) in done.get("groups", {}) for t in tps)):
        return done
    res = _run_server_reader(framework, path, tps, environ, python)
    if key:
        _server_answers[key] = res
    return res


def _run_server_reader(framework: str, path: str, tps, environ, python) -> dict:
    from guard_core.deployment.guard_module import config_copy, run_guard_module, server_process_env

    env = server_process_env(environ)  # as plan's resolution: one process for both in plan's session
    args = []
    for tp in tps:
        args += ["--tp", str(int(tp))]
    try:
        with config_copy(path) as (read, _):
            return run_guard_module(f"{framework}_guard.model_reader", [read, *args], env, _MARK, SERVER_TIMEOUT_S,
                                    f"{framework} reader", python=python)
    except OSError as exc:
        return {"ok": False, "refusal": f"{framework} reader: cannot copy {path} ({type(exc).__name__})"}


def read_with_server(framework: str, path: str, tp: int, environ=None) -> dict:
    """The rank groups at ``tp`` as the installed server reads them:
    ``{"ok", "label", "groups": (RankGroup, ...), "use_mla"}`` or ``{"ok": False, "refusal"}``."""
    res = run_server_reader(framework, path, (tp,), environ)
    label = SERVER_LABEL.get(framework, framework)
    if not res.get("ok"):
        return {"ok": False, "label": label, "refusal": res.get("refusal")}
    rows = res.get("groups", {}).get(str(tp))
    if not isinstance(rows, list):
        return {"ok": False, "label": label, "refusal": (rows or {}).get("refusal", "no groups")}
    return {"ok": True, "label": label, "groups": rank_groups_from(rows), "use_mla": bool(res.get("use_mla")),
            "raw": res}


def reader_main(read, server: str, prog: str, argv=None) -> int:
    """The command line of a server's own config reader (vllm_guard/sglang_guard ``model_reader``):
    one ``FLASHINFER_GUARD_GROUPS <json>`` line per path, never a traceback."""
    import argparse
    import json
    import sys

    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("path", nargs="+", help="config.json files or directories holding one; one line each")
    p.add_argument("--tp", type=int, action="append")
    a = p.parse_args(argv)
    for path in a.path:
        try:
            res = read(path, tuple(a.tp or (1,)))
        except Exception as exc:  # never a traceback: one line
            res = {"ok": False, "refusal": f"{server} reader failed: {type(exc).__name__}: {exc}"[:400]}
        res["path"] = path
        sys.stdout.write(_MARK + json.dumps(res, default=str) + "\n")
        sys.stdout.flush()
    return 0

