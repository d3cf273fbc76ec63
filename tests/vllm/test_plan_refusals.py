"""vLLM refusing the deployment is plan's verdict, on generated deployments (issue 42 item 3; the
gpt-oss / H200 case is in test_server_resolution.py): a ``--max-model-len`` past the model's own
(vLLM's ``ModelConfig`` raises: ``_get_and_verify_max_len``, config/model.py) gives exit 2 and one
line, "vLLM <line> would refuse to start: <vLLM's message>".

The deployments are generated (seeded): models of the corpus, a context length past the model's own
by a drawn factor. The expected sentence is vLLM's own, from ``vllm.config.ModelConfig`` built
directly here on the same model directory and length (its pydantic wrapper, where the line has one,
names other arguments than the engine's call: the check's own sentence is compared); nothing
expected comes from guard_core.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import re
from pathlib import Path

from guard_core.deployment.guard_module import PROGRESS_PREFIX

CORPUS = Path(__file__).resolve().parents[1] / "data" / "model_configs"


def _vllm_says(model: str, length: int) -> str:
    """The sentence of vLLM's own refusal of ``max_model_len=length`` for ``model``."""
    from vllm.config import ModelConfig

    try:
        ModelConfig(model=model, max_model_len=length, skip_tokenizer_init=True)
    except ValueError as exc:
        text = " ".join(str(exc).split())
        m = re.search(r"Value error, (.*?)(?: \[type=|$)", text)
        return m.group(1) if m else text
    raise AssertionError(f"vLLM accepted max_model_len={length} for {model}")


def test_generated_deployments_vllm_refuses_are_its_verdict(tmp_path):
    import vllm

    rnd = random.Random(20261204)
    for i, name in enumerate(rnd.sample(["Qwen3-8B", "Meta-Llama-3.1-8B", "Qwen3-32B", "Mistral-7B-Instruct-v0.3"], 2)):
        cfg = json.loads((CORPUS / f"{name}.json").read_text())
        d = tmp_path / f"{i}-{name}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        length = cfg["max_position_embeddings"] * rnd.randint(1, 8) + rnd.randint(1, 4096)
        theirs = _vllm_says(str(d), length)
        from guard_core.commands import cli

        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["plan", "--gpu", "h200", "--", "vllm", "serve", str(d), "--max-model-len", str(length)])
        lines = [ln for ln in err.getvalue().splitlines() if ln.strip() and not ln.startswith(PROGRESS_PREFIX)]
        assert code == 2 and out.getvalue() == "" and len(lines) == 1, (name, length, code, err.getvalue()[-2000:])
        assert f"vLLM {vllm.__version__} would refuse to start: " in lines[0], lines
        assert theirs[:200] in lines[0], (theirs, lines[0])
