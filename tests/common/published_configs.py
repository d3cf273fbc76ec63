"""Published decoder configs (tests/data/model_configs_published, each with its source in
manifest.json), each read by the installed vLLM's own ``ModelConfig`` (through
``vllm_guard.model_reader``) and by ``flashinfer-guard plan --model <file> --model-reader builtin``
(the built-in reader, as the core environment runs it), per (config, tp).

The expected answer is vLLM's: its per-rank groups (kind, q heads, kv heads, head dims, window,
count) of the layers FlashInfer plans in the guarded buffer, MLA (nothing planned there), or
vLLM's refusal. ``plan`` agrees when it plans the same groups, says the model is MLA (not
applicable) where vLLM runs MLA, and refuses (exit 2, one line) only where vLLM refuses too.

    python -m tests.common.published_configs   # prints the table and the count
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PUBLISHED = os.path.join(REPO, "tests", "data", "model_configs_published")
CORPUS = os.path.join(REPO, "tests", "data", "model_configs")
MARK = "FLASHINFER_GUARD_GROUPS "
TPS = (1, 2, 4, 8)


def names(root: str = PUBLISHED) -> list[str]:
    return sorted(f[:-5] for f in os.listdir(root) if f.endswith(".json") and f not in ("manifest.json",
                                                                                         "sources.json"))


def vllm_readings(root: str, tmp: str, tps=TPS) -> dict:
    """{name: vllm_guard.model_reader's answer}, all in one subprocess of this interpreter."""
    import subprocess

    from tests.common.server_reading import readings

    return readings("vllm_guard.model_reader", root, names(root), tmp, tps, run=subprocess.run)


def _key(g: dict) -> tuple:
    return (g["kind"], int(g["num_qo_heads"]), int(g["num_kv_heads"]), int(g["head_dim_qk"]),
            int(g["head_dim_vo"] or g["head_dim_qk"]), int(g["count"]), g.get("window") or None)


def vllm_answer(reading: dict, tp: int):
    """("refuses", why) | ("mla", None) | ("groups", sorted keys) as vLLM reads the model at ``tp``."""
    if not reading.get("ok"):
        return ("refuses", reading.get("refusal"))
    rows = reading["groups"][str(tp)]
    if isinstance(rows, dict):
        return ("refuses", rows.get("refusal"))
    if reading.get("use_mla"):
        return ("mla", None)
    return ("groups", sorted(_key(g) for g in rows if g["kind"] != "mla"))


def plan_answer(path: str, tp: int, reader: str = "builtin"):
    """The same three answers from ``flashinfer-guard plan --json --model <path> --tp <tp>``."""
    from guard_core.commands import cli

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = cli.main(["plan", "--json", "--model-reader", reader, "--model", path, "--tp", str(tp),
                         "--gpu", "h200", "--framework-version", "0.33.0"])
    if code != 0:
        return ("refuses", " ".join(err.getvalue().split())[:300])
    r = json.loads(out.getvalue())
    if r.get("verdict") == "not_applicable":
        return ("mla", None) if "MLA" in str(r.get("reason")) else ("groups", [])
    seen = {}
    for g in r["groups"]:
        k = _key(g)
        seen[k] = k
    return ("groups", sorted(seen))


def agrees(theirs, mine) -> bool:
    if theirs[0] == "refuses":
        return mine[0] == "refuses"
    return theirs == mine


def compare(root: str, readings: dict, tps=TPS, reader: str = "builtin") -> list[tuple]:
    """[(name, tp, vLLM's answer, plan's answer, agree)] for every (config, tp)."""
    rows = []
    for n in names(root):
        path = os.path.join(root, n + ".json")
        for tp in tps:
            theirs = vllm_answer(readings[n], tp)
            mine = plan_answer(path, tp, reader)
            rows.append((n, tp, theirs, mine, agrees(theirs, mine)))
    return rows


def main() -> int:
    roots = sys.argv[1:] or [PUBLISHED]
    total = ok = 0
    for root in roots:
        with tempfile.TemporaryDirectory() as tmp:
            readings = vllm_readings(root, tmp)
        for n, tp, theirs, mine, same in compare(root, readings):
            total += 1
            ok += same
            if not same:
                print(f"DIFF {n} tp{tp}: vLLM {theirs} | plan {mine}")
    print(f"agree {ok} of {total} (config, tp) pairs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
