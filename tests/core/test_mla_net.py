"""The MLA net (guard_core/runtime/mla_net.py, issue 38 item 3) on a FlashInfer-shaped stand-in.

The stand-in's plan() does what BatchMLAPagedAttentionWrapper.plan does with MLAPlan's output:
it stores the 18-entry plan info (MLAPlanInfo::ToVector) and fills the pinned uint8 int buffer
at the offsets MLAPlan lays out (13 int arrays, per-work ones at the 16,384 stride), work_indptr
last. The net reads ``work_indptr[num_blks_y]`` back and fails closed only over capacity."""

import ctypes
import sys
import types

import pytest

from guard_core.flashinfer import mla_planner
from guard_core.runtime import mla_net
from guard_core.runtime import safety_net as net
from guard_core.runtime.settings import MLA, load_settings, reset_settings_cache
from tests.core.test_safety_net import Log  # the same one-list warning log

CAP = mla_planner.capacity("0.7.2")
NUM_SM = 132


class Pinned:
    """A pinned uint8 tensor as far as the net uses one: host memory at an address, its size."""

    device = types.SimpleNamespace(type="cpu")

    def __init__(self, n):
        self.data = ctypes.create_string_buffer(n)

    def numel(self):
        return len(self.data)

    def element_size(self):
        return 1

    def is_contiguous(self):
        return True

    def data_ptr(self):
        return ctypes.addressof(self.data)

    def write_i32(self, off, value):
        self.data[off:off + 4] = value.to_bytes(4, sys.byteorder, signed=True)


