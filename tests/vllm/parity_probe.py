"""Parity search (issue 26): `flashinfer-guard plan` against the adapter inside vLLM, per deployment.

    python tests/vllm/parity_probe.py SEED COUNT [N_SERVER]

One interpreter, many deployments. For each seeded generated deployment (GPU, attention shape,
max seqs, batched tokens, KV-cache dtype, speculative n-gram draft tokens, capture ceiling,
eager), vLLM resolves its own config from the engine arguments
(``EngineArgs(...).create_engine_config(OPENAI_API_SERVER)``) on a platform reporting the
simulated GPU, the model's real ``Attention`` layers give the KV-cache spec, vLLM resolves its
CUDA-graph mode, and the real ``FlashInferMetadataBuilder`` is built on the CPU. The adapter's
decision is ``vllm_guard.workspace_facts.decide(builder, module)``; `plan` is run in this process
with the built-in readers (as in the core environment) on the same launch command, and the first
N_SERVER deployments also through vLLM's own resolution (``plan --resolution server``). Each
deployment prints one ``PARITY {json}`` line: both needs, buffers and verdicts, and the command.

Faked (nothing else): the platform's device name, memory and capability (no GPU here), static
CUDA graphs allowed, no pinned memory, FlashInfer's SM count and vLLM's counter buffer on the
CPU, and ``guard_core.gpus.detect_gpu`` answering the simulated GPU (the adapter asks torch).
GPUs are not SM10x, where TRT-LLM attention depends on FlashInfer's cubins (vLLM's
``has_nvidia_artifactory`` probes the network for them); on vLLM >= 0.32 SM90/SM12x decode with
XQA where the cubins are there, which `plan` does not assume (none are installed in the test
environments: the probe finds no artifactory offline).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
for p in (REPO, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

GPUS = ["h100", "h200", "a100", "l40s", "rtxpro6000"]
# (num_attention_heads, num_key_value_heads, head_dim): published shapes (Qwen3, Llama 3, Mistral, ...)
SHAPES = [(32, 8, 128), (64, 8, 128), (32, 2, 256), (16, 16, 128), (40, 8, 128), (28, 4, 128), (8, 1, 64),
          (24, 8, 128), (32, 32, 128), (48, 8, 128)]


def _line() -> str:
    import importlib.metadata as md

    return os.environ.get("FLASHINFER_GUARD_VLLM_LINE") or md.version("vllm")


def deployments(seed: int, count: int) -> list[dict]:
    rnd = random.Random(seed)
    gpus = GPUS
    out = []
    for _ in range(count):
        heads, kv, hd = rnd.choice(SHAPES)
        d = {"gpu": rnd.choice(gpus), "heads": heads, "kv_heads": kv, "head_dim": hd,
             "max_pos": rnd.choice([4096, 32768, 131072])}
        if rnd.random() < 0.6:
            d["max_num_seqs"] = rnd.choice([8, 64, 256, 528, 1024])
        if rnd.random() < 0.4:
            d["max_num_batched_tokens"] = rnd.choice([2048, 8192, 16384])
        if rnd.random() < 0.3:
            d["kv_cache_dtype"] = "fp8"
        if rnd.random() < 0.3:
            d["draft"] = rnd.choice([1, 3, 5])
        if rnd.random() < 0.2:
            d["max_cudagraph_capture_size"] = rnd.choice([64, 256, 1024])
        if rnd.random() < 0.1:
            d["enforce_eager"] = True
        out.append(d)
    return out


def command(model: str, d: dict) -> list[str]:
    cmd = ["vllm", "serve", model]
    for key in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "max_cudagraph_capture_size"):
        if key in d:
            cmd += ["--" + key.replace("_", "-"), str(d[key])]
    if d.get("draft"):
        cmd += ["--speculative-config", json.dumps({"method": "ngram", "num_speculative_tokens": d["draft"],
                                                    "prompt_lookup_max": 4, "prompt_lookup_min": 2})]
    if d.get("enforce_eager"):
        cmd.append("--enforce-eager")
    return cmd


def model_dir(d: dict) -> str:
    cfg = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": d["heads"] * d["head_dim"],
           "num_attention_heads": d["heads"], "num_key_value_heads": d["kv_heads"], "head_dim": d["head_dim"],
           "num_hidden_layers": 2, "intermediate_size": 1024, "vocab_size": 32000,
           "max_position_embeddings": d["max_pos"], "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
           "rope_theta": 1000000}
    path = tempfile.mkdtemp(prefix="fg-parity-")
    with open(os.path.join(path, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    return path


def adapter(d: dict, model: str, cls, platform_gpu) -> dict:
    import torch
    from vllm.engine.arg_utils import EngineArgs
    from vllm.platforms.interface import DeviceCapability
    from vllm.usage.usage_lib import UsageContext

    import realcalls_scenarios as rs
    from guard_core import gpus
    from guard_core.deployment.server_defaults import GPU_MEMORY

    spec = gpus.find_spec(d["gpu"])
    cls.get_device_total_memory = classmethod(lambda c, device_id=0: GPU_MEMORY[spec.key][0])
    cls.get_device_name = classmethod(lambda c, device_id=0: spec.name)
    cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(*spec.cc))
    platform_gpu[0] = gpus.lookup_gpu(d["gpu"])
    kw = dict(model=model, skip_tokenizer_init=True)
    for key in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_dtype", "max_cudagraph_capture_size",
                "enforce_eager"):
        if key in d:
            kw[key] = d[key]
    if d.get("draft"):
        kw["speculative_config"] = {"method": "ngram", "num_speculative_tokens": d["draft"],
                                    "prompt_lookup_max": 4, "prompt_lookup_min": 2}
    vc = EngineArgs(**kw).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
    case = rs.Case("parity", model=dict(heads=d["heads"], kv_heads=d["kv_heads"], head_dim=d["head_dim"]),
                   kv_cache_dtype=d.get("kv_cache_dtype", "auto"), draft=d.get("draft", 0),
                   max_num_seqs=vc.scheduler_config.max_num_seqs)
    import vllm.v1.attention.backends.flashinfer as m
    import vllm_guard.workspace_facts as wf
    from vllm.config import set_current_vllm_config

    _layers, groups = rs.make_layers(case, vc)
    specs = [s for _, s in groups]
    with set_current_vllm_config(vc):
        rs.resolve_layout(vc, specs)
        if not d.get("enforce_eager"):
            rs.resolve_cudagraphs(case, vc, specs)
        names, kv_spec = groups[0]
        b = m.FlashInferMetadataBuilder(kv_spec, names, vc, torch.device("cpu"))
        bd = wf.decide(b, m)
    req = bd.outcome.requirement
    return {"need": req.float_bytes if req is not None else 0, "buffer": bd.server_bytes,
            "verdict": "overflow" if bd.decision.action == "raise" else "ok", "line": bd.decision.line}


def plan(model: str, d: dict, resolution: str = "builtin") -> dict:
    """`plan` on the deployment's launch command: the built-in rules (as in the core environment), or
    (``resolution="server"``) vLLM's own resolution of the command (issue 26 item 2)."""
    from guard_core.commands import cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["plan", "--json", "--gpu", d["gpu"], "--framework-version", _line(), "--launch-reader",
                         "builtin", "--model-reader", "builtin", "--resolution", resolution, "--",
                         *command(model, d)])
    if code != 0:
        return {"error": err.getvalue().strip()}
    r = json.loads(out.getvalue())
    return {"need": r["need"]["float_bytes"], "buffer": r["workspace_bytes"], "verdict": r["verdict"],
            "line": (r.get("guard") or {}).get("line"), "resolution": (r.get("resolution") or {}).get("used")}


