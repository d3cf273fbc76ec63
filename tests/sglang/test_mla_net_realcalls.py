"""The MLA net (guard_core/runtime/mla_net.py) under FlashInfer's real ``BatchMLAPagedAttentionWrapper.plan``.

Runs in the SGLang lines' environments (the default run: 0.5.5 with FlashInfer 0.5.0, 0.5.11 with
0.6.8.post1). Not on FlashInfer 0.7.x (SGLang 0.5.23, only in a full run): there ``plan`` reaches
MLAPlan through per-backend objects that need more device queries stood in, and the module says so
instead of passing; the net's own logic is covered on every line by tests/core/test_mla_net.py. Real: the
wrapper's Python code (its ``__init__`` and ``plan``), and MLAPlan itself: the installed
release's ``scheduler.cuh`` compiled for the host (tests/conformance/harness.cu, planner "mla",
through tests/realcalls/standin.py's library). Replaced: ``get_batch_mla_module`` (the JIT/AOT
CUDA module) by an object whose ``plan`` runs that host MLAPlan and copies what it wrote for
``work_indptr`` into the wrapper's pinned int buffer at the plan info's offset (the harness keeps
its own host buffer; the rest of that buffer is not what the net reads), and ``pin_memory=True``
(page-locking needs a CUDA driver). The planted batch is one extend request of 128 heads
(DeepSeek's), whose works are its query tiles: 16,448 works, 64 past the stride.
"""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")
fi_mla = pytest.importorskip("flashinfer.mla")

from guard_core.flashinfer import mla_planner  # noqa: E402
from guard_core.runtime import mla_net  # noqa: E402
from guard_core.runtime import safety_net as net  # noqa: E402
from guard_core.runtime.settings import MLA, reset_settings_cache  # noqa: E402
from guard_core.versions import flashinfer_version  # noqa: E402
from tests.realcalls import standin  # noqa: E402

VERSION = flashinfer_version()
CAP = mla_planner.capacity(VERSION)
WRAPPER = fi_mla.BatchMLAPagedAttentionWrapper
HOME = sys.modules[WRAPPER.__module__]  # where plan looks its module getter up
NUM_SMS, HEADS, CKV, KPE, PAGE = 132, 128, 512, 64, 64

if not hasattr(HOME, "get_batch_mla_module"):  # 0.7.x: plan goes through per-backend objects
    pytest.skip(f"FlashInfer {VERSION}: BatchMLAPagedAttentionWrapper.plan does not call get_batch_mla_module "
                "in its own module (the stand-in covers 0.5.0-0.6.x)", allow_module_level=True)


def _ints(t) -> list[int]:
    return [int(x) for x in t.tolist()]


class HostMLAPlan:
    """The compiled module's ``plan``: FlashInfer's own MLAPlan, run on the host."""

    def __init__(self):
        self.replies = []

    def plan(self, float_ws, int_ws, pinned, qo_indptr, kv_indptr, kv_len_arr, num_heads, head_dim_o, causal):
        qo, kvp, kvl = _ints(qo_indptr), _ints(kv_indptr), _ints(kv_len_arr)
        reply = standin.planner().request("mla", {
            "qo_indptr": qo, "kv_indptr": kvp, "kv_len_arr": kvl, "batch_size": len(qo) - 1,
            "num_heads": int(num_heads), "head_dim_o": int(head_dim_o), "causal": bool(causal),
            "num_sms": NUM_SMS, "want_works": True})
        assert reply.get("ok"), reply
        self.replies.append(reply)
        info = [int(x) for x in reply["plan_info"]]
        wi = torch.tensor(reply["work_indptr"], dtype=torch.int32).view(torch.uint8)
        off = info[mla_net.WORK_INDPTR_OFFSET]
        pinned[off:off + wi.numel()] = wi
        return info

    def __getattr__(self, name):
        raise AssertionError(f"GPU kernel {name} called on a CPU stand-in")


@pytest.fixture
def wrapper(monkeypatch):
    monkeypatch.delenv(MLA, raising=False)
    reset_settings_cache()
    mla_net.reset()
    module = HostMLAPlan()
    monkeypatch.setattr(HOME, "get_batch_mla_module", lambda *a, **k: module)
    real_empty = torch.empty

    def empty(*a, **k):
        k.pop("pin_memory", None)
        return real_empty(*a, **k)
    monkeypatch.setattr(torch, "empty", empty)
    net.install(None, mla_capacity=mla_planner.capacity)
    net.patch_module(sys.modules["flashinfer.mla"])
    w = WRAPPER(torch.empty(128 << 20, dtype=torch.uint8), backend="fa2")
    w.module = module
    yield w
    net.uninstall()
    monkeypatch.setitem(mla_net._state, "capacity", None)
    reset_settings_cache()
    mla_net.reset()


