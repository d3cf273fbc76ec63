"""Issue #22: `plan -- <launch command>` answers for the deployment the command starts.

Core environment: no server installed, so the built-in reader (argparse rebuilt from
the committed option tables of vLLM 0.23/0.33 and SGLang 0.5.5/0.5.23) reads the
command; tests/vllm/test_launch_parser.py and tests/sglang/test_launch_parser.py check
the same commands against the real parsers. Expected values come from the command
text, the servers' own rules (cited) or the published seed numbers (README: 513.5 MiB
on the vLLM seed, FlashInfer's error `batch_prefill_tmp_v with size 536346624`).
Each case failed on main before this change (before/after verdicts in the docstrings).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from guard_core.commands import cli
from guard_core.flashinfer import releases
from guard_core.deployment.launch_command import LaunchError, parse_launch

SEED = "nvidia/Qwen3.5-397B-A17B-NVFP4 --kv-cache-dtype fp8_e4m3 --max-num-seqs 528"
SEED_NEED = 538_441_728  # 513.5 MiB: the vLLM seed's need (README, docs/compatibility.md)


def plan(*argv, env=None):
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(list(argv))
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def plan_json(*argv, environ=None, monkeypatch=None):
    code, out, err = plan("plan", "--json", *argv)
    assert code == 0, err
    return json.loads(out)


def read(cmd: str, **kw):
    return parse_launch(cmd.split(), environ=kw.pop("environ", {}), **kw)


def test_case1_list_option_read_whole_seed_overflows():
    """before: OK, 72.8 MiB to spare (capture sizes cut to [1]); after: OVERFLOW 513.5 MiB."""
    d = plan_json("--gpu", "b300", "--", "vllm", "serve", *SEED.split(),
                  "--cudagraph-capture-sizes", "1", "2", "4", "8", "256", "512")
    assert d["launch"]["capture_sizes"] == [1, 2, 4, 8, 256, 512]
    assert d["verdict"] == "overflow" and d["need"]["float_bytes"] == SEED_NEED and d["need"]["batch"] == 512
    assert d["ignored_options"] == [] and d["not_read_options"] == []


def test_case2_sc_alias_and_dotted_options():
    """Qwen3-32B + eagle3 x3 on H100: the options are read (draft tokens 3). Issue 26: without TRT-LLM
    decode vLLM drops FULL decode graphs with speculative decoding (resolve_cudagraph_mode_and_sizes,
    config/compilation.py 0.23.0:1398-1416) and its FlashInfer builder verifies as prefills
    (reorder_batch_threshold 1): every batch is planned eagerly (issue 22 had asserted OVERFLOW from
    verify graphs vLLM never captures)."""
    l = read("vllm serve Qwen/Qwen3-32B -sc.num_speculative_tokens 3 -sc.method eagle3 -sc.model x "
             "-cc.max_cudagraph_capture_size 512 -cc.cudagraph_capture_sizes [1,8,512]")
    assert (l.draft_tokens, l.speculative, l.max_capture, l.capture_sizes) == (3, "eagle3", 512, (1, 8, 512))
    assert read('vllm serve m -sc {"method":"eagle3","num_speculative_tokens":3}').draft_tokens == 3
    d = plan_json("--gpu", "h100", "--", "vllm", "serve", "Qwen/Qwen3-32B", "--speculative-config.num_speculative_tokens",
                  "3", "--speculative-config.method", "eagle3", "--speculative-config.model", "x")
    assert d["limits"]["draft_tokens"] == 3 and d["verdict"] == "ok"
    assert d["need"]["scenario"].startswith("eager") and d["limits"]["capture_sizes"] == []


def test_case4_native_workspace_variable_in_the_command_and_exported(monkeypatch):
    """The plan's own remedy, applied: before still OVERFLOW; after OK."""
    d = plan_json("--gpu", "b300", "--", "vllm", "serve", *SEED.split())
    assert d["verdict"] == "overflow"
    size = d["remedies"]["workspace_bytes"]
    d = plan_json("--gpu", "b300", "--", f"VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE={size}", "vllm", "serve", *SEED.split())
    assert d["verdict"] == "ok" and d["workspace_bytes"] == size
    assert "in the launch command" in d["server_default_source"]
    monkeypatch.setenv("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", str(size))
    d = plan_json("--gpu", "b300", "--", "vllm", "serve", *SEED.split())
    assert d["verdict"] == "ok" and "exported" in d["server_default_source"]
    d = plan_json("--gpu", "b300", "--", "docker", "run", "-e", f"VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE={size // 2}",
                  "vllm/vllm-openai:latest", *SEED.split())
    assert d["verdict"] == "overflow"  # the command's own value beats the exported one
    with pytest.raises(LaunchError, match="VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"):
        read("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=1GiB vllm serve m")


