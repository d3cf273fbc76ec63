"""The safety net (guard_core/runtime/safety_net.py) on FlashInfer-shaped stand-ins.

A fake wrapper class stands in for FlashInfer's (its plan() allocates like
FlashInfer's AlignedAllocator and raises FlashInfer's own message); the buffer
is a tiny tensor-like object with the methods the net uses. The same net runs
against FlashInfer's real wrappers and real planner code inside vLLM in
tests/vllm (real calls)."""

import sys
import types

import pytest

from guard_core.runtime import safety_net as net

MIB = 1 << 20


class Buf:
    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n

    def element_size(self):
        return 1

    def resize_(self, n):
        self.n = n
        return self

    def new_empty(self, n):
        return Buf(n)


def make_wrapper_class(allocs, graph=False):
    class Wrapper:
        calls = 0

        def __init__(self, buf):
            self._float_workspace_buffer = buf
            self._use_cuda_graph = graph

        def plan(self):
            type(self).calls += 1
            cap = self._float_workspace_buffer.numel()
            off = 0
            for name, size in allocs:
                if off + size > cap:
                    raise RuntimeError(
                        f"Buffer overflow when allocating memory for {name} with size {size} and alignment 16, "
                        f"but only {cap - off} bytes available in AlignedAllocator. Increase the workspace buffer size.")
                off += size
            return off
    return Wrapper


class Log:
    def __init__(self):
        self.lines = []

    def warning(self, msg, key=None):
        self.lines.append(msg)


@pytest.fixture
def armed(monkeypatch):
    log = Log()
    monkeypatch.setitem(net._state, "log", log)
    monkeypatch.setitem(net._state, "captured", 0)

    def arm(cls):
        mod = types.ModuleType("flashinfer.prefill")
        mod.BatchPrefillWithPagedKVCacheWrapper = cls
        net.patch_module(mod)
        return cls
    yield arm, log
    net.uninstall()


SEED = [("batch_prefill_tmp_v", 536346624), ("batch_prefill_tmp_s", 2095104)]


def test_grows_shared_buffer_in_place_before_any_graph(armed):
    arm, log = armed
    cls = arm(make_wrapper_class(SEED))
    buf = Buf(394 * MIB)
    other = cls(buf)  # another wrapper sharing the same buffer
    assert cls(buf).plan() == 536346624 + 2095104
    assert buf.numel() >= 536346624 + 2095104 and other._float_workspace_buffer is buf
    assert len(log.lines) == 1 and "536346624 bytes, only 413138944 available" in log.lines[0]
    assert "394 MiB -> 514 MiB" in log.lines[0]


def test_after_a_capture_an_eager_wrapper_gets_its_own_buffer(armed, monkeypatch):
    arm, log = armed
    monkeypatch.setitem(net._state, "captured", 3)
    cls = arm(make_wrapper_class(SEED, graph=False))
    buf = Buf(394 * MIB)
    w = cls(buf)
    w.plan()
    assert buf.numel() == 394 * MIB and w._float_workspace_buffer is not buf  # the graphs' buffer untouched
    assert "separate buffer" in log.lines[0]


def test_after_a_capture_a_graph_wrapper_keeps_the_original_error(armed, monkeypatch):
    arm, log = armed
    monkeypatch.setitem(net._state, "captured", 1)
    cls = arm(make_wrapper_class(SEED, graph=True))
    buf = Buf(394 * MIB)
    with pytest.raises(RuntimeError, match="batch_prefill_tmp_v with size 536346624") as e:
        cls(buf).plan()
    assert e.value.__cause__ is None and buf.numel() == 394 * MIB
    assert "captured CUDA graph holds this buffer" in log.lines[0]


def test_other_errors_pass_unchanged(armed):
    arm, _ = armed

    class W:
        _float_workspace_buffer = Buf(10)

        def plan(self):
            raise RuntimeError("Unsupported group_size: 5")
    arm(W)
    with pytest.raises(RuntimeError, match="^Unsupported group_size: 5$"):
        W().plan()


