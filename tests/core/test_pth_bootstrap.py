"""The .pth bootstrap acts only when SGLang is imported, never when it is merely looked up.

Each case runs in a fresh interpreter with a fake ``sglang`` package on a
temporary sys.path and the package's real ``flashinfer_guard_sglang.pth``
processed by ``site.addsitedir`` (exactly what site does at start-up).
"""

import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PTH = ROOT / "sglang_guard" / "flashinfer_guard_sglang.pth"

PRELUDE = r"""
import sys, site
site.addsitedir(sys.argv[1])          # processes flashinfer_guard_sglang.pth
sys.path.insert(0, sys.argv[2])       # the fake sglang
def registered():
    p = sys.modules.get("sglang_guard.plugin")
    return bool(p and p.is_registered())
WATCHING = any(type(f).__name__ == "_SglangWatcher" for f in sys.meta_path)
"""

FAKE_INIT = r"""
import sys
_p = sys.modules.get("sglang_guard.plugin")
REGISTERED_BEFORE_INIT = bool(_p and getattr(_p, "is_registered", lambda: False)())
"""


@pytest.fixture()
def dirs(tmp_path):
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH.name).write_text(PTH.read_text())
    old = tmp_path / "old"
    (old / "sglang").mkdir(parents=True)
    (old / "sglang" / "__init__.py").write_text(FAKE_INIT)
    new = tmp_path / "new"
    (new / "sglang" / "srt" / "plugins").mkdir(parents=True)
    (new / "sglang" / "__init__.py").write_text(FAKE_INIT)
    return site_dir, old, new


