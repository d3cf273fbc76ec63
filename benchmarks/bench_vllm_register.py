"""What vllm_guard's register() adds to vLLM's start-up, from one run.

    <vllm env>/bin/python benchmarks/bench_vllm_register.py

In one fresh process: ``import vllm``, then our entry point's cost (importing
``vllm_guard.plugin`` and calling ``register()``, cold, exactly what vLLM's
loader does with it), then ``vllm.plugins.load_general_plugins()`` (which finds
us registered already and loads the other plugins). Prints our share of
``import vllm`` + ``load_general_plugins()``. Target: < 1 % and < 20 ms.
"""

from __future__ import annotations

import os
import sys
import time


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    preloaded = [m for m in ("vllm", "vllm_guard", "guard_core") if m in sys.modules]
    if preloaded:
        print(f"already imported: {preloaded}; run in a fresh interpreter")
        return 2
    # an installed package has its bytecode compiled (pip does it at install);
    # compile ours the same way, without importing it
    import compileall
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    for pkg in ("guard_core", "vllm_guard"):
        compileall.compile_dir(str(repo / pkg), quiet=1)

    t0 = time.perf_counter()
    import vllm  # noqa: F401
    import vllm.plugins

    t1 = time.perf_counter()
    import vllm_guard.plugin

    vllm_guard.plugin.register()
    t2 = time.perf_counter()
    vllm.plugins.load_general_plugins()
    t3 = time.perf_counter()

    ours = t2 - t1
    total = (t1 - t0) + ours + (t3 - t2)
    ratio = ours / total
    print(f"import vllm: {(t1 - t0) * 1e3:.1f} ms; load_general_plugins (others): {(t3 - t2) * 1e3:.1f} ms; "
          f"flashinfer-guard register (import + call): {ours * 1e3:.2f} ms")
    print(f"register() share of import vllm + load_general_plugins(): {ratio * 100:.3f} % "
          f"({ours * 1e3:.2f} ms of {total * 1e3:.1f} ms)")
    ok = ratio < 0.01 and ours < 0.020
    print("target (< 1 % and < 20 ms):", "met" if ok else "MISSED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