def _layout():
    """Byte offsets of MLAPlan's int arrays (16-byte aligned, mla_planner.INT_ARRAYS order)."""
    off, out = 0, {}
    for name, per_work in mla_planner.INT_ARRAYS:
        out[name] = off
        size = 4 * (CAP if per_work else NUM_SM)
        off += -(-size // 16) * 16
    return out, off


class BatchMLAPagedAttentionWrapper:
    """FlashInfer's wrapper, reduced to what plan() leaves behind."""

    works = 0
    clusters = 66
    result = object()

    def __init__(self):
        layout, size = _layout()
        self._layout = layout
        self._pin_memory_int_workspace_buffer = Pinned(size)
        self._plan_info = None

    def plan(self, *args, **kwargs):
        buf = self._pin_memory_int_workspace_buffer
        wi = self._layout["mla_work_indptr"]
        per, extra = divmod(self.works, self.clusters)
        acc = 0
        for c in range(self.clusters + 1):  # work_indptr, written last by MLAPlan
            buf.write_i32(wi + 4 * c, acc)
            acc += per + (1 if c < extra else 0)
        info = [2, self.clusters] + [0] * 16
        info[mla_net.WORK_INDPTR_OFFSET] = wi
        self._plan_info = info
        return self.result

    begin_forward = plan


@pytest.fixture
def wrapper(monkeypatch):
    monkeypatch.delenv(MLA, raising=False)
    reset_settings_cache()
    mla_net.reset()
    log = Log()
    monkeypatch.setitem(mla_net._state, "version", "0.7.2")
    mla_net.configure(log, mla_planner.capacity)
    cls = type("BatchMLAPagedAttentionWrapper", (BatchMLAPagedAttentionWrapper,), {})
    cls.begin_forward = cls.plan = BatchMLAPagedAttentionWrapper.plan
    mod = types.ModuleType("flashinfer.mla")
    mod.BatchMLAPagedAttentionWrapper = cls
    net.patch_module(mod)
    w = cls()
    w.log = log
    yield w
    net.uninstall()
    monkeypatch.setitem(mla_net._state, "capacity", None)
    reset_settings_cache()
    mla_net.reset()


def test_plan_and_its_alias_are_wrapped(wrapper):
    got = net.patched_entry_points()
    assert "BatchMLAPagedAttentionWrapper.plan" in got
    assert "BatchMLAPagedAttentionWrapper.begin_forward" in got


@pytest.mark.parametrize("entry", ["plan", "begin_forward"])
def test_over_capacity_stops_with_one_clear_error(wrapper, entry):
    wrapper.works = CAP + 1
    with pytest.raises(mla_net.MLAWorksOverCapacity) as ei:
        getattr(wrapper, entry)()
    err = ei.value
    assert isinstance(err, RuntimeError)
    assert (err.works, err.capacity, err.version) == (CAP + 1, CAP, "0.7.2")
    msg = str(err)
    assert "\n" not in msg
    for part in ("16,385 works", "capacity of 16,384", "FlashInfer 0.7.2", "PR #5170", "--max-num-seqs",
                 "--max-running-requests", "FLASHINFER_GUARD_MLA=off"):
        assert part in msg, part
    assert wrapper.log.lines == []


def test_at_capacity_nothing(wrapper):
    wrapper.works = CAP
    assert wrapper.plan() is BatchMLAPagedAttentionWrapper.result
    assert mla_net.works_of(wrapper) == CAP
    assert wrapper.log.lines == []


def test_off_nothing(wrapper, monkeypatch):
    monkeypatch.setenv(MLA, "off")
    reset_settings_cache()
    wrapper.works = 3 * CAP
    assert wrapper.plan() is BatchMLAPagedAttentionWrapper.result


def test_master_switch_off_nothing(wrapper, monkeypatch):
    monkeypatch.setenv("FLASHINFER_GUARD", "0")
    reset_settings_cache()
    wrapper.works = 3 * CAP
    assert wrapper.plan() is BatchMLAPagedAttentionWrapper.result


@pytest.mark.parametrize("breakage", ["reader_raises", "short_plan_info", "offset_outside", "pinned_missing",
                                      "capacity_raises", "indptr_not_zero", "not_on_host"])
def test_our_failure_returns_the_plan_result_unchanged(wrapper, monkeypatch, breakage):
    wrapper.works = 2 * CAP  # over: only our failure keeps it from raising
    cls = type(wrapper)
    orig = BatchMLAPagedAttentionWrapper.plan
    if breakage == "reader_raises":
        monkeypatch.setattr(mla_net, "works_of", lambda *a, **k: 1 // 0)
    elif breakage == "capacity_raises":
        monkeypatch.setitem(mla_net._state, "capacity", lambda v: 1 // 0)
    else:
        def broken(self):
            out = orig(self)
            if breakage == "short_plan_info":
                self._plan_info = self._plan_info[:17]
            elif breakage == "offset_outside":
                self._plan_info[mla_net.WORK_INDPTR_OFFSET] = self._pin_memory_int_workspace_buffer.numel()
            elif breakage == "pinned_missing":
                del self._pin_memory_int_workspace_buffer
            elif breakage == "not_on_host":
                self._pin_memory_int_workspace_buffer.device = types.SimpleNamespace(type="cuda")
            else:
                self._plan_info[mla_net.WORK_INDPTR_OFFSET] += 4
            return out
        net.uninstall()
        cls.plan = broken
        net.patch_module(_module_of(cls))
    assert wrapper.plan() is BatchMLAPagedAttentionWrapper.result
    assert len(wrapper.log.lines) == 1 and wrapper.log.lines[0].startswith("mla: ")
    if breakage != "pinned_missing":  # the stand-in's own plan needs its buffer
        wrapper.plan()
        assert len(wrapper.log.lines) == 1  # one warning per kind of surprise


def _module_of(cls):
    mod = types.ModuleType("flashinfer.mla")
    mod.BatchMLAPagedAttentionWrapper = cls
    return mod


def test_a_plan_info_this_call_did_not_make_is_not_read(wrapper):
    """A backend without MLAPlan leaves the plan info of an earlier plan: not this plan's works."""
    wrapper.works = 2 * CAP
    stale = [0] * 5  # unreadable if it were read
    wrapper._plan_info = stale
    assert mla_net.works_of(wrapper, before=stale) is None
    assert mla_net._finding(wrapper, stale) is None


def test_unarmed_without_a_capacity(wrapper, monkeypatch):
    monkeypatch.setitem(mla_net._state, "capacity", None)
    wrapper.works = 2 * CAP
    assert wrapper.plan() is BatchMLAPagedAttentionWrapper.result


def test_the_setting():
    assert load_settings({}).mla == "auto"
    for v in ("auto", "strict", "off", " OFF "):
        s = load_settings({MLA: v})
        assert s.mla == v.strip().lower() and s.warnings == ()
    s = load_settings({MLA: "no-way"})
    assert s.mla == "auto"
    assert len(s.warnings) == 1
    assert s.warnings[0].startswith("ignoring FLASHINFER_GUARD_MLA='no-way': accepted values are auto, strict or off")
    assert load_settings({MLA: "off"}).describe()[MLA] == "off"


def test_a_byte_buffer_without_an_address_is_read_too():
    buf = bytearray(64)
    buf[8:12] = (16385).to_bytes(4, sys.byteorder, signed=True)
    assert mla_net._read_i32s(buf, 0, 8) == [0, 16385]
    for bad in (-4, 6, 64, 61):
        with pytest.raises(ValueError):
            mla_net._read_i32s(buf, 0, bad)


# SGLang's sync-free MLA plans (CUDA-graph replay: flashinfer_mla_backend.fast_mla_decode_plan /
# fast_mla_prefill_plan) call the planner module directly and drop the plan info it returns: the
# wrapper keeps the plan info of its first (full) plan. The stand-in below does the same.


def _fill_work_indptr(w, works: int, clusters: int):
    buf = w._pin_memory_int_workspace_buffer
    wi = w._layout["mla_work_indptr"]
    per, extra = divmod(works, clusters)
    acc = 0
    for c in range(clusters + 1):
        buf.write_i32(wi + 4 * c, acc)
        acc += per + (1 if c < extra else 0)


def fast_mla_decode_plan(self, qo_indptr_cpu, kv_indptr_cpu, kv_indices, kv_len_arr_cpu, num_heads, head_dim_ckv,
                         head_dim_kpe, page_size, causal, sm_scale, q_data_type, kv_data_type):
    # what MLAPlan writes for this batch: ``self.works`` over ``self.fast_clusters`` clusters; the
    # plan info it returns is dropped, as SGLang's function drops it
    _fill_work_indptr(self, self.works, self.fast_clusters)


@pytest.fixture
def fast(wrapper):
    mod = types.ModuleType(mla_net.FAST_PLAN_MODULE)
    mod.fast_mla_decode_plan = fast_mla_decode_plan
    mod.fast_mla_prefill_plan = fast_mla_decode_plan
    net.patch_module(mod)
    wrapper.plan()  # the first, full plan: plan info [2, 66, ...] (132 SMs)
    return mod


def _decode(n: int, heads: int = 128):
    return ([*range(n + 1)], None, None, [1] * n, heads, 512, 64, 1, False, 0.1, None, None)


def test_the_fast_plans_are_wrapped(fast):
    got = net.patched_entry_points()
    assert {f"{mla_net.FAST_PLAN_MODULE}.{fn}" for fn in mla_net.FAST_PLAN_FUNCTIONS} <= set(got), got


@pytest.mark.parametrize("fn", mla_net.FAST_PLAN_FUNCTIONS)
def test_a_fast_plan_over_capacity_stops(fast, wrapper, fn):
    wrapper.works, wrapper.fast_clusters = CAP + 1, 66  # 128 heads, one token a request: cluster size 2
    with pytest.raises(mla_net.MLAWorksOverCapacity) as ei:
        getattr(fast, fn)(wrapper, *_decode(CAP + 1))
    assert ei.value.works == CAP + 1
    wrapper.works = CAP
    assert getattr(fast, fn)(wrapper, *_decode(CAP)) is None
    assert wrapper.log.lines == []


def test_a_fast_plan_with_another_cluster_size_is_read_at_its_own_clusters(fast, wrapper):
    """The first plan had 66 clusters of 2 (128 heads); this one 16 heads a row, average 16: 132
    clusters of 1. work_indptr[66] is about half the works; work_indptr[132] is the count."""
    wrapper.works, wrapper.fast_clusters = CAP + 2, 132
    with pytest.raises(mla_net.MLAWorksOverCapacity) as ei:
        fast.fast_mla_decode_plan(wrapper, *_decode(CAP + 2, heads=16))
    assert ei.value.works == CAP + 2


def test_a_fast_plan_by_keyword_is_read_too(fast, wrapper):
    wrapper.works, wrapper.fast_clusters = CAP + 5, 66
    args = dict(zip(("qo_indptr_cpu", "kv_indptr_cpu", "kv_indices", "kv_len_arr_cpu", "num_heads", "head_dim_ckv",
                     "head_dim_kpe", "page_size", "causal", "sm_scale", "q_data_type", "kv_data_type"),
                    _decode(CAP + 5)))
    with pytest.raises(mla_net.MLAWorksOverCapacity):
        fast.fast_mla_decode_plan(wrapper, **args)


def test_a_fast_plan_we_cannot_read_runs_unchanged_with_one_warning(fast, wrapper):
    wrapper.works, wrapper.fast_clusters = CAP + 1, 66
    for _ in range(3):  # an empty batch: nothing to divide by; said once
        assert fast.fast_mla_decode_plan(wrapper, *_decode(0)) is None
    assert len(wrapper.log.lines) == 1 and "plans run unchecked" in wrapper.log.lines[0]


def test_a_wrapper_never_planned_is_not_read(wrapper):
    mod = types.ModuleType(mla_net.FAST_PLAN_MODULE)
    mod.fast_mla_decode_plan = fast_mla_decode_plan
    net.patch_module(mod)
    w = type(wrapper)()
    w.log = wrapper.log
    w.works, w.fast_clusters = CAP + 1, 66
    assert mod.fast_mla_decode_plan(w, *_decode(CAP + 1)) is None
    assert wrapper.log.lines == []
