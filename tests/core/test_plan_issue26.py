"""Issue 26: where `plan` drifted from the decision the guard makes inside the server.

Each expected figure is the plugin's own, measured inside the real server for the same
deployment (the issue's reproductions), or read from the server's code (cited per test).
"""

import pytest

from tests.core.test_plan_defaults import plan, plan_json

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


QWEN3_32B = "tests/data/model_configs/Qwen3-32B.json"
NGRAM3 = '{"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}'


def test_vllm_speculation_without_trtllm_decode_sizes_no_verify_graphs():
    # vLLM 0.23.0 without TRT-LLM (H200): the FlashInfer builder supports only single-token decode
    # graphs (get_cudagraph_support, flashinfer.py:713-745), so with speculative decoding vLLM drops
    # FULL graphs to PIECEWISE (config/compilation.py:1398-1416, it logs "CUDAGraphMode.FULL_AND_PIECEWISE
    # is not supported with spec-decode ... setting cudagraph_mode=PIECEWISE") and the builder plans
    # every batch eagerly, verifies as prefills (reorder_batch_threshold 1, flashinfer.py:648,667).
    # The adapter inside vLLM 0.23.0 on vLLM's own resolved config and builder (tests/vllm/parity_probe.py,
    # Qwen3-32B's shape, 3 n-gram draft tokens, H200): 17,436,672 B. plan said OVERFLOW 2576 MiB.
    r = plan_json("--gpu", "h200", "--framework-version", "0.23.0", "--", "vllm", "serve", QWEN3_32B,
                  "--speculative-config", NGRAM3)
    assert r["limits"]["draft_tokens"] == 3 and r["limits"]["capture_sizes"] == []
    assert not any(s["name"].startswith("cuda_graph") for s in r["scenarios"])
    assert r["need"]["float_bytes"] == 17_436_672 and r["verdict"] == "ok"
    # without speculation the same deployment captures its decode graphs: 386.5 MiB (the adapter's too)
    r = plan_json("--gpu", "h200", "--framework-version", "0.23.0", "--", "vllm", "serve", QWEN3_32B)
    assert r["need"]["float_bytes"] == 405_270_528


def test_vllm_speculation_counts_capture_sizes_in_tokens_where_verify_is_a_decode():
    # TRT-LLM attention unknown on B300: the builder may verify through its decode graphs, whose
    # capture sizes count tokens (a 512-token graph holds 128 requests of 4 tokens)
    r = plan_json("--gpu", "b300", "--framework-version", "0.23.0", "--trtllm-attention", "off", "--", "vllm",
                  "serve", QWEN3_32B, "--speculative-config", NGRAM3)
    assert not any(s["name"].startswith("cuda_graph") for s in r["scenarios"])  # off: PIECEWISE, eager only
    r = plan_json("--gpu", "b300", "--framework-version", "0.23.0", "--", "vllm", "serve", QWEN3_32B,
                  "--speculative-config", NGRAM3)
    verify = [s for s in r["scenarios"] if s["name"] == "cuda_graph_verify"]
    assert verify and max(s["batch"] for s in verify) == 128 and all(s["q_len"] == 4 for s in verify)


LLAMA_8B = "tests/data/model_configs/Meta-Llama-3.1-8B.json"
SGLANG = ["python", "-m", "sglang.launch_server", "--model-path", LLAMA_8B, "--speculative-algorithm", "EAGLE"]


def test_sglang_eagle_topk_sizes_the_draft_decode_at_topk_x_bs():
    # the draft worker's multi-step backend decodes topk x bs requests (flashinfer_backend.py
    # 0.5.5:1446, 0.5.23:2501 ``bs = self.topk * num_seqs``); the plugin inside SGLang 0.5.23 on
    # H200 sizes 42,204,672 B for this deployment; plan read neither option and sized 41,742,336 B.
    # --max-running-requests 64: without it SGLang runs 48 requests at most with EAGLE and captures
    # no graph above 48 (test_sglang_speculation_runs_48_requests_unless_told)
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *SGLANG, "--speculative-eagle-topk", "8",
                  "--speculative-num-steps", "7", "--speculative-num-draft-tokens", "8",
                  "--cuda-graph-max-bs-decode", "64", "--max-running-requests", "64")
    assert r["need"]["float_bytes"] == 42_204_672
    assert r["need"]["scenario"] == "cuda_graph_decode" and r["need"]["batch"] == 8 * 64
    assert not any("topk" in o or "num-steps" in o for o in r["not_read_options"])
    runners = {g["runner"]: g for g in r["groups"]}
    assert runners["target"]["scenario"] == "cuda_graph_verify" and runners["target"]["need_bytes"] == 41_742_336
    assert runners["draft"]["dominant"]