def run(code, site_dir, path, first_on_path=None, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS"))}
    env.update(env_extra)
    first = [first_on_path] if first_on_path else []
    env["PYTHONPATH"] = os.pathsep.join(first + [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    r = subprocess.run([sys.executable, "-c", PRELUDE + code, str(site_dir), str(path)], capture_output=True,
                       text=True, env=env, timeout=60,
                       cwd=first_on_path)  # python -c puts the working directory first on sys.path
    assert r.returncode == 0, r.stderr
    return r


def test_find_spec_and_pkgutil_probes_do_not_register(dirs):
    site_dir, old, _ = dirs
    r = run(r"""
import importlib.util, pkgutil
assert WATCHING, "bootstrap not installed"
spec = importlib.util.find_spec("sglang")
assert spec is not None and spec.name == "sglang"
assert not registered(), "find_spec triggered register()"
assert "sglang_guard.plugin" not in sys.modules
for it in pkgutil.iter_modules():
    pass
if hasattr(pkgutil, "find_loader"):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert pkgutil.find_loader("sglang") is not None
assert importlib.util.find_spec("sglang") is not None
assert not registered() and "sglang" not in sys.modules
print("quiet")
""", site_dir, old)
    assert "quiet" in r.stdout and r.stderr == ""


def test_import_registers_before_sglang_runs(dirs):
    site_dir, old, _ = dirs
    r = run(r"""
import importlib.util
assert WATCHING
importlib.util.find_spec("sglang")        # a probe first, then the import
import sglang
assert sglang.REGISTERED_BEFORE_INIT, "register() must run before SGLang's __init__"
assert registered()
# the import machinery sees the real loader again, and the watcher is gone
assert type(sglang.__loader__).__name__ == "SourceFileLoader", type(sglang.__loader__)
assert type(sglang.__spec__.loader).__name__ == "SourceFileLoader"
assert not any(type(f).__name__ == "_SglangWatcher" for f in sys.meta_path)
print(sys.modules["sglang_guard.plugin"].loaded_by())
""", site_dir, old)
    assert r.stdout.split() == ["pth"]


def test_import_module_and_spec_based_loading_register(dirs):
    site_dir, old, _ = dirs
    r = run(r"""
import importlib, importlib.util
spec = importlib.util.find_spec("sglang")
assert not registered()
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)               # a manual import: module execution
assert registered() and mod.REGISTERED_BEFORE_INIT
print("ok")
""", site_dir, old)
    assert "ok" in r.stdout


def test_sglang_with_plugin_system_is_left_to_its_loader(dirs):
    site_dir, _, new = dirs
    r = run(r"""
import sglang
assert not sglang.REGISTERED_BEFORE_INIT and not registered()
print("left")
""", site_dir, new)
    assert "left" in r.stdout


@pytest.mark.parametrize("env", [{"FLASHINFER_GUARD": "0"}, {"FLASHINFER_GUARD": " OFF "},
                                 {"SGLANG_PLUGINS": "other_plugin"}])
def test_switches_are_honoured(dirs, env):
    site_dir, old, _ = dirs
    code = r"""
import sglang
assert not registered()
print("off", WATCHING)
"""
    r = run(code, site_dir, old, **env)
    # switched off: the watcher is not even installed; not allowed by SGLANG_PLUGINS: it stands aside at import
    assert r.stdout.split() == ["off", "False" if "FLASHINFER_GUARD" in env else "True"]
    assert "off" in r.stdout


def test_hostile_settings_do_not_stop_the_bootstrap(dirs):
    site_dir, old, _ = dirs
    r = run(r"""
import sglang
assert registered()
print("on")
""", site_dir, old, FLASHINFER_GUARD_WORKSPACE="9" * 400, FLASHINFER_GUARD_MOE_FIXED_IN="9" * 5000,
        FLASHINFER_GUARD_LOG="\u00b2")
    assert "on" in r.stdout and "Traceback" not in r.stderr


def test_no_sglang_installed_lookup_is_silent(tmp_path, dirs):
    site_dir, _, _ = dirs
    r = run(r"""
import importlib.util
assert importlib.util.find_spec("sglang") is None
try:
    import sglang
except ImportError:
    pass
else:
    raise AssertionError("imported a sglang that does not exist")
assert not registered()
print("none")
""", site_dir, tmp_path)
    assert "none" in r.stdout and r.stderr == ""


def test_pth_line_survives_a_missing_package(tmp_path):
    """A .pth left behind by a partial uninstall must not print an error in every Python process."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / PTH.name).write_text(PTH.read_text())
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-S", "-c", "import sys, site; site.addsitedir(sys.argv[1]); "
                        "print('sglang_guard' in sys.modules)", str(site_dir)],
                       capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "False" and r.stderr == "", r.stderr


def test_bootstrap_import_is_cheap(dirs):
    """The .pth runs in every interpreter of the environment, so it may import nothing but its own
    bootstrap module and the standard library: no guard_core, no SGLang, no torch, nothing else
    from site-packages until SGLang itself is imported (the speed it buys is measured in
    benchmarks/bench_sglang_bootstrap.py, not here: no timed unit tests)."""
    site_dir, _, _ = dirs
    code = ("import sys, site, json; before = set(sys.modules); site.addsitedir(sys.argv[1]); "
            "assert 'sglang_guard._pth' in sys.modules; "
            "print(json.dumps(sorted(set(sys.modules) - before)))")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    # -S: no site-packages (and none of its .pth files) at start-up, so only this .pth's imports are new
    r = subprocess.run([sys.executable, "-S", "-c", code, str(site_dir), str(ROOT)], capture_output=True, text=True,
                       env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    new = json.loads(r.stdout.strip().splitlines()[-1])
    ours = {"sglang_guard", "sglang_guard._pth"}
    foreign = [m for m in new if m not in ours and m.split(".")[0] not in sys.stdlib_module_names]
    assert "sglang_guard._pth" in new and not foreign, foreign


@pytest.mark.parametrize("broken, how, cause", [
    ("guard_core/runtime/lifecycle.py", "removed", "cannot import name 'lifecycle'"),  # an interrupted upgrade
    ("sglang_guard/plugin.py", "emptied", "cannot import name 'register'"),    # the adapter itself lost
    ("sglang_guard/_pth.py", "emptied", "no bootstrap in"),                      # the bootstrap itself lost
])
def test_a_broken_install_costs_one_warning_not_the_import(dirs, tmp_path, broken, how, cause):
    """Issue 29: the .pth route caught a half-installed package silently; now SGLang still
    imports and one warning names the cause (Python's last-resort handler: stderr)."""
    from tests.common import broken_installs

    site_dir, old, _ = dirs
    tree = tmp_path / "tree"
    broken_installs._copy_tree(str(tree))
    broken_installs._break(str(tree / broken), how)
    r = run(r"""
import sglang
p = sys.modules.get("sglang_guard.plugin")
print("imported", bool(p and getattr(p, "_registered", False)))
""", site_dir, old, first_on_path=str(tree))
    assert "imported False" in r.stdout
    said = [ln for ln in r.stderr.splitlines() if "[flashinfer-guard]" in ln]
    assert len(said) == 1 and cause in said[0] and "broken or shadowed" in said[0], r.stderr
