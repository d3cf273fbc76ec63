"""The shape of guard_core: floors without a circle, and functions a reader can hold.

Parsed with ``ast`` (no import), so an import inside a function counts as much as one
at the top of a module: a lower floor never reaches up, not even lazily.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "guard_core"


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _core_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(CORE.rglob("*.py"))}


def _imports(path: Path, name: str, known: set[str]) -> set[str]:
    """guard_core modules that ``name`` imports anywhere in its source (top level and inside functions)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod in known:
                out.add(mod)
            # ``from . import flashinfer_model`` / ``from guard_core import releases``
            for a in node.names:
                sub = f"{mod}.{a.name}"
                if sub in known:
                    out.add(sub)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _core_modules()
    known = set(mods)
    return {name: _imports(path, name, known) for name, path in mods.items()}


def _find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = GREY
        stack.append(n)
        for m in sorted(graph[n]):
            if colour[m] == GREY:
                return stack[stack.index(m):] + [m]
            if colour[m] == WHITE:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        colour[n] = BLACK
        return None

    for n in sorted(graph):
        if colour[n] == WHITE:
            found = visit(n)
            if found:
                return found
    return None


def test_graph_sees_lazy_imports():
    """The parser counts imports inside functions (the circle this test guards against was lazy)."""
    graph = import_graph()
    assert "guard_core.versions" in graph["guard_core.flashinfer.releases"]
    assert "guard_core.flashinfer.planner" in graph["guard_core.flashinfer.sizing"]


def test_no_import_cycle_in_guard_core():
    cycle = _find_cycle(import_graph())
    assert cycle is None, "import circle in guard_core: " + " -> ".join(cycle)


def product_import_graph() -> dict[str, set[str]]:
    """Every module of the product (guard_core and both adapters) and what it imports of it."""
    mods = {_module_name(p): p for pkg in ("guard_core", "vllm_guard", "sglang_guard")
            for p in sorted((ROOT / pkg).rglob("*.py"))}
    known = set(mods)
    return {name: _imports(path, name, known) for name, path in mods.items()}


def test_no_import_cycle_anywhere_in_the_product():
    """Issue 42 item 7: sglang_guard's kv_reserve -> workspace -> workspace_apply -> kv_reserve was a
    circle of private names (the reservation now lives on the floor below both, kv_reservation)."""
    graph = product_import_graph()
    assert "sglang_guard.kv_reservation" in graph["sglang_guard.workspace_apply"]
    cycle = _find_cycle(graph)
    assert cycle is None, "import circle in the product: " + " -> ".join(cycle)


# The rooms and what each may import (each subpackage's __init__ says the same in words).
# "ground" is guard_core itself: units, versions, gpus and the package's TAG.
ROOMS = ("flashinfer", "runtime", "deployment", "decide", "commands")
MAY_IMPORT = {
    "ground": {"ground"},
    "flashinfer": {"ground", "flashinfer"},
    "runtime": {"ground", "runtime"},
    "deployment": {"ground", "flashinfer", "deployment", "guard_core.runtime.settings"},
    "decide": {"ground", "flashinfer", "runtime", "deployment", "decide"},
    "commands": {"ground", "flashinfer", "runtime", "deployment", "decide", "commands"},
}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[1] in ROOMS else "ground"


def test_every_module_lives_in_a_room_or_on_the_ground_floor():
    ground = {m for m in _core_modules() if room(m) == "ground"}
    assert ground == {"guard_core", "guard_core.units", "guard_core.versions", "guard_core.gpus"}, ground
    assert {room(m) for m in _core_modules()} == set(ROOMS) | {"ground"}


def test_no_arrow_from_a_lower_room_to_a_higher_one():
    bad = []
    for name, deps in import_graph().items():
        allowed = MAY_IMPORT[room(name)]
        for dep in deps:
            if room(dep) not in allowed and dep not in allowed:
                bad.append(f"{name} ({room(name)}) imports {dep} ({room(dep)})")
    assert not bad, "\n".join(sorted(bad))


