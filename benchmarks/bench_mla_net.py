"""The MLA net's cost beside the plan call it wraps (goal: < 1 %).

Run inside a framework env with FlashInfer 0.5.0-0.6.x (its ``BatchMLAPagedAttentionWrapper.plan``
looks its compiled module up in its own module), from the repository root:

    FLASHINFER_GUARD_CACHE=/tmp/cache python benchmarks/bench_mla_net.py

Prints, per batch: the net's own cost per plan (``mla_net._finding`` on the plan just made: the
settings look-up, two int32 reads from the 8 MiB pinned int buffer, the comparison), and two
denominators, FlashInfer's real Python ``plan``

- with the module's ``plan`` a no-op returning a stored plan info: the wrapper's own Python work
  only, a floor under any real plan call (a GPU adds MLAPlan's host loop and the copies), so the
  ratio against it is an upper bound;
- with the module's ``plan`` running FlashInfer's own MLAPlan compiled for the host
  (tests/realcalls/standin.py; includes the stand-in's JSON round trip).

Asserts nothing about time.
"""

from __future__ import annotations

import statistics
import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import flashinfer.mla as fi_mla  # noqa: E402
from guard_core.flashinfer import mla_planner  # noqa: E402
from guard_core.runtime import mla_net  # noqa: E402
from guard_core.runtime import safety_net as net  # noqa: E402
from tests.sglang.test_mla_net_realcalls import HOME, HostMLAPlan  # noqa: E402

REPEAT, NUMBER = 50, 100  # many short repeats: the min drops what other processes took (2 shared cores)


class Replay(HostMLAPlan):
    """The first call plans for real; later calls give its plan info back (no planning)."""

    def plan(self, *args):
        if not self.replies:
            return super().plan(*args)
        return [int(x) for x in self.replies[-1]["plan_info"]]


def _best(fn, number=NUMBER) -> float:
    return min(timeit.repeat(fn, repeat=REPEAT, number=number)) / number


def _args(bs: int, q_len: int, kv_len: int):
    i32, page = torch.int32, 64
    pages = -(-kv_len // page)
    return (torch.arange(bs + 1, dtype=i32) * q_len, torch.arange(bs + 1, dtype=i32) * pages,
            torch.zeros(bs * pages, dtype=i32), torch.full((bs,), kv_len, dtype=i32), 128, 512, 64, page, True,
            0.1, torch.bfloat16, torch.bfloat16)


def _row(label: str, bs: int, q_len: int, kv_len: int, real_empty) -> float:
    """One batch: the net's cost per plan beside the two denominators; returns net / floor."""
    plan = fi_mla.BatchMLAPagedAttentionWrapper.plan  # unwrapped: the denominators
    args = _args(bs, q_len, kv_len)
    w = fi_mla.BatchMLAPagedAttentionWrapper(real_empty(128 << 20, dtype=torch.uint8), backend="fa2")
    host, replay = HostMLAPlan(), Replay()
    HOME.get_batch_mla_module = lambda *a, **k: host
    host_s = _best(lambda: plan(w, *args), number=5)
    HOME.get_batch_mla_module = lambda *a, **k: replay
    floor_s = _best(lambda: plan(w, *args))
    works = mla_net.works_of(w)
    net_s = _best(lambda: mla_net._finding(w, None))
    # SGLang's sync-free replay plan (fast_mla_decode_plan): the arguments found by position, the
    # clusters from MLAPlan's step 0 on them, the same two reads
    where = mla_net._argument_places(_fast_signature)
    fast_s = _best(lambda: mla_net._finding(w, None, lambda: mla_net.works_of_fast_plan(
        w, mla_net._arguments(where, args, {}))))
    print(f"{label:<26}{works:>7}{net_s * 1e6:>9.2f}{fast_s * 1e6:>9.2f}{floor_s * 1e6:>10.1f}"
          f"{max(net_s, fast_s) / floor_s:>9.2%}{host_s * 1e6:>10.1f}{max(net_s, fast_s) / host_s:>9.2%}")
    return max(net_s, fast_s) / floor_s


def _fast_signature(self, qo_indptr_cpu, kv_indptr_cpu, kv_indices, kv_len_arr_cpu, num_heads, head_dim_ckv,
                    head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type):
    """SGLang's fast_mla_decode_plan's parameters (flashinfer_mla_backend.py 0.5.5:1050-1064)."""


def main() -> None:
    real_empty = torch.empty
    torch.empty = lambda *a, **k: real_empty(*a, **{x: y for x, y in k.items() if x != "pin_memory"})
    mla_net.configure(None, mla_planner.capacity)
    print(f"FlashInfer {mla_net._version()}, capacity {mla_planner.capacity(mla_net._version()):,} works")
    print(f"{'batch':<26}{'works':>7}{'net us':>9}{'fast us':>9}{'floor us':>10}{'ratio':>9}{'host us':>10}{'ratio':>9}")
    ratios = [_row(label, bs, q_len, kv_len, real_empty)
              for label, bs, q_len, kv_len in (("decode 1 x 4k", 1, 1, 4096), ("decode 256 x 8k", 256, 1, 8192),
                                               ("decode 1024 x 32k", 1024, 1, 32768),
                                               ("extend 1 x 16k", 1, 16384, 16384))]
    print(f"worst net / floor: {max(ratios):.2%}  (median {statistics.median(ratios):.2%}; goal < 1 %)")
    net.uninstall()


if __name__ == "__main__":
    main()
