"""FlashInfer's own ``workspace_size(...)`` (PR #3741, FlashInfer >= 0.6.15) on this line's installed
FlashInfer, through its real ``BatchPrefillWithPagedKVCacheWrapper`` and the planner stand-in
(tests/realcalls/workspace_size_check.py): on conformance-grid batches it equals what ``plan()``
allocates and guard_core's mirror, float and int bytes (issue 27 item 5). On a FlashInfer without
it (vLLM 0.23.0's 0.6.12), the wrapper has no such method, which the guard's cross-check relies on.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.common import forkserver  # noqa: E402

N = int(os.environ.get("FLASHINFER_GUARD_WS_SIZE_N", "60"))


def _key(v):
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def test_workspace_size_equals_plan_and_mirror():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "VLLM_")) or k == "VLLM_CACHE_ROOT"}
    if os.environ.get("FLASHINFER_GUARD_CACHE"):
        env["FLASHINFER_GUARD_CACHE"] = os.environ["FLASHINFER_GUARD_CACHE"]
    env["PYTHONPATH"] = str(REPO)
    proc = forkserver.run([sys.executable, str(REPO / "tests/realcalls/workspace_size_check.py"), str(N)],
                          env=env, capture_output=True, text=True, timeout=1200, cwd=str(REPO))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    r = json.loads(lines[-1][len("RESULT "):])
    fi = md.version("flashinfer-python")
    assert r["has_workspace_size"] == (_key(fi) >= (0, 6, 15)), r["has_workspace_size"]
    if not r["has_workspace_size"]:
        return
    assert len(r["rows"]) >= min(N, 50)
    bad = [x for x in r["rows"] if x.get("workspace_size") != x.get("mirror") or x.get("plan") != x.get("mirror")]
    print(f"\nFlashInfer {fi}: workspace_size == plan() == mirror on {len(r['rows']) - len(bad)}/{len(r['rows'])}")
    assert not bad, bad[:5]