def test_sglang_eagle_without_steps_takes_sglangs_own_choice():
    # auto_choose_speculative_params: (steps, topk, draft tokens) = (5, 4, 8) for LlamaForCausalLM
    # (server_args.py 0.5.5:4187-4189; arg_groups/speculative_hook.py 0.5.23:1440-1441)
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *SGLANG, "--cuda-graph-max-bs-decode", "64",
                  "--max-running-requests", "64")
    vals = r["defaults"]["values"]
    assert vals["eagle_topk"]["value"] == 4 and vals["spec_steps"]["value"] == 5
    assert r["limits"]["draft_tokens"] == 7
    assert max(g["batch"] for g in r["groups"] if g["runner"] == "draft") == 4 * 64
    # topk 1: the draft tokens become steps + 1 (server_args.py 0.5.5:1597-1604)
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *SGLANG, "--speculative-eagle-topk", "1",
                  "--speculative-num-steps", "3", "--speculative-num-draft-tokens", "9")
    assert r["limits"]["draft_tokens"] == 3


SEED_MODEL = "nvidia/Qwen3.5-397B-A17B-NVFP4"  # the vLLM seed: 513.5 MiB against vLLM 0.19.1's 394 MiB
GIB = "1073741824"


def test_docker_run_passes_only_its_own_env(monkeypatch):
    # the container gets only -e/--env/--env-file (docker run reference); an exported 1 GiB never reaches
    # vLLM: it allocates its 394 MiB default and dies (issue 26, 4); plan checked the exported 1 GiB: OK
    monkeypatch.setenv("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", GIB)
    docker = ["--", "docker", "run", "--gpus", "all", "vllm/vllm-openai:v0.19.1", "--model", SEED_MODEL]
    r = plan_json(*docker)
    assert r["workspace_bytes"] == 413_138_944 and r["verdict"] == "overflow"
    assert "docker run passes only" in r["environment"]
    assert any("does not see it" in n for n in r["notes"])
    code, out, _ = plan(*docker)
    assert "verdict    OVERFLOW: FlashInfer will raise at start-up (against 394.0 MiB" in out
    # passed with -e VAR (the client's value), -e VAR=value, --env=VAR=value: the container sees it
    for e in (["-e", "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"], ["-e", f"VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE={GIB}"],
              [f"--env=VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE={GIB}"]):
        r = plan_json("--", "docker", "run", *e, "vllm/vllm-openai:v0.19.1", "--model", SEED_MODEL)
        assert r["workspace_bytes"] == int(GIB) and r["verdict"] == "ok", e


def test_env_file_of_docker_run(monkeypatch, tmp_path):
    monkeypatch.delenv("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", raising=False)
    f = tmp_path / "server.env"
    f.write_text(f"# sizes\nVLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE={GIB}\n")
    r = plan_json("--", "podman", "run", "--env-file", str(f), "vllm/vllm-openai:v0.19.1", "--model", SEED_MODEL)
    assert r["workspace_bytes"] == int(GIB) and r["verdict"] == "ok"


def test_env_i_and_env_unset_take_the_variable_away(monkeypatch):
    monkeypatch.setenv("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", GIB)
    assert plan_json("--", "vllm", "serve", SEED_MODEL)["verdict"] == "ok"  # exported: the server sees it
    for prefix in (["env", "-i", "PATH=/usr/bin"], ["env", "-u", "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"],
                   ["env", "--unset=VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE"]):
        r = plan_json("--", *prefix, "vllm", "serve", SEED_MODEL)
        assert r["workspace_bytes"] == 413_138_944 and r["verdict"] == "overflow", prefix
    # and env -i then an assignment: the assignment holds
    r = plan_json("--", "env", "-i", f"VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE={GIB}", "vllm", "serve", SEED_MODEL)
    assert r["workspace_bytes"] == int(GIB)


def test_sglang_in_docker_does_not_see_the_exported_size(monkeypatch):
    monkeypatch.setenv("SGLANG_FLASHINFER_WORKSPACE_SIZE", str(1 << 31))
    cmd = ["lmsysorg/sglang:v0.5.5", "python3", "-m", "sglang.launch_server", "--model-path", LLAMA_8B]
    assert plan_json("--", "docker", "run", *cmd)["workspace_bytes"] == 384 << 20
    assert plan_json("--", "docker", "run", "-e", "SGLANG_FLASHINFER_WORKSPACE_SIZE", *cmd)["workspace_bytes"] == 1 << 31


def test_the_guards_switches_come_from_the_servers_environment(monkeypatch):
    # FLASHINFER_GUARD_* as the server process sees them: exported here but not passed to the container
    monkeypatch.setenv("FLASHINFER_GUARD_WORKSPACE", "off")
    docker = ["--", "docker", "run", "vllm/vllm-openai:v0.19.1", "--model", SEED_MODEL]
    r = plan_json(*docker)
    assert r["guard"]["action"] == "raise"  # the container's guard runs with its defaults
    r = plan_json("--", "docker", "run", "-e", "FLASHINFER_GUARD_WORKSPACE", "vllm/vllm-openai:v0.19.1", "--model",
                  SEED_MODEL)
    assert r["guard"]["action"] == "off" and r["verdict"] == "overflow"
    monkeypatch.setenv("FLASHINFER_GUARD", "0")
    assert plan_json("--", "vllm", "serve", SEED_MODEL)["guard"]["enabled"] is False


