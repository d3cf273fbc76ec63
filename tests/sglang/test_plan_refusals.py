"""SGLang refusing the deployment is plan's verdict (issue 42 item 3, SGLang's half; vLLM's:
tests/vllm/test_server_resolution.py): where SGLang's own config checks raise for the deployment
(``ModelConfig``'s context length over the model's; a bare assert is said with its source line), plan
exits 2 with one line, "SGLang <version> would refuse to start: <SGLang's message>"; before, it
printed the built-in rules' verdict and exited 0 (auto) after a note that SGLang "refused the
command".

The deployments are generated (seeded): models of the corpus, a context length past the model's
own by a drawn factor. The expected message is
SGLang's own, from its own functions called directly in a process of their own
(``prepare_server_args``, ``resolve_once``, ``ModelConfig.from_server_args``, on the simulated
H200 the resolution uses: a device this CPU host lacks); nothing expected comes from guard_core.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from guard_core.deployment.guard_module import PROGRESS_PREFIX

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "data" / "model_configs"
SGLANG = metadata.version("sglang")

SGLANG_SAYS = r"""
import json, linecache, os, sys
from sglang_guard import simulated_device
simulated_device.install_kernel_stand_in()
import sglang.srt.server_args as sa_mod
from sglang.srt.configs.model_config import ModelConfig
out = []
for model, extra in json.loads(sys.argv[1]):
    argv = ["--model-path", model, "--device", "cuda", "--load-format", "dummy", "--skip-tokenizer-init", *extra]
    simulated_device.point({"name": "H200", "key": "h200", "cc": [9, 0], "memory_mib": 143771})
    try:
        sa = sa_mod.prepare_server_args(argv)
        if hasattr(sa, "resolve_once"):
            sa.resolve_once()
        ModelConfig.from_server_args(sa)
        out.append(None)
    except (ValueError, AssertionError) as exc:
        tb = exc.__traceback__
        while tb.tb_next is not None:
            tb = tb.tb_next
        out.append({"type": type(exc).__name__, "message": " ".join(str(exc).split()),
                    "line": " ".join(linecache.getline(tb.tb_frame.f_code.co_filename, tb.tb_lineno).split())})
print("SAYS " + json.dumps(out))
"""


def _cases(tmp_path, n=2, seed=20261204):
    """Context lengths past the model's own (SGLang's ValueError; its DP-attention asserts are
    refused before SGLang is asked, by plan's launch rules, in one line with exit 2 as well)."""
    rnd = random.Random(seed)
    cases = []
    for i, name in enumerate(rnd.sample(["Qwen3-8B", "Meta-Llama-3.1-8B", "Qwen3-32B", "Mistral-7B-Instruct-v0.3"], n)):
        cfg = json.loads((CORPUS / f"{name}.json").read_text())
        d = tmp_path / f"{i}-{name}"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(cfg))
        longer = cfg["max_position_embeddings"] * rnd.randint(1, 8) + rnd.randint(1, 4096)
        cases.append((str(d), ["--context-length", str(longer)]))
    return cases


def _plan(model: str, extra: list[str]) -> tuple[int, str, str]:
    from guard_core.commands import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["plan", "--gpu", "h200", "--", "python", "-m", "sglang.launch_server", "--model-path", model,
                         "--attention-backend", "flashinfer", *extra])
    return code, out.getvalue(), err.getvalue()


def test_generated_deployments_sglang_refuses_are_its_verdict(tmp_path):
    cases = _cases(tmp_path)
    p = subprocess.run([sys.executable, "-c", SGLANG_SAYS, json.dumps(cases)], capture_output=True, text=True,
                       cwd=str(REPO), timeout=600, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1",
                                                        "PYTHONPATH": str(REPO)})
    says = [ln for ln in p.stdout.splitlines() if ln.startswith("SAYS ")]
    assert p.returncode == 0 and says, p.stderr[-3000:]
    theirs = json.loads(says[-1][len("SAYS "):])
    assert all(t is not None for t in theirs), list(zip(cases, theirs))  # SGLang refuses every one
    for (model, extra), t in zip(cases, theirs):
        code, out, err = _plan(model, extra)
        lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(PROGRESS_PREFIX)]
        assert code == 2 and out == "" and len(lines) == 1 and "Traceback" not in err, (extra, code, err[-2000:])
        assert f"SGLang {SGLANG} would refuse to start: " in lines[0], (extra, lines)
        said = lines[0].split("would refuse to start: ", 1)[1]
        if t["message"]:
            assert said == t["message"][:400], (extra, said, t)
        else:  # a bare assert: the check itself
            assert said.startswith(t["type"]) and said.endswith(t["line"]), (extra, said, t)
