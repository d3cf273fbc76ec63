"""`plan` resolves an SGLang command with SGLang's own ServerArgs where SGLang is installed (issue 26,
"What to build" item 2), and falls back to the per-line rules, in one line, where it cannot.

Expected values come from the adapter inside this SGLang (tests/sglang/parity_probe.py: SGLang
resolves the command on the simulated GPU, the real FlashInferAttnBackend and the EAGLE draft
backends are built with the guard loaded, and the guard's own decisions are read back), never
from guard_core. `plan` runs here in-process with its default resolution (the subprocess
``sglang_guard.plan_resolve``) and the built-in model reader (the resolver reads the model with
SGLang's ModelConfig itself; the reader's own subprocess would only add time).
"""

from __future__ import annotations

import contextlib
import io
import json
from importlib import metadata


from guard_core.deployment.guard_module import PROGRESS_PREFIX
from tests.sglang.test_plan_parity import _adapter

SGLANG = metadata.version("sglang")
LLAMA_8B = json.loads(open("tests/data/model_configs/Meta-Llama-3.1-8B.json").read())
QWEN3_32B = json.loads(open("tests/data/model_configs/Qwen3-32B.json").read())


def _line_at_least(v: str) -> bool:
    return tuple(int(x) for x in SGLANG.split(".")[:3]) >= tuple(int(x) for x in v.split("."))


def _model(tmp_path, name, cfg) -> str:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def plan(*args, reader="auto") -> tuple[int, dict, str]:
    from guard_core.commands import cli

    # --resolution server: SGLang's own resolution or a one-line exit 2 (auto with the built-in
    # model reader keeps the per-line rules: commands/plan/server_resolution._cannot_run)
    res = ["--model-reader", "builtin", "--resolution", "server"] if reader == "auto" else \
        ["--model-reader", "builtin", "--resolution", "builtin"] if reader == "builtin" else ["--resolution", "auto"]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["plan", "--json", *res, *args])
    return code, (json.loads(out.getvalue()) if code == 0 else {}), err.getvalue()


def _cmd(model_dir, opts):
    return ["--", "python", "-m", "sglang.launch_server", "--model-path", model_dir, *opts]


def _truth(gpu, model_dir, opts, tp=1):
    a = _adapter({"gpu": gpu, "opts": ["--attention-backend", "flashinfer", *opts], "attn_tp": tp, "attn_dp": 1,
                  "env": {}}, model_dir)
    assert "error" not in a, a
    return a


def _graph_max() -> str:
    return "--cuda-graph-max-bs-decode" if _line_at_least("0.5.20") else "--cuda-graph-max-bs"


def test_eagle_topk_8_draft_decode_is_sized_as_sglang_sizes_it(tmp_path):
    # issue 26 "Why" 3: topk 8, 7 steps, no --speculative-num-draft-tokens: SGLang leaves the draft
    # tokens unset and its draft worker decodes topk x bs = 8 x 64 requests (flashinfer_backend.py
    # 0.5.23:2501). On main `plan` refused the command (exit 2, "needs --speculative-num-draft-tokens").
    m = _model(tmp_path, "llama8b", LLAMA_8B)
    opts = ["--attention-backend", "flashinfer", "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
            m, "--speculative-eagle-topk", "8", "--speculative-num-steps", "7", _graph_max(), "64",
            "--max-running-requests", "64"]
    truth = _truth("h200", m, opts[2:])
    code, r, err = plan("--gpu", "h200", *_cmd(m, opts))
    assert code == 0, err
    assert r["resolution"]["server"] is True, r["resolution"]
    assert (r["need"]["float_bytes"], r["workspace_bytes"], r["verdict"]) == (truth["need"], truth["buffer"],
                                                                             truth["verdict"])
    if SGLANG == "0.5.23":
        assert truth["need"] == 42_204_672  # the figure, from the adapter inside SGLang 0.5.23
    draft = [g for g in r["groups"] if g["runner"] == "draft"]
    assert draft and draft[0]["batch"] == 8 * 64
    # the per-line rules still refuse it, in one line
    code, _r, err = plan("--gpu", "h200", *_cmd(m, opts), reader="builtin")
    assert code == 2 and "needs --speculative-num-draft-tokens" in err and "Traceback" not in err


def test_json_model_override_args_kv_heads_are_applied_by_sglang(tmp_path):
    # issue 26 "Why" 5: --json-model-override-args with num_key_value_heads changes the need; SGLang
    # applies it in its ModelConfig (hf_transformers_utils.py config.update)
    m = _model(tmp_path, "qwen3-32b", QWEN3_32B)
    over = ["--json-model-override-args", json.dumps({"num_key_value_heads": 1})]
    truth = _truth("h200", m, over)
    code, r, err = plan("--gpu", "h200", *_cmd(m, ["--attention-backend", "flashinfer", *over]))
    assert code == 0, err
    assert r["resolution"]["server"] is True
    assert r["layout"]["num_kv_heads"] == 1
    assert (r["need"]["float_bytes"], r["workspace_bytes"], r["verdict"]) == (truth["need"], truth["buffer"],
                                                                             truth["verdict"])
    print(f"override: adapter need {truth['need']:,} B (buffer {truth['buffer']:,}, {truth['verdict']}); plan "
          f"{r['need']['float_bytes']:,} B, {r['verdict']}")


