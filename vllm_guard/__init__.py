"""flashinfer-guard's vLLM adapter.

Loaded by vLLM's plugin system (entry point group ``vllm.general_plugins``,
name ``flashinfer_guard``) in the API server, every engine core and every
worker. ``register()`` only installs post-import hooks; the guards patch
vLLM when the modules they need are imported by vLLM itself.

Importing this package is cheap: no torch, flashinfer or vLLM internals.
"""

try:
    from guard_core.runtime.logs import logger_name

    LOGGER_NAME = logger_name("vllm")
except Exception:  # a broken or shadowed guard_core: plugin.register() says so, once
    LOGGER_NAME = "vllm.flashinfer_guard"
"""The product's logger under vLLM's own tree (``vllm.flashinfer_guard``): vLLM's
format, one line per decision."""
