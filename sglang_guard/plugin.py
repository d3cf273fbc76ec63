"""register(): the single entry of the SGLang adapter; uninstall() undoes it.

Cheap and idempotent: reads the FLASHINFER_GUARD_* settings and installs lazy
post-import hooks (guard_core.patching.when_imported). Nothing heavy is
imported here; the hooks wrap their targets when SGLang itself imports them,
and each wrapper logs its decision when it takes effect (in scheduler
processes SGLang configures logging only after plugins load).

Targets (found by feature, not by version string):

* ``sglang.srt.layers.attention.flashinfer_backend``: ``FlashInferAttnBackend.__init__``
  (workspace sizing, see workspace.py);
* the MoE runner backend where SGLang resolves it: ``ServerArgs`` (<= 0.5.15), the
  argument-resolution pipeline and its resolution hooks (0.5.20+), and
  ``initialize_moe_config`` in every scheduler (see moe.py).

The guards import ``._log`` for their logger, never this module.
"""

from __future__ import annotations

import os
import sys
import threading

from ._log import log  # noqa: F401  (the adapter's logger, kept reachable here)

_lock = threading.RLock()
_registered = False
_source: str | None = None

HOOK_PREFIX = "sglang_guard."  # every post-import hook key of this adapter starts so


def register(source: str = "entry_point") -> bool:
    """Install the SGLang hooks once per process. Returns True when active
    (the contract of guard_core.lifecycle; SGLang's loader ignores it)."""
    from guard_core import lifecycle

    return lifecycle.register(sys.modules[__name__], lambda: _register(source), _say_failed)


def _say_failed(exc: BaseException) -> None:
    log().warning(f"not loaded after an internal error ({type(exc).__name__}: {exc}); "
                  "SGLang runs without the guard", key="register")


def _register(source: str) -> bool:
    global _source
    from guard_core.settings import get_settings

    settings = get_settings()
    if not settings.enabled:
        return False
    from . import moe, workspace

    log().settings_warnings(settings)
    workspace.remember_user_size(os.environ)
    # FlashInferAttnBackend.__init__; ModelRunner.load_model (deterministic inference: the
    # fixed-split need said before the weights load)
    workspace.install()
    moe.install()
    _source = source
    return True


def uninstall() -> None:
    """Undo every patch and post-import hook of this process; ``register()`` installs
    again afterwards (tests; never raises)."""
    global _source
    from guard_core import lifecycle

    lifecycle.uninstall(sys.modules[__name__], _teardown)
    _source = None


def _teardown() -> None:
    from guard_core.patching import forget_import_hooks

    from . import _log, moe, workspace

    forget_import_hooks(HOOK_PREFIX)
    moe.uninstall()
    workspace.uninstall()
    _log.reset_log()


def is_registered() -> bool:
    return _registered


def loaded_by() -> str | None:
    """'entry_point' or 'pth' once registered in this process."""
    return _source
