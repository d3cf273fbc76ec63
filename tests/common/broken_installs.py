"""Generated broken installs of the product, run through a framework's real plugin loader.

Every module of guard_core, vllm_guard and sglang_guard, one at a time: removed,
emptied, cut in the middle of a line, cut at the line nearest the middle, or
replaced by an unrelated module of the same name; and each of the three packages
shadowed by an unrelated package of the same name. Each install is a full copy of
the three packages in its own directory, which the runner puts first on sys.path
(the way a stale copy in the working directory or an interrupted upgrade shadows
the real install).

The runner (``python -m tests.common.broken_installs vllm|sglang LIST.json OUT.json``)
imports the framework's plugin loader once (SGLang < 0.5.11 has none: the .pth
bootstrap's own hand-over, ``_pth._on_sglang_executed`` on the real sglang spec) and, for each install, forgets every
module of ours and every import hook we added (sys.modules, sys.meta_path,
sys.path_hooks, sys.path, importlib's caches), resets the loader's once-per-process
flag and calls the real loader, recording whether an exception escaped and every
log record said. One interpreter serves every install: a fresh interpreter per
install costs the framework's import (~15 s of CPU) each time.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import shutil
import sys
import traceback

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("guard_core", "vllm_guard", "sglang_guard")
UNRELATED_MODULE = '"""An unrelated module that happens to share the name."""\n\nVALUE = 1\n'
UNRELATED_PACKAGE = '"""An unrelated package that happens to share the name."""\n\n__version__ = "9.9"\n'
VARIANTS = ("removed", "emptied", "cut_mid_line", "cut_at_line", "unrelated")


def modules() -> list[str]:
    """Every .py file of the three packages, relative to the repository."""
    out = []
    for pkg in PACKAGES:
        for root, dirs, files in os.walk(os.path.join(REPO, pkg)):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            out += [os.path.relpath(os.path.join(root, f), REPO) for f in sorted(files) if f.endswith(".py")]
    return out


def _copy_tree(dest: str) -> None:
    # hard links where the file system allows (every install is the same ~100 files but one):
    # the broken file is always replaced, never written through the link (_break)
    for pkg in PACKAGES:
        shutil.copytree(os.path.join(REPO, pkg), os.path.join(dest, pkg),
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), copy_function=_link_or_copy)


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _break(path: str, variant: str) -> None:
    text = open(path, encoding="utf-8").read()
    if variant == "removed":
        os.remove(path)
        return
    if variant == "emptied":
        new = ""
    elif variant == "cut_mid_line":
        half = len(text) // 2
        while half < len(text) and text[half] in "\n ":  # land inside a line
            half += 1
        new = text[:half]
    elif variant == "cut_at_line":
        new = text[:text.rfind("\n", 0, len(text) // 2) + 1]
    else:
        new = UNRELATED_MODULE
    os.remove(path)  # a hard link to the checkout's file: replace it, never write through it
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)


def generate(root: str, loaded: set[str] | None = None) -> list[dict]:
    """Write every broken install under ``root``; returns [{'label', 'path'}]. ``loaded``: the
    modules (paths relative to the repository) the framework's loader imports from an intact
    install; a module outside it is only removed (its other variants cannot be seen by a loader
    that never imports it: removing it checks that nothing looks for it either). None: every
    variant of every module."""
    installs = []
    for i, rel in enumerate(modules()):
        for variant in (VARIANTS if loaded is None or rel in loaded else ("removed",)):
            dest = os.path.join(root, f"m{i:03d}-{variant}")
            _copy_tree(dest)
            _break(os.path.join(dest, rel), variant)
            installs.append({"label": f"{rel} {variant}", "path": dest})
    for pkg in PACKAGES:
        dest = os.path.join(root, f"shadow-{pkg}")
        _copy_tree(dest)
        shutil.rmtree(os.path.join(dest, pkg))
        os.makedirs(os.path.join(dest, pkg))
        with open(os.path.join(dest, pkg, "__init__.py"), "w", encoding="utf-8") as f:
            f.write(UNRELATED_PACKAGE)
        installs.append({"label": f"{pkg} shadowed by an unrelated package", "path": dest})
    return installs


def run_in_subprocess(framework: str, tmp_dir: str, python: str | None = None) -> tuple[list[dict], list[str]]:
    """Run every broken install through the framework's loader in one fresh interpreter of this
    environment: first an intact install (what the loader imports from it decides the variants,
    ``generate``), then the broken ones. Returns (results, the intact run's imported modules);
    the intact run is the first result."""
    import subprocess

    dst = os.path.join(tmp_dir, "results.json")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "VLLM_PLUGINS", "SGLANG_PLUGINS"))}
    env["PYTHONPATH"] = REPO
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # the generated copies must not leave stale bytecode
    proc = subprocess.run([python or sys.executable, "-m", "tests.common.broken_installs", framework, tmp_dir, dst],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"exit {proc.returncode}: {proc.stderr[-3000:]}"
    with open(dst, encoding="utf-8") as f:
        out = json.load(f)
    return out["results"], out["loaded"]


def reduction_problems(framework: str, results: list[dict], loaded: list[str]) -> list[str]:
    """What would make ``generate``'s reduction unsound or the run incomplete: the intact install
    must load the guard with nothing escaping, its imports must include the entry point and the
    lifecycle, the count must be ``expected_installs``; one module broken at a time, a module the
    intact load never imports cannot be reached by its own broken install (the load takes the
    intact path up to the first broken import), so only its removal runs, and the guard must load
    as from the intact install there."""
    out = []
    intact = results[0] if results else {}
    if intact.get("label") != "intact install" or intact.get("registered") is not True or intact.get("escaped"):
        out.append(f"intact install: {intact}")
    for need in (f"{framework}_guard/plugin.py", "guard_core/runtime/lifecycle.py"):
        if need not in loaded:
            out.append(f"the intact load did not import {need}: {loaded}")
    if len(results) != expected_installs(loaded):
        out.append(f"{len(results)} installs run, {expected_installs(loaded)} expected")
    for r in results:
        rel = r["label"].rsplit(" ", 1)[0]
        if rel.endswith(".py") and rel not in loaded and (r["registered"] is not True or rel in r["imported"]):
            out.append(f"{r['label']}: a module the intact load never imports changed the load: {r}")
    return out


def expected_installs(loaded: list[str]) -> int:
    """How many installs ``generate`` writes for that imported set (plus the intact one)."""
    n = sum(len(VARIANTS) if rel in loaded else 1 for rel in modules())
    return 1 + n + len(PACKAGES)


def problems(results: list[dict], loader_failed: str, register_raised: str | None = None) -> list[str]:
    """Every install where the server would not have gone on as without the guard, or where
    the guard stood down without one line saying why. ``loader_failed`` is the text the
    framework's own loader logs when importing our entry point fails (it then says why);
    ``register_raised`` the text it logs when our register() raised (SGLang catches it)."""
    out = []
    for r in results:
        raised = [m for _, _, m, _ in r["records"] if register_raised and register_raised in m]
        if raised:
            out.append(f"{r['label']}: register() raised into the loader: {raised[0]}")
        ours = [m for lvl, _, m, _ in r["records"] if "[flashinfer-guard]" in m and lvl == "WARNING"
                and ("broken or shadowed" in m or "internal error" in m)]
        loader = [m for lvl, _, m, _ in r["records"] if loader_failed in m]
        if r["escaped"]:
            out.append(f"{r['label']}: escaped into the loader: {r['escaped']}")
        elif len(ours) > 1:
            out.append(f"{r['label']}: {len(ours)} warnings, not one: {ours}")
        elif r["registered"] is not True and not ours and not loader:
            out.append(f"{r['label']}: not active and nothing said why")
        elif ours and "Error" not in ours[0] and "Exception" not in ours[0]:
            out.append(f"{r['label']}: the warning names no cause: {ours[0]}")
    return out


# ---- the runner: inside the framework's environment -------------------------------------


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[list] = []
        self._seen: set[int] = set()

    def emit(self, record):
        if id(record) in self._seen:  # attached to a logger and to the root: once
            return
        self._seen.add(id(record))
        try:
            msg = record.getMessage()
        except Exception:
            msg = str(record.msg)
        self.lines.append([record.levelname, record.name, msg, bool(record.exc_info)])


def _ours(name: str) -> bool:
    return name.split(".")[0] in PACKAGES


def _forget(meta_path, path_hooks, base_path) -> None:
    for name in [n for n in sys.modules if _ours(n)]:
        del sys.modules[name]
    sys.meta_path[:] = meta_path
    sys.path_hooks[:] = path_hooks
    sys.path[:] = base_path
    sys.path_importer_cache.clear()
    importlib.invalidate_caches()


def _loader(framework: str):
    """The framework's real plugin loader and a function resetting its once-per-process flag."""
    if framework == "vllm":
        import vllm.plugins as plugins

        def reset():
            plugins.plugins_loaded = False

        return plugins.load_general_plugins, reset, ("vllm", "")  # vllm's tree does not propagate
    try:
        import sglang.srt.plugins as plugins
    except ImportError:  # SGLang < 0.5.11: the .pth route (run by run() before each load)
        return _pth_route(), (lambda: None), ("sglang", "")

    def reset():
        plugins._plugins_loaded = False

    return plugins.load_plugins, reset, ("sglang", "")


def _pth_route():
    """What the .pth bootstrap's watcher does when ``sglang`` executes, on the real sglang
    spec (sglang itself is imported already: its import is not run again)."""
    import importlib.util

    spec = importlib.util.find_spec("sglang")

    def load():
        pth = sys.modules.get("sglang_guard._pth")
        watcher, hand_over = getattr(pth, "_SglangWatcher", None), getattr(pth, "_on_sglang_executed", None)
        if watcher is None or hand_over is None:  # the .pth said why, or a module cut/emptied installs
            return                                # no watcher: sglang's import would go on without it
        watcher.fired = False
        hand_over(spec)
    return load


def _pth_line() -> str:
    with open(os.path.join(REPO, "sglang_guard", "flashinfer_guard_sglang.pth"), encoding="utf-8") as f:
        return f.read()


def run(framework: str, installs: list[dict]) -> tuple[list[dict], list[str]]:
    """Each install through the loader; the modules of ours the first one's load imported."""
    load, reset, loggers = _loader(framework)
    handler = _Records()
    for name in loggers:
        logging.getLogger(name).addHandler(handler)
    # the generated copy comes first; drop the checkouts (this one, an editable install's),
    # keep site-packages (the entry points' metadata; where the install is a copy, also what
    # a removed __init__.py falls through to, as it would in a real environment)
    base_path = [p for p in sys.path if not os.path.isdir(os.path.join(p or ".", "guard_core"))
                 or os.path.basename(p.rstrip(os.sep)) in ("site-packages", "dist-packages")]
    meta_path, path_hooks = list(sys.meta_path), list(sys.path_hooks)
    pth = _pth_line()
    results, first_loaded = [], []
    for inst in installs:
        _forget(meta_path, path_hooks, [inst["path"]] + base_path)
        reset()
        handler.lines, handler._seen = [], set()
        escaped = None
        try:
            exec(pth, {})  # what site does with our .pth at interpreter start
            load()
        except BaseException as exc:  # what the server would see
            escaped = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        plugin = sys.modules.get(f"{framework}_guard.plugin")
        registered = getattr(plugin, "_registered", None)
        imported = sorted({os.path.relpath(m.__file__, inst["path"]) for n, m in list(sys.modules.items())
                           if _ours(n) and getattr(m, "__file__", None)
                           and os.path.abspath(m.__file__).startswith(os.path.abspath(inst["path"]) + os.sep)})
        if not results:
            first_loaded = imported
        results.append({"label": inst["label"], "escaped": escaped, "registered": registered,
                        "records": handler.lines, "imported": imported})
    _forget(meta_path, path_hooks, base_path)
    return results, first_loaded


def main(argv: list[str]) -> int:
    """framework, a working directory, the results file: an intact install first, then the
    broken installs its imports call for (``generate``)."""
    framework, tmp_dir, dst = argv
    intact = os.path.join(tmp_dir, "intact")
    _copy_tree(intact)
    _, loaded = run(framework, [{"label": "intact install", "path": intact}])
    installs = [{"label": "intact install", "path": intact}] + generate(os.path.join(tmp_dir, "installs"), set(loaded))
    results, loaded_again = run(framework, installs)
    with open(dst, "w", encoding="utf-8") as f:
        json.dump({"results": results, "loaded": loaded_again}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
