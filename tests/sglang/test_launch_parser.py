"""`flashinfer-guard plan -- <SGLang launch command>` reads the command as the installed SGLang does (issue #22).

Ground truth is SGLang's own parser (``argparse`` + ``ServerArgs.add_cli_args`` and, for
``--config``, SGLang's ``ConfigArgumentMerger``, as ``prepare_server_args`` builds them;
guard_core.deployment.server_parsers). The built-in reader (argparse rebuilt from
guard_core/deployment/server_options/sglang-<line>.json) must resolve every generated command to
the same deployment, and the committed table must be what the installed parser says.
"""

from __future__ import annotations

import json
import os
import random
import sys
from importlib import metadata
from pathlib import Path

import pytest

from tests.common import server_reading as common
from tests.common import forkserver  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SGLANG = metadata.version("sglang")
FLASHINFER = metadata.version("flashinfer-python")


def _key(v):
    return tuple(int(p) for p in v.split(".")[:3] if p.isdigit())


def both(cmd: list[str]):
    return common.both(cmd, SGLANG)


def real(cmd: str):
    return common.real(cmd, SGLANG)


def _server_options() -> set[str]:
    from guard_core.deployment.server_parsers import _sglang_parser
    return {o for a in _sglang_parser()._actions for o in a.option_strings}


def test_committed_option_table_is_the_installed_parsers():
    common.assert_option_table_is_the_installed_parsers("sglang", SGLANG)


def test_case3_dp_attention_divides_attention_tp_and_chunk():
    l = real("python -m sglang.launch_server --model-path Qwen/Qwen3-235B-A22B --tp 8 --dp 8 --enable-dp-attention")
    assert (l.tp, l.attn_dp) == (8, 8)
    if "--attn-dp-size" in _server_options():  # 0.5.23: the new spelling means the same layout
        assert real("python -m sglang.launch_server --model-path m --tp 8 --attn-dp-size 8").attn_dp == 8
    p = forkserver.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--gpu", "b200", "--",
                        "python", "-m", "sglang.launch_server", "--model-path", "Qwen/Qwen3-235B-A22B", "--tp", "8",
                        "--dp", "8", "--enable-dp-attention"], capture_output=True, text=True, cwd=str(REPO),
                       timeout=600, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    # Qwen3-235B-A22B: 64 q / 4 kv heads; attention TP 8 / 8 = 1 holds them all
    assert (d["layout"]["num_qo_heads"], d["layout"]["num_kv_heads"]) == (64, 4)
    # SGLang divides the chunked prefill size by the DP size (0.5.5 _handle_data_parallelism;
    # 0.5.23 parallel_hook.py): 16384 on a B200 (>= 160 GiB) / 8
    assert d["limits"]["max_batched_tokens"] == 16384 // 8
    # the installed line is simulated by default (case 10), read by SGLang's own parser
    assert d["framework_version"] == SGLANG and d["flashinfer"] == FLASHINFER
    assert d["launch"]["reader"] == f"SGLang {SGLANG}'s own parser"


def test_case7_yaml_config(tmp_path):
    cfg = tmp_path / "serve.yaml"
    # (no boolean flag: SGLang 0.5.11's own YAML merger turns "trust-remote-code: true" into
    # "--trust-remote-code true", which its parser refuses; later lines accept it)
    cfg.write_text("model-path: meta-llama/Llama-3.1-405B-Instruct\ntp-size: 4\nmax-running-requests: 64\n")
    l = real(f"python -m sglang.launch_server --config {cfg} --tp-size 8")
    assert (l.model, l.tp, l.max_num_seqs) == ("meta-llama/Llama-3.1-405B-Instruct", 8, 64)


def test_case9_cuda_graph_options_of_this_line():
    opts = _server_options()
    if "--cuda-graph-max-bs-decode" in opts:  # 0.5.23: the decode spellings are read ...
        l = real("python -m sglang.launch_server --model m --cuda-graph-max-bs-decode 64 --cuda-graph-bs-decode 1 2 4")
        assert (l.max_capture, l.capture_sizes) == (64, (1, 2, 4))
        # ... and the old one is ambiguous to SGLang's parser, so refused by both readers
        s, b = both("python -m sglang.launch_server --model m --cuda-graph-max-bs 64".split())
        assert isinstance(s, str) and isinstance(b, str) and "ambiguous" in s and "ambiguous" in b
    else:
        l = real("python -m sglang.launch_server --model m --cuda-graph-max-bs 64 --cuda-graph-bs 1 2 4")
        assert (l.max_capture, l.capture_sizes) == (64, (1, 2, 4))
    l = real('python -m sglang.launch_server --model m --json-model-override-args {"num_key_value_heads":1}')
    # issue 26: read and applied to the model's config as the server applies it
    assert not l.not_read and any("num_key_value_heads" in n for n in l.notes)
    assert l.model_overrides["values"] == {"num_key_value_heads": 1}


# ------------------------------------------------------------------ the property: generated commands

