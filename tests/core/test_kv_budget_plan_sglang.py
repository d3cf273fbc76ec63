"""`plan` gives the KV-budget figures the SGLang adapter logs at start-up (issue 28).

Expected values by hand from the published shape: Qwen3-VL-32B has 64 layers of 8 KV heads,
head dim 128, bf16 KV, so SGLang's cell size (its bytes per token) at TP 1 is
8 x 128 x 64 x 2 (K and V) x 2 = 262,144 B (0.5.5 model_runner.py:1309-1316; 0.5.11+
8 x (128 + 128) x 64 x 2, pool_configurator.py). SGLang 0.5.5 gives it 384 MiB of workspace
(not on its 512 MiB architecture list). tests/sglang/test_kv_budget.py holds plan's figures
equal to the start-up line on SGLang's own sizing.
"""

import json

import pytest

from guard_core.commands import cli
from guard_core.decide import kv_budget
from guard_core.deployment.launch_command import parse_launch

MIB = 1 << 20
CELL = 8 * 128 * 64 * 2 * 2
SEED = ["--framework", "sglang", "--framework-version", "0.5.5", "--gpu", "h200"]


def _kv(capsys, monkeypatch, env, *args):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert cli.main(["plan", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)["kv_budget"]


def _cmd(*extra):
    return ["--gpu", "h200", "--framework-version", "0.5.5", "--", "python", "-m", "sglang.launch_server",
            "--model-path", "Qwen/Qwen3-VL-32B-Instruct", *extra]


def test_auto_charges_the_guards_raise_in_sglang_kv_tokens(capsys, monkeypatch):
    kb = _kv(capsys, monkeypatch, {"FLASHINFER_GUARD_WORKSPACE": "1GiB"}, *_cmd("--mem-fraction-static", "0.88"))
    assert (kb["mode"], kb["buffer_bytes"], kb["server_bytes"]) == ("auto", 1024 * MIB, 384 * MIB)
    assert kb["charge_bytes"] == 640 * MIB and kb["per_token_bytes"] == CELL
    assert kb["kv_tokens"] == -(640 * MIB // CELL) == -2560
    assert "KV cache -2,560 tokens (262,144 B per token)" in kb["line"]
    # 640 MiB of an H200's ~150 GB pre-load memory: +0.0045, SGLang's three decimals rounded up
    assert kb["mem_fraction_static"] == 0.88 and kb["keep_mem_fraction_static"] == 0.885
    assert "--mem-fraction-static 0.885 (instead of 0.880) keeps SGLang's unguarded KV size" in kb["line"]


def test_full_off_and_the_automatic_fraction(capsys, monkeypatch):
    kb = _kv(capsys, monkeypatch, {"FLASHINFER_GUARD_RESERVE": "full"}, "--model", "Qwen/Qwen3-VL-32B-Instruct", *SEED)
    assert kb["charge_bytes"] == 384 * MIB and kb["kv_tokens"] == -1536
    assert kb["mem_fraction_static"] is None and kb["mem_fraction_static_delta"] == 0.003
    assert "+0.003 over SGLang's automatic value" in kb["line"] and "automatic value (its own estimate)" in kb["estimate"]
    kb = _kv(capsys, monkeypatch, {"FLASHINFER_GUARD_RESERVE": "off"}, "--model", "Qwen/Qwen3-VL-32B-Instruct", *SEED)
    assert kb["charge_bytes"] == 0 and "KV budget unchanged" in kb["line"]


def test_hybrid_and_mla_models_say_the_tokens_are_unknown(capsys, monkeypatch):
    # Qwen3.5: linear-attention layers beside the full ones (SGLang's Mamba pool shares the budget)
    kb = _kv(capsys, monkeypatch, {"FLASHINFER_GUARD_RESERVE": "full"}, "--framework", "sglang",
             "--framework-version", "0.5.5", "--gpu", "h200", "--tp", "8")
    assert kb["per_token_bytes"] is None and kb["kv_tokens"] is None
    assert "KV tokens unknown here (Mamba" in kb["estimate"] and "KV cache" not in kb["line"]


def test_cell_size_per_line():
    # 0.5.5 sizes K and V with the query/key head dim; 0.5.11+ adds the value head dim
    assert kv_budget.sglang_cell_bytes("0.5.5", [(10, 2, 192, 128)], 2) == 10 * 2 * 2 * 192 * 2
    assert kv_budget.sglang_cell_bytes("0.5.23", [(10, 2, 192, 128)], 2) == 10 * 2 * (192 + 128) * 2
    assert kv_budget.sglang_cell_bytes("0.5.11", [(64, 8, 128, 128)], 1) == CELL // 2
    assert kv_budget.sglang_cell_bytes("0.5.23", [], 2) is None


def test_fraction_delta_rounds_up_either_way():
    assert kv_budget.sglang_mem_fraction_delta(512 * MIB, 100 << 30) == 0.005
    assert kv_budget.sglang_mem_fraction_delta(1, 100 << 30) == 0.001  # one byte: rounded up, never short
    assert kv_budget.sglang_mem_fraction_delta(-463 * MIB, 150217949184) == -0.003  # a credit: lowered less
    assert kv_budget.sglang_mem_fraction_delta(0, 100 << 30) == 0.0


@pytest.mark.parametrize("spelling", [["--mem-fraction-static", "0.85"], ["--mem-fraction-static=0.85"]])
def test_the_commands_fraction_is_read_and_still_listed_as_not_changing_the_workspace(spelling):
    L = parse_launch(["python", "-m", "sglang.launch_server", "--model-path", "m", *spelling], line="0.5.5",
                     reader="builtin")
    assert L.mem_fraction_static == 0.85
    assert any("--mem-fraction-static" in x for x in L.ignored)
    bad = parse_launch(["python", "-m", "sglang.launch_server", "--model-path", "m", "--mem-fraction-static", "1.5"],
                       line="0.5.5", reader="builtin")
    assert bad.mem_fraction_static is None
