"""ruff (pinned in ci/locks/core.txt, rules in ruff.toml) over the whole repository."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_ruff_clean():
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", str(REPO)],
                          capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