def test_gives_up_after_bounded_tries_with_the_first_error(armed):
    arm, _ = armed

    class Endless:
        _use_cuda_graph = False

        def __init__(self):
            self._float_workspace_buffer = Buf(MIB)

        def plan(self):
            cap = self._float_workspace_buffer.numel()
            raise RuntimeError(f"Buffer overflow when allocating memory for x with size {cap * 2} and alignment 16, "
                               f"but only 0 bytes available in AlignedAllocator.")
    arm(Endless)
    w = Endless()
    with pytest.raises(RuntimeError, match=f"size {2 * MIB} and"):
        w.plan()


def test_parse_overflow():
    e = RuntimeError("Buffer overflow when allocating memory for batch_prefill_tmp_s with size 3141632 and "
                     "alignment 16, but only 524288 bytes available in AlignedAllocator.")
    assert net.parse_overflow(e) == {"name": "batch_prefill_tmp_s", "size": 3141632, "align": 16, "available": 524288}
    assert net.parse_overflow(RuntimeError("other")) is None


# --- every planning entry point, the original error unchanged, memory given back ----------

class Buf2(Buf):
    """A buffer that can also take a fresh storage (Tensor.set_), as torch tensors do."""

    def set_(self, other):
        self.n = other.numel()
        return self

    def new_empty(self, n):
        return Buf2(n)


def _overflow(name, size, avail):
    return RuntimeError(f"Buffer overflow when allocating memory for {name} with size {size} and alignment 16, "
                        f"but only {avail} bytes available in AlignedAllocator. Increase the workspace buffer size.")


def _planner(self, allocs):
    """FlashInfer-shaped planner: float allocations from the float buffer, the rest from
    the int buffer and its pinned host mirror (both must hold them)."""
    caps = {"float": self._float_workspace_buffer.numel(), "int": self._int_workspace_buffer.numel()}
    assert self._pin_memory_int_workspace_buffer.numel() == caps["int"], "int buffer and pinned mirror differ"
    used = {"float": 0, "int": 0}
    for name, size in allocs:
        kind = "float" if name.endswith(("tmp_v", "tmp_s")) else "int"
        if used[kind] + size > caps[kind]:
            raise _overflow(name, size, caps[kind] - used[kind])
        used[kind] += size
    return dict(used)


def _wrapper_cls(allocs, alias=True):
    class W:
        def __init__(self, fbuf=None, ibuf=None):
            self._float_workspace_buffer = fbuf or Buf2(MIB)
            self._int_workspace_buffer = ibuf or Buf2(8 * MIB)
            self._pin_memory_int_workspace_buffer = Buf2(self._int_workspace_buffer.numel())
            self._use_cuda_graph = False

        def plan(self):
            return _planner(self, allocs)

        if alias:
            begin_forward = plan  # as FlashInfer writes it in each wrapper's class body
    return W


def test_class_body_alias_begin_forward_is_covered(armed):
    arm, log = armed
    W = arm(_wrapper_cls([("batch_prefill_tmp_v", 3 * MIB)]))
    w = W()
    assert w.begin_forward() == {"float": 3 * MIB, "int": 0}  # SGLang's only entry point
    assert w._float_workspace_buffer.numel() >= 3 * MIB
    assert len(log.lines) == 1 and "plan retried" in log.lines[0]
    assert "begin_forward" in " ".join(net.patched_entry_points())