def test_a_refused_resolution_falls_back_to_the_rules_in_one_line(tmp_path, monkeypatch):
    from guard_core.commands.plan_report import server_resolution_stage as sr

    m = _model(tmp_path, "llama8b", LLAMA_8B)
    cmd = _cmd(m, ["--attention-backend", "flashinfer", "--max-running-requests", "64"])
    rules = plan("--gpu", "h200", *cmd, reader="builtin")[1]
    assert rules["resolution"]["server"] is False and rules["resolution"]["why"] == "--resolution builtin"
    # SGLang's resolution that does not answer in time: auto falls through to the rules in one line,
    # the same decision as the rules; --resolution server ends in one line, exit 2
    monkeypatch.setattr(sr, "RESOLUTION_TIMEOUT_S", 0.2)
    code, r, err = plan("--gpu", "h200", *cmd, reader="chain")
    assert code == 0 and "Traceback" not in err, err
    assert r["resolution"]["server"] is False and "within 0.2 s" in r["resolution"]["why"], r["resolution"]
    assert "\n" not in r["resolution"]["why"]
    assert (r["need"], r["workspace_bytes"], r["verdict"]) == (rules["need"], rules["workspace_bytes"],
                                                               rules["verdict"])
    code, _r, err = plan("--gpu", "h200", *cmd)
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(PROGRESS_PREFIX)]
    assert code == 2 and len(lines) == 1 and "within 0.2 s" in lines[0] and "Traceback" not in err, err


def test_sglangs_own_refusal_is_one_answer_line():
    # SGLang's parser exits on an option it does not know (SystemExit): the resolver answers one line
    import subprocess
    import sys

    import os

    from guard_core.commands.plan_report import server_resolution_stage

    MARK = server_resolution_stage.MARK
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", CUDA_VISIBLE_DEVICES="", FLASHINFER_GUARD="0")

    req = {"argv": ["--no-such-option", "1"], "model_dir": "/nonexistent", "line": SGLANG,
           "gpu": {"name": "NVIDIA H200", "key": "h200", "cc": [9, 0], "memory_mib": 143771}}
    p = subprocess.run([sys.executable, "-m", "sglang_guard.plan_resolve", json.dumps(req)], capture_output=True,
                       text=True, timeout=600, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith(MARK)]
    assert p.returncode == 0 and len(lines) == 1 and "Traceback" not in p.stdout + p.stderr
    res = json.loads(lines[0][len(MARK):])
    assert res["ok"] is False and res["refusal"].startswith("SGLang refused the command: SystemExit")


def test_deterministic_inference_is_sized_against_the_2_gib_sglang_sets(tmp_path):
    # issue 42 item 5b: FlashInferAttnBackend.__init__ sets SGLANG_FLASHINFER_WORKSPACE_SIZE to 2 GiB under
    # --enable-deterministic-inference, after its architecture list and over a user's export
    # (flashinfer_backend.py 0.5.5:183, 0.5.23:437-451); SGLang's resolution answered 384 MiB (512 MiB for Qwen3)
    GIB2 = 2048 * 1024 * 1024
    for name, cfg in (("llama8b", LLAMA_8B), ("qwen3-32b", QWEN3_32B)):
        m = _model(tmp_path, name, cfg)
        opts = ["--attention-backend", "flashinfer", "--enable-deterministic-inference", "--context-length", "8192"]
        code, r, err = plan("--gpu", "h200", *_cmd(m, opts))
        assert code == 0, err
        assert r["resolution"]["server"] is True, r["resolution"]
        assert r["resolution"]["resolved"]["deterministic"] is True
        assert (r["server_default_bytes"], r["workspace_bytes"]) == (GIB2, GIB2), name
        assert "deterministic" in r["server_default_source"]
        assert r["fixed_split"]["server_bytes"] == GIB2
        # the per-line rules size the same mode against the same buffer
        code, rules, err = plan("--gpu", "h200", *_cmd(m, opts), reader="builtin")
        assert code == 0, err
        assert rules["workspace_bytes"] == GIB2
        print(f"{name} deterministic: SGLang's resolution {r['workspace_bytes']:,} B, need "
              f"{r['need']['float_bytes']:,} B ({r['verdict']}); rules need {rules['need']['float_bytes']:,} B "
              f"({rules['verdict']})")


def test_sglangs_resolution_runs_with_plans_default_gpu(tmp_path):
    # issue 42 item 5a: plan's default GPU is B300 (SM103); the --trtllm-attention condition is vLLM's, so
    # SGLang's own resolution runs there with plan's defaults (it was "--resolution server: TRT-LLM ...", exit 2)
    m = _model(tmp_path, "llama8b", LLAMA_8B)
    code, r, err = plan(*_cmd(m, ["--attention-backend", "flashinfer", "--max-running-requests", "64"]))
    assert code == 0, err
    assert r["simulated"]["gpu"]["key"] == "b300" and r["resolution"]["server"] is True, r["resolution"]
    assert r["resolution"]["used"] == f"SGLang {SGLANG}'s own engine config"


def test_plan_one_process_for_the_reading_and_the_resolution(tmp_path, monkeypatch):
    """Issue 42 item 1: SGLang's model reader and its resolution of one plan run in one process
    (guard_core/deployment/module_host.py), where each was a subprocess importing SGLang."""
    import subprocess

    started = []
    real = subprocess.Popen

    class Counting(real):
        def __init__(self, args, *a, **k):
            started.append([str(x) for x in args] if isinstance(args, (list, tuple)) else [str(args)])
            super().__init__(args, *a, **k)

    monkeypatch.setattr(subprocess, "Popen", Counting)
    m = _model(tmp_path, "Qwen3-32B", QWEN3_32B)
    code, d, err = plan("--gpu", "h200", *_cmd(m, ["--attention-backend", "flashinfer", "--tp", "2"]), reader="server")
    assert code == 0, err[-2000:]
    assert d["resolution"]["server"] is True, d["resolution"]
    assert d["model_reader"]["server"], d["model_reader"]
    pythons = [a for a in started if "-m" in a]
    assert len(pythons) == 1 and pythons[0][pythons[0].index("-m") + 1] == "guard_core.deployment.module_host", started
