"""A model's attention as layer groups: the unit the workspace is sized by.

A model is a list of groups, each ``(q heads, kv heads, head dim qk/vo,
kind, window, sinks, count)`` for the whole model; ``per_rank(tp)`` splits the
heads the way the servers do. Every group that runs through FlashInfer's
planners is sized and the need is the largest over groups and phases (vLLM
0.33 shares one buffer across its attention groups, ``v1/worker/gpu/attn_utils.py``;
earlier lines give each group's builder its own buffer of the same default size,
so the largest need is what must fit either way).

Kinds: ``full`` (causal attention over the whole context), ``sliding``
(a window of ``window`` tokens), ``chunked`` (Llama 4's chunked local attention,
``window`` = chunk size), ``mla`` (FlashInfer's MLA planner and its own buffer:
not sized here). Layers that run no attention through FlashInfer (Mamba, linear
attention, Nemotron-NAS no-op blocks) are counted in ``other_layers``.

The readers live beside it: ``config_reader.read_config`` (the built-in reader of a
published ``config.json``, with ``model_kinds``, the table of how each layout names its
layers), ``server_reader`` (the installed server's own reading, in a subprocess), and
``model_readers`` (who reads, in order). Each is checked against vLLM's and SGLang's own
readings over real configs (``tests/vllm/test_model_groups.py``,
``tests/vllm/test_published_configs.py``, ``tests/sglang/test_model_groups.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = ["AttentionGroup", "GroupsError", "KINDS", "KIND_LABELS", "ModelGroups", "RankGroup", "kind_label", "merge",
           "rank_heads", "server_view", "single"]

KINDS = ("full", "sliding", "chunked", "mla")
# each kind as the report and the notes name it (the one copy: AttentionGroup.label, plan's table)
KIND_LABELS = {"full": "full attention", "sliding": "sliding window", "chunked": "chunked local attention",
               "mla": "MLA (not applicable: FlashInfer's MLA planner, its own buffer)"}


def kind_label(kind: str, window: int | None = None) -> str:
    """``sliding window 4096``, ``chunked local attention 8192``, ``full attention``, ..."""
    base = KIND_LABELS[kind]
    return f"{base} {window}" if window and kind in ("sliding", "chunked") else base


class GroupsError(ValueError):
    """A config this reader cannot turn into attention groups (one line)."""


@dataclass(frozen=True)
class AttentionGroup:
    """Layers of one attention shape and kind, for the whole model (before TP)."""

    kind: str
    num_qo_heads: int
    num_kv_heads: int
    head_dim_qk: int
    head_dim_vo: int
    count: int
    window: int | None = None  # sliding window / chunk size in tokens
    sinks: bool = False

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown attention kind {self.kind!r}")

    @property
    def shape(self) -> tuple[int, int, int, int]:
        return (self.num_qo_heads, self.num_kv_heads, self.head_dim_qk, self.head_dim_vo)

    def label(self) -> str:
        return kind_label(self.kind, self.window)


@dataclass(frozen=True)
class RankGroup:
    """One group per rank: heads after tensor parallelism."""

    kind: str
    num_qo_heads: int
    num_kv_heads: int
    head_dim_qk: int
    head_dim_vo: int
    count: int
    window: int | None = None
    sinks: bool = False

    @property
    def key(self) -> tuple:
        return (self.kind, self.num_qo_heads, self.num_kv_heads, self.head_dim_qk, self.head_dim_vo, self.count)

    def as_dict(self) -> dict:
        return {"kind": self.kind, "num_qo_heads": self.num_qo_heads, "num_kv_heads": self.num_kv_heads,
                "head_dim_qk": self.head_dim_qk, "head_dim_vo": self.head_dim_vo, "count": self.count,
                "window": self.window, "sinks": self.sinks}


def rank_heads(q: int, kv: int, tp: int, name: str = "model") -> tuple[int, int]:
    """Query and KV heads per rank. Both servers split query heads evenly and
    KV heads evenly where there are at least ``tp`` of them, else replicate one
    per rank (vLLM ``ModelConfig.get_num_kv_heads``: ``max(1, total // tp)``;
    ``QKVParallelLinear`` requires ``tp % kv == 0`` then, vllm 0.33
    ``model_executor/layers/linear.py``)."""
    if tp <= 0:
        raise GroupsError(f"--tp must be positive, got {tp}")
    if q % tp:
        raise GroupsError(f"{name}: {q} query heads are not divisible by tensor parallel size {tp}")
    if kv >= tp:
        if kv % tp:
            raise GroupsError(f"{name}: {kv} KV heads are not divisible by tensor parallel size {tp}")
        return q // tp, kv // tp
    if tp % kv:
        raise GroupsError(f"{name}: tensor parallel size {tp} is not a multiple of {kv} KV heads")
    return q // tp, 1


@dataclass(frozen=True)
class ModelGroups:
    name: str
    architecture: str
    groups: tuple[AttentionGroup, ...]
    num_layers: int = 0
    other_layers: tuple[tuple[str, int], ...] = ()  # (kind, count) of layers outside FlashInfer's planners
    max_len: int | None = None
    source: str = "built-in reader"
    notes: tuple[str, ...] = field(default=())

    @property
    def uses_mla(self) -> bool:
        return bool(self.groups) and all(g.kind == "mla" for g in self.groups)

    @property
    def attention_layers(self) -> int:
        return sum(g.count for g in self.groups)

    def planned(self) -> tuple[AttentionGroup, ...]:
        """The groups FlashInfer's planners size in the guarded buffer (not MLA)."""
        return tuple(g for g in self.groups if g.kind != "mla")

    def per_rank(self, tp: int = 1) -> tuple[RankGroup, ...]:
        """Groups per rank, merged where they coincide (same kind and shape)."""
        out: dict[tuple, RankGroup] = {}
        for g in self.groups:
            if g.kind == "mla":
                q, kv = rank_heads(g.num_qo_heads, g.num_qo_heads, tp, self.name)[0], 1
            else:
                q, kv = rank_heads(g.num_qo_heads, g.num_kv_heads, tp, self.name)
            k = (g.kind, q, kv, g.head_dim_qk, g.head_dim_vo, g.window, g.sinks)
            if k in out:
                out[k] = replace(out[k], count=out[k].count + g.count)
            else:
                out[k] = RankGroup(g.kind, q, kv, g.head_dim_qk, g.head_dim_vo, g.count, g.window, g.sinks)
        return tuple(out.values())

    def describe(self) -> list[str]:
        lines = []
        for g in self.groups:
            hd = f"head_dim {g.head_dim_qk}" + (f"/{g.head_dim_vo}" if g.head_dim_vo != g.head_dim_qk else "")
            lines.append(f"{g.count} layers {g.label()}: {g.num_qo_heads} q / {g.num_kv_heads} kv heads, {hd}"
                         + (", attention sinks" if g.sinks else ""))
        for kind, n in self.other_layers:
            lines.append(f"{n} layers {kind} (outside FlashInfer's attention planners)")
        return lines

    def as_dict(self) -> dict:
        return {"name": self.name, "architecture": self.architecture, "source": self.source,
                "num_layers": self.num_layers, "max_len": self.max_len,
                "groups": [dict(kind=g.kind, num_qo_heads=g.num_qo_heads, num_kv_heads=g.num_kv_heads,
                                head_dim_qk=g.head_dim_qk, head_dim_vo=g.head_dim_vo, count=g.count,
                                window=g.window, sinks=g.sinks) for g in self.groups],
                "other_layers": [{"kind": k, "count": n} for k, n in self.other_layers],
                "notes": list(self.notes)}


def merge(groups) -> tuple[AttentionGroup, ...]:
    """Groups of the same kind and shape as one (counts added), first-seen order."""
    out: dict[tuple, AttentionGroup] = {}
    for g in groups:
        k = (g.kind, g.shape, g.window, g.sinks)
        out[k] = replace(out[k], count=out[k].count + g.count) if k in out else g
    return tuple(out.values())


def single(name: str, architecture: str, q: int, kv: int, dqk: int, dvo: int | None = None, layers: int = 0,
           attention_layers: int | None = None, kind: str = "full", source: str = "given") -> ModelGroups:
    """One group (a preset, or --qo-heads/--kv-heads/--head-dim)."""
    n = layers if attention_layers is None else attention_layers
    other = ((("other", layers - n),) if layers > n else ())
    g = AttentionGroup(kind, q, kv, dqk, dvo or dqk, max(n, 1))
    return ModelGroups(name, architecture, (g,), layers, other, None, source)


def server_view(groups, framework: str) -> tuple[RankGroup, ...]:
    """The rank groups as the server's FlashInfer backend plans them.

    vLLM builds one metadata builder per KV-cache group, each with its own heads
    and head dims (``v1/attention/backends/flashinfer.py``): the groups as read.
    SGLang plans every layer with one shape (``layers/attention/flashinfer_backend.py``
    ``FlashInferIndicesUpdaterDecode``: ``get_max_num_attention_heads() // tp``, the
    model's ``get_num_kv_heads(tp)`` and ``head_dim``; 0.5.23 lines 1593-1603): one
    group of every attention layer, the full-attention layers' shape with the most
    query heads, sized without its window (a window only lowers the need)."""
    groups = tuple(groups)
    if framework != "sglang":
        return groups
    att = [g for g in groups if g.kind != "mla"]
    if not att:
        return groups
    base = next((g for g in att if g.kind == "full"), att[0])
    return (RankGroup("full", max(g.num_qo_heads for g in att), base.num_kv_heads, base.head_dim_qk,
                      base.head_dim_vo, sum(g.count for g in att), None, any(g.sinks for g in att)),)