def test_case5_mtp_without_a_count_runs_the_models_depth():
    """vllm/config/speculative.py: num_speculative_tokens None -> n_predict. before (0.29): no
    speculative decoding, 529.6 MiB at decode; after: the verify graphs of 1 + depth tokens are
    sized (TRT-LLM attention unknown on B300: the larger need), in tokens as vLLM captures them
    (issue 26: 1024 tokens = 512 requests x 2, 1028 MiB, under vLLM 0.29's 2 GiB)."""
    l = read('vllm serve m --speculative-config {"method":"mtp"}')
    assert l.draft_tokens is None and l.draft_tokens_from_model
    d = plan_json("--gpu", "b300", "--framework-version", "0.29.0", "--", "vllm", "serve", *SEED.split(),
                  "--speculative-config", '{"method": "mtp"}')
    assert d["limits"]["draft_tokens"] >= 1 and any("MTP depth" in n for n in d["notes"])
    before = plan_json("--gpu", "b300", "--framework-version", "0.29.0", "--", "vllm", "serve", *SEED.split())
    assert before["need"]["scenario"] == "cuda_graph_decode" and d["need"]["scenario"] == "cuda_graph_verify"
    assert d["need"]["batch"] == 512 and d["need"]["float_bytes"] > before["need"]["float_bytes"]


def test_case6_null_cudagraph_mode_is_vllms_default():
    """before: eager, OK 72.8 MiB; after: CUDA graphs, OVERFLOW 513.5 MiB on the seed."""
    assert not read('vllm serve m -cc {"cudagraph_mode":null}').eager
    assert read('vllm serve m -cc {"cudagraph_mode":"NONE"}').eager
    # -O0's defaults (OPTIMIZATION_LEVEL_00: cudagraph_mode NONE) apply only where the user set no mode
    # (VllmConfig._apply_optimization_level_defaults, vllm/config/vllm.py)
    assert read("vllm serve m -O0").eager and not read("vllm serve m -O0 -cc.cudagraph_mode FULL").eager
    d = plan_json("--gpu", "b300", "--", "vllm", "serve", *SEED.split(), "-cc", '{"cudagraph_mode": null}')
    assert d["verdict"] == "overflow" and d["need"]["float_bytes"] == SEED_NEED


def test_case7_yaml_config_vllm(tmp_path):
    """The model only in the YAML: before, the default model (the seed: OVERFLOW); after Llama-3.1-8B."""
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("# vLLM config\nmodel: meta-llama/Llama-3.1-8B-Instruct\nmax-num-seqs: 256\n"
                   "compilation-config:\n  max_cudagraph_capture_size: 64\n")
    l = read(f"vllm serve --config {cfg}")
    assert (l.model, l.max_num_seqs, l.max_capture) == ("meta-llama/Llama-3.1-8B-Instruct", 256, 64)
    d = plan_json("--gpu", "b300", "--", "vllm", "serve", "--config", str(cfg))
    assert d["model"]["name"] == "Llama-3.1-8B-Instruct" and d["verdict"] == "ok"