def test_module_functions_are_covered_and_rebound(armed, monkeypatch):
    """fast_decode_plan (FlashInfer's, taking the wrapper first) and a framework module
    that imported it by name before the net was armed both reach the net."""
    _, log = armed
    allocs = [("batch_prefill_tmp_v", 5 * MIB), ("batch_prefill_tmp_s", MIB)]

    def fast_decode_plan(wrapper, *a, **k):
        return _planner(wrapper, allocs)

    fi = types.ModuleType("flashinfer.decode")
    fi.fast_decode_plan = fast_decode_plan
    user = types.ModuleType("sglang.srt.layers.attention.flashinfer_backend")
    user.fast_decode_plan = fast_decode_plan  # from flashinfer import fast_decode_plan
    monkeypatch.setitem(sys.modules, "sglang.srt.layers.attention.flashinfer_backend", user)
    net.patch_module(fi)
    assert user.fast_decode_plan is fi.fast_decode_plan is not fast_decode_plan
    w = _wrapper_cls(allocs, alias=False)()
    assert user.fast_decode_plan(w) == {"float": 6 * MIB, "int": 0}
    assert len(log.lines) == 1
    net.uninstall()
    assert user.fast_decode_plan is fast_decode_plan and fi.fast_decode_plan is fast_decode_plan


