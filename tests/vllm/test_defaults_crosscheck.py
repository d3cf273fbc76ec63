"""``flashinfer-guard plan``'s vLLM defaults against the installed vLLM, on the same simulated GPU.

For every case (all in one process of this environment, forked from a warm interpreter: vLLM's
import costs about a minute here; nothing compared is cached per process, the
platform is re-pointed per case) vLLM builds its own
``EngineArgs(...).create_engine_config(OPENAI_API_SERVER)`` with the platform
reporting the simulated GPU (name, total memory, compute capability) and static
CUDA graphs allowed (nothing else is faked), and reports what vLLM chose: max
seqs, max batched tokens, the CUDA-graph capture sizes and ceiling, the
FlashInfer workspace it would allocate and the decode-graph limit of its
FlashInfer builder. The same inputs go through ``guard_core.deployment.server_defaults.derive``
(the table ``plan`` uses) and must give the same numbers, so the table cannot
drift from the code silently; the adapter's live reading of vLLM's buffer rule
(``vllm_guard.workspace_facts.server_bytes`` on the same builder) must give vLLM's
own allocation too. One case also runs the whole ``plan -- vllm
serve DIR ...`` path.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

import pytest

from guard_core.deployment.server_defaults import GPU_MEMORY, Deployment, default_workspace, derive
from guard_core.gpus import find_spec
from tests.common import forkserver  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
VLLM = metadata.version("vllm")
FLASHINFER = metadata.version("flashinfer-python")

# Qwen3.5-397B-A17B's full-attention shape as a dense config vLLM parses offline
SHAPE = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
    "num_hidden_layers": 2, "intermediate_size": 8192, "vocab_size": 151936,
    "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
    "rope_theta": 10000000,
}

PROBE = r'''
import json, os, sys
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
cls = type(current_platform)
if not current_platform.device_type:
    cls.device_type = "cpu"
cls.support_static_graph_mode = classmethod(lambda c: True)
from cpu_host import no_pinned_memory
no_pinned_memory()


def one(case):
  cc = tuple(case["cc"])
  cls.get_device_total_memory = classmethod(lambda c, device_id=0: case["memory"])
  cls.get_device_name = classmethod(lambda c, device_id=0: case["gpu_name"])
  cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(*cc))
  from vllm.engine.arg_utils import EngineArgs
  from vllm.usage.usage_lib import UsageContext
  kw = dict(model=case["model"], skip_tokenizer_init=True)
  kw.update(case["args"])
  vc = EngineArgs(**kw).create_engine_config(usage_context=UsageContext.OPENAI_API_SERVER)
  cc_ = vc.compilation_config
  import vllm.envs as envs
  out = {
      "max_num_seqs": vc.scheduler_config.max_num_seqs,
      "max_num_batched_tokens": vc.scheduler_config.max_num_batched_tokens,
      "capture_sizes": list(cc_.cudagraph_capture_sizes or []),
      "max_capture": cc_.max_cudagraph_capture_size,
      "env_workspace": envs.VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE,
  }
  # the FlashInfer builder of this config: its workspace and decode-graph limit
  try:
      import torch
      from vllm.config import set_current_vllm_config
      from vllm.v1.attention.backends.flashinfer import FlashInferBackend, FlashInferMetadataBuilder
      from vllm.v1.kv_cache_interface import FullAttentionSpec
      try:
          from vllm.model_executor.layers.attention import Attention
      except ImportError:
          from vllm.attention.layer import Attention
      import vllm.v1.attention.backends.flashinfer as m
      if hasattr(m, "_get_multi_ctas_kv_counter_buffer"):
          real = m._get_multi_ctas_kv_counter_buffer
          m._get_multi_ctas_kv_counter_buffer = lambda n, device: real(n, torch.device("cpu"))
      if hasattr(m, "get_device_sm_count"):
          m.get_device_sm_count = lambda device=None: 132
      spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=256, dtype=torch.bfloat16)
      with set_current_vllm_config(vc):
          layers = [Attention(num_heads=32, head_size=256, scale=256 ** -0.5, num_kv_heads=2,
                              attn_backend=FlashInferBackend, prefix=f"model.layers.{i}.self_attn.attn")
                    for i in range(2)]
          b = FlashInferMetadataBuilder(spec, [l.layer_name for l in layers], vc, torch.device("cpu"))
          out["workspace"] = int(b._get_workspace_buffer().numel())
          # the adapter's live reading of the same rule (vllm_guard.workspace_facts.server_bytes)
          from vllm_guard import workspace_facts
          out["adapter_workspace"] = workspace_facts.server_bytes(b, m)[0]
          out["decode_graph_max"] = getattr(b, "_decode_cudagraph_max_bs", None)
  except Exception as exc:
      import traceback
      traceback.print_exc()
      out["builder_error"] = f"{type(exc).__name__}: {exc}"
  return out


results = {}
for cid, case in json.loads(sys.argv[1]).items():
    try:
        results[cid] = one(case)
    except Exception as exc:  # vLLM refused this case: reported to its test
        import traceback
        traceback.print_exc()
        results[cid] = {"error": f"{type(exc).__name__}: {exc}"}
print("RESULT " + json.dumps(results), flush=True)
'''


def _model_dir(cfg=SHAPE) -> str:
    d = tempfile.mkdtemp(prefix="fg-xcheck-")
    with open(os.path.join(d, "config.json"), "w") as fh:
        json.dump(cfg, fh)
    return d


MODEL = _model_dir()
# gpt-oss-120b's published config without its MXFP4 quantization (not loadable on CPU; the capture
# rule it tests depends on the architecture only: GptOssForCausalLMConfig.verify_and_update_config)
_GPT_OSS = {k: v for k, v in json.loads((HERE.parent / "data" / "model_configs" / "gpt-oss-120b.json").read_text())
            .items() if k != "quantization_config"}
MODELS = {"gpt-oss": (_model_dir(_GPT_OSS), _GPT_OSS)}


def _env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "VLLM_FLASHINFER", "VLLM_PLUGINS", "VLLM_TARGET_DEVICE"))}
    # our own plugin would raise the workspace: this compares vLLM's own choice
    env.update(FLASHINFER_GUARD="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    return env


def _case(gpu: str, args: dict) -> dict:
    spec = find_spec(gpu)
    model = MODELS[args["_model"]][0] if "_model" in args else MODEL
    return {"model": model, "gpu_name": spec.name, "memory": GPU_MEMORY[spec.key][0], "cc": list(spec.cc),
            "args": {k: v for k, v in args.items() if not k.startswith("_")}}


_REAL: dict = {}


def vllm_says(gpu: str, args: dict) -> dict:
    """vLLM's choice for (gpu, args); every case of this module is computed in the first call."""
    key = json.dumps([gpu, args], sort_keys=True)
    if not _REAL:
        cases = {json.dumps([g, a], sort_keys=True): _case(g, a) for g, a in CASES + EXTRA}
        cases.setdefault(key, _case(gpu, args))
        proc = forkserver.run([sys.executable, "-c", PROBE, json.dumps(cases)], capture_output=True, text=True,
                              env=_env(), timeout=1200, cwd=str(REPO))
        lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, f"probe failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}"
        _REAL.update(json.loads(lines[-1][len("RESULT "):]))
        _REAL["_stderr"] = proc.stderr[-6000:]
    assert key in _REAL, f"case {key} was not probed"
    r = _REAL[key]
    assert "error" not in r, f"vLLM {VLLM} refused {key}: {r['error']}\n{_REAL['_stderr']}"
    return r


