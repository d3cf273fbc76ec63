"""Generated broken installs inside SGLang's real plugin loader (issue 29, item 1).

Every module of guard_core, vllm_guard and sglang_guard removed, emptied, cut, or
replaced by an unrelated module of the same name, and each package shadowed by an
unrelated package of the same name earlier on sys.path (tests/common/broken_installs.py),
each run through ``sglang.srt.plugins.load_plugins()`` (SGLang >= 0.5.11; before each,
the line of our .pth that site runs at start-up): nothing escapes, our ``register()``
never raises into SGLang's loader (which would log "Failed to execute general plugin"
with a traceback), and where the guard cannot install one warning says why (or SGLang's
own "Failed to load plugin" line, when our entry point itself cannot be imported).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.common import broken_installs  # noqa: E402


def test_broken_installs_never_stop_sglangs_plugin_loading(tmp_path):
    results, loaded = broken_installs.run_in_subprocess("sglang", str(tmp_path))
    # an intact install first; what its load imports broken five ways, every other module removed
    assert broken_installs.reduction_problems("sglang", results, loaded) == []
    assert broken_installs.problems(results, "Failed to load plugin", "Failed to execute general plugin") == []
    lifecycle = next(r for r in results if r["label"] == "guard_core/runtime/lifecycle.py removed")
    said = [m for _, _, m, _ in lifecycle["records"] if "[flashinfer-guard]" in m]
    assert len(said) == 1 and "lifecycle" in said[0] and "ImportError" in said[0], lifecycle
    # a broken core with an intact entry point: our one line, never a traceback
    assert not any(exc for r in results if r["label"].startswith("guard_core/") for _, _, _, exc in r["records"])
