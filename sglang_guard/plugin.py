"""register(): the single entry of the SGLang adapter.

Cheap and idempotent: reads the FLASHINFER_GUARD_* settings and installs lazy
post-import hooks (guard_core.patching.when_imported). Nothing heavy is
imported here; the hooks wrap their targets when SGLang itself imports them,
and each wrapper logs its decision when it takes effect (in scheduler
processes SGLang configures logging only after plugins load).

Targets (found by feature, not by version string):

* ``sglang.srt.layers.attention.flashinfer_backend``: ``FlashInferAttnBackend.__init__``
  (workspace sizing, see workspace.py);
* ``sglang.srt.server_args``: ``ServerArgs.__post_init__`` / ``_handle_moe_kernel_config``
  (MoE backend resolution in the main process, SGLang <= 0.5.15);
* ``sglang.srt.layers.moe.utils``: ``initialize_moe_config`` (the runner backend each
  scheduler uses, including NVFP4 ``auto``, which SGLang turns into TRT-LLM inside
  ``create_moe_runner``), see moe.py.
"""

from __future__ import annotations

import logging
import os
import threading

_lock = threading.Lock()
_registered = False
_source: str | None = None
_log = None

FLASHINFER_BACKEND = "sglang.srt.layers.attention.flashinfer_backend"
SERVER_ARGS = "sglang.srt.server_args"
MOE_UTILS = "sglang.srt.layers.moe.utils"


def log():
    """The adapter's GuardLog (SGLang modules log through the root logger)."""
    global _log
    if _log is None:
        from guard_core.logs import GuardLog
        from guard_core.settings import get_settings

        _log = GuardLog(logging.getLogger("sglang_guard"), level=get_settings().log_level)
    return _log


def register(source: str = "entry_point") -> bool:
    """Install the SGLang hooks once per process. Returns True when active."""
    global _registered, _source
    with _lock:
        if _registered:
            return True
        try:
            from guard_core.settings import get_settings

            settings = get_settings()
            if not settings.enabled:
                return False
            from guard_core.patching import when_imported

            from . import moe, workspace

            lg = log()
            lg.settings_warnings(settings)
            workspace.remember_user_size(os.environ)
            when_imported(FLASHINFER_BACKEND, workspace.on_backend_module, key="sglang_guard.workspace")
            when_imported(SERVER_ARGS, moe.on_server_args_module, key="sglang_guard.moe.server_args")
            when_imported(MOE_UTILS, moe.on_moe_utils_module, key="sglang_guard.moe.runtime")
            _registered = True
            _source = source
            return True
        except Exception as exc:  # never break SGLang's plugin loading
            try:
                logging.getLogger("sglang_guard").warning(
                    "[flashinfer-guard] not loaded after an internal error (%s: %s); "
                    "SGLang runs without the guard", type(exc).__name__, exc)
            except Exception:
                pass
            return False


def is_registered() -> bool:
    return _registered


def loaded_by() -> str | None:
    """'entry_point' or 'pth' once registered in this process."""
    return _source
