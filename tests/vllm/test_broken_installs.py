"""Generated broken installs inside vLLM's real plugin loader (issue 29, item 1).

Every module of guard_core, vllm_guard and sglang_guard removed, emptied, cut, or
replaced by an unrelated module of the same name, and each package shadowed by an
unrelated package of the same name earlier on sys.path (tests/common/broken_installs.py):
``vllm.plugins.load_general_plugins()`` calls our ``register()`` outside any ``try``
(vllm/plugins/__init__.py, load_general_plugins: ``for func in plugins.values(): func()``),
so nothing may escape it; where the guard cannot install, one warning says why (or vLLM's
own "Failed to load plugin" line, when our entry point itself cannot be imported).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.common import broken_installs  # noqa: E402


def test_broken_installs_never_stop_vllms_plugin_loading(tmp_path):
    results, loaded = broken_installs.run_in_subprocess("vllm", str(tmp_path))
    # an intact install first; what its load imports broken five ways, every other module removed
    assert broken_installs.reduction_problems("vllm", results, loaded) == []
    assert broken_installs.problems(results, "Failed to load plugin") == []
    # the reproduction: guard_core without lifecycle.py first on sys.path
    lifecycle = next(r for r in results if r["label"] == "guard_core/runtime/lifecycle.py removed")
    said = [m for _, _, m, _ in lifecycle["records"] if "[flashinfer-guard]" in m]
    assert len(said) == 1 and "lifecycle" in said[0] and "ImportError" in said[0], lifecycle
    # an intact entry point with a broken core still loads and says so, not vLLM's traceback
    assert not any(exc for r in results if r["label"].startswith("guard_core/") for _, _, _, exc in r["records"])
