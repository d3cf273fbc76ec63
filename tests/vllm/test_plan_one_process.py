"""`plan` starts the server's code once (issue 42 item 1): the model reading and the resolution of
one plan run in one process (guard_core/deployment/module_host.py, inside guard_module.session()),
where each was a subprocess of its own that imported vLLM (3 vLLM imports per plan with the
parser's, 2 subprocesses; measured 2026-12-04 in the vLLM 0.33.0 environment on 2 cores: 64 s, of
which 23 s the reader's subprocess and 20 s the resolution's). The plan runs here in this process
(vLLM's parser in it, as in the CLI); every process it starts is counted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from guard_core.commands import cli

CORPUS = Path(__file__).resolve().parents[1] / "data" / "model_configs"


def test_plan_one_process_for_the_reading_and_the_resolution(tmp_path, monkeypatch, capsys):
    started = []
    real = subprocess.Popen

    class Counting(real):
        def __init__(self, args, *a, **k):
            started.append([str(x) for x in args] if isinstance(args, (list, tuple)) else [str(args)])
            super().__init__(args, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", Counting)
    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    (model / "config.json").write_text((CORPUS / "Qwen3-32B.json").read_text())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    rc = cli.main(["plan", "--json", "--gpu", "h200", "--", "vllm", "serve", str(model),
                   "--attention-backend", "FLASHINFER", "--tensor-parallel-size", "2", "--max-model-len", "8192"])
    out = capsys.readouterr()
    assert rc == 0, out.err[-2000:]
    d = json.loads(out.out)
    assert d["resolution"]["server"] is True, d["resolution"]  # resolved by vLLM's own code
    assert d["model_reader"]["server"], d["model_reader"]  # read by vLLM's own config code
    pythons = [a for a in started if "-m" in a]
    assert len(pythons) == 1 and pythons[0][pythons[0].index("-m") + 1] == "guard_core.deployment.module_host", started
