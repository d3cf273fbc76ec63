"""`plan` resolves a vLLM command through vLLM's own engine config where vLLM is installed (issue 26, item 2).

Each test runs the real `flashinfer-guard plan` in this vLLM environment, which asks
``vllm_guard.server_resolution`` in a subprocess (vLLM's parser, ``EngineArgs.create_engine_config`` on
a simulated GPU, vLLM's own FlashInfer builder, read by the adapter's code). The expected numbers
come from the adapter inside real vLLM (``tests/vllm/parity_probe.py``: the builder vLLM builds
from the same engine arguments, decided by ``vllm_guard.workspace_facts.decide``), or from vLLM's
own objects, never from guard_core.

Faked, as in the parity probe: the GPU (vLLM's platform answers the simulated one); nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from guard_core.deployment.guard_module import PROGRESS_PREFIX
from tests.common import forkserver

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORPUS = REPO / "tests" / "data" / "model_configs"
VLLM = os.environ.get("FLASHINFER_GUARD_VLLM_LINE") or __import__("importlib.metadata").metadata.version("vllm")


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "VLLM_FLASHINFER", "VLLM_PLUGINS"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    env.update(extra)
    return env


def _plan(*args, env=None) -> dict:
    p = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--framework-version", VLLM,
                        *args], capture_output=True, text=True, env=env or _env(), cwd=str(REPO), timeout=900)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout)


def _adapter(deployment: dict) -> dict:
    """The adapter's decision inside real vLLM for the deployment (parity_probe: vLLM's own engine
    config and builder on the simulated GPU)."""
    p = forkserver.run([sys.executable, str(HERE / "parity_probe.py"), "json", json.dumps([deployment])],
                       capture_output=True, text=True, env=_env(FLASHINFER_GUARD="0"), cwd=str(REPO), timeout=900)
    rows = [json.loads(x[len("PARITY "):]) for x in p.stdout.splitlines() if x.startswith("PARITY ")]
    assert p.returncode == 0 and len(rows) == 1, p.stderr[-3000:]
    return rows[0]


def test_server_resolution_speculative_without_trtllm_is_the_adapters(tmp_path):
    """Issue 26 "Why" 2: Qwen3-32B, 3 draft tokens, H200 (no TRT-LLM attention): vLLM drops the FULL
    decode graphs (its builder does not decode 4-token batches), so nothing is captured for
    FlashInfer. `plan` (its default: vLLM's own resolution, in a subprocess) gives the adapter's need,
    buffer and verdict; the probe's built-in plan of the same command is the figure before."""
    cfg = json.loads((CORPUS / "Qwen3-32B.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    r = _plan("--gpu", "h200", "--model", str(tmp_path), "--draft-tokens", "3")
    assert r["resolution"]["used"] == f"vLLM {VLLM}'s own engine config", r["resolution"]
    res = r["resolution"]["resolved"]
    assert res["cudagraph_mode"] == "PIECEWISE" and res["draft_tokens"] == 3
    assert r["limits"]["capture_sizes"] == []  # no FULL graph plans in FlashInfer's buffer
    d = {"gpu": "h200", "heads": cfg["num_attention_heads"], "kv_heads": cfg["num_key_value_heads"],
         "head_dim": cfg["head_dim"], "max_pos": cfg["max_position_embeddings"], "draft": 3}
    row = _adapter(d)
    a, builtin = row["adapter"], row["plan"]
    print(f"vLLM {VLLM}, Qwen3-32B, 3 draft tokens, H200: adapter need {a['need']:,} B / buffer {a['buffer']:,} B "
          f"({a['verdict']}); plan through vLLM's resolution {r['need']['float_bytes']:,} / {r['workspace_bytes']:,}; "
          f"built-in rules {builtin['need']:,} / {builtin['buffer']:,}")
    assert (r["need"]["float_bytes"], r["workspace_bytes"], r["verdict"]) == (a["need"], a["buffer"], a["verdict"])


def test_server_resolution_falls_through_on_a_broken_vllm(tmp_path):
    """Fail-open: a vLLM that cannot be imported in the resolution's process falls through to the
    built-in rules with one line naming why; exit 0, no traceback."""
    shutil.copy(CORPUS / "Qwen3-8B.json", tmp_path / "config.json")
    broken = tmp_path / "broken" / "vllm"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('a broken vLLM install (test)')\n")
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join([str(broken.parent), env["PYTHONPATH"]])
    # plan's own process drops the broken package from its path (it finds the real vLLM installed); the
    # resolution's subprocess inherits the environment and imports the broken one
    p = subprocess.run([sys.executable, "-c", "import sys; sys.path.remove(sys.argv[1]); "
                        "from guard_core.commands.cli import main; sys.exit(main(sys.argv[2:]))",
                        str(broken.parent), "plan", "--json", "--framework-version", VLLM, "--gpu", "h200", "--model",
                        str(tmp_path)], capture_output=True, text=True, env=env, cwd=str(REPO), timeout=900)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-2000:]
    r = json.loads(p.stdout)
    assert r["resolution"]["used"] == f"built-in rules for vLLM {VLLM}", r["resolution"]
    assert "a broken vLLM install (test)" in r["resolution"]["why"] and "\n" not in r["resolution"]["why"]
    assert r["verdict"] == "ok" and r["need"]["float_bytes"] > 0


def _resolve(requests: list, cuda_visible_devices: str = "") -> list:
    """vllm_guard.server_resolution's answers, one process for all requests (as plan runs it:
    ``CUDA_VISIBLE_DEVICES=""``, unless the test says otherwise)."""
    p = subprocess.run([sys.executable, "-m", "vllm_guard.server_resolution"], input=json.dumps(requests),
                       capture_output=True, text=True,
                       env=_env(FLASHINFER_GUARD="0", CUDA_VISIBLE_DEVICES=cuda_visible_devices),
                       cwd=str(REPO), timeout=900)
    out = [json.loads(x[len("FLASHINFER_GUARD_RESOLVED "):]) for x in p.stdout.splitlines()
           if x.startswith("FLASHINFER_GUARD_RESOLVED ")]
    assert p.returncode == 0 and len(out) == len(requests), p.stderr[-3000:]
    return out


def a_runner(answer: dict) -> str | None:
    return (answer.get("resolved") or {}).get("runner")


def test_server_resolution_gpt_oss_ceiling_and_refusals(tmp_path):
    """Issue 26 "Why" 1: gpt-oss-120b, --max-num-seqs 1024, H200: vLLM's own resolution raises the
    capture ceiling to 1024 (GptOssForCausalLMConfig.verify_and_update_config) and captures up to it.
    vLLM's FlashInfer builder then refuses gpt-oss's attention sinks on H200 without TRT-LLM
    attention (v1/attention/backends/flashinfer.py 0.23.0:680, 0.33.0:1093): the server never plans
    this model in FlashInfer's buffer there. Where the command chose FlashInfer (--attention-backend
    FLASHINFER) vLLM would refuse to start: the answer says so (``refuses``, vLLM's message) and plan
    exits 2 with "vLLM <line> would refuse to start: <its message>" (issue 42 item 3; it fell through
    to its built-in rules, exit 0); without the choice vLLM's selector picks another backend and plan
    falls through to its rules, in one line. A config vLLM refuses (a context longer than the model's,
    config/model.py _get_and_verify_max_len) is vLLM refusing to start too."""
    oss, q8 = tmp_path / "oss", tmp_path / "q8"
    oss.mkdir(), q8.mkdir()
    shutil.copy(CORPUS / "gpt-oss-120b.json", oss / "config.json")
    cfg = json.loads((CORPUS / "Qwen3-8B.json").read_text())
    (q8 / "config.json").write_text(json.dumps(cfg))
    ans = _resolve([{"tokens": ["--max-num-seqs", "1024"], "model": str(oss), "gpu": "h200", "trtllm": None},
                    {"tokens": ["--max-model-len", str(4 * cfg["max_position_embeddings"])], "model": str(q8),
                     "gpu": "h200", "trtllm": None},
                    {"tokens": [], "model": str(q8), "gpu": "h200", "trtllm": None},
                    {"tokens": ["--max-num-seqs", "1024", "--attention-backend", "FLASHINFER"], "model": str(oss),
                     "gpu": "h200", "trtllm": None}],
                   # a process where this host's vLLM disables Triton (a GPU hidden by a non-empty
                   # CUDA_VISIBLE_DEVICES, no driver: vllm/triton_utils/importing.py), as in the parity
                   # probe's in-process resolution; plan's own subprocess sets "" (vLLM's lenient check)
                   cuda_visible_devices="-1")
    # the model runner is the one a GPU server builds (Triton present there; this host lacks it here):
    # VllmConfig.use_v2_model_runner, config/vllm.py 0.23.0:519-542 (V2 only for the default
    # architectures, LlamaForCausalLM / MistralForCausalLM / Qwen3ForCausalLM, dense, not quantized:
    # :69-75, :544-558), 0.32.0:703-738 and 0.33.0:731-766 (V2 unless a feature is unsupported)
    assert a_runner(ans[0]) == ("v1" if VLLM == "0.23.0" else "v2"), ans[0]["resolved"]  # GptOssForCausalLM
    assert a_runner(ans[2]) == "v2", ans[2]  # Qwen3ForCausalLM
    a = ans[0]
    assert a["ok"] is False and a["resolved"]["max_capture"] == 1024, a
    assert a["resolved"]["cudagraph_capture_sizes"][-1] == 1024 and a["resolved"]["max_num_seqs"] == 1024
    assert a["refusal"].startswith(f"vLLM {VLLM}'s FlashInfer builder refuses") and "attention sinks" in a["refusal"]
    assert not a.get("refuses") and not a.get("ours"), a  # no FlashInfer chosen: vLLM picks another backend
    c = ans[3]
    assert c["ok"] is False and c["refuses"] is True and not c.get("ours"), c
    assert c["label"] == f"vLLM {VLLM}" and "attention sinks" in c["message"]
    b = ans[1]
    assert b["ok"] is False and b["refusal"].startswith(f"vLLM {VLLM} refuses the config"), b
    assert b["refuses"] is True and not b.get("ours"), b
    assert "\n" not in a["refusal"] + b["refusal"] + c["message"]
    # plan: the deployment with FlashInfer chosen is vLLM refusing to start (exit 2, its message, one line)
    p = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--framework-version", VLLM, "--gpu",
                        "h200", "--", "vllm", "serve", str(oss), "--max-num-seqs", "1024", "--attention-backend",
                        "FLASHINFER"], capture_output=True, text=True, env=_env(), cwd=str(REPO), timeout=900)
    lines = [ln for ln in p.stderr.splitlines() if ln.strip() and not ln.startswith(PROGRESS_PREFIX)]
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr, p.stderr[-3000:]
    assert len(lines) == 1 and f"vLLM {VLLM} would refuse to start: " in lines[0] and "attention sinks" in lines[0]
    # without the choice: plan falls through to its rules (exit 0), saying why in one line
    r = _plan("--gpu", "h200", "--", "vllm", "serve", str(oss), "--max-num-seqs", "1024")
    assert r["resolution"]["server"] is False and "attention sinks" in r["resolution"]["why"], r["resolution"]
    print(f"vLLM {VLLM}, gpt-oss-120b H200 --max-num-seqs 1024: capture ceiling {a['resolved']['max_capture']} "
          f"(vLLM's own); {a['refusal'][:120]}")
