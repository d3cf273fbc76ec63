"""The checked lines live in one place (guard_core.flashinfer.releases.CHECKED_LINES) and the CI reads
it there (issue 30): ci/matrix.sh and ci/matrix_report.py take the list from
``python3 -m guard_core.flashinfer.releases --lines``; the locks on disk and the default runs of
ci/vllm/run_tests.sh and ci/sglang/run_tests.sh are tied to it here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from guard_core.flashinfer.releases import CHECKED_LINES

REPO = Path(__file__).resolve().parents[2]
CI = REPO / "ci"
LINE = re.compile(r"\b(?:vllm|sglang)-\d+\.\d+\.\d+\b")


def _locks() -> set[str]:
    """The lines with a lock file (ci/locks/<framework>-<line>.txt; core.txt is the core env)."""
    return {p.stem for p in (CI / "locks").glob("*.txt") if p.stem != "core"}


def _code(path: Path) -> str:
    """A shell script without its comment lines."""
    return "\n".join(ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("#"))


def test_the_module_prints_every_checked_line_and_each_has_a_lock():
    out = subprocess.run([sys.executable, "-m", "guard_core.flashinfer.releases", "--lines"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()
    assert set(out) == _locks(), "a checked line without its lock, or a lock of a line not checked"
    assert len(out) == len(set(out)) == sum(len(v) for v in CHECKED_LINES.values())
    for fw in ("vllm", "sglang"):
        one = subprocess.run([sys.executable, "-m", "guard_core.flashinfer.releases", "--lines", fw], cwd=REPO,
                             capture_output=True, text=True, check=True).stdout.split()
        assert [f"{fw}-{v}" for v in one] == [x for x in out if x.startswith(fw + "-")]
    bad = subprocess.run([sys.executable, "-m", "guard_core.flashinfer.releases", "--lines", "trtllm"], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stdout == ""


def test_matrix_scripts_read_the_lines_and_name_none_themselves():
    script = _code(CI / "matrix.sh")
    assert 'all="$(python3 -m guard_core.flashinfer.releases --lines)"' in script
    assert not LINE.findall(script), LINE.findall(script)
    report = (CI / "matrix_report.py").read_text()
    assert "ORDER = list(matrix_lines())" in report and "ORDER = [" not in report


def _default_and_selected(path: Path, var: str) -> tuple[list[str], set[str]]:
    """The lines a run_tests.sh runs by default, and the lines its per-line selection names."""
    text = _code(path)
    default = re.search(r"\$\{" + var + r":-([^}]*)\}", text)
    assert default, f"{path.name}: no default for {var}"
    labels = set(re.findall(r"^\s*(\d+\.\d+\.\d+)\)", text, re.M))
    value = default.group(1)
    ref = re.fullmatch(r"\$(\w+)", value.strip())
    if ref:  # the default named in ci/lib.sh (FG_VLLM_LINES_DEFAULT, FG_SGLANG_LINES_DEFAULT)
        lib = re.search(r'^' + ref.group(1) + r'="([^"]*)"', _code(CI / "lib.sh"), re.M)
        assert lib, f"{path.name}: {ref.group(1)} is not set in ci/lib.sh"
        value = lib.group(1)
    return value.split(), labels


def test_default_ci_runs_are_checked_lines_with_locks():
    for fw, script, var in (("vllm", CI / "vllm" / "run_tests.sh", "FLASHINFER_GUARD_VLLM_LINES"),
                            ("sglang", CI / "sglang" / "run_tests.sh", "FLASHINFER_GUARD_SGLANG_LINES")):
        default, labels = _default_and_selected(script, var)
        assert default and labels, script
        for line in default:
            assert f"{fw}-{line}" in _locks(), f"{script.name} runs {fw} {line} by default: no lock"
            assert line in CHECKED_LINES[fw], f"{script.name} runs {fw} {line} by default: not a checked line"
        assert labels <= set(default), f"{script.name} selects tests for lines it does not run: {labels - set(default)}"
