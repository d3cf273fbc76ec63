"""The safety net on real torch tensors (CPU), threads and every retry failure (issue 29, items 2-3).

A FlashInfer-shaped stand-in wrapper (FlashInfer's plan() needs a GPU build; its
AlignedAllocator's overflow message and its writes into the workspace are imitated)
holds real ``torch.uint8`` workspaces; the net is armed on it as on FlashInfer's
module (``safety_net.patch_module``). Everything runs in one fresh interpreter of this
environment, so that a crash (the SIGSEGV in ``resize_bytes_cpu`` -> ``memmove`` the
issue reports when two threads grew one tensor at once) fails the test instead of
killing pytest.

- threads: ROUNDS rounds of THREADS threads planning at once, half on wrappers that
  share one buffer, half on buffers of their own, needs drawn below and above the
  buffer: no crash, and every call ends in a plan whose allocations fit the buffer it
  planned in or in FlashInfer's own overflow error;
- retry failures: the retry raises ValueError, MemoryError, TypeError, a RuntimeError
  that is no overflow, overflows on every try, or is interrupted (KeyboardInterrupt):
  the owner's tensor is handed back on the same storage (same data pointer, same size),
  one warning says why, and FlashInfer's first error (or the interrupt) propagates.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ROUNDS, THREADS = 50, 8
MIB = 1 << 20


def _overflow(name, size, avail):
    return RuntimeError(f"Buffer overflow when allocating memory for {name} with size {size} and alignment 16, "
                        f"but only {avail} bytes available in AlignedAllocator. Increase the workspace buffer size.")


def _stand_in(retry_error=None):
    """A FlashInfer-shaped wrapper: plan(need) carves ``need`` bytes from the float workspace
    (overflow message as FlashInfer's AlignedAllocator words it) and writes them, as the planner
    writes its plan info; ``retry_error`` is raised on every call after the first."""
    class Wrapper:
        _use_cuda_graph = False

        def __init__(self, buf):
            self._float_workspace_buffer = buf
            self.calls = 0

        def plan(self, need):
            self.calls += 1
            if retry_error is not None and self.calls > 1:
                raise retry_error
            buf = self._float_workspace_buffer
            cap = buf.numel()
            if need > cap:
                raise _overflow("batch_prefill_tmp_v", need, cap)
            buf.narrow(0, 0, need).fill_(self.calls & 0xFF)
            return (need, buf.numel())
    return Wrapper


class _Log:
    def __init__(self):
        self.lines = []

    def warning(self, msg, key=None):
        self.lines.append(msg)


def _arm(net, cls):
    import types

    mod = types.ModuleType("flashinfer.prefill")
    mod.BatchPrefillWithPagedKVCacheWrapper = cls
    net.patch_module(mod)


def _work(i, go, wrappers, needs, out) -> None:
    go.wait()
    try:
        for _ in range(3):
            out[i] = ("ok",) + tuple(wrappers[i].plan(needs[i]))
    except RuntimeError as exc:
        out[i] = ("error", str(exc))
    except BaseException as exc:  # noqa: BLE001 - anything else is a finding
        out[i] = ("other", repr(exc))


def _threads(net, torch) -> dict:
    import random
    import threading

    rng = random.Random(29)
    bad, recovered, refused = [], 0, 0
    for r in range(ROUNDS):
        net.uninstall()
        cls = _stand_in()
        _arm(net, cls)
        shared = torch.zeros(MIB, dtype=torch.uint8)
        wrappers = [cls(shared) if i % 2 == 0 else cls(torch.zeros(MIB, dtype=torch.uint8)) for i in range(THREADS)]
        needs = [rng.choice([MIB // 2, MIB, 2 * MIB + 5, 5 * MIB, 9 * MIB]) for _ in range(THREADS)]
        out = [None] * THREADS
        go = threading.Barrier(THREADS)

        ts = [threading.Thread(target=_work, args=(i, go, wrappers, needs, out)) for i in range(THREADS)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        for i, o in enumerate(out):
            if o[0] == "ok" and o[1] == needs[i] and o[2] >= needs[i]:
                recovered += 1
            elif o[0] == "error" and net.parse_overflow(RuntimeError(o[1])) is not None:
                refused += 1
            else:
                bad.append((r, i, needs[i], o))
    net.uninstall()
    return {"rounds": ROUNDS, "threads": THREADS, "recovered": recovered, "refused": refused, "bad": bad[:5]}


def _retry_failures(net, torch) -> dict:
    errors = {"ValueError": ValueError("bad shape"), "MemoryError": MemoryError("no memory"),
              "TypeError": TypeError("bad type"), "RuntimeError": RuntimeError("CUDA error: an illegal access"),
              "overflow": _overflow("batch_prefill_tmp_v", 8 * MIB, 0), "KeyboardInterrupt": KeyboardInterrupt()}
    results = {}
    for captured in (0, 1):  # grown in place (before any graph); a separate buffer (after one)
        for label, err in errors.items():
            net.uninstall()
            log = _Log()
            net._state.update(log=log, captured=captured)
            cls = _stand_in(retry_error=err)
            _arm(net, cls)
            owner = torch.zeros(4 * MIB, dtype=torch.uint8)
            ptr, size, storage = owner.data_ptr(), owner.numel(), owner.untyped_storage().data_ptr()
            w, other = cls(owner), cls(owner)
            try:
                w.plan(283 * MIB)
                raised = None
            except BaseException as exc:  # noqa: BLE001
                raised = exc
            results[f"{label}@{captured}"] = {
                "same_tensor": w._float_workspace_buffer is owner and other._float_workspace_buffer is owner,
                "same_pointer": owner.data_ptr() == ptr and owner.untyped_storage().data_ptr() == storage,
                "same_size": owner.numel() == size,
                "raised": type(raised).__name__,
                "first_error": isinstance(raised, RuntimeError) and "with size 296747008 and" in str(raised),
                "warnings": log.lines,
            }
    net.uninstall()
    net._state.update(log=None, captured=0)
    return results


def main() -> None:
    import torch

    from guard_core.runtime import safety_net as net

    print("RETRY " + json.dumps(_retry_failures(net, torch)), flush=True)
    net._state["log"] = _Log()
    print("THREADS " + json.dumps(_threads(net, torch)), flush=True)


@lru_cache(maxsize=1)
def _run() -> tuple[int, dict, str]:
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.run([sys.executable, "-c", "from tests.vllm.test_safety_net_threads import main; main()"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    res = {}
    for ln in proc.stdout.splitlines():
        key, _, data = ln.partition(" ")
        if key in ("RETRY", "THREADS"):
            res[key.lower()] = json.loads(data)
    return proc.returncode, res, proc.stderr[-3000:]


def test_many_threads_planning_on_shared_and_separate_buffers_never_crash():
    rc, res, err = _run()
    assert rc == 0 and "threads" in res, f"exit {rc} (a negative exit is a signal: -11 SIGSEGV): {err}"
    t = res["threads"]
    assert t["bad"] == [], t
    assert t["recovered"] + t["refused"] == ROUNDS * THREADS
    assert t["recovered"] > 0  # the net did grow buffers while other threads planned on them


def test_every_retry_failure_gives_back_the_owners_storage_with_one_warning():
    rc, res, err = _run()
    assert "retry" in res, f"exit {rc}: {err}"
    assert len(res["retry"]) == 12
    for case, r in res["retry"].items():
        assert r["same_tensor"] and r["same_pointer"] and r["same_size"], (case, r)
        assert len(r["warnings"]) == 1 and "given back" in r["warnings"][0], (case, r)
        if case.startswith("KeyboardInterrupt"):
            assert r["raised"] == "KeyboardInterrupt", (case, r)
        else:
            assert r["first_error"], (case, r)  # FlashInfer's first error, not the retry's
            if not case.startswith("overflow"):  # the retry's own error is named, not lost
                assert case.split("@")[0] in r["warnings"][0], (case, r)