def plan_says(gpu: str, args: dict) -> dict:
    spec = find_spec(gpu)
    cfg = MODELS[args["_model"]][1] if "_model" in args else SHAPE
    d = Deployment(framework="vllm", line=VLLM, gpu_key=spec.key, cc=spec.cc, gpu_name=spec.name,
                   max_num_seqs=args.get("max_num_seqs"), max_batched_tokens=args.get("max_num_batched_tokens"),
                   max_model_len=args.get("max_model_len"), model_max_len=cfg["max_position_embeddings"],
                   architecture=cfg["architectures"][0],
                   max_capture=args.get("max_cudagraph_capture_size"),
                   draft_tokens=(args.get("speculative_config") or {}).get("num_speculative_tokens"))
    r = derive(d)
    tokens = r.get("max_batched_tokens")
    return {
        "max_num_seqs": r.get("max_num_seqs"), "max_num_batched_tokens": tokens,
        "capture_sizes": list(r.get("capture_sizes")), "max_capture": max(r.get("capture_sizes"), default=0),
        "workspace": default_workspace("vllm", VLLM, architecture=SHAPE["architectures"][0],
                                       max_num_batched_tokens=tokens, q_heads=32, head_dim=256),
        "decode_graph_max": max(r.decode_graph_sizes, default=0),
        "flashinfer": r.get("flashinfer"),
    }


