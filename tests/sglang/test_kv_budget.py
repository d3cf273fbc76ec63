"""Issue 28 on SGLang: the workspace paid for where SGLang sizes its KV pool.

SGLang's own sizing code of the installed line (0.5.2x ``KVCacheConfigurator``,
0.5.11 the runner's ``_profile_available_bytes``, 0.5.5 ``profile_max_num_token``)
and its ``FlashInferAttnBackend.__init__`` run on a CPU ledger standing in for the
device's memory (tests/sglang/kv_budget_scenarios.py; every stand-in is listed in
its ``STAND_INS`` and checked below). One SGLang scheduler process per run, Qwen3-VL-32B
on one H200 (the seed deployment); the operator's slack is 256 MiB (less than SGLang's
own 384/512 MiB buffer) so that without the guard the workspace does not fit.

Expected values come from the runs themselves (SGLang's sizes, the ledger's bytes),
never from guard_core. On today's main every test here fails: there is no
``sglang_guard.kv_reserve`` (no reservation, no full mode, nothing to break).
"""

from __future__ import annotations

import json
import os
import sys

from tests.common import forkserver

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20
GIB = 1 << 30
TIGHT = {"slack_mib": 256}

_runs: dict = {}


def run(env=None, **opts):
    key = (json.dumps(env or {}, sort_keys=True), json.dumps(opts, sort_keys=True))
    if key not in _runs:
        e = {k: v for k, v in os.environ.items()
             if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))}
        e.update(env or {})
        proc = forkserver.run([sys.executable, os.path.join(HERE, "kv_budget_scenarios.py"), "start",
                               json.dumps(opts)], env=e, timeout=900)
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"rc={proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        out = json.loads(lines[-1][len("RESULT "):])
        out["log"] = [l for l in (proc.stderr + proc.stdout).splitlines() if "[flashinfer-guard]" in l]
        _runs[key] = out
    return _runs[key]


def without_guard():
    return run({"FLASHINFER_GUARD": "0"}, **TIGHT)


def _order(r):
    """The ledger's events reduced to what the issue asks about, in order."""
    seq = []
    for what, label, n in r["events"]:
        if what == "measure":
            seq.append("measure")
        elif "KV pool" in label:
            seq.append("kv_pool")
        elif what in ("alloc", "oom") and n >= 64 * MIB and "stand-in" not in label:
            seq.append("workspace" if what == "alloc" else "workspace_oom")
    return seq


