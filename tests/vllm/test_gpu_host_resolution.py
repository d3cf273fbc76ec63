"""`plan` resolves multi-GPU launches through vLLM's own code on a GPU host too (issue 41 item 3).

On the machine users run `plan` on, vLLM picks its CUDA platform through NVML, while plan's resolution
subprocess sees no device (``CUDA_VISIBLE_DEVICES=""``): the CUDA platform counted 0 GPUs and
``ParallelConfig`` refused every TP x PP > 1 ("World size (2) is larger than the number of available
GPUs (0) in this node", config/parallel.py 0.33.0:1066-1076, 0.23.0:855-865), so every multi-GPU plan
fell back to the built-in rules with a line saying vLLM refused it.

The GPU host is simulated below the Python code, as the host looks from a process without a device:
NVML answers 8 H200s (tests/vllm/gpu_host/sitecustomize.py, first on PYTHONPATH) and the CUDA driver
library is present (a stand-in ``libcuda.so.1`` built here with the driver entry points vLLM's
extensions link against, each answering CUDA_ERROR_STUB_LIBRARY, as the toolkit's own stub does: the
host has a driver, this process no device). vLLM's own platform choice, config and FlashInfer builder
run unchanged. The expected answer is vLLM's own resolution of the same command on this CPU host
(vLLM's unspecified platform, where the GPU count is not checked), whose agreement with the adapter
inside vLLM the parity search holds (test_plan_parity.py); nothing comes from guard_core.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORPUS = REPO / "tests" / "data" / "model_configs"
VLLM = os.environ.get("FLASHINFER_GUARD_VLLM_LINE") or __import__("importlib.metadata").metadata.version("vllm")


@pytest.fixture(scope="module")
def driver_stub(tmp_path_factory) -> Path:
    """``libcuda.so.1`` with every CUDA driver symbol the installed vLLM's extensions import."""
    import vllm

    d = tmp_path_factory.mktemp("cuda-driver")
    syms = set()
    for so in Path(vllm.__file__).parent.rglob("*.so"):
        out = subprocess.run(["nm", "-D", "--undefined-only", str(so)], capture_output=True, text=True).stdout
        syms.update(w for ln in out.splitlines() for w in ln.split()[-1:]
                    if w.startswith("cu") and len(w) > 2 and w[2].isupper() and "@" not in w)
    assert "cuGetProcAddress_v2" in syms or "cuTensorMapEncodeTiled" in syms, sorted(syms)
    src = ['static const char *msg = "flashinfer-guard test: CUDA driver stand-in";']
    for s in sorted(syms):
        src.append(f"int {s}(int e, const char **p) {{ if (p) *p = msg; return 0; }}" if s == "cuGetErrorString"
                   else f"int {s}(void) {{ return 34; }}  /* CUDA_ERROR_STUB_LIBRARY */")
    (d / "stub.c").write_text("\n".join(src) + "\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(d / "libcuda.so.1"), "-Wl,-soname,libcuda.so.1",
                    str(d / "stub.c")], check=True, capture_output=True)
    return d


def _plan(model_dir: Path, *launch: str, gpu_host: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLASHINFER_GUARD", "VLLM_FLASHINFER", "VLLM_PLUGINS"))}
    path = [str(REPO), str(HERE)]
    if gpu_host is not None:
        path.insert(0, str(HERE / "gpu_host"))
        env["LD_LIBRARY_PATH"] = os.pathsep.join([str(gpu_host), env.get("LD_LIBRARY_PATH", "")]).rstrip(os.pathsep)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=os.pathsep.join(path))
    p = subprocess.run([sys.executable, "-m", "guard_core.commands.cli", "plan", "--json", "--gpu", "h200",
                        "--framework-version", VLLM, "--", "vllm", "serve", str(model_dir), *launch],
                       capture_output=True, text=True, env=env, cwd=str(REPO), timeout=900)
    assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr[-3000:]
    return json.loads(p.stdout)


def _answer(d: dict) -> dict:
    """What plan concludes: the resolved config, the need, the buffers, the verdict, the decision line."""
    keep = ("layout", "limits", "planners", "need", "server_default_bytes", "workspace_bytes", "verdict")
    return {"resolved": d["resolution"].get("resolved"), **{k: d[k] for k in keep},
            "decision": d["decision"]["line"], "kv": d["kv_budget"]["line"],
            "scenarios": [(s["name"], s["float_bytes"], s["int_bytes"]) for s in d["scenarios"]]}


def test_multi_gpu_launch_resolves_through_vllm_on_a_gpu_host(tmp_path, driver_stub):
    """TP 2 x PP 2 (world size 4) on a simulated 8 x H200 host: vLLM's own engine config answers, as
    it does on this CPU host, with the same need, buffer and verdict."""
    model = tmp_path / "Qwen3-32B"
    model.mkdir()
    (model / "config.json").write_text((CORPUS / "Qwen3-32B.json").read_text())
    launch = ("--attention-backend", "FLASHINFER", "--tensor-parallel-size", "2", "--pipeline-parallel-size", "2",
              "--max-model-len", "8192")
    on_gpu_host = _plan(model, *launch, gpu_host=driver_stub)
    res = on_gpu_host["resolution"]
    assert res["server"] is True, f"fell back on a GPU host: {res.get('why')}"
    assert res["resolved"]["tp"] == 2
    on_cpu_host = _plan(model, *launch, gpu_host=None)
    assert on_cpu_host["resolution"]["server"] is True, on_cpu_host["resolution"]
    assert _answer(on_gpu_host) == _answer(on_cpu_host)
