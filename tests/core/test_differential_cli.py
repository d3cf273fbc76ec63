"""The differential search's command (`python -m tests.differential`, README) parses its options.

Two branches once each added a `--space` option to it and the merge made argparse refuse every
invocation ("conflicting option string"); nothing in the default run called the command, so this
one does, with the options the README and ci/matrix.sh name.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_differential_command_parses_its_options():
    p = subprocess.run([sys.executable, "-m", "tests.differential", "--help"], capture_output=True, text=True,
                       cwd=str(REPO), timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    for opt in ("--framework", "--n", "--seed", "--gpus", "--space", "--search", "--before", "--inject", "--json"):
        assert opt in p.stdout, opt
    assert "{wide,shapes,narrow}" in p.stdout
