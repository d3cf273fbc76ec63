"""Which model runner this vLLM's worker builds, by feature (never by version string).

- vLLM 0.23-0.33 have both runners: ``VllmConfig.use_v2_model_runner`` (a property, config/vllm.py
  0.33.0:731) and the worker's copy of it (``Worker.use_v2_model_runner``, v1/worker/gpu_worker.py
  0.33.0:206) choose between Model Runner V1 (``v1/worker/gpu_model_runner.py``) and V2
  (``v1/worker/gpu/model_runner.py``).
- vLLM 0.34.0 removed Model Runner V1: no ``v1/worker/gpu_model_runner.py``, no
  ``use_v2_model_runner`` anywhere, and the worker always builds V2
  (``Worker._make_model_runner``, v1/worker/gpu_worker.py 0.34.0:583-590).

So: the object's own ``use_v2_model_runner`` where it has one; else V2 exactly when V1's module
is gone from the installed vLLM.
"""

from __future__ import annotations

__all__ = ["V1_MODULE", "uses_v2_runner", "v1_runner_absent"]

V1_MODULE = "vllm.v1.worker.gpu_model_runner"


def v1_runner_absent() -> bool:
    """Whether the installed vLLM has no Model Runner V1 (0.34+); False when that cannot be told."""
    import importlib.util

    try:
        return importlib.util.find_spec(V1_MODULE) is None
    except Exception:  # vllm itself missing or broken: say nothing new
        return False


def uses_v2_runner(obj) -> bool:
    """Whether a ``VllmConfig`` or a ``Worker`` runs Model Runner V2 (module doc)."""
    flag = getattr(obj, "use_v2_model_runner", None)
    if flag is not None:
        return bool(flag)
    return v1_runner_absent()
