"""The safety net (guard_core/safety_net.py) on FlashInfer-shaped stand-ins.

A fake wrapper class stands in for FlashInfer's (its plan() allocates like
FlashInfer's AlignedAllocator and raises FlashInfer's own message); the buffer
is a tiny tensor-like object with the methods the net uses. The same net runs
against FlashInfer's real wrappers and real planner code inside vLLM in
tests/vllm (real calls)."""

import types

import pytest

from guard_core import safety_net as net

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
        net._patch_module(mod)
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
