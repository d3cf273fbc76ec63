"""Issue 29, item 4, the built-in reader's side (core environment): the issue's disagreements
with the servers, each fixed. Expected values come from the command text and the servers' own
code (cited), never from guard_core; the agreement with the installed parsers on generated
commands is tests/{vllm,sglang}/test_launch_parser.py::test_issue29_*.
"""

from __future__ import annotations

import pytest

from guard_core.commands import cli
from guard_core.deployment.launch_command import LaunchError, parse_launch

VAR = "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"


def read(cmd: list[str], line: str = "0.23.0"):
    return parse_launch(cmd, line=line, reader="builtin", environ={})


TAIL = ["meta-llama/Llama-3.1-8B-Instruct", "-tp", "2", "--max-num-seqs", "64"]


@pytest.mark.parametrize("prefix", [
    ["docker", "run", "--cpu-shares", "512", "--gpus", "all", f"-e{VAR}=536870912", "vllm/vllm-openai:latest"],
    ["docker", "run", "-c", "512", "-itd", "--memory-swappiness", "10", "--health-start-period", "5s",
     f"-e={VAR}=536870912", "vllm/vllm-openai:latest"],
    ["podman", "run", "--pids-limit", "100", "--pod", "p", "--env", f"{VAR}=536870912", "vllm/vllm-openai:latest"],
    ["docker", "run", "--env-file", "ENVFILE", "--rm", "vllm/vllm-openai:latest"],
    [f"{VAR}=536870912", "env", "-C", "/tmp", "-v", "--"],
    ["env", "-i", f"{VAR}=536870912", "--chdir=/tmp"],
    ["env", "-iC/tmp", f"{VAR}=536870912"],
    [f"{VAR}=536870912", "uv", "run", "--with", "vllm", "-m", "vllm.entrypoints.openai.api_server", "--model"],
    [f"{VAR}=536870912", "uv", "run", "-p", "3.12", "--module=vllm.entrypoints.openai.api_server", "--model"],
    [f"{VAR}=536870912", "python3", "-X", "dev", "-Werror", "-um", "vllm.entrypoints.openai.api_server", "--model"],
])
def test_prefixes_the_issue_found_refused_now_read(prefix, tmp_path):
    """Before: `docker run --cpu-shares 512` (and the other value options), `-eVAR=value`,
    `--env-file`, `uv run -m`, `env -C DIR` were refused or misread."""
    envfile = tmp_path / "x.env"
    envfile.write_text(f"# generated\n{VAR}=536870912\n")
    prefix = [str(envfile) if t == "ENVFILE" else t for t in prefix]
    if prefix[-1] not in ("--model",) and not prefix[-1].startswith("vllm/") and prefix[0] != "docker":
        prefix = prefix + ["vllm", "serve"]
    launch = read(prefix + TAIL)
    assert (launch.model, launch.tp, launch.max_num_seqs, launch.workspace_bytes) == \
        ("meta-llama/Llama-3.1-8B-Instruct", 2, 64, 536870912)


def test_fullwidth_digits_read_as_the_servers_int_reads_them():
    """vLLM's type=int and human_readable_int (re \\d, float()) take any Unicode decimal digits:
    int("６４") == 64 (before: refused)."""
    launch = read(["vllm", "serve", "M", "--max-num-seqs", "\uff16\uff14", "--max-num-batched-tokens", "\uff11\uff16k",
                   "-tp", "\u0664"])
    assert (launch.max_num_seqs, launch.max_batched_tokens, launch.tp) == (64, 16000, 4)
    assert read(["python", "-m", "sglang.launch_server", "--model-path", "M", "--max-running-requests",
                 "\uff16\uff14"], line="0.5.5").max_num_seqs == 64


