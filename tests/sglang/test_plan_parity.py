"""`flashinfer-guard plan` gives the decision the guard makes inside SGLang (issue 26, the parity search).

Seeded generated deployments: GPUs from the table, models (generated attention shapes under
four architectures, and published configs of tests/data/model_configs), TP, DP attention,
``--cuda-graph-max-bs``, ``--max-running-requests``, ``--chunked-prefill-size``, page size, FP8
KV cache, EAGLE with and without steps/topk/draft tokens, launch-command spellings and
environment prefixes. For each, SGLang resolves the launch command itself on the simulated GPU
and builds its real backends with the guard loaded (tests/sglang/parity_probe.py, one forked
process per deployment: the workspace buffer, the environment's size field and the runtime
context are per process); `plan` reads the same command with the built-in readers, as in the
core environment. The need (the largest over SGLang's backends), SGLang's buffer and the
verdict must be equal on every deployment; a disagreement is reported as its `plan` command
and the adapter's log line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata
from pathlib import Path

from tests.common import forkserver

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORPUS = REPO / "tests" / "data" / "model_configs"
SGLANG = metadata.version("sglang")
# 16 deployments per line in the default run, on every default line (each a forked SGLang process
# with its real backends; stop 34's 0.5.5 EAGLE rule is deployments 9 and 12);
# FLASHINFER_GUARD_PARITY_N for more (ci/matrix.sh: 128)
SEED, COUNT = 26, max(1, int(os.environ.get("FLASHINFER_GUARD_PARITY_N") or 16))

GPUS = ["h100", "h200", "a100", "l40s", "b200", "rtx4090"]
# (num_attention_heads, num_key_value_heads, head_dim): published shapes (Llama 3, Qwen3, Mistral, ...)
SHAPES = [(32, 8, 128), (64, 8, 128), (32, 2, 256), (16, 16, 128), (40, 8, 128), (28, 4, 128), (8, 1, 64),
          (24, 8, 128), (32, 32, 128), (48, 8, 128), (32, 16, 128)]
ARCHS = [("LlamaForCausalLM", "llama"), ("Qwen3ForCausalLM", "qwen3"), ("MistralForCausalLM", "mistral"),
         ("Qwen2ForCausalLM", "qwen2")]
PUBLISHED = ["Meta-Llama-3.1-8B", "Qwen3-8B", "Qwen3-32B", "Qwen2.5-7B", "Mistral-7B-Instruct-v0.3",
             "Llama-3.3-70B-Instruct", "Qwen3-0.6B", "Llama-3.2-1B"]
MIB = 1 << 20


def _graph_max_flag(line: str) -> str:
    """The decode CUDA-graph ceiling's spelling on this line (renamed with the per-phase graph
    config; --cuda-graph-max-bs is ambiguous there: guard_core/deployment/server_options/sglang-0.5.20.json)."""
    parts = tuple(int(x) for x in line.split(".")[:3] if x.isdigit())
    return "--cuda-graph-max-bs-decode" if parts >= (0, 5, 20) else "--cuda-graph-max-bs"


def _model(rnd) -> dict:
    if rnd.random() < 0.3:
        name = rnd.choice(PUBLISHED)
        cfg = json.loads((CORPUS / f"{name}.json").read_text())
        return dict(cfg, num_hidden_layers=2, _name=name)
    heads, kv, hd = rnd.choice(SHAPES)
    arch, mtype = rnd.choice(ARCHS)
    return {"architectures": [arch], "model_type": mtype, "hidden_size": heads * hd, "num_attention_heads": heads,
            "num_key_value_heads": kv, "head_dim": hd, "num_hidden_layers": 2, "intermediate_size": 1024,
            "vocab_size": 32000, "max_position_embeddings": rnd.choice([4096, 32768, 131072]),
            "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6, "rope_theta": 1000000,
            "_name": f"{arch}-{heads}x{kv}x{hd}"}


def _eagle(rnd) -> list[str]:
    if rnd.random() < 0.3:
        return []  # SGLang picks (steps, topk, draft tokens) itself
    steps, topk = rnd.choice([1, 2, 3, 5, 7]), rnd.choice([1, 1, 2, 4, 8])
    n = steps + 1 if topk == 1 else rnd.randint(2, min(steps * topk + 1, 16))
    return ["--speculative-num-steps", str(steps), "--speculative-eagle-topk", str(topk),
            "--speculative-num-draft-tokens", str(n)]


def deployments(seed: int, count: int, line: str = SGLANG) -> list[dict]:
    """Each: gpu, model (a config.json dict), options (the launch command's, SGLang's spelling), env."""
    rnd = random.Random(seed)
    out = []
    for _ in range(count):
        model = _model(rnd)
        heads = model["num_attention_heads"]
        tp = rnd.choice([t for t in (1, 1, 2, 4, 8) if heads % t == 0])
        opts: list[str] = ["--attention-backend", "flashinfer"]
        if tp > 1:
            opts += [rnd.choice(["--tp-size", "--tensor-parallel-size"]), str(tp)]
        attn_dp = 1
        if tp > 1 and rnd.random() < 0.2:
            attn_dp = rnd.choice([x for x in (2, 4, 8) if x <= tp and tp % x == 0])
            opts += ["--dp-size", str(attn_dp), "--enable-dp-attention"]
        for flag, p, values in ((_graph_max_flag(line), 0.3, [8, 24, 64, 160, 256, 512]),
                                ("--max-running-requests", 0.3, [16, 48, 128, 512, 1024]),
                                ("--chunked-prefill-size", 0.3, [2048, 4096, 8192, 16384]),
                                ("--page-size", 0.25, [16, 64]),
                                ("--kv-cache-dtype", 0.2, ["fp8_e4m3", "fp8_e5m2"])):
            if rnd.random() < p:
                opts += [flag, str(rnd.choice(values))]
        eagle = rnd.random() < 0.3
        if eagle:
            opts += ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "{model}"] + _eagle(rnd)
        if rnd.random() < 0.3:  # the --opt=value spelling
            joined, i = [], 0
            while i < len(opts):
                if i + 1 < len(opts) and opts[i].startswith("--") and not opts[i + 1].startswith("--"):
                    joined.append(f"{opts[i]}={opts[i + 1]}")
                    i += 2
                else:
                    joined.append(opts[i])
                    i += 1
            opts = joined
        head = rnd.choice([["python", "-m", "sglang.launch_server", "--model-path"],
                           ["python3", "-m", "sglang.launch_server", "--model"]])
        env: dict = {}
        prefix: list[str] = []
        r = rnd.random()
        if r < 0.25:
            env["SGLANG_FLASHINFER_WORKSPACE_SIZE"] = str(rnd.choice([256, 384, 512, 1024]) * MIB)
            prefix = (["env"] if rnd.random() < 0.4 else []) + [f"SGLANG_FLASHINFER_WORKSPACE_SIZE="
                                                                  f"{env['SGLANG_FLASHINFER_WORKSPACE_SIZE']}"]
        elif r < 0.35:
            env["FLASHINFER_GUARD_LOG"] = "debug"
            prefix = ["FLASHINFER_GUARD_LOG=debug"]
        out.append({"gpu": rnd.choice(GPUS), "model": model, "head": head, "opts": opts, "attn_tp": tp // attn_dp,
                    "attn_dp": attn_dp, "env": env, "prefix": prefix})
    return out


def _command(d: dict, model_dir: str) -> list[str]:
    return d["prefix"] + d["head"] + [model_dir] + [o.replace("{model}", model_dir) for o in d["opts"]]


def _plan(d: dict, model_dir: str, server: bool = False) -> dict:
    """`plan` with the built-in readers and the per-line rules, or (``server``) with its default
    resolution here (``--resolution server``): SGLang's own ServerArgs in a subprocess
    (sglang_guard/server_resolution.py over plan_resolve.py)."""
    from guard_core.commands import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["plan", "--json", "--gpu", d["gpu"], "--framework-version", SGLANG, "--launch-reader",
                         "auto" if server else "builtin", "--model-reader", "builtin",
                         "--resolution", "server" if server else "builtin", "--", *_command(d, model_dir)])
    if code != 0:
        return {"error": err.getvalue().strip()[-600:]}
    r = json.loads(out.getvalue())
    if r.get("verdict") == "not_applicable":
        return {"error": f"not applicable: {r.get('reason')}"}
    return {"need": r["need"]["float_bytes"], "buffer": r["workspace_bytes"], "verdict": r["verdict"],
            "line": (r.get("guard") or {}).get("line"), "resolution": r.get("resolution")}


def _env(extra: dict) -> dict:
    # as conftest.py's scenarios (the same warm interpreter serves them); the probe puts the
    # repository on its path and sets the Hugging Face offline switches itself
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "SGLANG_PLUGINS", "SGLANG_FLASHINFER"))}
    env.update(extra)
    return env


def _adapter(d: dict, model_dir: str) -> dict:
    argv = [a.replace("{model}", model_dir) for a in ["--model-path", model_dir] + d["opts"]]
    proc = forkserver.run([sys.executable, str(HERE / "parity_probe.py"),
                           json.dumps({"gpu": d["gpu"], "argv": argv, "attn_tp": d["attn_tp"],
                                       "attn_dp": d["attn_dp"]})],
                          capture_output=True, text=True, env=_env(d["env"]), timeout=600, cwd=str(REPO))
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        return {"error": f"rc={proc.returncode}: " + " | ".join(tail)}
    res = json.loads(lines[-1][len("RESULT "):])
    recs = res["records"]
    if not recs or any(r["need"] is None for r in recs):
        return {"error": f"no decision recorded: {recs}"}
    top = max(recs, key=lambda r: r["need"])
    return {"need": top["need"], "buffer": recs[0]["server_bytes"][-1],
            "verdict": "ok" if all(r["action"] == "ok" for r in recs) else "overflow", "line": top["line"],
            "backends": len(recs), "eagle": res.get("eagle"), "resolved": res.get("resolved")}


_ADAPTER: dict = {}  # deployment index -> the adapter's answer (one SGLang process each), shared by both tests


def _rows(ds: list[dict], root: Path) -> list[dict]:
    """Each deployment's plan (in this process, one at a time: it prints through redirected
    stdout) and its adapter decision (one SGLang process each, two at a time)."""
    rows = []
    for i, d in enumerate(ds):
        model_dir = root / f"m{i}"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps({k: v for k, v in d["model"].items() if k != "_name"}))
        cmd = " ".join(_command(d, str(model_dir)))
        rows.append({"i": i, "model": d["model"]["_name"], "dir": str(model_dir),
                     "command": f"flashinfer-guard plan --gpu {d['gpu']} --framework-version {SGLANG} -- {cmd}",
                     "plan": _plan(d, str(model_dir))})
    with ThreadPoolExecutor(max_workers=2) as ex:
        for r, a in zip(rows, ex.map(lambda r: _adapter(ds[r["i"]], r["dir"]), rows)):
            r["adapter"] = _ADAPTER[r["i"]] = a
    return rows


def _disagreement(r: dict) -> str | None:
    a, p = r["adapter"], r["plan"]
    if "error" in a or "error" in p or any(a[k] != p[k] for k in ("need", "buffer", "verdict")):
        return (f"[{r['i']}] {r['model']}: {r['command']}\n    plan: {p}\n    adapter: "
                f"{a.get('error') or a['line']} (need {a.get('need')}, buffer {a.get('buffer')}, "
                f"{a.get('verdict')}; resolved {a.get('resolved')}, eagle {a.get('eagle')})")
    return None


def test_plan_agrees_with_the_adapter_on_generated_deployments(tmp_path):
    rows = _rows(deployments(SEED, COUNT), tmp_path)
    bad = [b for b in map(_disagreement, rows) if b]
    print(f"parity (SGLang {SGLANG}): {COUNT} deployments, {COUNT - len(bad)} agree (need, buffer, verdict)")
    for b in bad:
        print(b)
    assert len(rows) == COUNT
    assert not bad, f"{len(bad)} of {COUNT} disagree:\n" + "\n".join(bad[:12])


def _server_sample(ds: list[dict], n: int) -> list[int]:
    """``n`` deployments for the server-resolved plan: the first with DP attention, the first with
    EAGLE (also test_plan_server_resolution's item 3), then the first others, in seed order."""
    eagle = [i for i, d in enumerate(ds) if "EAGLE" in " ".join(d["opts"])]
    dpa = [i for i, d in enumerate(ds) if d["attn_dp"] > 1]
    picked: list[int] = []
    for i in dpa[:1] + eagle[:1] + list(range(len(ds))):
        if i not in picked and len(picked) < n:
            picked.append(i)
    return picked


def test_server_resolved_plan_agrees_with_the_adapter(tmp_path):
    # issue 26 item 2: where SGLang is installed, plan's default resolution is SGLang's own
    # (ServerArgs + ModelConfig on the simulated GPU, the adapter's fact reader); a sample of the
    # same generated deployments (FLASHINFER_GUARD_PARITY_SERVER=N for more), each against the
    # adapter inside SGLang (shared with the test above when it ran in this process)
    n = int(os.environ.get("FLASHINFER_GUARD_PARITY_SERVER", "1"))
    ds = deployments(SEED, COUNT)
    rows = []
    for i in _server_sample(ds, n):
        model_dir = tmp_path / f"m{i}"
        model_dir.mkdir()
        (model_dir / "config.json").write_text(json.dumps({k: v for k, v in ds[i]["model"].items() if k != "_name"}))
        cmd = " ".join(_command(ds[i], str(model_dir)))
        rows.append({"i": i, "model": ds[i]["model"]["_name"], "dir": str(model_dir),
                     "command": f"flashinfer-guard plan --gpu {ds[i]['gpu']} --framework-version {SGLANG} -- {cmd}",
                     "plan": _plan(ds[i], str(model_dir), server=True)})
    with ThreadPoolExecutor(max_workers=2) as ex:
        for r, a in zip(rows, ex.map(lambda r: _ADAPTER.get(r["i"]) or _adapter(ds[r["i"]], r["dir"]), rows)):
            r["adapter"] = a
    by = ["server" if (r["plan"].get("resolution") or {}).get("server") else "rules" for r in rows]
    bad = [b for b in map(_disagreement, rows) if b]
    print(f"parity, server-resolved plan (SGLang {SGLANG}): {len(rows)} deployments {[r['i'] for r in rows]}, "
          f"{len(rows) - len(bad)} agree (need, buffer, verdict); resolution {by}")
    for b in bad:
        print(b)
    assert by == ["server"] * len(rows), [r["plan"].get("resolution") or r["plan"] for r in rows]
    assert not bad, f"{len(bad)} of {len(rows)} disagree:\n" + "\n".join(bad)
