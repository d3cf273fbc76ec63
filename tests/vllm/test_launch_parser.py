"""`flashinfer-guard plan -- <vLLM launch command>` reads the command as the installed vLLM does (issue #22).

Ground truth is vLLM's own argument parser (the `vllm serve` subparser under its
FlexibleArgumentParser, through guard_core.deployment.server_parsers). The built-in reader
(argparse rebuilt from guard_core/deployment/server_options/vllm-<line>.json plus vLLM's
pre-processing, for machines without vLLM) must resolve every generated command
to the same deployment; the committed option table must be what the installed
parser says. Expected values come from vLLM's parser or from the command text.
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
VLLM = metadata.version("vllm")
FLASHINFER = metadata.version("flashinfer-python")
ENV = {"HF_HUB_OFFLINE": "1"}


def both(cmd: list[str], tmp_env=None):
    """(server reader, built-in reader) results: a Launch, or the LaunchError text."""
    return common.both(cmd, VLLM, tmp_env)


def test_committed_option_table_is_the_installed_parsers():
    """guard_core/deployment/server_options/vllm-<installed>.json == what ci/dump_server_options.py reads now."""
    common.assert_option_table_is_the_installed_parsers("vllm", VLLM)


# ------------------------------------------------------------------ each numbered case of issue #22

def real(cmd: str):
    return common.real(cmd, VLLM)


def test_case1_list_options_are_read_whole():
    l = real("vllm serve nvidia/Qwen3.5-397B-A17B-NVFP4 --max-num-seqs 528 --cudagraph-capture-sizes 1 2 4 8 256 512")
    assert l.capture_sizes == (1, 2, 4, 8, 256, 512) and l.model == "nvidia/Qwen3.5-397B-A17B-NVFP4"


def test_case2_short_aliases_and_dotted_options():
    l = real("vllm serve Qwen/Qwen3-32B -sc.num_speculative_tokens 3 -sc.method eagle3 -sc.model x "
             "-cc.max_cudagraph_capture_size 256 -cc.cudagraph_capture_sizes [1,8,256]")
    assert (l.draft_tokens, l.speculative, l.max_capture, l.capture_sizes) == (3, "eagle3", 256, (1, 8, 256))
    # two spellings of one option are two options to vLLM: the last one wins whole
    l = real("vllm serve m --compilation-config.max_cudagraph_capture_size 256 -cc.cudagraph_capture_sizes [1,8]")
    assert (l.max_capture, l.capture_sizes) == (None, (1, 8))
    l = real('vllm serve Qwen/Qwen3-32B -sc {"method":"eagle3","model":"x","num_speculative_tokens":3}')
    assert l.draft_tokens == 3


def test_case5_mtp_without_a_count_runs_the_models_depth():
    l = real('vllm serve m --speculative-config {"method":"mtp"}')
    assert l.draft_tokens is None and l.draft_tokens_from_model and l.speculative == "mtp"


def test_case6_null_cudagraph_mode_keeps_cuda_graphs():
    assert not real('vllm serve m -cc {"cudagraph_mode":null}').eager
    assert real('vllm serve m -cc {"cudagraph_mode":"NONE"}').eager
    assert real("vllm serve m --enforce-eager").eager


def test_case7_yaml_config(tmp_path):
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("model: meta-llama/Llama-3.1-405B-Instruct\ntensor-parallel-size: 4\nmax-num-seqs: 128\n"
                   "enforce-eager: true\ncompilation-config:\n  max_cudagraph_capture_size: 64\n")
    l = real(f"vllm serve --config {cfg} -tp 8")
    assert (l.model, l.tp, l.max_num_seqs, l.eager, l.max_capture) == (
        "meta-llama/Llama-3.1-405B-Instruct", 8, 128, True, 64)  # the command beats the file


def test_case8_model_positional_after_options():
    assert real("vllm serve -tp 2 meta-llama/Llama-3.1-405B-Instruct").model == "meta-llama/Llama-3.1-405B-Instruct"


def test_case9_spellings():
    l = real("vllm serve m --tensor_parallel_size 2 --max_num_seqs +64 --max-num-batched-tokens 16k --max-model-len 32K")
    assert (l.tp, l.max_num_seqs, l.max_batched_tokens, l.max_model_len) == (2, 64, 16000, 32768)
    l = real("vllm serve m --tensor-parallel 4 --max-num-se 32")  # unique prefixes (argparse abbreviations)
    assert (l.tp, l.max_num_seqs) == (4, 32)
    l = real("vllm serve m -O 3")
    assert not l.eager and l.not_read == []
    assert real("vllm serve m -O0").eager  # OptimizationLevel.O0: no CUDA graphs
    l = real('vllm serve m --hf-overrides {"num_key_value_heads":1}')
    # issue 26: read and applied to the model's config as the server applies it
    assert not l.not_read and any("num_key_value_heads" in n for n in l.notes)
    assert l.model_overrides["values"] == {"num_key_value_heads": 1}


def test_case9_prefixes_read_the_same_command():
    base = real("vllm serve m -tp 2 --max-num-seqs 64").deployment()
    for cmd in ("env CUDA_VISIBLE_DEVICES=0,1 vllm serve m -tp 2 --max-num-seqs 64",
                "uv run --with vllm vllm serve m -tp 2 --max-num-seqs 64",
                "docker run --gpus all -e HF_TOKEN=x -p 8000:8000 vllm/vllm-openai:latest m -tp 2 --max-num-seqs 64",
                "python -X dev -m vllm.entrypoints.openai.api_server --model m -tp 2 --max-num-seqs 64"):
        assert real(cmd).deployment() == base, cmd


def test_unknown_and_bad_values_refused_like_the_server():
    for cmd in ("vllm serve m --cudagraph-capture-sizes 1,2,4", "vllm serve m --max-num-seqs",
                "vllm serve m --max-num-seqs many"):
        s, b = both(cmd.split())
        assert isinstance(s, str) and isinstance(b, str), (cmd, s, b)


def test_case10_plan_simulates_the_installed_line_by_default():
    p = forkserver.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--gpu", "b300", "--",
                        "vllm", "serve", "nvidia/Qwen3.5-397B-A17B-NVFP4", "--max-num-seqs", "528"],
                       capture_output=True, text=True, cwd=str(REPO), timeout=600,
                       env={**os.environ, **ENV, "PYTHONPATH": str(REPO)})
    assert p.returncode == 0, p.stderr[-2000:]
    d = json.loads(p.stdout)
    assert d["framework_version"] == VLLM and d["flashinfer"] == FLASHINFER
    assert "installed" in d["simulated"]["line_source"]
    assert d["launch"]["reader"] == f"vLLM {VLLM}'s own parser"


def test_case11_huge_values_and_deep_json_are_one_line_exit_2():
    for tail in (["--max-num-seqs", "134217728", "--max-cudagraph-capture-size", "134217728"],
                 ["-cc", "{\"a\":" * 5000 + "1" + "}" * 5000]):
        p = forkserver.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--gpu", "b300", "--", "vllm", "serve",
                            "m"] + tail, capture_output=True, text=True, cwd=str(REPO), timeout=300,
                           env={**os.environ, **ENV, "PYTHONPATH": str(REPO)})
        assert p.returncode == 2, (p.returncode, p.stderr[-1000:])
        assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


# ------------------------------------------------------------------ the property: generated commands

def _abbrev(opt: str, options: set[str], rng) -> str:
    """A unique prefix of ``opt`` among the parser's long options (argparse's abbreviations)."""
    for n in range(len("--") + 3, len(opt)):
        p = opt[:n]
        if [o for o in options if o.startswith(p)] == [opt] and rng.random() < 0.5:
            return p
    return opt


def _spell(opt: str, options, rng) -> str:
    r = rng.random()
    if r < 0.2 and opt.startswith("--"):
        return "--" + opt[2:].replace("-", "_")
    if r < 0.35 and opt.startswith("--"):
        return _abbrev(opt, options, rng)
    return opt


def generate(rng, options: set[str], tmp: Path) -> list[str]:
    """One vLLM launch command from the forms users write."""
    parts: list[list[str]] = []
    opt = lambda o, *v: parts.append([_spell(o, options, rng), *v])  # noqa: E731
    if rng.random() < 0.5:
        opt(rng.choice(["-tp", "--tensor-parallel-size"]), str(rng.choice([1, 2, 4, 8])))
    if rng.random() < 0.3:
        opt(rng.choice(["-dp", "--data-parallel-size"]), str(rng.choice([1, 2, 8])))
    if rng.random() < 0.2:
        opt(rng.choice(["-dcp", "--decode-context-parallel-size"]), str(rng.choice([1, 2])))
    if rng.random() < 0.3:
        opt(rng.choice(["--enable-expert-parallel", "-ep", "--no-enable-expert-parallel"]))
    if rng.random() < 0.5:
        opt("--max-num-seqs", rng.choice(["", "+"]) + str(rng.choice([16, 64, 256, 528, 1024])))
    if rng.random() < 0.4:
        opt("--max-num-batched-tokens", rng.choice(["8192", "16k", "16K", "2048", "32k"]))
    if rng.random() < 0.3:
        opt("--max-model-len", rng.choice(["3072", "32k", "32K", "auto", "-1"]))
    if rng.random() < 0.3:
        opt("--kv-cache-dtype", rng.choice(["auto", "fp8", "fp8_e4m3"]))
    if rng.random() < 0.2:
        opt("--block-size", rng.choice(["16", "32"]))
    sizes = sorted(rng.sample([1, 2, 4, 8, 16, 64, 128, 256, 512], rng.randint(1, 5)))
    r = rng.random()
    if r < 0.2:
        opt("--cudagraph-capture-sizes", *map(str, sizes))
    elif r < 0.3:
        parts.append(["-cc.cudagraph_capture_sizes", json.dumps(sizes).replace(" ", "")])
    elif r < 0.4:
        parts.append([rng.choice(["-cc", "--compilation-config"]), json.dumps({"cudagraph_capture_sizes": sizes})])
    r = rng.random()
    if r < 0.15:
        opt("--max-cudagraph-capture-size", str(rng.choice([64, 256, 512])))
    elif r < 0.25:
        parts.append([rng.choice(["-cc.max_cudagraph_capture_size", "--compilation-config.max_cudagraph_capture_size"]),
                      str(rng.choice([64, 512]))])
    if rng.random() < 0.15:
        parts.append(["-cc.cudagraph_mode", rng.choice(["NONE", "FULL", "PIECEWISE", "null", "FULL_AND_PIECEWISE"])])
    r = rng.random()
    if r < 0.15:
        parts.append([rng.choice(["-sc", "--speculative-config"]),
                      json.dumps({"method": "eagle3", "model": "x", "num_speculative_tokens": rng.randint(1, 4)})])
    elif r < 0.25:
        parts += [["-sc.method", rng.choice(["eagle3", "mtp"])], ["-sc.num_speculative_tokens", str(rng.randint(1, 3))]]
    elif r < 0.3:
        parts.append(["--speculative-config", json.dumps({"method": "mtp"})])
    if rng.random() < 0.15:
        opt(rng.choice(["--enforce-eager", "--no-enforce-eager"]))
    if rng.random() < 0.15 and "--optimization-level" in options:
        parts.append(rng.choice([["-O", str(rng.randint(0, 3))], [f"-O{rng.randint(0, 3)}"],
                                 ["--optimization-level", str(rng.randint(0, 3))]]))
    if rng.random() < 0.2:
        opt(rng.choice(["--enable-chunked-prefill", "--no-enable-chunked-prefill"]))
    for harmless in (["--port", "8000"], ["--host", "0.0.0.0"], ["--trust-remote-code"],
                     ["--gpu-memory-utilization", "0.85"], ["--max-lora-rank", "16"]):
        if rng.random() < 0.2:
            opt(*harmless)
    rng.shuffle(parts)
    if rng.random() < 0.2:  # some options in a YAML --config (the command's own ones win)
        cfg = tmp / f"c{rng.randint(0, 1 << 30)}.yaml"
        cfg.write_text("max-num-seqs: 96\ntensor-parallel-size: 2\ncompilation-config:\n"
                       "  max_cudagraph_capture_size: 128\n")
        parts.append(["--config", str(cfg)])
    model = rng.choice(["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B"])
    flat = [t for p in parts for t in p]
    form = rng.random()
    if form < 0.4:
        return ["vllm", "serve", model] + flat
    if form < 0.6:  # model after the options
        return ["vllm", "serve"] + flat + ([model] if not flat or not flat[-1].startswith("-") else ["--model", model])
    if form < 0.8:
        return ["vllm", "serve", "--model", model] + flat
    return ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", model] + flat


@pytest.mark.parametrize("seed", range(4))
def test_generated_commands_resolve_the_same_through_both_readers(seed, tmp_path):
    """The property: for every generated command, vLLM's own parser and the built-in reader give
    the same resolved deployment (or both refuse it)."""
    from guard_core.deployment.server_parsers import _vllm_parser

    options = {o for a in _vllm_parser()[1]._actions for o in a.option_strings if o.startswith("--")}
    rng = random.Random(1000 + seed)
    checked = 0
    for _ in range(60):
        cmd = generate(rng, options, tmp_path)
        s, b = both(cmd)
        if isinstance(s, str) or isinstance(b, str):
            assert isinstance(s, str) and isinstance(b, str), (cmd, s, b)
            continue
        assert s.deployment() == b.deployment(), (cmd, s.deployment(), b.deployment())
        assert s.ignored == b.ignored, (cmd, s.ignored, b.ignored)
        assert len(s.not_read) == len(b.not_read), (cmd, s.not_read, b.not_read)
        checked += 1
    assert checked >= 40  # most generated commands are valid ones


def test_config_files_bounded_and_refused_in_one_line(tmp_path):
    """Issue 29, items 4-5: hostile --config files refused alike by both readers before vLLM's
    parser opens them; vLLM's parser's own errors on malformed files as one line naming the file
    (before: ParserError / AttributeError escaped as "internal error", exit 1)."""
    common.assert_config_files_read_alike(["vllm", "serve", "M"], VLLM, str(tmp_path))


def test_decimal_suffixes_read_as_vllm_reads_them():
    """Issue 29, item 6: vLLM computes ``int(float(number) * 1000)`` (human_readable_int,
    vllm/utils/argparse_utils.py 0.23.0:58), so 8.19k is 8189, not 8190; the built-in reader
    gives what vLLM's own parser gives for every value (before: 8190 for 8.19k and 4.35k)."""
    for value in ("8.19k", "4.35k", "1.1k", "0.3k", "25.6k", "131.072k", "2.3m", "0.57k"):
        server, builtin = both(["vllm", "serve", "M", "--max-model-len", value, "--max-num-batched-tokens", value])
        assert not isinstance(server, str) and not isinstance(builtin, str), (value, server, builtin)
        assert (builtin.max_model_len, builtin.max_batched_tokens) == \
            (server.max_model_len, server.max_batched_tokens), value
    assert both(["vllm", "serve", "M", "--max-model-len", "8.19k"])[0].max_model_len == 8189


@pytest.mark.parametrize("seed", range(2))
def test_issue29_readers_agree_on_generated_commands_behind_prefixes(seed, tmp_path):
    """Issue 29, item 4: 150 generated commands per seed (spellings, fullwidth digits, suffixes,
    dotted and -O options, `--` placement, --config YAML, unknown options, a newline in a value)
    behind generated prefixes (VAR=value, env with its options, docker/podman run with their value
    options, -e/--env-file, uv run [-m], python -X ...): vLLM's own parser on the bare command, and
    both readers on the prefixed one, accept or refuse alike and resolve to the same deployment,
    with the workspace variable seen exactly where the prefix passes it on (before: the issue's
    cases disagreed)."""
    from guard_core.deployment.server_parsers import _vllm_parser

    options = {o for a in _vllm_parser()[1]._actions for o in a.option_strings}
    accepted = common.assert_readers_agree_on_generated_commands("vllm", VLLM, options, tmp_path, 2900 + seed, 150)
    assert accepted >= 40  # the valid commands are a good share of the generated ones