def test_case8_model_positional_after_options():
    """before: the default model (OK 72.8 MiB); after: Llama-3.1-405B at TP 2 (OVERFLOW)."""
    assert read("vllm serve -tp 2 meta-llama/Llama-3.1-405B-Instruct").model == "meta-llama/Llama-3.1-405B-Instruct"
    d = plan_json("--gpu", "b300", "--", "vllm", "serve", "-tp", "2", "meta-llama/Llama-3.1-405B-Instruct")
    assert d["model"]["name"] == "Llama-3.1-405B-Instruct" and d["layout"]["tp"] == 2 and d["verdict"] == "overflow"


def test_case9_spellings_vllm():
    l = read("vllm serve m --tensor_parallel_size 2 --max_num_seqs +64 --max-num-batched-tokens 16k")
    assert (l.tp, l.max_num_seqs, l.max_batched_tokens) == (2, 64, 16000)  # vLLM's human_readable_int: k = 1000
    assert read("vllm serve m --max-num-batched-tokens 16K").max_batched_tokens == 16384
    assert (read("vllm serve m --tensor-parallel 4").tp, read("vllm serve m --max-num-se 32").max_num_seqs) == (4, 32)
    assert not read("vllm serve m -O 3").eager and read("vllm serve m -O0").eager
    for cmd in ("env CUDA_VISIBLE_DEVICES=0 vllm serve m -tp 2", "uv run --with vllm vllm serve m -tp 2",
                "docker run --gpus all --rm -p 8000:8000 vllm/vllm-openai:latest --model m -tp 2",
                "python -X dev -m vllm.entrypoints.openai.api_server --model m -tp 2",
                "python3 -u -W ignore -m vllm.entrypoints.openai.api_server --model=m --tensor-parallel-size=2"):
        l = read(cmd)
        assert (l.framework, l.model, l.tp) == ("vllm", "m", 2), cmd
    l = read('vllm serve m --hf-overrides {"num_key_value_heads":1} --port 8000')
    # issue 26: read and applied to the model's config (no longer "not read")
    assert l.ignored == ["--port 8000"] and not l.not_read and "num_key_value_heads" in " ".join(l.notes)
    assert l.model_overrides["values"] == {"num_key_value_heads": 1}


def test_ignored_means_known_harmless_else_not_read():
    l = read("vllm serve m --port 8000 --trust-remote-code --max-lora-rank 16")
    assert l.ignored == ["--port 8000", "--trust-remote-code"]
    assert l.not_read == ["--max-lora-rank 16"]
    # an option the line does not have: vLLM's parse_args refuses "unrecognized arguments" (issue 29)
    with pytest.raises(LaunchError, match="unrecognized arguments: --no-such-option 3"):
        read("vllm serve m --port 8000 --no-such-option 3")
    code, out, _ = plan("plan", "--gpu", "b300", "--", "vllm", "serve", *SEED.split(), "--max-lora-rank", "16")
    assert code == 0 and "ignored    (do not change" not in out
    assert "not read   (the server's default assumed for each): --max-lora-rank 16" in out
    assert "assumes    the server's default for 1 option(s)" in out


def _cpu_limit():
    import resource

    resource.setrlimit(resource.RLIMIT_CPU, (30, 30))


def test_case11_launch_values_bounded_and_nested_json_refused_fast():
    """before: `--max-num-seqs 134217728 ...` ran a minute then `internal error (MemoryError)`, exit 1;
    deeply nested JSON: RecursionError, exit 1. after: one line, exit 2, at once."""
    for tail in (["--max-num-seqs", "134217728", "--max-cudagraph-capture-size", "134217728"],
                 ["--max-num-batched-tokens", "134217728"], ["--cudagraph-capture-sizes"] + ["8"] * 2000,
                 ["-cc", '{"a":' * 5000 + "1" + "}" * 5000], ["-sc.a" + ".b" * 5000, "1"]):
        # "at once": within 30 s of CPU (RLIMIT_CPU; a runaway is killed, returncode < 0), not a
        # wall-clock bound that load on the machine moves
        p = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--", "vllm", "serve", "m"] + tail,
                           capture_output=True, text=True, timeout=600, preexec_fn=_cpu_limit)
        assert p.returncode == 2, (tail[:2], p.returncode, p.stderr[-500:])
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_case11_doctor_reports_with_an_unreadable_flashinfer_version(monkeypatch):
    """before: `internal error (InvalidVersion ...)` and no report; after: the report, the version named."""
    versions = {"vllm": None, "sglang": None, "flashinfer-python": "nightly-2026-11-30", "torch": None}
    from guard_core.commands import doctor

    monkeypatch.setattr(doctor, "installed_version", lambda d: versions.get(d))
    monkeypatch.setattr(doctor, "flashinfer_version", lambda: "nightly-2026-11-30")
    out = io.StringIO()
    assert cli.run_doctor(out=out) == 0
    text = out.getvalue()
    assert "flashinfer-python  'nightly-2026-11-30' (not a PEP 440 version: read as unknown)" in text
    assert "moe guard" in text and "workspace  FlashInfer" in text and "not a PEP 440 version" in text