def generate(rng, options: set[str], tmp: Path) -> list[str]:
    parts: list[list[str]] = []
    tp = rng.choice([1, 2, 4, 8])
    parts.append([rng.choice([o for o in ("--tp", "--tp-size", "--tensor-parallel-size") if o in options]
                             or ["--tp-size"]), str(tp)])
    r = rng.random()
    if r < 0.2:
        parts += [[rng.choice(["--dp", "--dp-size"]), str(tp)], ["--enable-dp-attention"]]
    elif r < 0.3 and "--attn-dp-size" in options:
        parts.append(["--attn-dp-size", str(rng.choice([1, tp]))])
    elif r < 0.4:
        parts.append(["--dp-size", str(rng.choice([1, 2]))])
    if rng.random() < 0.4:
        parts.append(["--max-running-requests", str(rng.choice([16, 64, 256]))])
    if rng.random() < 0.4:
        parts.append(["--chunked-prefill-size", rng.choice(["2048", "8192", "-1"])])
    if rng.random() < 0.3:
        parts.append(["--context-length", rng.choice(["4096", "32768"])])
    if rng.random() < 0.3:
        parts.append(["--kv-cache-dtype", rng.choice(["auto", "fp8_e4m3"])])
    if rng.random() < 0.2:
        parts += [["--speculative-algorithm", "EAGLE"], ["--speculative-num-draft-tokens", str(rng.randint(2, 5))]]
    max_bs = "--cuda-graph-max-bs-decode" if "--cuda-graph-max-bs-decode" in options else "--cuda-graph-max-bs"
    bs = "--cuda-graph-bs-decode" if "--cuda-graph-bs-decode" in options else "--cuda-graph-bs"
    r = rng.random()
    if r < 0.25:
        parts.append([max_bs, str(rng.choice([8, 64, 160]))])
    elif r < 0.45:
        parts.append([bs] + [str(b) for b in sorted(rng.sample([1, 2, 4, 8, 16, 32, 64], rng.randint(1, 4)))])
    if rng.random() < 0.1:
        parts.append(["--disable-cuda-graph"])
    if rng.random() < 0.1:
        parts.append(["--disable-cuda-graph-padding"])
    if rng.random() < 0.2:
        parts.append(["--page-size", rng.choice(["1", "16", "64"])])
    if rng.random() < 0.2:
        parts.append(["--attention-backend", rng.choice(["flashinfer", "fa3", "triton"])])
    for extra in (["--port", "30000"], ["--host", "0.0.0.0"], ["--mem-fraction-static", "0.8"],
                  ["--trust-remote-code"], ["--enable-torch-compile"]):
        if rng.random() < 0.2:
            parts.append(extra)
    rng.shuffle(parts)
    if rng.random() < 0.2:
        cfg = tmp / f"c{rng.randint(0, 1 << 30)}.yaml"
        cfg.write_text("max-running-requests: 96\nchunked-prefill-size: 4096\n")
        parts.append(["--config", str(cfg)])
    model = rng.choice(["--model-path", "--model"])
    flat = [t for p in parts for t in p]
    return ["python3", "-m", "sglang.launch_server", model, rng.choice(["Qwen/Qwen3-32B", "m"])] + flat


@pytest.mark.parametrize("seed", range(3))
def test_generated_commands_resolve_the_same_through_both_readers(seed, tmp_path):
    """The property: SGLang's own parser and the built-in reader give the same resolved deployment
    for every generated command (or both refuse it)."""
    options = _server_options()
    rng = random.Random(2000 + seed)
    checked = 0
    for _ in range(60):
        cmd = generate(rng, options, tmp_path)
        s, b = both(cmd)
        if isinstance(s, str) or isinstance(b, str):
            assert isinstance(s, str) and isinstance(b, str), (cmd, s, b)
            continue
        assert s.deployment() == b.deployment(), (cmd, s.deployment(), b.deployment())
        assert s.ignored == b.ignored and s.not_read == b.not_read, (cmd, s.ignored, b.ignored, s.not_read, b.not_read)
        checked += 1
    assert checked >= 40


def test_config_files_bounded_and_refused_in_one_line(tmp_path):
    """Issue 29, items 4-5: hostile --config files refused alike by both readers before SGLang's
    ConfigArgumentMerger opens them; its own errors on malformed files as one line naming the file."""
    common.assert_config_files_read_alike(["python", "-m", "sglang.launch_server", "--model-path", "M"],
                                          SGLANG, str(tmp_path))


@pytest.mark.parametrize("seed", range(2))
def test_issue29_readers_agree_on_generated_commands_behind_prefixes(seed, tmp_path):
    """Issue 29, item 4: as tests/vllm/test_launch_parser.py, with SGLang's own parser (and its
    ConfigArgumentMerger) as the truth: `--tp_size` and other spellings SGLang's argparse refuses,
    fullwidth digits its int() takes, prefixes, `--` placement; 150 commands per seed."""
    accepted = common.assert_readers_agree_on_generated_commands("sglang", SGLANG, _server_options(), tmp_path,
                                                                 2950 + seed, 150)
    assert accepted >= 30