def _kv_tokens_moved(base, other, charge):
    """(observed token change, the whole tokens the charge can take: floor either side)."""
    moved = base["tokens"] - other["tokens"]
    cell = base["cell"]
    return moved, {charge // cell, -((-charge) // cell)}


def _our_code(guard_from: str) -> bool:
    """The guard under test: this checkout (PYTHONPATH, a worktree) or the wheel ci/install_env.sh
    built from it into the line's environment (the default test command)."""
    repo = os.path.dirname(os.path.dirname(HERE))
    return bool(guard_from) and (guard_from.startswith(repo) or "site-packages" in guard_from)


def test_without_guard_the_workspace_comes_after_the_budget_and_does_not_fit_the_slack():
    r = without_guard()
    assert r["registered"] is False and r["reservation"] is None
    # SGLang measured free memory, sized the pool, then its backend asked for the workspace
    assert _order(r) == ["measure", "kv_pool", "workspace_oom"], r["events"]
    assert r["oom"] and "CUDA out of memory. Tried to allocate" in r["oom"]
    server = r["events"][-1][2]
    assert server in (384 * MIB, 512 * MIB) and server > TIGHT["slack_mib"] * MIB
    assert "DeviceLedger (device memory)" in r["stand_ins"]


def test_full_counts_the_whole_buffer_and_the_same_tensor_serves_flashinfer():
    base = without_guard()
    r = run({"FLASHINFER_GUARD_RESERVE": "full"}, **TIGHT)
    assert _our_code(r["guard_from"]), r["guard_from"]
    res = r["reservation"]
    assert res and res["mode"] == "full"
    # the buffer is created before SGLang measures, then the pool; the backend allocates no workspace
    assert _order(r) == ["workspace", "measure", "kv_pool"], r["events"]
    assert r["oom"] is None  # the case that failed without the guard starts
    assert r["workspace_is_reserved"] and r["wrappers_plan_in_it"]
    assert r["workspace_allocs"] == [res["buffer"]] == [r["workspace_bytes"]]  # nothing allocated twice
    moved, allowed = _kv_tokens_moved(base, r, res["buffer"])
    assert moved in allowed, (moved, allowed)
    if base["budget_bytes"] is not None:  # 0.5.11+: SGLang's budget in bytes (its GiB float arithmetic)
        assert abs(base["budget_bytes"] - r["budget_bytes"] - res["buffer"]) <= 2
    line = [l for l in r["log"] if "KV budget (FLASHINFER_GUARD_RESERVE=full)" in l]
    assert len(line) == 1 and any(f"KV cache -{t:,} tokens" in line[0] for t in allowed), line


def test_auto_moves_the_budget_by_exactly_the_guards_change():
    base = without_guard()
    server = base["events"][-1][2]  # SGLang's own size, from the run without the guard
    r = run({"FLASHINFER_GUARD_WORKSPACE": "1GiB"}, **TIGHT)
    res = r["reservation"]
    assert res and res["mode"] == "auto" and res["buffer"] == 1024 * MIB and res["server"] == server
    charge = 1024 * MIB - server
    moved, allowed = _kv_tokens_moved(base, r, charge)
    assert moved in allowed, (moved, allowed)
    if base["budget_bytes"] is not None:
        assert abs(base["budget_bytes"] - r["budget_bytes"] - charge) <= 2
    line = [l for l in r["log"] if "KV budget (FLASHINFER_GUARD_RESERVE=auto)" in l]
    assert len(line) == 1 and f"charged {charge >> 20} MiB" in line[0], line
    assert any(f"KV cache -{t:,} tokens ({base['cell']:,} B per token)" in line[0] for t in allowed), line


def test_reserve_off_leaves_sglangs_sizing_untouched():
    base = without_guard()
    moved = run({"FLASHINFER_GUARD_WORKSPACE": "1GiB"}, **TIGHT)  # the same settings under auto move it
    assert moved["tokens"] < base["tokens"]
    r = run({"FLASHINFER_GUARD_RESERVE": "off", "FLASHINFER_GUARD_WORKSPACE": "1GiB"}, **TIGHT)
    assert r["registered"] and r["reservation"] is None
    assert r["tokens"] == base["tokens"] and r["budget_bytes"] == base["budget_bytes"]
    assert not [l for l in r["log"] if "KV budget" in l]


def test_a_failure_in_the_budget_code_leaves_sglang_as_without_it_with_one_warning():
    base = without_guard()
    r = run({"FLASHINFER_GUARD_WORKSPACE": "1GiB"}, **dict(TIGHT, **{"break": True}))
    assert r["registered"] and r["reservation"] is None
    assert r["tokens"] == base["tokens"] and r["budget_bytes"] == base["budget_bytes"]
    warn = [l for l in r["log"] if "KV budget: not moved" in l]
    assert len(warn) == 1 and "injected failure" in warn[0], r["log"]


def test_post_capture_kv_sizing_is_left_alone_where_the_line_has_it():
    """SGLang 0.5.23 can size the pool after CUDA-graph capture (``post_capture_kv_active``,
    model_runner_components/kv_pool_runtime.py:34-48): its measurement holds the workspace,
    the guard moves nothing and says so. Older lines have no such sizing (checked here)."""
    import importlib.util

    has = importlib.util.find_spec("sglang.srt.model_executor.model_runner_components") is not None and \
        importlib.util.find_spec("sglang.srt.model_executor.model_runner_components.kv_pool_runtime") is not None
    if not has:
        from importlib import metadata

        assert tuple(int(p) for p in metadata.version("sglang").split(".")[:3]) < (0, 5, 23)
        return
    base = run({"FLASHINFER_GUARD": "0"}, **dict(TIGHT, post_capture=True))
    r = run({"FLASHINFER_GUARD_WORKSPACE": "1GiB"}, **dict(TIGHT, post_capture=True))
    assert r["reservation"] is None and r["budget_bytes"] == base["budget_bytes"]
    assert [l for l in r["log"] if "post-capture KV sizing" in l and "nothing moved" in l]


# ---------------------------------------------------------------- `plan` says what the start-up line says

def _plan(r, env, monkeypatch, capsys, mfs=None):
    """`flashinfer-guard plan --json` for the deployment the scenario ran (its model config, the
    H200, SGLang's line installed here, the same switches), in this process; the built-in readers
    (the server's own readers are held equal to them in test_plan_parity.py and
    test_launch_parser.py; importing SGLang's argument parser here would cost half a minute)."""
    from guard_core.commands import cli

    for k in list(os.environ):
        if k.startswith(("FLASHINFER_GUARD", "SGLANG_FLASHINFER")):
            monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    # the scenario's graphs and chunk (scenarios.gpu_resolved): capture up to 512, chunked prefill 16384;
    # 0.5.23 spells the graph ceiling --cuda-graph-max-bs-decode (the old name is ambiguous there)
    for graph_flag in ("--cuda-graph-max-bs-decode", "--cuda-graph-max-bs"):
        capsys.readouterr()
        rc = cli.main(["plan", "--json", "--gpu", "h200", "--launch-reader", "builtin", "--model-reader", "builtin",
                       "--", "python", "-m", "sglang.launch_server", "--model-path", r["model_path"],
                       graph_flag, "512", "--chunked-prefill-size", "16384", "--mem-fraction-static",
                       repr(r["mem_fraction_static"] if mfs is None else mfs)])
        if rc == 0:
            return json.loads(capsys.readouterr().out)["kv_budget"]
    raise AssertionError(f"plan refused the command: {capsys.readouterr().err[-2000:]}")


def _line_tokens(line):
    """(tokens, bytes per token) as the start-up line prints them: "KV cache -2,048 tokens (262,144 B per token)"."""
    import re

    m = re.search(r"KV cache ([-+][\d,]+) tokens \(([\d,]+) B per token\)", line)
    assert m, line
    return int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))


