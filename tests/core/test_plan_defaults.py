"""`plan` answers for the deployment the user runs: the line's own defaults per GPU, with their sources."""

import io
import json
import subprocess
import sys

import pytest

from guard_core.commands import cli
from guard_core.deployment.deployment_record import pin_source
from guard_core.deployment.server_defaults import Deployment, derive, pinned_flashinfer
from guard_core.gpus import find_spec

VLLM_SEED = ("python3 -m vllm.entrypoints.openai.api_server --model nvidia/Qwen3.5-397B-A17B-NVFP4 "
             "--data-parallel-size 8 --kv-cache-dtype fp8_e4m3 --max-num-seqs 528 --trust-remote-code "
             "--max-model-len 3072 --gpu-memory-utilization 0.85 --no-enable-prefix-caching --language-model-only "
             "--async-scheduling --attention-backend FLASHINFER --enable-expert-parallel --quantization modelopt "
             "--host 0.0.0.0 --port 60000").split()
SGLANG_SEED = ("python -m sglang.launch_server --model Qwen/Qwen3-VL-32B-Instruct-FP8 --tp 1 --quantization fp8 "
               "--trust-remote-code").split()


def plan(*args):
    """(exit code, stdout, stderr) of the command, in this process."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        code = cli.main(["plan", *args])
    finally:
        sys.stdout, sys.stderr = old
    return code, out.getvalue(), err.getvalue()


def plan_json(*args):
    code, out, err = plan("--json", *args)
    assert code == 0, err
    return json.loads(out)


def vllm(line, gpu, **kw):
    spec = find_spec(gpu)
    return derive(Deployment(framework="vllm", line=line, gpu_key=spec.key, cc=spec.cc, gpu_name=spec.name, **kw))


@pytest.mark.parametrize("line,gpu,seqs,tokens,ceiling", [
    ("0.19.1", "b300", 1024, 8192, 512),
    ("0.19.1", "a100", 256, 2048, 512),
    ("0.19.1", "l40s", 256, 2048, 512),
    ("0.23.0", "h100", 1024, 8192, 512),
    ("0.26.0", "b200", 1024, 8192, 512),
    ("0.29.0", "b200", 1024, 16384, 1024),   # 160 GiB tier and the SM100 ceiling arrive in 0.29
    ("0.32.0", "b300", 1024, 16384, 1024),
    ("0.32.0", "h200", 1024, 8192, 512),
    ("0.32.0", "gb10", 1024, 8192, 512),
    ("0.33.0", "gb10", 256, 2048, 512),      # 0.33 keeps GB10 on the small tier
    ("0.33.0", "rtxpro6000", 1024, 8192, 512),
    ("0.33.0", "gb300", 1024, 16384, 1024),
])
def test_vllm_line_defaults_per_gpu(line, gpu, seqs, tokens, ceiling):
    d = vllm(line, gpu)
    assert (d.get("max_num_seqs"), d.get("max_batched_tokens"), d.get("max_capture")) == (seqs, tokens, ceiling)
    assert max(d.get("capture_sizes")) == ceiling
    assert "vLLM" in d.values["max_num_seqs"].source and not d.values["max_num_seqs"].passed


def test_vllm_capture_list_rules():
    # 0.23+: the batched tokens join the list when they are below the ceiling
    assert 100 in vllm("0.23.0", "h100", max_batched_tokens=100).get("capture_sizes")
    assert max(vllm("0.19.1", "h100", max_batched_tokens=100).get("capture_sizes")) == 96
    # 0.32+: max seqs itself is captured (uniform decode)
    assert 530 in vllm("0.32.0", "b300", max_num_seqs=530).get("capture_sizes")
    assert 530 not in vllm("0.29.0", "b300", max_num_seqs=530).get("capture_sizes")
    # speculative: ceiling doubles per draft token, and 0.29+ adds request-count multiples of 1 + k
    d = vllm("0.33.0", "h100", max_num_seqs=64, draft_tokens=3)
    assert d.get("max_capture") == min(2 * 64 * 4, 512) and 64 * 4 in d.get("capture_sizes")
    # eager: no graphs
    assert vllm("0.33.0", "b300", eager=True).get("capture_sizes") == ()


def test_pins():
    assert [pinned_flashinfer("vllm", v) for v in ("0.19.1", "0.23.0", "0.26.0", "0.29.0", "0.32.0", "0.33.0",
                                                   "0.34.0")] == [
        "0.6.6", "0.6.12", "0.6.14", "0.6.18", "0.7.0.post1", "0.7.2.post1", "0.7.4"]
    # vLLM 0.34.0 pins 0.7.3 (Requires-Dist), absent from the registry: 0.7.4 in its place, said so
    assert pin_source("vllm", "0.34.0", "vLLM 0.34") == \
        "vLLM 0.34 pins 0.7.3, which the registry does not have; 0.7.4 installs in its place"
    assert pin_source("vllm", "0.33.0", "vLLM 0.33") == "vLLM 0.33 pins it"
    assert [pinned_flashinfer("sglang", v) for v in ("0.5.5", "0.5.11", "0.5.15", "0.5.20", "0.5.22", "0.5.23")] == [
        "0.5.0", "0.6.8.post1", "0.6.12", "0.6.18", "0.7.1", "0.7.2"]


@pytest.mark.parametrize("line,gpu,tp,chunk,max_bs", [
    ("0.5.5", "b200", 1, 16384, 512), ("0.5.5", "h200", 1, 8192, 256), ("0.5.5", "h200", 4, 8192, 512),
    ("0.5.5", "l40s", 1, 4096, 32), ("0.5.11", "rtx4090", 1, 2048, 24), ("0.5.20", "rtx4090", 1, 4096, 48),
    ("0.5.15", "rtx4090", 4, 2048, 80), ("0.5.23", "rtx4090", 4, 4096, 160), ("0.5.23", "l4", 1, 4096, 48),
])
def test_sglang_line_defaults_per_gpu(line, gpu, tp, chunk, max_bs):
    spec = find_spec(gpu)
    d = derive(Deployment(framework="sglang", line=line, gpu_key=spec.key, cc=spec.cc, tp=tp))
    assert (d.get("max_batched_tokens"), d.get("max_capture")) == (chunk, max_bs)
    assert max(d.get("capture_sizes")) == max_bs


def test_sglang_capture_list_per_line():
    def sizes(line, bs):
        return derive(Deployment(framework="sglang", line=line, gpu_key="b200", cc=(10, 0), max_capture=bs)).get(
            "capture_sizes")
    assert sizes("0.5.5", 500)[-1] == 496 and sizes("0.5.11", 500)[-1] == 500  # 0.5.11+ appends the max
    d = derive(Deployment(framework="sglang", line="0.5.22", gpu_key="b200", cc=(10, 0), max_num_seqs=200))
    assert d.get("max_capture") == 200  # 0.5.22+: the default graph max follows --max-running-requests
    d = derive(Deployment(framework="sglang", line="0.5.20", gpu_key="b200", cc=(10, 0), max_num_seqs=200))
    assert d.get("max_capture") == 512


def test_vllm_seed_command_reproduces_seed():
    code, out, err = plan("--gpu", "b300", "--framework-version", "0.19.1", "--trtllm-attention", "off", "--",
                          *VLLM_SEED)
    assert code == 0, err
    assert ("Buffer overflow when allocating memory for batch_prefill_tmp_v with size 536346624 and alignment 16, "
            "but only 413138944 bytes available") in out
    assert "simulating vLLM 0.19.1" in out
    assert "max seqs                 528            in the command" in out
    assert "ignored" in out and "--port 60000" in out
    # once in the ignored options, once in the KV-budget line (issue 28), read from the command
    assert out.count("--gpu-memory-utilization") == 2 and "instead of 0.8500" in out


def test_sglang_seed_command_reproduces_seed():
    code, out, err = plan("--gpu", "b200", "--framework-version", "0.5.5", "--flashinfer", "0.5.0", "--",
                          *SGLANG_SEED)
    assert code == 0, err
    assert ("Buffer overflow when allocating memory for batch_prefill_tmp_s with size 3141632 and alignment 16, "
            "but only 524288 bytes available") in out
    assert "simulating SGLang 0.5.5" in out
    # the overflowing allocation beside the largest one, and why they differ
    assert "overflowing allocation batch_prefill_tmp_s" in out and "largest allocation batch_prefill_tmp_v" in out
    assert "why they differ" in out


def test_every_default_printed_with_its_source():
    code, out, _ = plan("--framework-version", "0.33.0", "--gpu", "b300")
    assert code == 0
    assert "max seqs                 1024           vLLM 0.33 default on GPUs with >= 160 GiB" in out
    assert "max batched tokens       16384          vLLM 0.33 default on GPUs with >= 160 GiB" in out
    assert "capture ceiling          1024           vLLM 0.33: min(2 x max seqs x (1 + draft tokens), 1024)" in out
    assert "flashinfer 0.7.2.post1 (vLLM 0.33 pins it" in out
    assert "vllm allocates 2,147,483,648 bytes" in out and "16384 x 32 x 256 x 16" in out
    assert "verdict    OK" in out


def test_readme_capture_1024_case_acts_without_extra_flags():
    # vLLM 0.32 on a B300 captures up to 1024 by default; the 2 GiB from 16384 tokens covers it,
    # at 8192 tokens (1 GiB) FlashInfer 0.7.0.post1 overflows
    d = plan_json("--framework-version", "0.32.0", "--max-batched-tokens", "8192")
    assert d["limits"]["capture_sizes"][-1] == 1024 and d["verdict"] == "overflow"
    assert d["need"]["float_bytes"] > 1 << 30 == d["server_default_bytes"]
    assert plan_json("--framework-version", "0.32.0")["verdict"] == "ok"


def test_capped_value_is_noted():
    code, out, _ = plan("--framework-version", "0.19.1", "--max-num-seqs", "256", "--max-capture-batch", "1024")
    assert code == 0 and "FlashInfer decode graphs stop at 256" in out
    d = plan_json("--framework-version", "0.19.1", "--max-batched-tokens", "300")
    assert any("lowered to the max batched tokens 300" in n for n in d["notes"])


def test_unknown_trtllm_takes_larger_need_and_names_flag():
    d = plan_json("--framework-version", "0.23.0", "--gpu", "b200")
    assert "TRT-LLM attention availability" in d["planner_missing"]
    assert any("--trtllm-attention on|off" in n for n in d["planner_notes"])
    needs = sorted(c["float_bytes"] for c in d["planner_candidates"])
    assert len(needs) == 2 and d["need"]["float_bytes"] == needs[-1] > needs[0]
    on = plan_json("--framework-version", "0.23.0", "--gpu", "b200", "--trtllm-attention", "on")
    assert on["planners"]["decode"] == "trtllm" and on["need"]["float_bytes"] == needs[0]
    # off SM10x nothing is unknown
    assert plan_json("--framework-version", "0.23.0", "--gpu", "h100")["planner_missing"] == []


def test_moe_verdict_per_gpu():
    gb = plan_json("--framework-version", "0.23.0", "--gpu", "gb200")
    assert gb["moe"]["host_arch"] == "aarch64" and gb["moe"]["block"]
    assert not plan_json("--framework-version", "0.23.0", "--gpu", "b200")["moe"]["block"]
    assert not plan_json("--framework-version", "0.33.0", "--gpu", "gb300")["moe"]["block"]  # FlashInfer >= 0.6.16
    code, out, _ = plan("--framework-version", "0.23.0", "--gpu", "gh200")
    assert "moe guard  aarch64 host" in out


def test_eager_worst_case_in_words():
    code, out, _ = plan()
    assert "one short prompt against a long KV cache" in out


def test_sglang_h200_default_is_ok_b200_overflows():
    h = plan_json("--framework", "sglang", "--framework-version", "0.5.5", "--flashinfer", "0.5.0",
                  "--model", "Qwen3-VL-32B-Instruct", "--gpu", "h200")
    assert h["limits"]["capture_sizes"][-1] == 256 and h["verdict"] == "ok"
    assert h["planners"]["decode"] == "fa2" and h["planners"]["tensor_core_decode"]


def test_framework_contradiction_and_bad_line():
    code, _, err = plan("--framework", "sglang", "--", "vllm", "serve", "Qwen/Qwen3-32B")
    assert code == 2 and "contradicts" in err and len(err.strip().splitlines()) == 1


def test_help_has_text_and_default_for_every_option():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "cmd")
    pl = sub.choices["plan"]
    for act in pl._actions:
        if act.dest == "help":
            continue
        assert act.help, act.option_strings
        if act.nargs != 0:  # options taking a value say their default
            assert "default" in act.help.lower(), act.option_strings


def test_cli_subprocess_launch_command():
    r = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--", "vllm", "serve",
                        "Qwen/Qwen3-32B", "-tp", "2", "--max-num-seqs", "64"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["layout"]["tp"] == 2 and d["layout"]["num_qo_heads"] == 32 and d["limits"]["max_num_seqs"] == 64
    assert d["defaults"]["values"]["max_num_seqs"]["source"] == "in the command"
    assert d["defaults"]["values"]["tp"]["source"] == "in the command"  # was labelled "given" (issue 30)


def test_tp_source_says_where_it_came_from_on_both_servers():
    """A TP size read from the launch command is "in the command"; from --tp, "given"."""
    for fw in ("vllm", "sglang"):
        spec = find_spec("h200")
        for source, want in (("command", "in the command"), ("flag", "given")):
            d = derive(Deployment(framework=fw, gpu_key=spec.key, cc=spec.cc, gpu_name=spec.name, tp=2, source=source))
            assert (d.values["tp"].value, d.values["tp"].source) == (2, want), (fw, source)
