"""Issue 26: where `plan` drifted from the decision the guard makes inside the server.

Each expected figure is the plugin's own, measured inside the real server for the same
deployment (the issue's reproductions), or read from the server's code (cited per test).
"""

from tests.core.test_plan_defaults import plan_json

GPT_OSS = "tests/data/model_configs/gpt-oss-120b.json"


def test_gpt_oss_on_vllm_captures_up_to_1024():
    # vLLM raises gpt-oss's ceiling to 1024 when no capture size is given
    # (GptOssForCausalLMConfig.verify_and_update_config, model_executor/models/config.py 0.23.0:164-168,
    # 0.33.0:555-559); the plugin inside vLLM 0.23.0 sizes 408,678,400 B for this deployment
    r = plan_json("--gpu", "h200", "--framework-version", "0.23.0", "--model", GPT_OSS, "--max-num-seqs", "1024")
    assert r["defaults"]["values"]["max_capture"]["value"] == 1024
    assert r["need"]["float_bytes"] == 408_678_400  # was 204,206,080 (ceiling 512)
    assert r["need"]["batch"] == 1024
    # a 256 MiB buffer no longer passes (the server needs 389.7 MiB)
    r = plan_json("--gpu", "h200", "--framework-version", "0.23.0", "--model", GPT_OSS, "--max-num-seqs", "1024",
                  "--workspace", "256MiB")
    assert r["verdict"] == "overflow"


def test_gpt_oss_keeps_a_given_ceiling():
    r = plan_json("--gpu", "h200", "--framework-version", "0.23.0", "--model", GPT_OSS, "--max-num-seqs", "1024",
                  "--max-capture-batch", "512")
    assert r["defaults"]["values"]["max_capture"]["value"] == 512
    assert r["need"]["float_bytes"] == 204_206_080
