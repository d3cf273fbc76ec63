"""``flashinfer-guard plan``'s SGLang defaults against the installed SGLang, on the same simulated GPU.

SGLang's real ``ServerArgs`` is built (in its own process of this
environment, with only the CUDA-only kernel package stood in, see ``_cpu.py``)
with ``get_device_memory_capacity`` reporting the simulated GPU's memory; what
it chose (decode CUDA-graph max batch and list, chunked prefill size) must
equal what ``guard_core.deployment.server_defaults.derive`` (the table ``plan`` uses) derives.
A real ``FlashInferAttnBackend`` is built per model (one process each: the
workspace buffer is cached per process) with the guard switched off, and its
workspace size and tensor-core decode choice must equal the table's.
"""

from __future__ import annotations

import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

import pytest

from guard_core.deployment.server_defaults import GPU_MEMORY, Deployment, derive, sglang_default_workspace, sglang_tensor_core_decode
from guard_core.gpus import find_spec
from tests.common import forkserver  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SGLANG = metadata.version("sglang")
FLASHINFER = metadata.version("flashinfer-python")

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
         "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 2,
         "intermediate_size": 8192, "vocab_size": 32000, "max_position_embeddings": 32768,
         "rms_norm_eps": 1e-5, "torch_dtype": "bfloat16"}
LLAMA_G2 = dict(LLAMA, num_attention_heads=16, hidden_size=2048)  # GQA group 2
QWEN3_VL = {"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
            "text_config": {"model_type": "qwen3_vl_text", "hidden_size": 5120, "num_attention_heads": 64,
                            "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 2,
                            "intermediate_size": 8192, "vocab_size": 151936, "max_position_embeddings": 32768,
                            "rms_norm_eps": 1e-6, "rope_theta": 5000000, "torch_dtype": "bfloat16"},
            "vision_config": {"depth": 2, "hidden_size": 64, "num_heads": 2, "out_hidden_size": 5120,
                              "patch_size": 16, "spatial_merge_size": 2, "temporal_patch_size": 2,
                              "in_channels": 3, "intermediate_size": 128, "deepstack_visual_indexes": [0]},
            "torch_dtype": "bfloat16", "image_token_id": 151655, "video_token_id": 151656,
            "vision_start_token_id": 151652, "vision_end_token_id": 151653, "tie_word_embeddings": False}
MODELS = {"llama": LLAMA, "llama_g2": LLAMA_G2, "qwen3_vl": QWEN3_VL}

PROBE = r'''
import json, os, sys, tempfile
sys.path.insert(0, os.environ["FG_SGLANG_TESTS"])
import _cpu
_cpu.install_cuda_only_stand_ins()
import sglang.srt.server_args as sa

cases = json.loads(sys.argv[1])
model_dir = _cpu.write_model(tempfile.mkdtemp(), "model", json.loads(sys.argv[2]))


def point_memory(mib):
    for mod in list(sys.modules.values()):
        name = getattr(mod, "__name__", "") or ""
        if name.startswith("sglang") and getattr(mod, "get_device_memory_capacity", None) is not None:
            mod.get_device_memory_capacity = lambda device=None: mib


def one(case):
    point_memory(case["mib"])
    kw = dict(model_path=model_dir, device="cuda", load_format="dummy", skip_tokenizer_init=True,
              attention_backend="flashinfer", tp_size=case["tp"])
    kw.update(case["args"])
    try:
        args = sa.ServerArgs(**kw)
    except TypeError as exc:  # later lines renamed the decode CUDA-graph max
        if "cuda_graph_max_bs" not in str(exc):
            raise
        kw["cuda_graph_max_bs_decode"] = kw.pop("cuda_graph_max_bs")
        args = sa.ServerArgs(**kw)
    if hasattr(args, "resolve_once"):
        args.resolve_once()
        d = args.resolved_dict()
        dec = d["cuda_graph_config"]["decode"]
        return {"max_bs": dec["max_bs"], "bs": dec["bs"], "chunked_prefill_size": d["chunked_prefill_size"]}
    cg = getattr(args, "cuda_graph_config", None)
    if hasattr(cg, "decode"):  # 0.5.15-0.5.22: the per-phase config, resolved in __post_init__
        return {"max_bs": cg.decode.max_bs, "bs": list(cg.decode.bs or []),
                "chunked_prefill_size": args.chunked_prefill_size}
    return {"max_bs": args.cuda_graph_max_bs, "bs": list(args.cuda_graph_bs),
            "chunked_prefill_size": args.chunked_prefill_size}


out = {}
for cid, case in cases.items():
    try:
        out[cid] = one(case)
    except Exception as exc:
        import traceback
        traceback.print_exc()
        out[cid] = {"error": f"{type(exc).__name__}: {exc}"}
print("RESULT " + json.dumps(out), flush=True)
'''

