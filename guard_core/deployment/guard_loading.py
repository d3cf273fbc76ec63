"""Whether the guard loads at all in a server process, from the environment that process sees
(issue 42 item 4): the answer ``plan`` gives is the unguarded one where it does not.

- the master switch ``FLASHINFER_GUARD=0`` (``guard_core.runtime.settings``): every adapter stands down;
- vLLM loads a general plugin only if ``VLLM_PLUGINS`` is unset or lists its entry-point name
  (vllm/envs.py ``VLLM_PLUGINS``: ``os.environ["VLLM_PLUGINS"].split(",")`` where set, names exact, no
  whitespace stripped; vllm/plugins/__init__.py ``load_plugins_by_group``: ``plugin.name in
  allowed_plugins``; 0.23.0 envs.py:1041-1045, plugins/__init__.py:32 and :56), so a set empty value loads none;
- SGLang 0.5.11+ loads it only if ``SGLANG_PLUGINS`` is unset, empty or lists it (srt/plugins/__init__.py
  ``load_plugins_by_group``: ``{x.strip() for x in value.split(",") if x.strip()}`` where the value is
  not empty), and the guard's own bootstrap for older lines applies the same allowlist
  (sglang_guard/_pth.py ``_allowed``).
"""

from __future__ import annotations

from guard_core.runtime.settings import MASTER

__all__ = ["PLUGIN_NAME", "not_loaded"]

# the entry-point name in both groups (pyproject.toml: vllm.general_plugins, sglang.srt.plugins)
PLUGIN_NAME = "flashinfer_guard"


def not_loaded(framework: str, environ: dict, enabled: bool = True) -> str | None:
    """Why the guard does not load in the server process (one line), or None: it loads."""
    if not enabled:
        return f"{MASTER}=0: the guard stands down"
    if framework == "vllm" and "VLLM_PLUGINS" in environ:
        value = environ["VLLM_PLUGINS"]
        if PLUGIN_NAME not in value.split(","):
            return (f"VLLM_PLUGINS={value!r} does not list {PLUGIN_NAME}: vLLM's plugin loader never registers the "
                    "guard (vllm/plugins/__init__.py load_plugins_by_group)")
    if framework == "sglang":
        value = environ.get("SGLANG_PLUGINS")
        if value and PLUGIN_NAME not in {x.strip() for x in value.split(",") if x.strip()}:
            return (f"SGLANG_PLUGINS={value!r} does not list {PLUGIN_NAME}: SGLang's plugin loader "
                    "(srt/plugins/__init__.py, 0.5.11+) and the guard's bootstrap for older lines "
                    "(sglang_guard/_pth.py) never register the guard")
    return None