def test_each_room_says_what_lives_there_and_imports_nothing_at_its_door():
    """Each room, and each package inside a room (guard_core/deployment/launch), says what lives there
    and what it may import, and runs nothing when imported."""
    inits = [CORE / r / "__init__.py" for r in ROOMS]
    inits += sorted(p for r in ROOMS for p in (CORE / r).rglob("*/__init__.py"))
    assert CORE / "deployment" / "launch" / "__init__.py" in inits
    assert CORE / "commands" / "plan" / "__init__.py" in inits
    for init in inits:
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree)
        assert doc and "May import" in doc, f"{init}: the docstring says what lives here and what it may import"
        assert all(isinstance(n, ast.Expr) for n in tree.body), f"{init} runs nothing: importing a room is free"


def test_the_room_rules_can_fail():
    """The rule above sees a lazy upward import (a graph with one planted arrow is refused)."""
    graph = import_graph()
    graph["guard_core.flashinfer.sizing"] = graph["guard_core.flashinfer.sizing"] | {"guard_core.decide.workspace"}
    name = "guard_core.flashinfer.sizing"
    assert any(room(d) not in MAY_IMPORT[room(name)] for d in graph[name])


# ---------------------------------------------------------------- function length

MAX_FUNCTION_LINES = 80
PRODUCT = ("guard_core", "vllm_guard", "sglang_guard")

# FlashInfer's planner functions, mirrored statement by statement (scheduler.cuh): they keep
# the length of the functions they follow, so a reader can hold them side by side.
PLANNER_MIRRORS = {
    "guard_core/flashinfer/planner.py::prefill_plan",  # PrefillPlan + PrefillSplitQOKVIndptr
}