CASES = [
    ("b300", {}), ("b200", {}), ("h200", {}), ("h100", {}), ("a100", {}), ("l40s", {}), ("rtxpro6000", {}),
    ("gb10", {}), ("b300", {"max_num_seqs": 528, "max_model_len": 3072}),
    ("h100", {"max_num_seqs": 96}), ("b200", {"max_model_len": 3}),
    ("b300", {"max_cudagraph_capture_size": 1024, "max_num_seqs": 1024}),
    ("b200", {"max_num_seqs": 64, "speculative_config": {"method": "ngram", "num_speculative_tokens": 3,
                                                           "prompt_lookup_max": 3, "prompt_lookup_min": 2}}),
    # issue 26: vLLM raises gpt-oss's capture ceiling to 1024 (GptOssForCausalLMConfig)
    ("h200", {"_model": "gpt-oss", "max_num_seqs": 1024}),
]
EXTRA = [("b300", {"max_num_seqs": 528})]


@pytest.mark.parametrize("gpu,args", CASES, ids=[f"{g}-{'-'.join(f'{k}={v}' for k, v in a.items() if k != 'speculative_config') or 'defaults'}" + ("-ngram3" if "speculative_config" in a else "")
                                                   for g, a in CASES])
def test_plan_defaults_equal_vllm(gpu, args):
    real = vllm_says(gpu, args)
    ours = plan_says(gpu, args)
    assert ours["max_num_seqs"] == real["max_num_seqs"]
    assert ours["max_num_batched_tokens"] == real["max_num_batched_tokens"]
    assert ours["capture_sizes"] == real["capture_sizes"]
    assert ours["max_capture"] == real["max_capture"]
    assert "builder_error" not in real, real["builder_error"]
    if "_model" not in args:  # the probe's builder has SHAPE's heads (vLLM 0.26+ sizes by them)
        assert ours["workspace"] == real["workspace"]
    # vLLM's buffer rule is written twice (issue 30): plan's offline copy
    # (server_defaults.vllm_workspace) and the adapter's live reading
    # (vllm_guard.workspace_facts.server_bytes); both equal what vLLM allocates
    assert real["adapter_workspace"] == real["workspace"]
    assert ours["decode_graph_max"] == real["decode_graph_max"]


def test_pinned_flashinfer_is_installed_one():
    assert plan_says("b300", {})["flashinfer"] == FLASHINFER


def test_whole_plan_path_reads_command_and_matches():
    """The launch command read by `plan` and its defaults (the model read by the built-in reader:
    vLLM's own reading of configs has its tests, test_published_configs / test_model_groups)."""
    real = vllm_says("b300", {"max_num_seqs": 528})
    proc = subprocess.run(
        [sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--gpu", "b300", "--framework-version", VLLM,
         "--trtllm-attention", "off", "--resolution", "builtin", "--model-reader", "builtin",
         "--", "vllm", "serve", MODEL, "--max-num-seqs", "528", "--port", "8000"],
        capture_output=True, text=True, env=_env(), cwd=str(REPO), timeout=300)
    assert proc.returncode == 0, proc.stderr
    d = json.loads(proc.stdout)
    assert d["limits"]["max_num_seqs"] == real["max_num_seqs"] == 528
    assert d["limits"]["max_batched_tokens"] == real["max_num_batched_tokens"]
    assert d["defaults"]["values"]["capture_sizes"]["value"] == real["capture_sizes"]
    assert d["server_default_bytes"] == real["workspace"]
    assert d["limits"]["capture_sizes"][-1] == real["decode_graph_max"]
    assert d["ignored_options"] == ["--port 8000"]
