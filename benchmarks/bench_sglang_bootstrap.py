"""What loading the SGLang adapter costs, printed as ratios.

Run with the python of an environment where flashinfer-guard is installed
(``ci/sglang/install.sh VERSION`` prints one):

    $ENV/bin/python benchmarks/bench_sglang_bootstrap.py [--runs 30]

1. The .pth bootstrap: the time ``import sglang_guard._pth`` takes in a bare
   ``python -c pass`` (``-X importtime``, what the .pth line executes), next to the
   whole interpreter start of the same command (wall clock). Target: < 2 ms.
2. The entry point: SGLang's own ``load_plugins()`` with our plugin loaded versus
   with ``SGLANG_PLUGINS`` set to a name that is not ours (SGLang >= 0.5.11), each in
   a fresh interpreter with ``sglang.srt.plugins`` already imported.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

PY = sys.executable


def _env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS"))}
    e.update(extra)
    return e


def pth_import_us(runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        p = subprocess.run([PY, "-X", "importtime", "-c", "pass"], capture_output=True, text=True, env=_env())
        total = 0
        for line in p.stderr.splitlines():
            m = re.match(r"import time:\s+(\d+)\s+\|\s+(\d+)\s+\|\s*(\S+)", line)
            if m and m.group(3) == "sglang_guard._pth":  # cumulative: includes the sglang_guard package
                total = max(total, int(m.group(2)))
        out.append(total)
    if not any(out):
        raise SystemExit("sglang_guard._pth was not imported at start-up: is flashinfer_guard_sglang.pth installed?")
    return out


def bare_start_ms(runs: int, **env) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run([PY, "-c", "pass"], env=_env(**env), check=True)
        out.append((time.perf_counter() - t) * 1000)
    return out


_LOAD = r"""
import time, sys
import sglang.srt.plugins as p
t = time.perf_counter(); p.load_plugins(); dt = time.perf_counter() - t
print(dt * 1e6, 'sglang_guard.plugin' in sys.modules)
"""


def load_plugins_us(runs: int, **env) -> tuple[list[float], bool]:
    out, ours = [], False
    for _ in range(runs):
        p = subprocess.run([PY, "-c", _LOAD], capture_output=True, text=True, env=_env(**env))
        if p.returncode != 0:
            return [], False
        us, loaded = p.stdout.split()[-2:]
        out.append(float(us))
        ours = loaded == "True"
    return out, ours


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    ap.add_argument("--plugin-runs", type=int, default=5)
    a = ap.parse_args()

    med = statistics.median
    pth = pth_import_us(a.runs)
    start_on = bare_start_ms(a.runs)
    start_off = bare_start_ms(a.runs, FLASHINFER_GUARD="0")
    print(f"python -c pass: {med(start_on):.1f} ms wall (guard on), {med(start_off):.1f} ms (FLASHINFER_GUARD=0)")
    print(f".pth bootstrap: import sglang_guard._pth = {med(pth) / 1000:.3f} ms median, {max(pth) / 1000:.3f} ms max "
          f"(target < 2 ms) = {med(pth) / 1000 / med(start_on):.2%} of the interpreter start")

    have_plugins = subprocess.run([PY, "-c", "import sglang.srt.plugins"], capture_output=True,
                                  env=_env()).returncode == 0
    if not have_plugins:
        print("load_plugins(): n/a (this SGLang has no plugin system; the .pth path loads the guard)")
        return
    names = subprocess.run([PY, "-c", "from importlib.metadata import entry_points; "
                            "print(','.join(e.name for e in entry_points(group='sglang.srt.plugins')))"],
                           capture_output=True, text=True, env=_env()).stdout.strip().split(",")
    others = [n for n in names if n and n != "flashinfer_guard"]
    # the other plugins of this env (SGLang's own dependencies ship some) with and without ours
    with_us, ours = load_plugins_us(a.plugin_runs, SGLANG_PLUGINS=",".join(others + ["flashinfer_guard"]))
    without_us, _ = load_plugins_us(a.plugin_runs, SGLANG_PLUGINS=",".join(others) or "none_at_all")
    assert ours, "our entry point was not loaded by load_plugins()"
    print(f"load_plugins() with the env's other plugins {others}: {med(with_us) / 1000:.2f} ms with "
          f"flashinfer_guard, {med(without_us) / 1000:.2f} ms without: ratio "
          f"{med(with_us) / max(med(without_us), 1e-9):.3f}x, ours adds {(med(with_us) - med(without_us)) / 1000:.2f} ms")
    alone, _ = load_plugins_us(a.plugin_runs, SGLANG_PLUGINS="flashinfer_guard")
    none, _ = load_plugins_us(a.plugin_runs, SGLANG_PLUGINS="none_at_all")
    print(f"load_plugins() with only flashinfer_guard: {med(alone) / 1000:.2f} ms vs {med(none) / 1000:.2f} ms "
          f"with no plugin (ratio {med(alone) / max(med(none), 1e-9):.1f}x)")


if __name__ == "__main__":
    main()