def test_plan_gives_the_start_up_lines_kv_figures(monkeypatch, capsys):
    """The start-up line (the adapter, on SGLang's own sizing) and `plan` for the same deployment:
    the same buffer, charge, per-token size (SGLang's own cell size, from the run) and KV tokens,
    under auto (a 1 GiB buffer) and full. On main before this, plan had no SGLang KV figures."""
    for env in ({"FLASHINFER_GUARD_WORKSPACE": "1GiB"}, {"FLASHINFER_GUARD_RESERVE": "full"}):
        r = run(env, **TIGHT)
        res = r["reservation"]
        tokens, per_token = _line_tokens(res["line"])
        assert per_token == r["cell"]  # the line's size is SGLang's own cell size
        kb = _plan(r, env, monkeypatch, capsys)
        assert kb is not None, "plan has no KV-budget figures for SGLang"
        assert (kb["mode"], kb["buffer_bytes"], kb["server_bytes"], kb["charge_bytes"]) == \
            (res["mode"], res["buffer"], res["server"], res["charge"])
        assert kb["per_token_bytes"] == r["cell"] and kb["kv_tokens"] == tokens
        assert f"KV cache -{-tokens:,} tokens ({per_token:,} B per token)" in kb["line"]


def test_plans_mem_fraction_static_keeps_sglangs_unguarded_kv_size(monkeypatch, capsys):
    """The --mem-fraction-static `plan` suggests, given to SGLang's own sizing with the guard's
    1 GiB buffer, gives at least the tokens SGLang sizes without the guard at the command's 0.88;
    one thousandth less (SGLang's own precision) gives fewer."""
    env = {"FLASHINFER_GUARD_WORKSPACE": "1GiB"}
    base = run({"FLASHINFER_GUARD": "0"}, mem_fraction_static=0.88)
    kb = _plan(base, env, monkeypatch, capsys)
    keep = kb["keep_mem_fraction_static"]
    assert kb["mem_fraction_static"] == 0.88 and keep is not None and keep > 0.88
    assert f"--mem-fraction-static {keep:.3f} (instead of 0.880)" in kb["line"]
    kept = run(env, mem_fraction_static=keep)
    assert kept["reservation"]["charge"] == kb["charge_bytes"] > 0
    assert kept["tokens"] >= base["tokens"], (kept["tokens"], base["tokens"])
    short = run(env, mem_fraction_static=round(keep - 0.001, 3))
    assert short["tokens"] < base["tokens"]


# ---------------------------------------------------------------- issue 28: "and a generated sample"

SAMPLE_SEED = 28


def _draw(rng):
    """One generated deployment: a Llama-shaped model (q/kv heads, head dim, layers, context), a GPU,
    weights, the operator's slack (mem_fraction_static or slack in MiB) and the guard's switches.
    The slack is drawn above any workspace drawn here, so that with the guard off (and under
    RESERVE=off) SGLang's own run fits; the OOM side is the seed tests' job."""
    kv = rng.choice((1, 2, 4, 8, 16))
    q = kv * rng.choice((1, 2, 4, 8))
    hd = rng.choice((64, 128, 256))
    layers = rng.randint(2, 80)
    ctx = rng.choice((32768, 131072, 262144))
    gpu = rng.choice(("h100", "h200", "b200", "h20"))
    model = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": q * hd,
             "num_attention_heads": q, "num_key_value_heads": kv, "head_dim": hd, "num_hidden_layers": layers,
             "intermediate_size": 4 * q * hd, "vocab_size": 151936, "max_position_embeddings": ctx,
             "rms_norm_eps": 1e-6, "rope_theta": 1000000, "torch_dtype": "bfloat16"}
    opts = {"model": model, "gpu": gpu, "weights_frac": round(rng.uniform(0.05, 0.55), 3)}
    if rng.random() < 0.5:
        opts["mem_fraction_static"] = round(rng.uniform(0.86, 0.95), 3)
    else:
        opts["slack_mib"] = rng.randint(3072, 8192)
    env = {}
    reserve = rng.choice(("auto", "full", "off"))
    if reserve != "auto" or rng.random() < 0.5:
        env["FLASHINFER_GUARD_RESERVE"] = reserve
    ws = rng.choice(("auto", "512MiB", "768MiB", "1GiB", "1536MiB", "exact"))
    if ws != "auto":
        env["FLASHINFER_GUARD_WORKSPACE"] = ws
    return reserve, env, opts


