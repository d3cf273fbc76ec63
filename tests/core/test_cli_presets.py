import json
import subprocess
import sys

import pytest

from guard_core.deployment.presets import facts_from_config, load_model, PRESETS


def run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "guard_core.commands.cli", *args], capture_output=True, text=True, env=env)


def test_bare_plan_shows_seed_overflow_and_fix():
    r = run("plan")
    assert r.returncode == 0, r.stderr
    assert "Buffer overflow when allocating memory for batch_prefill_tmp_v with size 536346624" in r.stdout
    assert "only 413138944 bytes available" in r.stdout
    assert "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE=538968064" in r.stdout


def test_plan_json_vllm_seed():
    d = json.loads(run("plan", "--json").stdout)
    assert d["verdict"] == "overflow" and d["need"]["scenario"] == "cuda_graph_decode"
    assert d["need"]["float_bytes"] == 538441728
    s512 = [s for s in d["scenarios"] if s["name"] == "cuda_graph_decode" and s["batch"] == 512][0]
    assert {"name": "batch_prefill_tmp_v", "buffer": "float", "bytes": 536346624} in s512["allocations"]
    assert {s["name"] for s in d["scenarios"]} >= {"cuda_graph_decode", "eager_decode", "eager_prefill"}
    for s in d["scenarios"]:
        assert {"name", "batch", "float_bytes", "int_bytes", "allocations"} <= set(s)


def test_plan_json_sglang_seed():
    # the seed ran on a B200: SGLang 0.5.5 captures up to 512 there (>= 160 GiB)
    d = json.loads(run("plan", "--json", "--framework", "sglang", "--framework-version", "0.5.5",
                       "--model", "Qwen/Qwen3-VL-32B-Instruct-FP8", "--gpu", "b200", "--flashinfer", "0.5.0").stdout)
    assert d["server_default_bytes"] == 402653184 and d["verdict"] == "overflow"
    assert d["limits"]["capture_sizes"][-1] == 512
    assert d["overflow"] == {"allocation": "batch_prefill_tmp_s", "bytes": 3141632, "alignment": 16, "available": 524288}
    # on an H200 (141 GB) at TP 1 SGLang 0.5.5 captures only up to 256: no crash there
    d = json.loads(run("plan", "--json", "--framework", "sglang", "--framework-version", "0.5.5",
                       "--model", "Qwen/Qwen3-VL-32B-Instruct-FP8", "--gpu", "h200", "--flashinfer", "0.5.0").stdout)
    assert d["limits"]["capture_sizes"][-1] == 256 and d["verdict"] == "ok"
    # SGLang 0.5.6 puts Qwen3-VL on its 512 MiB list: no crash there
    d = json.loads(run("plan", "--json", "--framework", "sglang", "--framework-version", "0.5.6",
                       "--model", "Qwen3-VL-32B-Instruct", "--gpu", "h200", "--flashinfer", "0.5.3").stdout)
    assert d["verdict"] == "ok"


def test_plan_fixed_flashinfer_ok():
    d = json.loads(run("plan", "--json", "--flashinfer", "0.7.2.post1").stdout)
    assert d["verdict"] == "ok" and d["need"]["float_bytes"] < 394 << 20


@pytest.mark.parametrize("args,needle", [
    (("plan", "--model", "NoSuchModel-7B"), "unknown model"),
    (("plan", "--gpu", "tpu-v5"), "unknown GPU"),
    (("plan", "--tp", "3"), "not divisible"),
    (("plan", "--max-num-seqs", "-1"), "positive integer"),
    (("plan", "--qo-heads", "30", "--kv-heads", "4", "--head-dim", "128"), "multiple"),
    (("plan", "--flashinfer", "latest"), "version"),
    (("plan", "--capture-sizes", "1,x"), "comma-separated"),
    (("bogus",), "invalid choice"),
])
def test_bad_input_one_line_exit_2(args, needle):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in r.stderr


def test_config_without_heads(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"architectures": ["X"], "hidden_size": 4096}))
    r = run("plan", "--model", str(p))
    assert r.returncode == 2 and "num_attention_heads" in r.stderr


def test_config_json_vl_and_hybrid(tmp_path):
    vl = {"architectures": ["Qwen3VLForConditionalGeneration"],
          "text_config": {"num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 64}}
    f = facts_from_config(vl)
    assert (f.num_attention_heads, f.num_key_value_heads, f.head_dim) == (64, 8, 128)
    hybrid = {"architectures": ["Qwen3_5MoeForConditionalGeneration"],
              "text_config": {"num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
                              "num_hidden_layers": 8,
                              "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"]}}
    f = facts_from_config(hybrid)
    assert f.kind == "hybrid" and f.attention_layers == 2
    nohd = {"architectures": ["LlamaForCausalLM"], "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}
    assert facts_from_config(nohd).head_dim == 128
    mla = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "num_attention_heads": 128, "kv_lora_rank": 512,
           "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    assert facts_from_config(mla).uses_mla
    p = tmp_path / "m"
    p.mkdir()
    (p / "config.json").write_text(json.dumps(vl))
    d = json.loads(run("plan", "--json", "--model", str(p), "--flashinfer", "0.5.0", "--framework", "sglang",
                       "--framework-version", "0.5.5", "--gpu", "h100", "--max-capture-batch", "512").stdout)
    assert d["need"]["float_bytes"] == 405270528


def test_presets_and_mla():
    assert len(PRESETS) >= 12
    assert load_model("deepseek-ai/DeepSeek-V3").uses_mla
    assert load_model("nvidia/Qwen3.5-397B-A17B-NVFP4").num_key_value_heads == 2
    d = json.loads(run("plan", "--json", "--model", "DeepSeek-V3").stdout)
    assert d["verdict"] == "not_applicable"
    r = run("presets")
    assert r.returncode == 0 and "Qwen3.5-397B-A17B" in r.stdout


def test_doctor_runs_and_reports_bad_env():
    import os
    env = dict(os.environ, FLASHINFER_GUARD_MOE="sometimes")
    r = run("doctor", env=env)
    assert r.returncode == 0
    assert "FLASHINFER_GUARD_MOE" in r.stdout and "auto, strict, on or off" in r.stdout
    assert "moe guard" in r.stdout and "entry point vllm.general_plugins" in r.stdout


def test_import_is_light():
    code = ("import sys, guard_core, guard_core.flashinfer.sizing, guard_core.decide.records, guard_core.runtime.wrapping, guard_core.runtime.settings;"
            "bad=[m for m in ('torch','flashinfer','vllm','sglang') if m in sys.modules]; print(bad)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "[]"
