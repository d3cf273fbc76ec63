"""One line's probes for the compatibility matrix (run with the line's env python).

    python ci/matrix_probe.py vllm|sglang   -> one JSON object on stdout

Each probe is a fresh interpreter running the suites' own scenarios
(tests/vllm/scenarios.py, tests/sglang/scenarios.py): the real framework, the
real plugin loader, the real patch targets. The framework alone is the same
scenario with the plugins not loaded (vLLM) or the master switch off (SGLang).
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINE_RE = re.compile(r"\[flashinfer-guard\] (workspace|moe): (.*)$")


def run(script: str, *args: str, env: dict | None = None) -> dict:
    # as the suites' conftests do: our checkout and the suite folder first on the
    # path (an environment's editable install may point at another checkout),
    # none of the caller's FLASHINFER_GUARD* settings
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("FLASHINFER_GUARD") and k != "PYTHONDONTWRITEBYTECODE"}
    full_env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONUNBUFFERED="1",
                    PYTHONPATH=os.pathsep.join([REPO, os.path.join(REPO, os.path.dirname(script))]))
    full_env.update(env or {})
    proc = subprocess.run([sys.executable, os.path.join(REPO, script), *args], capture_output=True, text=True,
                          env=full_env, cwd=REPO, timeout=600)
    out = {"rc": proc.returncode}
    for line in (proc.stdout + "\n" + proc.stderr).splitlines():
        if line.startswith("RESULT"):
            out.update(json.loads(line.split(" ", 1)[1]))
        m = LINE_RE.search(line)
        if m:
            out.setdefault("lines", []).append(f"{m.group(1)}: {m.group(2)}")
    if proc.returncode:
        out["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
    return out


def version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def vllm() -> dict:
    s = "tests/vllm/scenarios.py"
    res = {"discover": run(s, "discover")}
    for shape in ("qwen35", "qwen3vl"):
        res[f"ws_{shape}"] = run(s, "workspace", "--fake-gpu", "--shape", shape)
        res[f"ws_{shape}_alone"] = run(s, "workspace", "--fake-gpu", "--no-plugins", "--shape", shape,
                                       env={"VLLM_PLUGINS": ""})
    # EngineArgs loads the plugins by itself: the baseline names none at all
    env = {"VLLM_TARGET_DEVICE": "cpu"}
    alone = dict(env, VLLM_PLUGINS="")
    res["moe_aarch64"] = run(s, "moe", "--machine", "aarch64", "--explicit", env=env)
    res["moe_aarch64_alone"] = run(s, "moe", "--machine", "aarch64", "--explicit", "--no-plugins", env=alone)
    return res


def sglang() -> dict:
    s = "tests/sglang/scenarios.py"
    res = {}
    for shape in ("qwen35", "qwen3vl"):
        res[f"ws_{shape}"] = run(s, shape, "{}")
        res[f"ws_{shape}_alone"] = run(s, shape, "{}", env={"FLASHINFER_GUARD": "0"})
    res["moe_aarch64"] = run(s, "moe_server_args", json.dumps({"explicit": True}))
    res["moe_aarch64_alone"] = run(s, "moe_server_args", json.dumps({"explicit": True}), env={"FLASHINFER_GUARD": "0"})
    res["moe_runtime_aarch64"] = run(s, "moe_runtime", "{}")
    return res


def main() -> int:
    fw = sys.argv[1]
    out = {
        "framework": fw, "version": version(fw), "flashinfer": version("flashinfer-python"),
        "torch": version("torch"), "python": sys.version.split()[0],
        "entry_points": sorted(e.name for e in md.entry_points(
            group="vllm.general_plugins" if fw == "vllm" else "sglang.srt.plugins")),
    }
    out.update(vllm() if fw == "vllm" else sglang())
    print(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
