"""Harness for the vLLM adapter tests: every scenario in its own process.

vLLM caches capability checks and its plugins-loaded flag per process, so
each scenario of scenarios.py runs in its own process (this env's python, forked from a warm
interpreter that preloaded only third-party modules: tests/common/forkserver.py;
the one with the real vLLM installed). All scenarios are started when the
session begins, a few at a time, and each test waits for the ones it reads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from tests.common import forkserver  # noqa: E402

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SCRIPT = HERE / "scenarios.py"
TIMEOUT_S = int(os.environ.get("FLASHINFER_GUARD_SCENARIO_TIMEOUT", "600"))
MIB = 1 << 20

# scenario id -> (arguments, extra environment)
AUTO = {}
SCENARIOS: dict[str, tuple[list[str], dict[str, str]]] = {
    "discover": (["discover"], AUTO),
    "moe_arm": (["moe", "--machine", "aarch64", "--explicit"], AUTO),
    "moe_x86": (["moe", "--machine", "x86_64", "--explicit"], AUTO),
    # vLLM alone: what its own selection picks on this line (EngineArgs loads plugins by itself)
    "moe_baseline": (["moe", "--machine", "x86_64", "--explicit", "--no-plugins"], {"VLLM_PLUGINS": ""}),
    "moe_x86_on": (["moe", "--machine", "x86_64", "--explicit"], {"FLASHINFER_GUARD_MOE": "on"}),
    "moe_arm_off": (["moe", "--machine", "aarch64"], {"FLASHINFER_GUARD_MOE": "off"}),
    "moe_env_route": (["moe_env_route", "--machine", "aarch64"],
                      {"VLLM_USE_FLASHINFER_MOE_FP16": "1", "VLLM_FLASHINFER_MOE_BACKEND": "latency"}),
    "moe_env_route_baseline": (["moe_env_route", "--machine", "aarch64", "--no-plugins"],
                               {"VLLM_USE_FLASHINFER_MOE_FP16": "1", "VLLM_FLASHINFER_MOE_BACKEND": "latency"}),
    "moe_mxfp4_route": (["moe_env_route", "--machine", "aarch64"], {"VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": "1"}),
    # EngineArgs loads plugins by itself: the baseline names no plugin at all
    "moe_mxfp4_route_baseline": (["moe_env_route", "--machine", "aarch64", "--no-plugins"],
                                 {"VLLM_USE_FLASHINFER_MOE_MXFP4_BF16": "1", "VLLM_PLUGINS": ""}),
    "moe_broken_hook": (["moe", "--machine", "aarch64"], {"FG_TEST_BREAK_MOE": "1"}),
    # one per evidence-table row (guard_core.flashinfer.moe_evidence), on the real selection code: the
    # host, the GPU family (--cc) and the FlashInfer release the guard reads (--fi) simulated
    "moe_row_grace": (["moe", "--machine", "aarch64", "--explicit", "--fi", "0.6.15.post1"], AUTO),
    "moe_row_any_host": (["moe", "--machine", "x86_64", "--explicit", "--fi", "0.6.15.post1"], AUTO),
    "moe_row_any_host_strict": (["moe", "--machine", "x86_64", "--explicit", "--fi", "0.6.15.post1"],
                                {"FLASHINFER_GUARD_MOE": "strict"}),
    "moe_row_any_host_b300_strict": (["moe", "--machine", "x86_64", "--cc", "10.3", "--fi", "0.6.15.post1"],
                                     {"FLASHINFER_GUARD_MOE": "strict"}),
    "moe_row_sm120_arm_strict": (["moe", "--machine", "aarch64", "--explicit", "--cc", "12.0", "--fi", "0.6.15.post1"],
                                 {"FLASHINFER_GUARD_MOE": "strict"}),
    "moe_baseline_sm120": (["moe", "--machine", "aarch64", "--explicit", "--cc", "12.0", "--no-plugins"],
                           {"VLLM_PLUGINS": ""}),
    "moe_row_bf16": (["moe", "--machine", "x86_64", "--fi", "0.6.17"], AUTO),
    "moe_row_bf16_strict": (["moe", "--machine", "x86_64", "--explicit", "--fi", "0.6.17"],
                            {"FLASHINFER_GUARD_MOE": "strict"}),
    "moe_row_bf16_strict_user": (["moe", "--machine", "x86_64", "--fi", "0.6.17"],
                                 {"FLASHINFER_GUARD_MOE": "strict", "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS": "fp4_gemm"}),
    "ws": (["workspace", "--fake-gpu"], AUTO),
    "ws_baseline": (["workspace", "--fake-gpu", "--no-plugins"], AUTO),
    "ws1024": (["workspace", "--fake-gpu", "--capture", "1024"], AUTO),
    "ws_disabled": (["workspace", "--fake-gpu"], {"FLASHINFER_GUARD": "0"}),
    "ws_user_small": (["workspace", "--fake-gpu"], {"VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE": str(400 * MIB)}),
    "ws_user_big": (["workspace", "--fake-gpu"], {"VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE": str(1536 * MIB)}),
    "ws_size": (["workspace", "--fake-gpu"], {"FLASHINFER_GUARD_WORKSPACE": "1600MiB"}),
    # a size the device cannot hold (8 GiB free): vLLM's own size, one warning (issue 22 item 13)
    "ws_too_big": (["workspace", "--fake-gpu", "--device-memory", str(8 << 30)],
                   {"FLASHINFER_GUARD_WORKSPACE": "200GiB"}),
    "ws_off": (["workspace", "--fake-gpu"], {"FLASHINFER_GUARD_WORKSPACE": "off"}),
    "ws_bad_value": (["workspace", "--fake-gpu"], {"FLASHINFER_GUARD_WORKSPACE": "plenty"}),
    "ws_no_gpu": (["workspace"], AUTO),
    "ws_twice": (["workspace", "--fake-gpu", "--twice"], AUTO),
    "ws_broken_hook": (["workspace", "--fake-gpu", "--break-hook"], AUTO),
    "ws_renamed": (["workspace", "--fake-gpu", "--rename-target"], AUTO),
    "ws_shared": (["shared"], AUTO),
    "environ": (["environ"], {
        "FLASHINFER_GUARD": "1", "FLASHINFER_GUARD_MOE": "auto", "FLASHINFER_GUARD_MOE_FIXED_IN": "0.6.16",
        "FLASHINFER_GUARD_WORKSPACE": "auto", "FLASHINFER_GUARD_LOG": "info"}),
    "environ_control": (["environ"], {"VLLM_FLASHINFER_GUARD_WORKSPACE": "auto"}),
}

_OURS = ("FLASHINFER_GUARD", "VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE", "VLLM_USE_FLASHINFER_MOE",
         "VLLM_FLASHINFER_AUTOTUNE_SKIP_OPS",
         "VLLM_FLASHINFER_MOE", "VLLM_TARGET_DEVICE", "VLLM_PLUGINS", "FG_TEST_")


class Run:
    def __init__(self, sid: str, proc: subprocess.CompletedProcess):
        self.id = sid
        self.rc = proc.returncode
        self.output = proc.stdout + proc.stderr
        m = [l for l in proc.stdout.splitlines() if l.startswith("RESULT: ")]
        self.result = json.loads(m[-1][len("RESULT: "):]) if m else None

    @property
    def guard_lines(self) -> list[str]:
        return [l for l in self.output.splitlines() if "[flashinfer-guard]" in l]

    def lines(self, level: str, area: str | None = None) -> list[str]:
        # vLLM's prefix: "INFO 11-29 ..." or, from 0.31, "(MainProcess pid=1) INFO 11-29 ..."
        out = [l for l in self.guard_lines if level in l.split("[flashinfer-guard]")[0].split()]
        if area:
            out = [l for l in out if f"[flashinfer-guard] {area}:" in l]
        return out

    def ok(self) -> dict:
        assert self.rc == 0 and self.result is not None, f"scenario {self.id} failed:\n{self.output[-6000:]}"
        return self.result


def _run(sid: str) -> Run:
    args, extra = SCENARIOS[sid]
    # PYTHONDONTWRITEBYTECODE would make every scenario recompile vLLM and
    # torch from source (tens of seconds each); let the first ones cache it
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(_OURS) and k != "PYTHONDONTWRITEBYTECODE"}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    env.update(extra)
    try:
        proc = forkserver.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                              timeout=TIMEOUT_S, cwd=str(REPO))
    except subprocess.TimeoutExpired as exc:
        proc = subprocess.CompletedProcess(exc.cmd, -9, str(exc.stdout or ""), f"timeout after {TIMEOUT_S} s")
    logs = os.environ.get("FLASHINFER_GUARD_SCENARIO_LOGS")
    if logs:  # keep each scenario's full output for CI artefacts and the README
        try:
            Path(logs).mkdir(parents=True, exist_ok=True)
            (Path(logs) / f"{sid}.log").write_text(
                f"$ {' '.join(args)}  env={extra}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
        except OSError:
            pass
    return Run(sid, proc)


class Pool:
    def __init__(self, workers: int):
        self._ex = ThreadPoolExecutor(max_workers=workers)
        self._futures = {}
        self._lock = threading.Lock()

    def start(self, ids):
        with self._lock:
            for sid in ids:
                if sid not in self._futures:
                    self._futures[sid] = self._ex.submit(_run, sid)

    def get(self, sid: str) -> Run:
        self.start([sid])
        return self._futures[sid].result()

    def close(self):
        self._ex.shutdown(wait=False, cancel_futures=True)


@pytest.fixture(scope="session")
def pool(request):
    workers = int(os.environ.get("FLASHINFER_GUARD_SCENARIO_JOBS", str(max(2, (os.cpu_count() or 2)))))
    p = Pool(workers)
    # start every scenario the selected tests ask for, in test order
    wanted = []
    for item in request.session.items:
        for sid in getattr(item.function, "scenarios", ()):
            if sid not in wanted:
                wanted.append(sid)
    p.start(wanted)
    yield p
    p.close()


def uses(*ids):
    """Mark a test with the scenarios it reads (started up front)."""
    def deco(fn):
        fn.scenarios = ids
        return fn
    return deco


@pytest.fixture(scope="session")
def versions():
    import importlib.metadata as md

    return {"vllm": md.version("vllm"), "flashinfer": md.version("flashinfer-python")}


def mib(n: int) -> str:
    return f"{n / MIB:.1f} MiB"


NUM = re.compile(r"(\d[\d,]*)")
