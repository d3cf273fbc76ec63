"""`plan` gives the KV-budget figures the vLLM adapter logs (issue 28).

Expected values are computed here from the model's published shape, not from guard_core:
Qwen3.5-397B-A17B has 15 full-attention layers, 2 KV heads per rank at TP 8 and head dim 256,
bf16 KV: 15 x 2 x (256 + 256) x 2 = 30,720 bytes per token (vLLM's FullAttentionSpec
page_size_bytes / block_size per layer, summed). The vLLM ledger test
(tests/vllm/test_kv_budget.py) checks the same token figure in the adapter's start-up line.
"""

import json

from guard_core.commands import cli
from guard_core.decide import kv_budget

MIB = 1 << 20
PER_TOKEN = 15 * 2 * (256 + 256) * 2


def _plan(capsys, *args, env=None, monkeypatch=None):
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    assert cli.main(["plan", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_default_plan_charges_the_guards_change_in_kv_tokens(capsys):
    r = _plan(capsys)
    kb = r["kv_budget"]
    assert kb["per_token_bytes"] == PER_TOKEN
    assert kb["server_bytes"] == 394 * MIB and kb["buffer_bytes"] == 514 * MIB
    assert kb["kv_tokens"] == -((120 * MIB + PER_TOKEN - 1) // PER_TOKEN) == -4096
    # vLLM requests ceil(total * util): 120 MiB more of a B300's memory keeps the KV size
    total = r["gpu"].get("memory_gib")
    assert kb["keep_utilization"] > 0.9 and "keeps vLLM's unguarded KV size" in kb["line"]
    assert total is None or abs(kb["keep_utilization"] - 0.9 - 120 * MIB / (total * (1 << 30))) < 2e-4


def test_full_and_off(capsys, monkeypatch):
    kb = _plan(capsys, env={"FLASHINFER_GUARD_RESERVE": "full"}, monkeypatch=monkeypatch)["kv_budget"]
    assert kb["charge_bytes"] == 514 * MIB and kb["kv_tokens"] == -((514 * MIB + PER_TOKEN - 1) // PER_TOKEN)
    kb = _plan(capsys, env={"FLASHINFER_GUARD_RESERVE": "off"}, monkeypatch=monkeypatch)["kv_budget"]
    assert kb["charge_bytes"] == 0 and "KV budget unchanged" in kb["line"]


def test_utilization_read_from_the_launch_command():
    assert kv_budget.launch_utilization(["vllm", "serve", "m", "--gpu-memory-utilization", "0.96"]) == 0.96
    assert kv_budget.launch_utilization(["vllm", "serve", "m", "--gpu-memory-utilization=0.93"]) == 0.93
    assert kv_budget.launch_utilization(["vllm", "serve", "m"]) is None
    # 1% of 100 GiB charged: the utilization rises by exactly that share
    assert kv_budget.utilization_keeping_kv(0.9, 1 << 30, 100 << 30) == 0.91


def test_measured_return_moves_the_budget_by_the_charge():
    # the buffer alive in the measurement: vLLM already took it; auto gives back the server's own size
    move = kv_budget.BudgetMove("auto", 514 * MIB, 394 * MIB, 0)
    assert kv_budget.measured_return(10_000 * MIB - 514 * MIB, move) == 10_000 * MIB - 120 * MIB
    # V1 FULL-graph profiling counted vLLM's own 394 MiB already: nothing counted twice
    move = kv_budget.BudgetMove("full", 514 * MIB, 394 * MIB, 394 * MIB)
    assert kv_budget.measured_return(10_000 * MIB - 514 * MIB, move) == 10_000 * MIB - 514 * MIB
