"""`plan` leaves no trace and imports the server only in its one server process (issue 42 items 1, 2):
the shared check for both servers (tests/vllm/test_plan_no_trace.py, tests/sglang/test_plan_no_trace.py).

`plan` runs as a user runs it, a process of its own, with HOME, XDG_CACHE_HOME, XDG_CONFIG_HOME, TMPDIR
and vLLM's cache root pointed at watched directories (vLLM's holding a copy of the line's model-inspection
cache, as a user's would after one server start). Afterwards every watched directory holds exactly what
it held before (names, sizes, modification times), plan's own process never imported the server, and it
started one Python process (plan's server process). Measured before (2f09787, vLLM 0.33.0): vLLM's
modelinfos/<class>.json in VLLM_CACHE_ROOT, ~/.cache/flashinfer/<version>/flashinfer_jit.log,
TMPDIR/<user>/cutlass_python_cache and TMPDIR/torchinductor_<user> written by every plan.
"""

from __future__ import annotations

import importlib
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "model_configs"

# plan's own process, wrapped: counts the processes it starts and says whether it imported the server
WRAP = r"""
import json, subprocess, sys
started = []
class Counting(subprocess.Popen):
    def __init__(self, args, *a, **k):
        started.append([str(x) for x in args] if isinstance(args, (list, tuple)) else [str(args)])
        super().__init__(args, *a, **k)
subprocess.Popen = Counting
from guard_core.commands import cli
rc = cli.main(sys.argv[2:])
sys.stdout.flush()
print("\nWRAP " + json.dumps({"rc": rc, "started": started,
      "imported": sorted(m for m in ("vllm", "sglang", "torch", "flashinfer") if m in sys.modules)}))
"""


def _snapshot(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in dirnames + filenames:
            p = Path(dirpath) / n
            st = p.lstat()
            out[str(p.relative_to(root))] = (st.st_size if p.is_file() else -1, st.st_mtime_ns)
    return out


def plan_watched(tmp_path: Path, launch: list[str], vllm_cache_seed: str | None = None) -> tuple[dict, dict]:
    """(plan's JSON, the wrapper's record) for ``plan --json --gpu h200 -- <launch>``; asserts that
    every watched directory is unchanged."""
    watched = {k: tmp_path / k.lower() for k in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TMPDIR",
                                                 "VLLM_CACHE_ROOT")}
    for d in watched.values():
        d.mkdir()
    if vllm_cache_seed and os.path.isdir(os.path.join(vllm_cache_seed, "modelinfos")):
        shutil.copytree(os.path.join(vllm_cache_seed, "modelinfos"), watched["VLLM_CACHE_ROOT"] / "modelinfos")
    before = {k: _snapshot(d) for k, d in watched.items()}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "VLLM_", "SGLANG_"))}
    env.update({k: str(d) for k, d in watched.items()}, HF_HUB_OFFLINE="1", PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "-c", WRAP, "--", "plan", "--json", "--gpu", "h200", "--", *launch],
                       capture_output=True, text=True, env=env, cwd=str(REPO), timeout=900)
    wrap = [ln for ln in p.stdout.splitlines() if ln.startswith("WRAP ")]
    assert p.returncode == 0 and wrap and "Traceback" not in p.stderr, (p.stdout[-2000:], p.stderr[-3000:])
    rec = json.loads(wrap[-1][len("WRAP "):])
    assert rec["rc"] == 0, p.stderr[-3000:]
    after = {k: _snapshot(d) for k, d in watched.items()}
    for k in watched:
        new = sorted(set(after[k]) - set(before[k]))
        changed = sorted(n for n in before[k] if n in after[k] and after[k][n] != before[k][n])
        assert not new and not changed, f"plan wrote into {k}: new {new[:10]}, changed {changed[:10]}"
    body = p.stdout[: p.stdout.rindex("\nWRAP ")] if "\nWRAP " in p.stdout else p.stdout
    return json.loads(body), rec


def check_plan_in_one_server_process(tmp_path: Path, launch_for, server_config_module: str,
                                     vllm_cache_seed: str | None = None) -> None:
    """The whole check for one server: Qwen3-32B at TP 2 on H200 (``launch_for(model_dir)``: the
    launch command), plan run watched (``plan_watched``): resolved, read and parsed by the server's
    own code, none of the server, torch or FlashInfer imported in plan's process, one Python process
    started (the module host); then the same plan in this process, with ``server_config_module``
    imported here first (the server's parser then runs here): the same answer, the parsed launch
    record whole."""
    from contextlib import redirect_stderr, redirect_stdout

    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    (model / "config.json").write_text((CORPUS / "Qwen3-32B.json").read_text())
    launch = launch_for(str(model))
    d, rec = plan_watched(tmp_path, launch, vllm_cache_seed=vllm_cache_seed)
    assert d["resolution"]["server"] is True, d["resolution"]
    assert d["model_reader"]["server"], d["model_reader"]
    assert "own parser" in d["launch"]["reader"], d["launch"]
    assert rec["imported"] == [], rec  # neither the server nor torch nor FlashInfer in plan's own process
    pythons = [a for a in rec["started"] if "-m" in a]
    assert len(pythons) == 1 and pythons[0][pythons[0].index("-m") + 1] == "guard_core.deployment.module_host", rec
    from guard_core.commands import cli

    importlib.import_module(server_config_module)
    out = io.StringIO()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        assert cli.main(["plan", "--json", "--gpu", "h200", "--", *launch]) == 0
    here = json.loads(out.getvalue())
    for key in ("layout", "limits", "need", "workspace_bytes", "verdict", "server_default_bytes"):
        assert d[key] == here[key], key
    assert d["resolution"]["resolved"] == here["resolution"]["resolved"]
    assert d["launch"] == here["launch"]  # the parse crossed as JSON reads as the parse in this process
