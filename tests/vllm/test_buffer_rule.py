"""vLLM's own workspace rule, read from the installed wheel of this line (no import of vLLM: ast only).

guard_core keeps one offline copy of it (``server_defaults.vllm_workspace``: 394 MiB, from 0.26 at
least tokens x q heads x head dim x 16); the adapter reads vLLM's live values
(``vllm_guard.workspace_facts.server_bytes``: ``envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE`` and
``FLASHINFER_PREFILL_WORKSPACE_BYTES_PER_ELEM`` where the module has it). This test ties the offline
copy to the wheel's source on each locked line; tests/vllm/test_defaults_crosscheck.py ties the
adapter's reading to what vLLM allocates.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import importlib.util
from pathlib import Path

from guard_core.deployment import server_defaults

VLLM = md.version("vllm")


def _tree(*parts: str) -> ast.Module:
    root = Path(importlib.util.find_spec("vllm").submodule_search_locations[0])
    path = root.joinpath(*parts)
    return ast.parse(path.read_text(), str(path))


def _module_constant(tree: ast.Module, name: str):
    for n in tree.body:
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and n.value is not None:
            return ast.literal_eval(n.value)
    return None


def test_the_per_element_floor_is_the_wheels():
    per_elem = _module_constant(_tree("v1", "attention", "backends", "flashinfer.py"),
                                "FLASHINFER_PREFILL_WORKSPACE_BYTES_PER_ELEM")
    # present exactly on the lines the offline rule gives the floor to
    assert (per_elem is not None) == server_defaults.vllm_per_phase_builder(VLLM), (VLLM, per_elem)
    if per_elem is not None:
        assert per_elem == server_defaults.VLLM_BYTES_PER_ELEM


def test_the_default_size_is_the_wheels():
    """envs.py: ``VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE: int = 394 * 1024 * 1024`` (the type-checking
    default, the same expression as the getenv default below it)."""
    tree = _tree("envs.py")
    found = [n.value for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
             and n.target.id == "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE" and n.value is not None]
    assert found, "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE not declared in envs.py"
    wheel = eval(compile(ast.Expression(found[0]), "envs.py", "eval"), {})  # an arithmetic literal
    ours = server_defaults.vllm_workspace(VLLM, 1, 1, 1).value  # tokens x heads x dim x 16 far below the floor
    assert wheel == ours