BACKEND = r'''
import json, os, sys
sys.path.insert(0, os.environ["FG_SGLANG_TESTS"])
import _cpu
_cpu.install_cuda_only_stand_ins()
import scenarios
r = scenarios.build_backend(json.loads(sys.argv[1]), {"gpu": "b200"})
print("RESULT " + json.dumps({"workspace_bytes": r["workspace_bytes"],
                              "decode_use_tensor_cores": r["decode_use_tensor_cores"]}), flush=True)
'''

CASES = [
    ("b200", 1, {}), ("b200", 8, {}), ("h200", 1, {}), ("h200", 4, {}), ("h100", 1, {}), ("h100", 8, {}),
    ("a100", 2, {}), ("l40s", 1, {}), ("l40s", 4, {}), ("rtx4090", 1, {}), ("rtx4090", 4, {}), ("l4", 2, {}),
    ("b300", 1, {"max_running_requests": 200}), ("h200", 1, {"cuda_graph_max_bs": 384}),
    ("b200", 1, {"chunked_prefill_size": 4096}),
]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "SGLANG_"))}
    env.update(FLASHINFER_GUARD="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", FG_SGLANG_TESTS=HERE,
               PYTHONPATH=os.pathsep.join([REPO, HERE]))
    return env


def _run(code, *argv):
    proc = forkserver.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=_env(),
                          timeout=900, cwd=REPO)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"probe failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):]), proc.stderr[-6000:]


def _cid(gpu, tp, args):
    return f"{gpu}-tp{tp}" + "".join(f"-{k}={v}" for k, v in args.items())


_REAL: dict = {}


def real() -> dict:
    """Every probe of this module, run once, concurrently (one defaults process, one per model)."""
    if not _REAL:
        cases = {_cid(g, tp, a): {"mib": GPU_MEMORY[find_spec(g).key][1], "tp": tp, "args": a} for g, tp, a in CASES}
        with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as ex:
            fut = ex.submit(_run, PROBE, json.dumps(cases), json.dumps(LLAMA))
            backs = {name: ex.submit(_run, BACKEND, json.dumps(cfg)) for name, cfg in MODELS.items()}
            _REAL["defaults"], _REAL["defaults_stderr"] = fut.result()
            _REAL["backend"] = {name: f.result()[0] for name, f in backs.items()}
    return _REAL


@pytest.mark.parametrize("gpu,tp,args", CASES, ids=[_cid(*c) for c in CASES])
def test_plan_defaults_equal_sglang(gpu, tp, args):
    r = real()["defaults"][_cid(gpu, tp, args)]
    assert "error" not in r, f"SGLang {SGLANG} refused: {r['error']}\n{real()['defaults_stderr']}"
    spec = find_spec(gpu)
    d = derive(Deployment(framework="sglang", line=SGLANG, gpu_key=spec.key, cc=spec.cc, gpu_name=spec.name, tp=tp,
                          max_num_seqs=args.get("max_running_requests"), max_capture=args.get("cuda_graph_max_bs"),
                          max_batched_tokens=args.get("chunked_prefill_size")))
    assert d.get("max_capture") == r["max_bs"]
    assert list(d.get("capture_sizes")) == r["bs"]
    assert d.get("max_batched_tokens") == r["chunked_prefill_size"]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_plan_workspace_and_decode_planner_equal_sglang(name):
    r = real()["backend"][name]
    cfg = MODELS[name]
    text = cfg.get("text_config", cfg)
    assert sglang_default_workspace(SGLANG, cfg["architectures"][0]) == r["workspace_bytes"]
    tc, _ = sglang_tensor_core_decode("16bit", text["num_attention_heads"], text["num_key_value_heads"])
    assert tc == r["decode_use_tensor_cores"]


def test_pinned_flashinfer_is_installed_one():
    d = derive(Deployment(framework="sglang", line=SGLANG, gpu_key="b200", cc=(10, 0)))
    assert d.get("flashinfer") == FLASHINFER