def _plan(w, q_len: int):
    pages = -(-q_len // PAGE)
    i32 = torch.int32
    return w.plan(torch.tensor([0, q_len], dtype=i32), torch.tensor([0, pages], dtype=i32),
                  torch.arange(pages, dtype=i32), torch.tensor([q_len], dtype=i32), HEADS, CKV, KPE, PAGE,
                  True, 0.1, torch.bfloat16, torch.bfloat16)


def test_the_real_plan_is_wrapped(wrapper):
    assert "BatchMLAPagedAttentionWrapper.plan" in net.patched_entry_points()


def test_over_capacity_stops_before_the_kernel(wrapper):
    with pytest.raises(mla_net.MLAWorksOverCapacity) as ei:
        _plan(wrapper, CAP + 64)
    assert wrapper.module.replies[-1]["total_num_works"] == CAP + 64  # FlashInfer's own count
    assert (ei.value.works, ei.value.capacity, ei.value.version) == (CAP + 64, CAP, VERSION)
    assert f"FlashInfer {VERSION}" in str(ei.value) and "PR #5170" in str(ei.value)


@pytest.mark.parametrize("q_len", [CAP - 64, CAP])
def test_under_and_at_capacity_unchanged(wrapper, q_len):
    assert _plan(wrapper, q_len) is None
    assert mla_net.works_of(wrapper) == q_len == wrapper.module.replies[-1]["total_num_works"]
    assert wrapper._plan_info == [int(x) for x in wrapper.module.replies[-1]["plan_info"]]


def test_off_runs_unchecked(wrapper, monkeypatch):
    monkeypatch.setenv(MLA, "off")
    reset_settings_cache()
    assert _plan(wrapper, CAP + 64) is None


# SGLang's own sync-free MLA plan for CUDA-graph replay (the installed
# sglang/srt/layers/attention/flashinfer_mla_backend.py: fast_mla_decode_plan calls the wrapper's
# planner module directly and drops the plan info it returns), patched by the net's row for that
# module. The graph is captured with a small batch (the wrapper's full plan), replayed with one
# over the stride.


@pytest.fixture
def sglang_fast(wrapper):
    from sglang.srt.layers.attention import flashinfer_mla_backend as backend

    net.patch_module(backend)
    return backend


def _fast_decode(backend, w, n: int, heads: int):
    i32 = torch.int32
    return backend.fast_mla_decode_plan(w, torch.arange(n + 1, dtype=i32), torch.arange(n + 1, dtype=i32),
                                        torch.arange(n, dtype=i32), torch.ones(n, dtype=i32), heads, CKV, KPE, 1,
                                        False, 0.1, torch.bfloat16, torch.bfloat16)


def _capture(w, n: int, heads: int):
    i32 = torch.int32
    w.plan(torch.arange(n + 1, dtype=i32), torch.arange(n + 1, dtype=i32), torch.arange(n, dtype=i32),
           torch.ones(n, dtype=i32), heads, CKV, KPE, 1, False, 0.1, torch.bfloat16, torch.bfloat16)


@pytest.mark.parametrize("heads", [HEADS, 16])  # cluster size 2 (DP attention) and 1 (TP 8)
def test_sglangs_fast_decode_plan_over_capacity_stops(sglang_fast, wrapper, heads):
    assert f"{mla_net.FAST_PLAN_MODULE}.fast_mla_decode_plan" in net.patched_entry_points()
    _capture(wrapper, 64, HEADS)  # plan info of a 128-head capture: 66 clusters of 2
    with pytest.raises(mla_net.MLAWorksOverCapacity) as ei:
        _fast_decode(sglang_fast, wrapper, CAP + 64, heads)
    assert wrapper.module.replies[-1]["total_num_works"] == ei.value.works == CAP + 64  # FlashInfer's own count
    assert _fast_decode(sglang_fast, wrapper, CAP - 64, heads) is None  # under: SGLang's own result
    assert wrapper.module.replies[-1]["total_num_works"] == CAP - 64