def server_in_process() -> None:
    """`plan --resolution server` asks ``vllm_guard.server_resolution`` in a subprocess (vLLM's start-up,
    tens of seconds); here the same ``resolve(request)`` answers in this vLLM process, which already
    simulates the GPU the same way: only the process boundary is skipped (tests/vllm/
    test_server_resolution.py runs it for real)."""
    import vllm_guard.server_resolution as vsr
    from guard_core.commands import plan_report

    plan_report.server_resolution_stage._ask = lambda fw, req, environ: vsr.resolve(req)


def main() -> None:
    # SEED COUNT, or `json '[{deployment}, ...]'` for given deployments
    given = json.loads(sys.argv[2]) if sys.argv[1] == "json" else None
    # the first N_SERVER deployments are also planned through vLLM's own resolution (--resolution server)
    n_server = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    if n_server or (given and any(d.get("server") for d in given)):
        server_in_process()
    from vllm.platforms import current_platform

    import realcalls_scenarios as rs

    rs.gpu_host_triton()  # the model runner a GPU host picks (Triton present)
    cls = type(current_platform)
    if not current_platform.device_type:
        cls.device_type = "cpu"
    cls.support_static_graph_mode = classmethod(lambda c: True)
    from cpu_host import no_pinned_memory

    no_pinned_memory()
    import vllm.v1.attention.backends.flashinfer as m
    from guard_core import gpus

    platform_gpu = [None]
    gpus.detect_gpu = lambda device=None: platform_gpu[0]
    if hasattr(m, "_get_multi_ctas_kv_counter_buffer"):
        real = m._get_multi_ctas_kv_counter_buffer
        import torch

        m._get_multi_ctas_kv_counter_buffer = lambda n, device: real(n, torch.device("cpu"))
    for i, d in enumerate(given if given is not None else deployments(int(sys.argv[1]), int(sys.argv[2]))):
        model = model_dir(d)
        if hasattr(m, "get_device_sm_count"):
            n = gpus.find_spec(d["gpu"]).num_sms
            m.get_device_sm_count = lambda device=None, n=n: n
        row = {"i": i, "deployment": d, "command": f"flashinfer-guard plan --gpu {d['gpu']} --framework-version "
               f"{_line()} -- " + " ".join(command(model, d))}
        try:
            row["adapter"] = adapter(d, model, cls, platform_gpu)
        except Exception as exc:
            traceback.print_exc()
            row["adapter"] = {"error": f"{type(exc).__name__}: {exc}"}
        row["plan"] = plan(model, d)
        if d.get("server") or i < n_server:
            row["plan_server"] = plan(model, d, "server")
        print("PARITY " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
