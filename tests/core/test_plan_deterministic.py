"""`flashinfer-guard plan -- python -m sglang.launch_server ... --enable-deterministic-inference`.

Expected values are the public reports' (GB10, 24 q / 4 kv heads, head_dim 256, chunk 8192:
"batch_prefill_tmp_v with size 2415919104 ... only 2147483648 bytes available", "any prompt over
~7.3k tokens"; on FlashInfer 0.7.1+ (SGLang 0.5.22/0.5.23) "prompts over about 41k tokens") and
SGLang's own code (the forced 2 GiB: flashinfer_backend.py 0.5.5:183, 0.5.20:423, 0.5.23:451).
"""

import json

import pytest

from tests.core.test_plan_defaults import plan, plan_json

GB10_CMD = ["--gpu", "gb10", "--qo-heads", "24", "--kv-heads", "4", "--head-dim", "256", "--",
            "python", "-m", "sglang.launch_server", "--model-path", "x", "--chunked-prefill-size", "8192",
            "--enable-deterministic-inference"]
FORCED = 2147483648


def _gb10(line, ctx, *extra):
    args = list(GB10_CMD) + ["--context-length", str(ctx), *extra]
    return ["--framework-version", line] + args


def test_gb10_report_on_0_5_20_shows_the_published_allocation_against_2gib():
    r = plan_json(*_gb10("0.5.20", 8192))
    assert r["flashinfer"] == "0.6.18"  # what SGLang 0.5.20 pins
    assert r["workspace_bytes"] == r["server_default_bytes"] == FORCED
    assert r["overflow"]["allocation"] == "batch_prefill_tmp_v"
    assert r["overflow"]["bytes"] == 2415919104 and r["overflow"]["available"] == FORCED
    assert 7000 < r["fixed_split"]["longest_prompt_in_buffer"] < 7400  # "over ~7.3k tokens kills the server"
    code, out, _ = plan(*_gb10("0.5.20", 8192))
    assert code == 0
    assert ("Buffer overflow when allocating memory for batch_prefill_tmp_v with size 2415919104 and alignment 16, "
            "but only 2147483648 bytes available") in out
    assert "SGLang forces 2048.0 MiB" in out


def test_gb10_on_0_5_23_shows_the_41k_limit():
    r = plan_json(*_gb10("0.5.23", 131072))
    assert r["flashinfer"] == "0.7.2"
    assert 40000 < r["fixed_split"]["longest_prompt_in_buffer"] < 42000  # "prompts over about 41k tokens"
    assert r["verdict"] == "overflow"
    # a context that fits in SGLang's own 2 GiB: ok, the guard keeps SGLang's size
    ok = plan_json(*_gb10("0.5.23", 32768))
    assert ok["verdict"] == "ok" and ok["fixed_split"]["allocate_bytes"] == FORCED


@pytest.mark.parametrize("line", ["0.5.5", "0.5.11", "0.5.15", "0.5.20", "0.5.22", "0.5.23"])
def test_every_checked_line_answers_for_the_mode(line):
    r = plan_json(*_gb10(line, 32768))
    fx = r["fixed_split"]
    assert r["server_default_bytes"] == FORCED
    assert fx["prefill_split_tile_size"] == 4096 and fx["decode_split_tile_size"] == 2048
    names = {s["name"] for s in r["scenarios"]}
    assert {"fixed_split_prefill", "fixed_split_decode"} <= names
    assert "eager_prefill" not in names  # the SM-capped prefill does not run in this mode
    assert all(s["float_bytes"] == 0 for s in r["scenarios"] if s["name"] == "cuda_graph_decode")
    assert fx["longest_prompt_in_buffer"] <= 32768


def test_split_sizes_from_the_commands_environment_and_the_pool():
    base = plan_json(*_gb10("0.5.23", 131072))
    i = GB10_CMD.index("--")
    big = plan_json("--framework-version", "0.5.23", *GB10_CMD[:i + 1],
                    "SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE=16384", *GB10_CMD[i + 1:], "--context-length", "131072")
    assert big["fixed_split"]["prefill_split_tile_size"] == 16384
    assert big["need"]["float_bytes"] < base["need"]["float_bytes"]
    pooled = plan_json(*_gb10("0.5.23", 131072, "--max-total-tokens", "300000"))
    assert pooled["fixed_split"]["kv_pool_tokens"] == 300000


def test_deterministic_needs_a_context_length():
    code, _, err = plan("--framework-version", "0.5.23", *GB10_CMD)
    assert code == 2 and "--max-model-len" in err and "\n" == err[-1] and err.count("\n") == 1


def test_unaffordable_prints_the_guards_warning_line():
    code, out, _ = plan(*_gb10("0.5.20", 131072))
    assert code == 0
    line = [x for x in out.splitlines() if x.strip().startswith("[flashinfer-guard] workspace: deterministic")]
    assert len(line) == 1
    assert "prompts up to" in line[0] and "--chunked-prefill-size" in line[0]
    assert json.dumps(line[0]).count("\\n") == 0