def test_a_generated_sample_moves_the_kv_budget_by_exactly_the_charge(capsys):
    """A seeded sample of deployments (FLASHINFER_GUARD_KV_SAMPLE raises the count from 3), each
    run on SGLang's own sizing with and without the guard. The charge is the test's own: from the
    workspace tensor SGLang's backend holds with the guard (the ledger's bytes) and SGLang's own
    size (the tensor it holds without): auto buffer - own, full the whole buffer, off 0. SGLang's
    token count moves by that charge (whole tokens, floor either side); full: one workspace
    allocation, the reserved tensor is the backend's; the start-up line's tokens are the tokens
    SGLang moved. One line per deployment is printed to reproduce it."""
    import random

    from guard_core.gpus import GPU_MEMORY  # the ledger's size for the table GPU (not an expected value)

    rng = random.Random(SAMPLE_SEED)
    count = int(os.environ.get("FLASHINFER_GUARD_KV_SAMPLE", "3"))
    failures = []
    for i in range(count):
        reserve, env, opts = _draw(rng)
        opts = dict(opts)
        opts["weights"] = int(GPU_MEMORY[opts["gpu"]][0] * opts.pop("weights_frac"))
        m = opts["model"]
        repro = (f"seed {SAMPLE_SEED} #{i}: {opts['gpu']} q{m['num_attention_heads']}/kv{m['num_key_value_heads']} "
                 f"d{m['head_dim']} L{m['num_hidden_layers']} ctx{m['max_position_embeddings']} "
                 f"weights {opts['weights'] / GIB:.1f} GiB "
                 + (f"mfs {opts['mem_fraction_static']}" if "mem_fraction_static" in opts
                    else f"slack {opts['slack_mib']} MiB")
                 + f" env {env}")
        base = run({"FLASHINFER_GUARD": "0"}, **opts)
        r = run(env, **opts)
        assert _our_code(r["guard_from"]), r["guard_from"]
        assert base["oom"] is None and r["oom"] is None, (repro, base["oom"], r["oom"])
        server, buffer = base["workspace_bytes"], r["workspace_bytes"]
        charge = {"auto": buffer - server, "full": buffer, "off": 0}[reserve]
        moved, allowed = _kv_tokens_moved(base, r, charge)
        lines = [l for l in r["log"] if "KV budget (FLASHINFER_GUARD_RESERVE=" in l]
        line_tokens = _line_tokens(lines[0])[0] if lines and "KV cache" in lines[0] else 0
        with capsys.disabled():  # the reproduction line, past pytest's capture
            print(f"[kv-sample] {repro}: own {server >> 20} MiB, buffer {buffer / MIB:.1f} MiB, charge "
                  f"{charge / MIB:+.1f} MiB, cell {base['cell']:,} B, tokens {base['tokens']:,} -> {r['tokens']:,} "
                  f"(moved {moved:+,}, line {line_tokens:+,})", flush=True)
        try:
            assert moved in allowed, (moved, allowed)
            if base["budget_bytes"] is not None:  # 0.5.11+: SGLang's budget in bytes
                assert abs(base["budget_bytes"] - r["budget_bytes"] - charge) <= 2, \
                    (base["budget_bytes"], r["budget_bytes"], charge)
            if reserve == "full":
                # nothing allocated twice: one device allocation of the buffer's size (the scenario's
                # workspace_allocs stops at 64 MiB; exact can be below), and it is the backend's tensor
                same = [e for e in r["events"] if e[0] == "alloc" and e[2] == buffer]
                assert len(same) == 1 and all(n == buffer for n in r["workspace_allocs"]), \
                    (same, r["workspace_allocs"])
                assert r["workspace_is_reserved"] and r["wrappers_plan_in_it"]
            if reserve == "off" or charge == 0:
                assert all("KV cache" not in l for l in lines), lines
                assert moved == 0
            else:
                assert len(lines) == 1, r["log"]
                # the line gives floor(-charge / cell) (guard_core.decide.kv_budget.kv_token_change): SGLang
                # floors its budget before and after the charge, so its own change is that or one token less
                assert -line_tokens in allowed and -line_tokens - moved in (0, 1), (lines[0], moved)
        except AssertionError as exc:
            failures.append(f"{repro}: {exc!r}")
    assert not failures, "\n".join(failures)

