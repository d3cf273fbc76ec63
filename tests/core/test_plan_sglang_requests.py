"""Issue 26, found by the SGLang parity search (tests/sglang/test_plan_parity.py): how many
requests SGLang runs, and so which decode CUDA graphs it captures, where `plan` did not follow.

Expected values are read from SGLang's code (cited per test), never from guard_core.
"""

from tests.core.test_plan_defaults import plan_json

LLAMA_8B = "tests/data/model_configs/Meta-Llama-3.1-8B.json"
SERVER = ["python", "-m", "sglang.launch_server", "--model-path", LLAMA_8B]


def _graph_batches(r) -> list:
    return sorted({s["batch"] for s in r["scenarios"] if s["name"].startswith("cuda_graph")})


def test_no_decode_graph_above_the_request_pool():
    # get_batch_sizes_to_capture (cuda_graph_runner.py 0.5.11:496-522): the list is cut at the
    # runner's req_to_token_pool.size, and that size is added; the pool holds
    # --max-running-requests (model_runner_kv_cache_mixin.py 0.5.11:698-717). H100 at TP 1
    # would capture up to 256 by default.
    r = plan_json("--gpu", "h100", "--framework-version", "0.5.11", "--", *SERVER, "--max-running-requests", "20")
    assert _graph_batches(r) == [1, 2, 4, 8, 12, 16, 20]
    assert r["limits"]["capture_sizes"] == [1, 2, 4, 8, 12, 16, 20]


def test_dp_attention_divides_the_request_pool():
    # 0.5.23: the pool holds max(1, max_running_requests // attn_dp_size)
    # (mem_cache/kv_cache_configurator.py 0.5.23:3119-3131); 0.5.11: // dp_size, which is the DP
    # size with DP attention (model_runner.py 0.5.11:338)
    for line, graph_flag in (("0.5.23", "--cuda-graph-max-bs-decode"), ("0.5.11", "--cuda-graph-max-bs")):
        r = plan_json("--gpu", "h200", "--framework-version", line, "--", *SERVER, "--tp-size", "4", "--dp-size", "2",
                      "--enable-dp-attention", "--max-running-requests", "64", graph_flag, "256")
        assert max(_graph_batches(r)) == 32, line


def test_speculation_runs_48_requests_unless_told():
    # EAGLE (and NEXTN, STANDALONE, NGRAM) without --max-running-requests: ServerArgs sets 48
    # (server_args.py 0.5.11:3447-3459; arg_groups/speculative_hook.py 0.5.23:1072-1095), so the
    # pool holds 48 and no verify graph above 48 is captured (H200 at TP 1 would capture up to 256)
    for line in ("0.5.11", "0.5.23"):
        r = plan_json("--gpu", "h200", "--framework-version", line, "--", *SERVER, "--speculative-algorithm", "EAGLE",
                      "--speculative-draft-model-path", LLAMA_8B, "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
        assert r["limits"]["max_num_seqs"] == 48, line
        assert max(_graph_batches(r)) == 48, line
    told = plan_json("--gpu", "h200", "--framework-version", "0.5.11", "--", *SERVER, "--speculative-algorithm", "EAGLE",
                     "--speculative-draft-model-path", LLAMA_8B, "--speculative-num-steps", "3",
                     "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                     "--max-running-requests", "100")
    assert told["limits"]["max_num_seqs"] == 100 and max(_graph_batches(told)) == 100


def test_eagle_topk_without_a_request_count_sizes_48_x_topk():
    # Llama-3.1-8B, EAGLE topk 8 / 7 steps / 8 draft tokens, --cuda-graph-max-bs-decode 64, H200,
    # SGLang 0.5.23, no --max-running-requests: SGLang resolves 48 running requests and a pool of 48,
    # so the draft decodes at most 8 x 48 = 384 requests in its graphs; the plugin inside SGLang
    # 0.5.23 (tests/sglang/parity_probe.py) sizes 31,636,992 B (plan said 42,204,672 B, 8 x 64)
    r = plan_json("--gpu", "h200", "--framework-version", "0.5.23", "--", *SERVER, "--speculative-algorithm", "EAGLE",
                  "--speculative-draft-model-path", LLAMA_8B, "--speculative-eagle-topk", "8",
                  "--speculative-num-steps", "7", "--speculative-num-draft-tokens", "8",
                  "--cuda-graph-max-bs-decode", "64")
    assert r["need"]["float_bytes"] == 31_636_992
    assert r["need"]["scenario"] == "cuda_graph_decode" and r["need"]["batch"] == 8 * 48
