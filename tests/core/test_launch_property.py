"""Properties of the built-in launch-command reader (core environment, hypothesis).

The agreement with the servers' own parsers is tested where they are installed
(tests/vllm/test_launch_parser.py, tests/sglang/test_launch_parser.py); here: any
command gives a Launch or one LaunchError line (never another exception), and
spellings the servers treat alike (vLLM: `_` for `-`, `--opt=value`, option order,
`env`/`uv run`/`docker run` prefixes) resolve to the same deployment.
"""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from guard_core.deployment.launch_command import LaunchError, parse_launch

HEADS = (["vllm", "serve"], ["python", "-m", "vllm.entrypoints.openai.api_server"],
         ["python3", "-m", "sglang.launch_server"], ["sglang", "serve"])
WORDS = st.sampled_from(["--tp", "-tp", "--max-num-seqs", "--cudagraph-capture-sizes", "-cc", "-sc", "--config",
                         "-O", "-O0", "--model", "--model-path", "--dp", "--enable-dp-attention", "--attn-dp-size",
                         "--cuda-graph-bs", "--cuda-graph-max-bs", "-cc.max_cudagraph_capture_size",
                         "-sc.num_speculative_tokens", "--chunked-prefill-size", "8", "0", "-1", "16k", "1e9", "{",
                         '{"a":1}', "[1,2]", "auto", "m", "--", "=", "--max-num-seqs=3", "VLLM_X=1", "env", "uv",
                         "run", "docker", "\u0661", "9" * 30])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(HEADS), st.lists(st.one_of(WORDS, st.text(max_size=12)), max_size=12))
# found by this test in the final run of the merged branch: a NUL byte in a --config path
@example(["vllm", "serve"], ["--config", "\x00"])
@example(["sglang", "serve"], ["--config", "\x00"])
def test_any_command_reads_or_is_one_error_line(head, tail):
    try:
        parse_launch(head + tail, environ={})
    except LaunchError as exc:
        assert "\n" not in str(exc) and str(exc)


OPTS = st.fixed_dictionaries({}, optional={
    "--tensor-parallel-size": st.sampled_from(["1", "2", "8"]),
    "--max-num-seqs": st.sampled_from(["16", "256", "+64"]),
    "--max-num-batched-tokens": st.sampled_from(["2048", "16k", "16K"]),
    "--block-size": st.sampled_from(["16", "32"]),
    "--kv-cache-dtype": st.sampled_from(["auto", "fp8"]),
    "--max-cudagraph-capture-size": st.sampled_from(["64", "512"]),
})


@settings(max_examples=150, deadline=None)
@given(OPTS, st.randoms(use_true_random=False), st.sampled_from(["", "env A=1", "uv run --with vllm",
                                                                "docker run --gpus all vllm/vllm-openai:latest"]))
def test_vllm_spellings_resolve_alike(opts, rnd, prefix):
    plain = ["vllm", "serve", "m"] + [t for k, v in opts.items() for t in (k, v)]
    items = list(opts.items())
    rnd.shuffle(items)
    spelled = []
    for k, v in items:
        k2 = "--" + k[2:].replace("-", "_") if rnd.random() < 0.5 else k
        spelled += [f"{k2}={v}"] if rnd.random() < 0.5 else [k2, v]
    head = prefix.split() + (["m"] if prefix.startswith("docker") else ["vllm", "serve", "m"])
    a = parse_launch(plain, environ={}, reader="builtin", line="0.33.0").deployment()
    b = parse_launch(head + spelled, environ={}, reader="builtin", line="0.33.0").deployment()
    assert a == b, (plain, head + spelled)
