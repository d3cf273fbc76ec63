"""`flashinfer-guard plan` gives the decision the guard makes inside vLLM (issue 26, the parity search).

One process of this environment (forked from a warm interpreter, tests/common/forkserver.py) (tests/vllm/parity_probe.py) generates seeded deployments
(GPU, attention shape, max seqs, batched tokens, KV-cache dtype, n-gram speculative decoding,
capture ceiling, eager), lets vLLM resolve each from its engine arguments on the simulated GPU and
build its real FlashInfer builder, and compares the adapter's decision on that builder
(``vllm_guard.workspace_facts.decide``) with `plan`'s for the same launch command, read with the
built-in readers as in the core environment: the need, the buffer and the verdict must be equal
on every deployment; the first N_SERVER deployments are also planned through vLLM's own resolution
of the command (``plan --resolution server``), which must agree with the adapter too. A disagreement is reported as its `plan` command and the adapter's log line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.common import forkserver

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
SEED, COUNT = 26, 150
# the first N_SERVER deployments are also planned through vLLM's own resolution (`plan --resolution
# server`, issue 26 item 2; resolve() in the probe's vLLM process, see parity_probe.server_in_process)
N_SERVER = int(os.environ.get("FLASHINFER_GUARD_PARITY_SERVER", "20"))


def test_plan_agrees_with_the_adapter_on_generated_deployments():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLASHINFER_GUARD", "VLLM_FLASHINFER", "VLLM_PLUGINS"))}
    env.update(FLASHINFER_GUARD="0", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=os.pathsep.join([str(REPO), str(HERE)]))
    proc = forkserver.run([sys.executable, str(HERE / "parity_probe.py"), str(SEED), str(COUNT), str(N_SERVER)],
                          capture_output=True, text=True, env=env, cwd=str(REPO), timeout=1200)
    rows = [json.loads(line[len("PARITY "):]) for line in proc.stdout.splitlines() if line.startswith("PARITY ")]
    assert proc.returncode == 0 and len(rows) == COUNT, proc.stderr[-4000:]
    bad = []
    for r in rows:
        a, p = r["adapter"], r["plan"]
        if "error" in a or "error" in p or any(a[k] != p[k] for k in ("need", "buffer", "verdict")):
            bad.append(f"{r['command']}\n    plan: {p}\n    adapter: {a.get('error') or a['line']} "
                       f"(need {a.get('need')}, buffer {a.get('buffer')}, {a.get('verdict')})")
        s = r.get("plan_server")
        if s is not None and ("error" in a or "error" in s or any(a[k] != s[k] for k in ("need", "buffer", "verdict"))
                              or not str(s.get("resolution", "")).endswith("own engine config")):
            bad.append(f"{r['command'].replace(' -- ', ' --resolution server -- ')}\n    plan (server): {s}\n"
                       f"    adapter: {a.get('error') or a['line']} (need {a.get('need')}, buffer {a.get('buffer')}, "
                       f"{a.get('verdict')})")
    served = sum("plan_server" in r for r in rows)
    assert served == min(N_SERVER, COUNT)
    print(f"parity: {COUNT} deployments ({served} also through vLLM's own resolution), {COUNT + served - len(bad)} "
          f"of {COUNT + served} plans agree (need, buffer, verdict)")
    assert not bad, f"{len(bad)} of {COUNT + served} disagree:\n" + "\n".join(bad[:10])
