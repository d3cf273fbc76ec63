"""Fill one vLLM line's model-inspection cache once, in one process, before its tests (issue 40).

vLLM inspects each model class the first time a config names it, in a fresh subprocess that imports
vLLM again (``_run_in_subprocess`` in ``_LazyRegisteredModel.inspect_model_cls``,
model_executor/models/registry.py 0.33.0:1088-1130, 0.23.0:~890-925), and caches the answer under
``$VLLM_CACHE_ROOT/modelinfos`` keyed by the model file's hash. On an empty machine the vLLM tests
missed it about 40 times per line (42 files on 0.33.0 after a cold run): 40 imports of vLLM and
torch, the largest part of the cold run's extra CPU. Here vLLM's own ``inspect_model_cls`` runs for
every architecture the test corpora name, with its subprocess call made in this process (the
subprocess only keeps CUDA out of the parent; there is no GPU here), and vLLM's own code writes its
cache: the same files the tests' misses would write. A class that fails here is left to the tests'
own path. Run by ci/vllm/run_tests.sh with the line's python and VLLM_CACHE_ROOT; prints one line
and appends one build row to $FG_TIMINGS.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def corpus_architectures() -> list[str]:
    found = set()
    for p in sorted((REPO / "tests" / "data").rglob("*.json")):
        try:
            data = json.loads(p.read_text())
        except (ValueError, OSError):
            continue
        archs = data.get("architectures") if isinstance(data, dict) else None
        if isinstance(archs, list):
            found.update(a for a in archs if isinstance(a, str))
    return sorted(found)


def main() -> int:
    t0, wall0 = time.monotonic(), time.time() - 1
    import vllm.model_executor.models.registry as reg

    cache = Path(os.environ.get("VLLM_CACHE_ROOT") or "~/.cache/vllm").expanduser() / "modelinfos"
    reg._run_in_subprocess = lambda fn: fn()  # this process is the subprocess: no GPU to keep out
    done = failed = 0
    for arch in corpus_architectures():
        model = reg.ModelRegistry.models.get(arch)
        if model is None:
            continue
        try:
            model.inspect_model_cls()
            done += 1
        except Exception:  # noqa: BLE001 - the tests' own (subprocess) path takes this one
            failed += 1
    made = sum(1 for p in cache.glob("*.json") if p.stat().st_mtime >= wall0) if cache.is_dir() else 0
    secs = time.monotonic() - t0
    line = os.environ.get("FLASHINFER_GUARD_VLLM_LINE", "?")
    state = f"built={made}" if made else "cached"
    if os.environ.get("FG_TIMINGS"):
        with open(os.environ["FG_TIMINGS"], "a") as f:
            f.write(f"build\tvLLM {line} model cache\t{secs:.0f}\t{state}\n")
    print(f"[ci] build vLLM {line} model-inspection cache: {done} classes ({made} written, {failed} left to the "
          f"tests) in {secs:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
