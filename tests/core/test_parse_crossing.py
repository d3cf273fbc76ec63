"""The server parser's namespace crossing from plan's server process as JSON (issue 42 item 1,
``server_parsers._plain``): a config object as the dict of its fields, an enum as its name (what
``launch/fields.py`` reads from either: ``getattr(mode, "name", mode)``), a set as a sorted list;
an object graph with a cycle, or one wider than the node budget, ends as text instead of running
away (generated graphs). The in-process and hosted answers are compared whole on the real servers
(tests/vllm/test_plan_no_trace.py, tests/sglang/test_plan_no_trace.py)."""

from __future__ import annotations

import dataclasses
import enum
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from guard_core.deployment import server_parsers as sp


class Level(enum.IntEnum):
    O0 = 0
    O3 = 3


class Mode(enum.Enum):
    NONE = "none-value"
    FULL = "full-value"


@dataclasses.dataclass
class Compilation:
    cudagraph_mode: Mode = Mode.FULL
    cudagraph_capture_sizes: tuple = (1, 2, 4)
    level: Level = Level.O3


def test_config_objects_and_enums_read_as_the_fields_readers_read_them():
    out = json.loads(json.dumps(sp._plain({"cc": Compilation(cudagraph_mode=Mode.NONE), "o": Level.O0, "s": {3, 1}})))
    assert out == {"cc": {"cudagraph_mode": "NONE", "cudagraph_capture_sizes": [1, 2, 4], "level": "O3"},
                   "o": "O0", "s": [1, 3]}
    # the displayed values of what the command passed: an object as its text, a dict stays a dict
    assert sp._plain(Compilation(), objects_as_text=True).startswith("Compilation(")
    assert sp._plain({"a": {"b": 1}}, objects_as_text=True) == {"a": {"b": 1}}


class Node:
    def __init__(self, n):
        self.n = n
        self.children = []


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 50), st.integers(0, 40), st.booleans())
def test_any_object_graph_crosses_as_bounded_json(width, depth, cycle):
    root = Node(0)
    cur = root
    for i in range(depth):
        nxt = Node(i + 1)
        cur.children = [nxt] + [Node(-j) for j in range(width)]
        cur = nxt
    if cycle:
        cur.children.append(root)
    text = json.dumps(sp._plain(root))
    assert len(text) < 40 * sp._PLAIN_NODES  # bounded by the node budget, never by the graph


def test_a_graph_past_the_budget_ends_as_text(monkeypatch):
    monkeypatch.setattr(sp, "_PLAIN_NODES", 50)
    out = sp._plain({str(i): [i] * 10 for i in range(20)})
    assert any(isinstance(v, str) for v in out.values())
