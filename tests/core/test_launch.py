"""Reading the server's launch command: the options that change the answer, the rest ignored once."""

import io
import sys

import pytest

from guard_core.commands import cli
from guard_core.deployment.launch_command import LaunchError, attention_backend_note, parse_launch


def test_vllm_seed_command():
    l = parse_launch(("python3 -m vllm.entrypoints.openai.api_server --model nvidia/Qwen3.5-397B-A17B-NVFP4 "
                      "--data-parallel-size 8 --kv-cache-dtype fp8_e4m3 --max-num-seqs 528 --trust-remote-code "
                      "--max-model-len 3072 --gpu-memory-utilization 0.85 --no-enable-prefix-caching "
                      "--language-model-only --async-scheduling --attention-backend FLASHINFER "
                      "--enable-expert-parallel --quantization modelopt --host 0.0.0.0 --port 60000").split())
    assert (l.framework, l.model, l.dp, l.tp, l.max_num_seqs, l.max_model_len) == (
        "vllm", "nvidia/Qwen3.5-397B-A17B-NVFP4", 8, None, 528, 3072)
    assert l.kv_cache_dtype == "fp8_e4m3" and l.expert_parallel and l.quantization == "modelopt"
    assert l.attention_backend == "FLASHINFER" and attention_backend_note(l) is None
    assert l.ignored == ["--trust-remote-code", "--gpu-memory-utilization 0.85", "--no-enable-prefix-caching",
                         "--language-model-only", "--async-scheduling", "--host 0.0.0.0", "--port 60000"]


def test_sglang_seed_command_with_env_prefix():
    l = parse_launch("CUDA_VISIBLE_DEVICES=7 python -m sglang.launch_server --model Qwen/Qwen3-VL-32B-Instruct-FP8 "
                     "--tp 1 --quantization fp8 --trust-remote-code".split())
    assert (l.framework, l.model, l.tp, l.quantization) == ("sglang", "Qwen/Qwen3-VL-32B-Instruct-FP8", 1, "fp8")
    assert l.ignored == ["--trust-remote-code", "CUDA_VISIBLE_DEVICES=7"] and l.not_read == []


def test_vllm_serve_positional_aliases_and_equals():
    l = parse_launch(["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "-tp", "4", "-pp=2", "-dcp", "2",
                      "--max-num-batched-tokens=16384", "--max-model-len", "32k", "--block-size", "32",
                      "--enforce-eager", "--cudagraph-capture-sizes", "1", "2", "4", "--max-cudagraph-capture-size", "4"])
    assert (l.model, l.tp, l.pp, l.dcp, l.max_batched_tokens, l.max_model_len, l.page_size) == (
        "meta-llama/Llama-3.1-70B-Instruct", 4, 2, 2, 16384, 32000, 32)
    assert l.eager and l.capture_sizes == (1, 2, 4) and l.max_capture == 4
    assert parse_launch(["vllm", "serve", "m", "--max-model-len", "1K"]).max_model_len == 1024


def test_vllm_json_options():
    l = parse_launch(["vllm", "serve", "m", "--speculative-config",
                      '{"method": "eagle3", "model": "x", "num_speculative_tokens": 3}',
                      "-cc", '{"cudagraph_capture_sizes": [1, 8, 64], "max_cudagraph_capture_size": 64}'])
    assert l.draft_tokens == 3 and l.speculative == "eagle3" and l.capture_sizes == (1, 8, 64) and l.max_capture == 64
    assert parse_launch(["vllm", "serve", "m", "--compilation-config", '{"cudagraph_mode": "NONE"}']).eager


def test_sglang_options():
    l = parse_launch(["python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "8", "--dp", "2",
                      "--max-running-requests", "256", "--chunked-prefill-size", "8192", "--context-length", "4096",
                      "--kv-cache-dtype", "fp8_e5m2", "--speculative-algorithm", "EAGLE",
                      "--speculative-num-draft-tokens", "4", "--cuda-graph-bs", "1", "2", "4", "8",
                      "--page-size", "16", "--attention-backend", "fa3", "--mem-fraction-static", "0.8"])
    assert (l.tp, l.dp, l.max_num_seqs, l.max_batched_tokens, l.max_model_len) == (8, 2, 256, 8192, 4096)
    assert l.draft_tokens == 3  # SGLang counts the verified token in
    assert l.capture_sizes == (1, 2, 4, 8) and l.page_size == 16
    assert l.ignored == ["--mem-fraction-static 0.8"]
    assert "fa3" in attention_backend_note(l)
    assert parse_launch(["sglang", "serve", "--model-path", "m", "--disable-cuda-graph"]).eager
    # chunked prefill off: no token cap from the command
    assert parse_launch(["python", "-m", "sglang.launch_server", "--model-path", "m",
                         "--chunked-prefill-size", "-1"]).max_batched_tokens is None


@pytest.mark.parametrize("argv,needle", [
    (["vllm", "serve", "m", "--max-num-seqs", "many"], "--max-num-seqs"),
    (["vllm", "serve", "m", "-tp", "0"], "-tp"),
    (["vllm", "serve", "m", "--max-model-len", "long"], "--max-model-len"),
    (["vllm", "serve", "m", "--speculative-config", "{bad"], "--speculative-config"),
    (["vllm", "serve", "m", "--max-num-seqs"], "--max-num-seqs: expected one argument"),
    (["python", "-m", "sglang.launch_server", "--tp", "x"], "--tp"),
    (["python", "-m", "sglang.launch_server", "--cuda-graph-bs", "1", "two"], "--cuda-graph-bs"),
    (["torchrun", "serve.py"], "not recognised"),
    (["python", "-m", "something.else"], "expected vllm.entrypoints"),
    ([], "empty launch command"),
])
def test_bad_values_one_error_naming_the_option(argv, needle):
    with pytest.raises(LaunchError) as e:
        parse_launch(argv)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_cli_bad_value_in_command_is_one_line_exit_2():
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(["plan", "--", "vllm", "serve", "Qwen/Qwen3-32B", "--max-num-seqs", "lots"])
    finally:
        sys.stdout, sys.stderr = old
    assert code == 2 and out.getvalue() == ""
    lines = err.getvalue().strip().splitlines()
    assert len(lines) == 1 and "--max-num-seqs" in lines[0] and "'lots'" in lines[0]


def test_hostile_numbers_in_a_launch_command_are_one_error_line():
    """Huge or non-finite numbers after `--` are refused like flags (exit 2, one line). Non-ASCII
    decimal digits are not among them: the servers read their integers with int(), which takes
    any Unicode decimal digits (issue 29: "\u0661\u0662" is 12 to vLLM; see
    test_issue29_launch_prefixes.py)."""
    import subprocess
    import sys
    for opt, val in (("--max-model-len", "1e400"), ("--max-model-len", "nan"), ("--max-num-seqs", str(10 ** 12)),
                     ("--tensor-parallel-size", "9" * 5000)):
        p = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--", "vllm", "serve", "m", opt, val],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2, (opt, val, p.returncode, p.stderr)
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr, p.stderr
        assert opt in p.stderr
