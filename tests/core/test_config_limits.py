"""``--config`` files are read with limits (issue 29, item 4).

Before: ``--config /dev/zero`` read until MemoryError ("internal error ... please report
it", exit 1), a FIFO hung, a 9 x 9 YAML alias bomb under ``speculative-config:`` took
45 s and 1.4-3.1 GB on the server reader. Now every reader first goes through
``command_limits.bounded_config_text``: a regular file only, at most 1 MiB read in
chunks, at most 16 aliases and their expansion bounded, 32 levels; one line, exit 2.
This file runs the command in the core environment (no PyYAML: the built-in reader,
aliases and depth counted in the text); tests/vllm/test_launch_parser.py reads the same
files (tests/common/config_files.py) with PyYAML through both readers of an installed vLLM.
"""

import os
import subprocess
import sys

import pytest

from tests.common.config_files import alias_bomb, hostile_files, malformed_files


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_bomb_is_the_issues():
    text = alias_bomb()
    assert text.count("*") == 8 * 9 + 1 and len(text.encode()) < 400


@pytest.mark.parametrize("case", ["dev_zero", "fifo", "directory", "alias_bomb", "too_deep"])
@pytest.mark.parametrize("command", [["vllm", "serve", "M"], ["python", "-m", "sglang.launch_server"]])
def test_hostile_config_files_get_one_line_and_exit_2(tmp_path, case, command):
    """The real command in its own process (a FIFO would hang it: the timeout fails the test)."""
    path, words = hostile_files(str(tmp_path), with_yaml=False)[case]
    env = dict(os.environ, PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--gpu", "h200", "--", *command,
                        "--config", path], capture_output=True, text=True, timeout=60, env=env, cwd=str(tmp_path))
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1, (r.returncode, r.stderr[-2000:])
    assert words in lines[0] and f"--config {path!r}" in lines[0], lines[0]


def test_a_config_at_the_bounds_is_still_read(tmp_path):
    """16 aliases and 32 levels are within the bounds: read as before."""
    from guard_core.deployment.launch_command import parse_launch

    ok = tmp_path / "ok.yaml"
    nested = "".join("  " * i + "k:\n" for i in range(1, 31)) + "  " * 31 + "k: 1\n"
    # (options of vLLM 0.23: a key it does not know is refused, as its own parser refuses it)
    ok.write_text("model: meta-llama/Llama-3.1-8B-Instruct\nmax-num-seqs: 64\ntokenizer: &x t\n"
                  "served-model-name: [" + ", ".join(["*x"] * 16) + "]\noverride-generation-config:\n" + nested)
    launch = parse_launch(["vllm", "serve", "--config", str(ok)], reader="builtin", line="0.23.0")
    assert (launch.model, launch.max_num_seqs) == ("meta-llama/Llama-3.1-8B-Instruct", 64)


@pytest.mark.parametrize("case", ["malformed", "top_list", "top_string", "nul_byte"])
def test_malformed_configs_get_one_line_naming_the_file(tmp_path, case, capsys):
    """Issue 29, item 5, the built-in reader's side (the server reader's: tests/vllm/test_launch_parser.py)."""
    from guard_core.commands import cli

    path = malformed_files(str(tmp_path))[case]
    rc = cli.main(["plan", "--gpu", "h200", "--", "vllm", "serve", "M", "--config", path])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and path in err, (rc, err)
    assert "\\n" not in err and "internal error" not in err, err
