"""The safety net on real torch tensors (CPU), threads, every retry failure (issue 29, items 2-3) and
every kind of buffer torch can hand over (issue 41 item 5).

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


def _buffer_kinds(torch):
    """Every kind of CPU tensor torch can hand over as a workspace (issue 41 item 5): name -> maker(nbytes)."""
    import numpy as np

    u8 = torch.uint8
    return {
        "zeros": lambda n: torch.zeros(n, dtype=u8),
        "from_numpy": lambda n: torch.from_numpy(np.zeros(n, np.uint8)),  # storage torch will not resize
        "frombuffer": lambda n: torch.frombuffer(bytearray(n), dtype=u8),  # likewise
        "shared_memory": lambda n: torch.zeros(n, dtype=u8).share_memory_(),
        "offset_view": lambda n: torch.zeros(2 * n, dtype=u8)[n:],
        "strided_view": lambda n: torch.zeros(2 * n, dtype=u8)[::2],
        "int32": lambda n: torch.zeros(n // 4, dtype=torch.int32),
        "float16": lambda n: torch.zeros(n // 2, dtype=torch.float16),
        "dtype_view": lambda n: torch.zeros(n // 4, dtype=torch.float32).view(u8),
        "as_strided": lambda n: torch.zeros(n + 64, dtype=u8).as_strided((n,), (1,), 64),
        "empty_numpy_slice": lambda n: torch.from_numpy(np.zeros(2 * n, np.uint8)[n:]),
    }


def _buffers(net, torch) -> dict:
    """Generated buffers of every kind x what the plan does after the net grows it (fits; overflows
    again; fails differently) x before/after a graph capture: wherever the plan ends in an error,
    the owner's tensor comes back exactly as handed in (same object on every wrapper, same storage
    pointer, offset, size, stride, contents); where it fits, the plan had the room it asked for."""
    import random

    rng = random.Random(41)
    kinds = _buffer_kinds(torch)
    bad, recovered, refused = [], 0, 0
    for r in range(120):
        kind = rng.choice(sorted(kinds))
        after = rng.choice(["fits", "overflows", "ValueError"])
        captured = rng.choice([0, 1])
        size = rng.choice([64 * 1024, MIB, 3 * MIB + 4096])
        net.uninstall()
        net._state.update(log=_Log(), captured=captured)

        class W:
            _use_cuda_graph = False

            def __init__(self, buf):
                self._float_workspace_buffer = buf
                self.calls = 0

            def plan(self, need, after=after):
                self.calls += 1
                cap = self._float_workspace_buffer.numel() * self._float_workspace_buffer.element_size()
                if self.calls > 1 and after == "ValueError":
                    raise ValueError("bad shape")
                if need > cap or (self.calls > 1 and after == "overflows"):
                    raise _overflow("batch_prefill_tmp_v", need, cap)
                return cap

        _arm(net, W)
        try:
            owner = kinds[kind](size)
        except Exception as exc:  # noqa: BLE001 - a kind this torch cannot make is a finding too
            bad.append((r, kind, "cannot make", repr(exc)))
            continue
        before = (owner.untyped_storage().data_ptr(), owner.storage_offset(), tuple(owner.size()),
                  tuple(owner.stride()), owner.data_ptr(), owner.clone())
        w, other = W(owner), W(owner)
        need = size + rng.choice([1, MIB, 7 * MIB])
        try:
            got = w.plan(need)
        except (RuntimeError, ValueError):
            now = (owner.untyped_storage().data_ptr(), owner.storage_offset(), tuple(owner.size()),
                   tuple(owner.stride()), owner.data_ptr())
            same = (now == before[:5] and w._float_workspace_buffer is owner
                    and other._float_workspace_buffer is owner and torch.equal(owner, before[5]))
            refused += 1
            if not same:
                bad.append((r, kind, after, captured, "changed", before[:5], now))
        else:
            recovered += 1
            if got < need or after != "fits":
                bad.append((r, kind, after, captured, "planned", got, need))
    net.uninstall()
    net._state.update(log=None, captured=0)
    return {"cases": 120, "recovered": recovered, "refused": refused, "bad": bad[:8]}


def main() -> None:
    import torch

    from guard_core.runtime import safety_net as net

    print("BUFFERS " + json.dumps(_buffers(net, torch)), flush=True)
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
        if key in ("RETRY", "THREADS", "BUFFERS"):
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


def test_a_buffer_the_net_did_not_grow_comes_back_exactly_as_handed_in():
    """Issue 41 item 5: handed a workspace whose storage torch will not resize (torch.from_numpy),
    the old give-back swapped a fresh storage into the owner's tensor although nothing grew."""
    rc, res, err = _run()
    assert "buffers" in res, f"exit {rc}: {err}"
    b = res["buffers"]
    assert b["bad"] == [], b
    assert b["recovered"] > 0 and b["refused"] > 0, b  # both outcomes drawn