@pytest.mark.parametrize("fw, line, fi", [
    ("vllm", "0.27.0", "0.6.16.post3"), ("sglang", "0.5.21", "0.6.18.post1"), ("vllm", "0.23.0", "0.6.13"),
    ("sglang", "0.5.23", "0.7.0")])
def test_case12_exact_only_on_checked_lines_and_releases(fw, line, fi):
    """before: None (exact shrinks) between the checked points; after: a reason, so exact acts as auto."""
    assert releases.unchecked_reason(fw, line, fi) is not None


def test_case12_exact_still_shrinks_on_every_checked_pair():
    pins = {"vllm": {"0.19.1": "0.6.6", "0.23.0": "0.6.12", "0.26.0": "0.6.14", "0.29.0": "0.6.18",
                     "0.32.0": "0.7.0.post1", "0.33.0": "0.7.2.post1"},
            "sglang": {"0.5.5": "0.5.0", "0.5.11": "0.6.8.post1", "0.5.15": "0.6.12", "0.5.20": "0.6.18",
                       "0.5.22": "0.7.1", "0.5.23": "0.7.2"}}  # ci/locks/<line>.txt flashinfer-python pins
    for fw, lines in pins.items():
        for line, fi in lines.items():
            assert releases.unchecked_reason(fw, line, fi) is None, (fw, line, fi)


SGLANG_SEED_NEED = 405_270_528  # 386.5 MiB: the SGLang seed's need (README: Qwen3-VL-32B, 384 MiB buffer)