def test_model_overrides_are_applied_as_the_server_applies_them():
    # SGLang: config.update(json_model_override_args) (hf_transformers_utils.py 0.5.5:267-268)
    sg = ["--gpu", "h200", "--framework-version", "0.5.23", "--", "python", "-m", "sglang.launch_server",
          "--model-path", QWEN3_32B]
    base = plan_json(*sg)
    r = plan_json(*sg, "--json-model-override-args", '{"num_key_value_heads": 32}')
    assert (base["layout"]["num_kv_heads"], r["layout"]["num_kv_heads"]) == (8, 32)
    assert not any("override" in o for o in r["ignored_options"] + r["not_read_options"])
    assert r["need"]["float_bytes"] != base["need"]["float_bytes"]
    # vLLM: hf_overrides key by key, a nested config updated recursively (config/model.py 0.23.0:449-464)
    vl = ["--gpu", "h200", "--framework-version", "0.23.0", "--", "vllm", "serve", QWEN3_32B]
    r = plan_json(*vl, "--hf-overrides", '{"num_attention_heads": 32, "head_dim": 256}')
    assert (r["layout"]["num_qo_heads"], r["layout"]["head_dim_qk"]) == (32, 256)


def test_flashinfer_guard_moe_is_honoured(monkeypatch):
    # the evidence row route-map-oob (FlashInfer #4237/#4288) on SM103 with FlashInfer 0.6.6: "default
    # warn, strict block"; `doctor` reads FLASHINFER_GUARD_MOE=strict, plan ignored it
    r = plan_json("--gpu", "b300")
    assert r["moe"]["block"] is False and r["moe"]["setting"] == "auto"
    monkeypatch.setenv("FLASHINFER_GUARD_MOE", "strict")
    r = plan_json("--gpu", "b300")
    assert r["moe"]["block"] is True and r["moe"]["setting"] == "strict"
    assert r["moe"]["decision"]["block"] is True


def test_split_tile_sizes_are_read_with_pythons_int(monkeypatch):
    # SGLang's get_int_env_var: int(value), its default only where int() raises (utils/common.py
    # 0.5.5:257-265, 0.5.23:1445-1452); int() reads fullwidth digits and underscores
    from guard_core.decide.fixed_split import split_sizes_from_env

    assert split_sizes_from_env({"SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE": "\uff18\uff11\uff19\uff12",
                                 "SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE": " 1_024 "})[:2] == (8192, 1024)
    p, d, notes = split_sizes_from_env({"SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE": "4k"})
    assert (p, d) == (4096, 2048) and "its default 4096" in notes[0]
    cmd = ["--gpu", "gb10", "--framework-version", "0.5.23", "--qo-heads", "24", "--kv-heads", "4", "--head-dim",
           "256", "--", "env", "SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE=\uff18\uff11\uff19\uff12", "python", "-m",
           "sglang.launch_server", "--model-path", "x", "--enable-deterministic-inference", "--context-length", "8192"]
    r = plan_json(*cmd)
    assert r["fixed_split"]["prefill_split_tile_size"] == 8192


def test_native_size_is_read_with_pythons_int(monkeypatch):
    # vLLM: int(os.getenv("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", ...)) (envs.py 0.23.0:1607-1609);
    # SGLang: EnvInt.parse -> int(value) (environ.py 0.5.23:153-158): fullwidth digits, underscores, spaces
    for raw in ("\uff11\uff10\uff17\uff13\uff17\uff14\uff11\uff18\uff12\uff14", " 1_073_741_824 "):
        monkeypatch.setenv("VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", raw)
        r = plan_json("--", "vllm", "serve", SEED_MODEL)
        assert r["workspace_bytes"] == int(GIB) and r["verdict"] == "ok", raw


def test_without_sglang_installed_the_rules_resolve_and_say_why():
    # issue 26 item 2: SGLang's own resolution only where SGLang is installed in plan's interpreter;
    # here (the core environment) the per-line rules answer, and the report says which and why
    from importlib import metadata

    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("sglang")
    r = plan_json("--gpu", "h200", "--", "python", "-m", "sglang.launch_server", "--model-path", LLAMA_8B)
    assert r["resolution"]["server"] is False
    assert r["resolution"]["why"] == "not installed here: SGLang"
    text = plan("--gpu", "h200", "--", "python", "-m", "sglang.launch_server", "--model-path", LLAMA_8B)[1]
    assert "resolved   by built-in rules for SGLang 0.5.5 (not installed here: SGLang)" in text