@pytest.mark.parametrize("cmd,line", [
    # after `--` argparse takes everything as positionals: "unrecognized arguments"
    (["vllm", "serve", "M", "-tp", "4", "--", "--max-num-seqs", "64"], "0.23.0"),
    (["vllm", "serve", "M", "-tp", "4", "--", "--max-num-seqs", "64"], "0.33.0"),
    # vLLM turns -O<anything> into --optimization-level <anything>; NONE is left over
    (["vllm", "serve", "M", "-O.cudagraph_mode", "NONE"], "0.33.0"),
    # SGLang's plain argparse maps no `_` to `-`
    (["python", "-m", "sglang.launch_server", "--model-path", "M", "--tp_size", "4"], "0.5.5"),
    (["python", "-m", "sglang.launch_server", "--model-path", "M", "--tp_size", "4"], "0.5.23"),
    # a value the server's typed option refuses (choices, int)
    (["python", "-m", "sglang.launch_server", "--model-path", "M", "--attention-backend", "nope"], "0.5.5"),
    (["vllm", "serve", "M", "--port", "http"], "0.23.0"),
])
def test_commands_the_servers_refuse_are_refused(cmd, line):
    """Before: accepted by the built-in reader (the rest listed as "not read")."""
    with pytest.raises(LaunchError) as exc:
        read(cmd, line)
    assert "\n" not in str(exc.value)


def test_yaml_false_is_dropped_as_vllm_serve_drops_it(tmp_path):
    """`enable-chunked-prefill: false` in a --config: vLLM 0.23 drops a false boolean
    (argparse_utils.py 0.23.0:573-575); 0.33 adds --no-key only where the parser reading the YAML
    has it, and for `vllm serve` that is the top-level parser (0.33.0:654-658). Before: read as
    --no-enable-chunked-prefill."""
    cfg = tmp_path / "serve.yaml"
    cfg.write_text("enable-chunked-prefill: false\nmax-num-seqs: 32\n")
    for line in ("0.23.0", "0.33.0"):
        launch = read(["vllm", "serve", "M", "--config", str(cfg)], line)
        assert (launch.chunked_prefill, launch.max_num_seqs) == (None, 32), line


def test_a_newline_in_an_option_value_stays_on_its_line(capsys):
    """Before: `--served-model-name $'a\\nb'` printed a raw line break into the report."""
    launch = read(["vllm", "serve", "M", "--served-model-name", "a\nb", "--max-lora-rank", "16"])
    assert launch.ignored == ["--served-model-name a\\nb"]
    rc = cli.main(["plan", "--gpu", "h200", "--", "vllm", "serve", "Qwen3-235B-A22B", "--served-model-name", "a\nb",
                   "--max-lora-rank", "x\ny"])
    out = capsys.readouterr().out
    assert rc == 0 and "a\\nb" in out and "x\\ny" in out
    assert not any(ln.startswith(("b", "y")) for ln in out.splitlines()), out


@pytest.mark.parametrize("cmd", [["doctor"], ["presets"]])
def test_doctor_refuses_a_launch_command_it_cannot_use(cmd, capsys):
    """Before: `doctor -- vllm serve M` printed the doctor report and ignored the command (exit 0)."""
    rc = cli.main(cmd + ["--", "vllm", "serve", "M"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and "plan -- <command>" in err, (rc, err)


@pytest.mark.parametrize("model", ["/nonexistent/config.json", "", "/dev/zero", "TP3"])
def test_doctor_refuses_a_model_it_cannot_use(model, capsys):
    """Before: `doctor --model /nonexistent` (or an empty name, a device, heads that do not split at
    --tp) printed the report with the error inside one of its lines, exit 0."""
    import os
    args = ["doctor", "--model", model]
    if model == "TP3":  # 64 query heads do not split over 3 ranks (both servers refuse it)
        args = ["doctor", "--tp", "3", "--model", os.path.join(os.path.dirname(os.path.dirname(
            os.path.abspath(__file__))), "data", "model_configs", "MiMo-V2-Flash.json")]
    rc = cli.main(args)
    cap = capsys.readouterr()
    assert rc == 2 and not cap.out and len(cap.err.strip().splitlines()) == 1, (rc, cap.out[-200:], cap.err)