def test_case3_sglang_dp_attention():
    """Qwen3-235B-A22B on B200, --tp 8 --dp 8 --enable-dp-attention: before OK 149.2 MiB (attention TP 8);
    after OVERFLOW 515.5 MiB: attention TP 8 / 8 = 1 (all 64 q / 4 kv heads) and the chunk / 8
    (SGLang 0.5.5 ServerArgs._handle_data_parallelism; 0.5.23 --attn-dp-size, parallel_hook.py)."""
    cmd = ["python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-235B-A22B", "--tp", "8", "--dp", "8",
           "--enable-dp-attention"]
    d = plan_json("--gpu", "b200", "--", *cmd)
    assert (d["layout"]["num_qo_heads"], d["layout"]["num_kv_heads"]) == (64, 4)
    assert d["limits"]["max_batched_tokens"] == 16384 // 8 and d["verdict"] == "overflow"
    d = plan_json("--gpu", "b200", "--framework-version", "0.5.23", "--", "python", "-m", "sglang.launch_server",
                  "--model-path", "Qwen/Qwen3-235B-A22B", "--tp", "8", "--attn-dp-size", "8")
    assert (d["layout"]["num_qo_heads"], d["limits"]["max_batched_tokens"]) == (64, 16384 // 8)
    with pytest.raises(LaunchError, match="divide"):
        read("python -m sglang.launch_server --model-path m --tp 4 --dp 8 --enable-dp-attention")


def test_case7_yaml_config_sglang(tmp_path):
    """The SGLang seed from a YAML config: before, the default model (OK 265 MiB); after OVERFLOW 386.5 MiB."""
    cfg = tmp_path / "sglang.yaml"
    cfg.write_text("model-path: Qwen/Qwen3-VL-32B-Instruct-FP8\ntp-size: 1\ncuda-graph-max-bs: 512\n")
    l = read(f"python -m sglang.launch_server --config {cfg}")
    assert (l.model, l.tp, l.max_capture) == ("Qwen/Qwen3-VL-32B-Instruct-FP8", 1, 512)
    d = plan_json("--gpu", "h200", "--", "python", "-m", "sglang.launch_server", "--config", str(cfg))
    assert d["verdict"] == "overflow" and d["need"]["float_bytes"] == SGLANG_SEED_NEED


def test_case9_sglang_spellings_per_line():
    """0.5.23 reads --cuda-graph-max-bs-decode / --cuda-graph-bs-decode and refuses the old
    --cuda-graph-max-bs as ambiguous (its own parser does); 0.5.5 reads the old one."""
    l = read("python -m sglang.launch_server --model m --cuda-graph-max-bs-decode 64 --cuda-graph-bs-decode 1 2 4",
             line="0.5.23")
    assert (l.max_capture, l.capture_sizes) == (64, (1, 2, 4))
    with pytest.raises(LaunchError, match="ambiguous option: --cuda-graph-max-bs"):
        read("python -m sglang.launch_server --model m --cuda-graph-max-bs 64", line="0.5.23")
    assert read("python -m sglang.launch_server --model m --cuda-graph-max-bs 64", line="0.5.5").max_capture == 64
    l = read('python -m sglang.launch_server --model m --json-model-override-args {"num_attention_heads":8}')
    assert not l.not_read and "num_attention_heads" in " ".join(l.notes)  # applied (issue 26)
    assert l.model_overrides == {"option": "--json-model-override-args", "values": {"num_attention_heads": 8},
                                 "nested": False}
    l = read("docker run --gpus all --ipc=host lmsysorg/sglang:latest python3 -m sglang.launch_server "
             "--model-path m --tp 2")
    assert (l.framework, l.model, l.tp) == ("sglang", "m", 2)


def test_case4_sglang_native_variable_and_its_architecture_list():
    """SGLANG_FLASHINFER_WORKSPACE_SIZE is the buffer, except for the architectures SGLang sets to
    512 MiB itself over it (layers/attention/flashinfer_backend.py, 0.5.5-0.5.23)."""
    d = plan_json("--gpu", "b200", "--", "SGLANG_FLASHINFER_WORKSPACE_SIZE=600000000", "python", "-m",
                  "sglang.launch_server", "--model-path", "Qwen/Qwen3-235B-A22B", "--tp", "8", "--dp", "8",
                  "--enable-dp-attention")
    assert d["workspace_bytes"] == 600000000 and d["verdict"] == "ok"
    d = plan_json("--gpu", "b200", "--", "SGLANG_FLASHINFER_WORKSPACE_SIZE=600000000", "python", "-m",
                  "sglang.launch_server", "--model-path", "Qwen/Qwen3-32B")
    assert d["workspace_bytes"] == 512 << 20 and "overridden by SGLang" in d["server_default_source"]


def test_case10_a_docker_image_tag_names_the_line():
    """`docker run vllm/vllm-openai:v0.19.1 ...` starts vLLM 0.19.1 whatever is installed here."""
    from guard_core.deployment.launch_command import image_line
    assert image_line("vllm", "docker run vllm/vllm-openai:v0.19.1: vllm serve") == "0.19.1"
    assert image_line("sglang", "docker run lmsysorg/sglang:v0.5.5-cu126: python -m sglang.launch_server") == "0.5.5"
    assert image_line("vllm", "docker run vllm/vllm-openai:latest: vllm serve") is None
    d = plan_json("--gpu", "b300", "--", "docker", "run", "--gpus", "all", "vllm/vllm-openai:v0.33.0", *SEED.split())
    assert d["framework_version"] == "0.33.0" and d["flashinfer"] == "0.7.2.post1"  # ci/locks/vllm-0.33.0.txt pin
    assert any("image tag" in n for n in d["notes"])