def function_lengths() -> dict[str, int]:
    """'path::qualified name' -> lines from ``def`` to the function's last line (docstring included)."""
    out: dict[str, int] = {}

    def walk(rel: str, node, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[f"{rel}::{prefix}{child.name}"] = child.end_lineno - child.lineno + 1
                walk(rel, child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                walk(rel, child, f"{prefix}{child.name}.")
            else:
                walk(rel, child, prefix)

    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            walk(rel, ast.parse(path.read_text(), rel), "")
    return out


def test_no_function_over_80_lines():
    lengths = function_lengths()
    allowed = PLANNER_MIRRORS
    long = {k: n for k, n in lengths.items() if n > MAX_FUNCTION_LINES and k not in allowed}
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}"


def test_allowlist_names_real_functions():
    """An allowlist entry that no longer exists (renamed, or split below the limit) is removed."""
    lengths = function_lengths()
    for name in PLANNER_MIRRORS:
        assert name in lengths, f"{name} is allowlisted but not found"


# ---------------------------------------------------------------- public names

def test_every_core_module_declares_its_public_names():
    """Each guard_core module says what other modules, the adapters and the tests may import
    from it (``__all__``), and every name it lists exists."""
    import importlib

    for name in sorted(_core_modules()):
        if _core_modules()[name].name == "__init__.py":  # a room's or a package's door: a docstring only
            continue
        mod = importlib.import_module(name)
        assert isinstance(getattr(mod, "__all__", None), list), f"{name} has no __all__"
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert not missing, f"{name}.__all__ names what it lacks: {missing}"


# ---------------------------------------------------------------- one entry for reading a launch command

def test_launch_command_is_the_one_door_to_its_parts():
    """guard_core.deployment.launch holds the parts of reading a launch command; everything else
    (the core, both adapters, the tests) goes through guard_core.deployment.launch_command."""
    graph = import_graph()
    parts = {m for m in graph if m.startswith("guard_core.deployment.launch.") or m == "guard_core.deployment.launch"}
    assert "guard_core.deployment.launch.prefixes" in parts
    outside = sorted(f"{name} imports {dep}" for name, deps in graph.items() if name not in parts
                     for dep in deps & parts if name != "guard_core.deployment.launch_command")
    for pkg in ("vllm_guard", "sglang_guard", "tests", "ci"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                        else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                outside += [f"{path.relative_to(ROOT)} imports {m}" for m in mods
                            if m.startswith("guard_core.deployment.launch.")]
    assert not outside, "\n".join(outside)


def test_plan_report_is_the_one_door_to_the_plans_stages():
    """guard_core.commands.plan holds the plan's stages, one module each; everything else (the CLI,
    doctor, the tests, ci, benchmarks) goes through guard_core.commands.plan_report."""
    graph = import_graph()
    parts = {m for m in graph if m.startswith("guard_core.commands.plan.") or m == "guard_core.commands.plan"}
    assert {"guard_core.commands.plan.facts", "guard_core.commands.plan.printing"} <= parts
    outside = sorted(f"{name} imports {dep}" for name, deps in graph.items() if name not in parts
                     for dep in deps & parts if name != "guard_core.commands.plan_report")
    for pkg in ("vllm_guard", "sglang_guard", "tests", "ci", "benchmarks"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                mods = ([a.name for a in node.names] if isinstance(node, ast.Import)
                        else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                outside += [f"{path.relative_to(ROOT)} imports {m}" for m in mods
                            if m.startswith("guard_core.commands.plan.")]
    assert not outside, "\n".join(outside)


# ---------------------------------------------------------------- one copy of every rule

def test_per_gpu_facts_live_in_one_table():
    """SMs, compute capability, memory and the host's CPU of a table GPU are one row of
    guard_core.gpus.GPU_TABLE: no other module keeps a table keyed by GPU (issue 30)."""
    from guard_core import gpus
    from guard_core.deployment import server_defaults

    keys = {s.key for s in gpus.GPU_TABLE}
    assert set(gpus.GPU_MEMORY) == keys  # every row has its memory
    assert server_defaults.GPU_MEMORY is gpus.GPU_MEMORY  # a re-export, not a copy
    assert not hasattr(server_defaults, "AARCH64_GPUS")
    assert {k for k in keys if gpus.is_aarch64_gpu(k)} == {"gh200", "gb200", "gb300", "gb10"}
    for path in sorted(CORE.rglob("*.py")):
        if path.name != "gpus.py":
            text = path.read_text()
            assert '"gb10": (' not in text and '"b300": (' not in text, f"{path}: a table keyed by GPU"


def test_attention_kind_labels_are_written_once():
    """Each attention kind is named in one table (guard_core.deployment.groups.KIND_LABELS)."""
    from guard_core.deployment.groups import KINDS, KIND_LABELS, kind_label

    assert set(KIND_LABELS) == set(KINDS)
    assert kind_label("sliding", 4096) == "sliding window 4096" and kind_label("full", 4096) == "full attention"
    for pkg in PRODUCT:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path.as_posix().endswith("guard_core/deployment/groups.py"):
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Constant) and isinstance(node.value, str):
                    assert not node.value.startswith(("sliding window", "chunked local attention", "full attention")), \
                        f"{path}: an attention kind named outside groups.KIND_LABELS: {node.value!r}"


# ---------------------------------------------------------------- module length

MAX_MODULE_LINES = 400
# The planner mirror keeps the length of the FlashInfer code it follows (scheduler.cuh): no limit.
PLANNER_MIRROR = "guard_core/flashinfer/planner.py"
# Modules still over the limit, each with its size today as a ceiling: an entry may only shrink
# (lower its number when it does; remove it once under the limit). None today: the last three were
# split in issue 30; a new entry needs a reason and an issue for its split.
LONG_MODULES: dict[str, int] = {}


def module_lengths() -> dict[str, int]:
    return {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines())
            for pkg in PRODUCT for p in sorted((ROOT / pkg).rglob("*.py"))}


def test_no_module_over_400_lines():
    lengths = module_lengths()
    long = {k: n for k, n in lengths.items() if n > LONG_MODULES.get(k, MAX_MODULE_LINES) and k != PLANNER_MIRROR}
    assert not long, (f"modules over {MAX_MODULE_LINES} lines (or grown past their ceiling in LONG_MODULES): "
                      f"{long}")


def test_long_modules_allowlist_is_tight():
    """Each allowlisted module exists, is still over the limit (else its entry goes) and its ceiling
    is its size (a module that shrank lowers its number, so that it cannot grow back)."""
    lengths = module_lengths()
    for path, ceiling in LONG_MODULES.items():
        assert path in lengths, f"{path} is allowlisted but not found"
        assert lengths[path] > MAX_MODULE_LINES, f"{path} is {lengths[path]} lines now: remove it from LONG_MODULES"
        assert lengths[path] == ceiling, f"{path} is {lengths[path]} lines now: set its ceiling in LONG_MODULES to that"