def test_int_workspace_overflow_grows_the_int_buffers(armed):
    arm, log = armed
    W = arm(_wrapper_cls([("batch_prefill_request_indices", 9 * MIB), ("batch_prefill_tmp_v", MIB // 2)]))
    w = W()
    assert w.plan() == {"float": MIB // 2, "int": 9 * MIB}
    assert w._int_workspace_buffer.numel() >= 9 * MIB + 16
    assert w._pin_memory_int_workspace_buffer.numel() == w._int_workspace_buffer.numel()
    assert w._float_workspace_buffer.numel() == MIB  # the float workspace was not the one short
    assert "int 8 MiB -> 10 MiB" in log.lines[0], log.lines


def test_original_error_propagates_unchanged_with_its_chain(armed, monkeypatch):
    """A graph holds the buffer: FlashInfer's own exception object, with its cause and
    context, reaches the server; nothing of ours is chained to it."""
    arm, _ = armed
    cause = ValueError("inner")
    raised = []

    class G:
        _use_cuda_graph = True

        def __init__(self):
            self._float_workspace_buffer = Buf2(MIB)

        def plan(self):
            try:
                raise cause
            except ValueError as c:
                e = _overflow("batch_prefill_tmp_v", 2 * MIB, MIB)
                raised.append(e)
                raise e from c
    arm(G)
    monkeypatch.setitem(net._state, "captured", 1)
    with pytest.raises(RuntimeError) as info:
        G().plan()
    assert info.value is raised[0] and info.value.__cause__ is cause and info.value.__context__ is cause


def test_gives_back_what_it_grew_when_it_gives_up(armed):
    """Four growths and still short: the buffer is given back to its size before the net
    (a fresh storage, not the grown one) and FlashInfer's first error propagates."""
    arm, log = armed

    class Endless:
        _use_cuda_graph = False

        def __init__(self):
            self._float_workspace_buffer = Buf2(394 * MIB)

        def plan(self):
            cap = self._float_workspace_buffer.numel()
            raise _overflow("batch_prefill_tmp_v", cap * 2, 0)
    arm(Endless)
    w = Endless()
    with pytest.raises(RuntimeError, match=f"size {2 * 394 * MIB} and"):
        w.plan()
    assert w._float_workspace_buffer.numel() == 394 * MIB
    assert "given back" in log.lines[-1]


def test_memory_the_device_cannot_give_leaves_the_server_as_without_us(armed):
    arm, log = armed

    class NoMem(Buf2):
        def resize_(self, n):
            raise MemoryError("CUDA out of memory")

    W = arm(_wrapper_cls([("batch_prefill_tmp_v", 3 * MIB)]))
    w = W(fbuf=NoMem(MIB))
    with pytest.raises(RuntimeError, match="batch_prefill_tmp_v with size 3145728"):
        w.plan()
    assert w._float_workspace_buffer.numel() == MIB
    assert "could not grow" in log.lines[-1]


@pytest.mark.parametrize("seed", range(20))
def test_generated_overflows_recover_exactly_or_propagate(armed, seed):
    """Generated allocation lists (float and int, any order, sizes up to 2 GiB): the net
    either plans them with buffers that hold them, or gives everything back and raises
    FlashInfer's first error."""
    import random

    rng = random.Random(seed)
    arm, _ = armed
    names = ["batch_prefill_tmp_v", "batch_prefill_tmp_s", "batch_decode_tmp_v", "batch_prefill_request_indices",
             "batch_prefill_kv_tile_indices", "batch_prefill_o_indptr"]
    allocs = [(rng.choice(names), rng.choice([1, 16, MIB, 7 * MIB + 3, 300 * MIB, 2 << 30]))
              for _ in range(rng.randint(1, 6))]
    W = arm(_wrapper_cls(allocs))
    w = W(fbuf=Buf2(rng.choice([MIB, 394 * MIB])))
    f0, i0 = w._float_workspace_buffer.numel(), w._int_workspace_buffer.numel()
    try:
        used = w.begin_forward()
    except RuntimeError as e:
        assert net.parse_overflow(e) is not None
        assert (w._float_workspace_buffer.numel(), w._int_workspace_buffer.numel()) == (f0, i0)
    else:
        assert used["float"] <= w._float_workspace_buffer.numel() and used["int"] <= w._int_workspace_buffer.numel()


def test_graph_captures_are_counted_and_undone(monkeypatch):
    """torch's CUDAGraph.capture_end is a row of the net's table like the planning entry
    points: counted while armed, FlashInfer-independent, undone by uninstall()."""
    monkeypatch.setitem(net._state, "captured", 0)

    class CUDAGraph:
        def capture_end(self):
            return "ended"

    graphs = types.ModuleType("torch.cuda.graphs")
    graphs.CUDAGraph = CUDAGraph
    net.patch_module(graphs)
    assert CUDAGraph().capture_end() == "ended" and net.graphs_captured() == 1
    assert [e for e in net.patched_entry_points() if e.endswith("CUDAGraph.capture_end")]
    net.uninstall()
    CUDAGraph().capture_end()
    assert net.graphs_captured() == 1 and net.patched_entry_points() == []


def test_an_inherited_plan_and_alias_are_wrapped_on_the_named_class(armed):
    """FlashInfer's wrapper may inherit plan (and begin_forward) from a base: both are
    wrapped on the named class, the base untouched, and undone."""
    arm, log = armed
    Base = _wrapper_cls([("batch_prefill_tmp_v", 3 * MIB)])

    class Paged(Base):
        pass

    arm(Paged)
    assert {e.rpartition("Paged.")[2] for e in net.patched_entry_points()} == {"plan", "begin_forward"}
    assert "plan" not in Base.__dict__ or not getattr(Base.__dict__["plan"], "__wrapped__", None)
    assert Paged().begin_forward() == {"float": 3 * MIB, "int": 0} and len(log.lines) == 1
    net.uninstall()
    assert "plan" not in Paged.__dict__ and "begin_forward" not in Paged.__dict__


@pytest.mark.parametrize("again", [ValueError("bad shape"), MemoryError("no memory"), TypeError("bad type"),
                                   RuntimeError("CUDA error: an illegal memory access")])
@pytest.mark.parametrize("captured", [0, 1])
def test_a_retry_failing_differently_gives_back_and_says_so(armed, monkeypatch, again, captured):
    """Issue 29: a retry raising anything but an overflow kept the grown buffer (283 MiB,
    was 4 MiB) and said nothing; now the owner's buffer comes back, one warning names the
    retry's error, and FlashInfer's first error propagates. (Same storage, same data
    pointer on real torch tensors: tests/vllm/test_safety_net_threads.py.)"""
    arm, log = armed
    monkeypatch.setitem(net._state, "captured", captured)

    class Once:
        _use_cuda_graph = False
        calls = 0

        def __init__(self, buf):
            self._float_workspace_buffer = buf

        def plan(self):
            type(self).calls += 1
            if type(self).calls > 1:
                raise again
            raise _overflow("batch_prefill_tmp_v", 283 * MIB, 4 * MIB)
    arm(Once)
    owner = Buf2(4 * MIB)
    w = Once(owner)
    with pytest.raises(RuntimeError, match=f"size {283 * MIB} and"):
        w.plan()
    assert w._float_workspace_buffer is owner and owner.numel() == 4 * MIB
    assert len(log.lines) == 1 and type(again).__name__ in log.lines[0] and "given back" in log.lines[0]


def make_sized_wrapper_class(allocs, graph=False):
    """Like FlashInfer's paged prefill wrapper, records ``_workspace_size`` in ``__init__`` from
    the buffer it is given (flashinfer 0.7.2.post1 prefill.py:2818; 0.6.12 :1619) and never
    refreshes it (``reset_workspace_buffer``, 0.7.2.post1 :2924). A stand-in: the real wrapper's
    ``__init__`` needs a CUDA driver."""
    base = make_wrapper_class(allocs, graph)

    class SizedWrapper(base):
        def __init__(self, buf):
            super().__init__(buf)
            self._workspace_size = buf.numel() * buf.element_size()

    return SizedWrapper


def test_no_wrapper_keeps_a_stale_workspace_size_after_the_buffer_grows(armed):
    arm, log = armed
    cls = arm(make_sized_wrapper_class(SEED))
    buf = Buf(394 * MIB)
    other, planner = cls(buf), cls(buf)
    assert other._workspace_size == 394 * MIB
    planner.plan()
    grown = buf.numel()
    assert grown >= 536346624 + 2095104
    # both holders of the grown buffer report its size now (today's main left 394 MiB in both)
    assert planner._workspace_size == grown and other._workspace_size == grown


def test_an_eager_wrapper_given_its_own_buffer_reports_that_size(armed, monkeypatch):
    arm, log = armed
    monkeypatch.setitem(net._state, "captured", 1)  # a CUDA graph holds the shared buffer
    cls = arm(make_sized_wrapper_class(SEED))
    buf = Buf(394 * MIB)
    w = cls(buf)
    w.plan()
    assert w._float_workspace_buffer is not buf
    assert w._workspace_size == w._float_workspace_buffer.numel() > 394 * MIB
    assert buf.numel() == 394 * MIB


def test_refresh_workspace_sizes_finds_every_holder():
    class Holder:
        pass

    buf = Buf(10)
    hs = [Holder() for _ in range(3)]
    for h in hs:
        h._float_workspace_buffer, h._workspace_size = buf, 10
    buf.resize_(20)
    assert net.refresh_workspace_sizes(buf) == 3
    assert [h._workspace_size for h in hs] == [20, 20, 20]


def test_a_buffer_that_cannot_grow_comes_back_untouched(armed):
    """Issue 41 item 5: a workspace whose storage cannot be resized and whose storage the net
    cannot name (torch.from_numpy's storage refuses resize_): FlashInfer's error propagates and
    the owner's buffer is not handed a fresh storage, since nothing was grown. The old give-back
    swapped in a new one of the old size (``set_(new_empty(before))``) after the failed grow."""
    arm, log = armed

    class Fixed(Buf2):
        swaps = 0

        def resize_(self, n):
            raise RuntimeError("Trying to resize storage that is not resizable")

        def set_(self, other):
            type(self).swaps += 1
            return super().set_(other)

    W = arm(_wrapper_cls([("batch_prefill_tmp_v", 3 * MIB)]))
    owner = Fixed(MIB)
    w = W(fbuf=owner)
    with pytest.raises(RuntimeError, match="batch_prefill_tmp_v with size 3145728"):
        w.plan()
    assert w._float_workspace_buffer is owner and owner.numel() == MIB
    assert Fixed.swaps == 0, "the owner's buffer was handed a fresh storage although nothing grew"
    assert "could not grow" in log.lines[-1]
