"""The fields a launch command and a simulated deployment share (``ServerShape``), the simulated
deployment (``Deployment``), its resolved limits (``Defaults``, each value a ``Derived(value, source)``)
and what both servers' default rules share: the line labels, the FlashInfer each line pins."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from guard_core.flashinfer.releases import CHECKED_LINES  # the lines whose wheels the rules were read from
from guard_core.versions import is_version, parse_version

__all__ = ["DEFAULT_LINE", "Defaults", "Deployment", "Derived", "FLASHINFER_PINS", "PIN_OVERRIDES", "ServerShape",
           "draft_context_page", "framework_label", "installed_line", "known_line", "line_at_least", "pin_source",
           "pinned_flashinfer", "short_line"]


# What ``plan`` simulates when the framework is not installed here (and no
# --framework-version is given): the line of each framework's seed crash.
DEFAULT_LINE = {"vllm": "0.19.1", "sglang": "0.5.5"}

# The FlashInfer each line pins (Requires-Dist of the wheel; the in-between
# vLLM lines from shared/reference/installing-frameworks.md), or where the pin cannot be
# installed, the FlashInfer that installs in its place (PIN_OVERRIDES says which and why).
FLASHINFER_PINS = {
    "vllm": (("0.19", "0.6.6"), ("0.20", "0.6.8.post1"), ("0.22", "0.6.11.post2"), ("0.23", "0.6.12"),
             ("0.25", "0.6.13"), ("0.26", "0.6.14"), ("0.27", "0.6.16.post3"), ("0.29", "0.6.18"),
             ("0.30", "0.6.18.post1"), ("0.31", "0.7.0.post1"), ("0.33", "0.7.2.post1"), ("0.34", "0.7.4")),
    "sglang": (("0.5.5", "0.5.0"), ("0.5.6", "0.5.3"), ("0.5.11", "0.6.8.post1"), ("0.5.15", "0.6.12"),
               ("0.5.19", "0.6.18"), ("0.5.22", "0.7.1"), ("0.5.23", "0.7.2")),
}
# Lines whose wheel pins a FlashInfer the registry does not have: (framework, line) -> (the pin,
# why the FLASHINFER_PINS entry differs). vLLM 0.34.0 Requires-Dist flashinfer-python==0.7.3;
# 0.7.3 is not on the registry, 0.7.4 installs and imports beside it (ci/lock.sh's override).
PIN_OVERRIDES = {
    ("vllm", "0.34"): ("0.7.3", "vLLM 0.34 pins 0.7.3, which the registry does not have; 0.7.4 installs in its place"),
}



@dataclass(frozen=True)
class Derived:
    """One value of the simulated deployment and where it came from."""

    value: object
    source: str
    passed: bool = False  # given by the user (flag or launch command)

    def as_dict(self) -> dict:
        v = list(self.value) if isinstance(self.value, tuple) else self.value
        return {"value": v, "source": self.source, "passed": self.passed}


@dataclass(kw_only=True)
class ServerShape:
    """What a server is started with that its limits follow from: parallelism, batch limits,
    speculative decoding, CUDA graphs, pages; ``None`` (or off) where nothing set it.

    The one table of the fields a launch command and a simulated deployment share: ``Launch``
    (what a command says, ``deployment/launch/record.py``) and ``Deployment`` (what ``plan``
    simulates) are each a ``ServerShape``, so a field added here is in both, and ``plan`` hands a
    command's shape on whole (``shape()``), plan's own flags over it, never field by field."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    dcp: int | None = None
    attn_dp: int | None = None  # SGLang DP attention width (--enable-dp-attention with --dp, or --attn-dp-size)
    expert_parallel: bool = False
    all2all_backend: str | None = None
    max_num_seqs: int | None = None
    max_batched_tokens: int | None = None
    max_model_len: int | None = None  # given (Deployment.model_max_len: the model's config)
    speculative: str | None = None  # the speculative method (vLLM) / --speculative-algorithm (SGLang)
    draft_tokens: int | None = None
    eagle_topk: int | None = None  # SGLang --speculative-eagle-topk
    spec_steps: int | None = None  # SGLang --speculative-num-steps
    capture_sizes: tuple[int, ...] | None = None
    max_capture: int | None = None
    eager: bool = False
    chunked_prefill: bool | None = None
    disable_graph_padding: bool = False
    page_size: int | None = None

    def shape(self) -> dict:
        """This record's ``ServerShape`` fields by name (of a ``Launch`` or a ``Deployment``)."""
        return {f.name: getattr(self, f.name) for f in fields(ServerShape)}


@dataclass
class Deployment(ServerShape):
    """One deployment ``plan`` simulates: a server's shape (``ServerShape``: the launch command's,
    plan's flags over it) on a GPU, a line and a model; ``None`` where the user gave nothing."""

    framework: str = "vllm"
    line: str | None = None
    gpu_key: str | None = None
    cc: tuple[int, int] = (10, 3)
    gpu_name: str = ""
    model_max_len: int | None = None  # from the model's config
    flashinfer: str | None = None
    architecture: str | None = None
    source: str = "flag"  # "flag" | "command": how passed values are named in notes

    @property
    def speculates(self) -> bool:
        """Speculative decoding: a method named, or draft tokens given (plan's --draft-tokens alone)."""
        return bool(self.speculative or self.draft_tokens)


@dataclass
class Defaults:
    """The resolved deployment: every limit with its source, and notes."""

    framework: str
    line: str
    line_source: str
    values: dict = field(default_factory=dict)  # name -> Derived
    notes: list = field(default_factory=list)
    decode_graph_sizes: tuple[int, ...] = ()  # capture sizes FlashInfer plans decode for

    def get(self, name):
        d = self.values.get(name)
        return d.value if d else None

    def as_dict(self) -> dict:
        return {"framework": self.framework, "line": self.line, "line_source": self.line_source,
                "values": {k: v.as_dict() for k, v in self.values.items()}, "notes": list(self.notes),
                "decode_graph_sizes": list(self.decode_graph_sizes)}


def framework_label(framework: str) -> str:
    return "vLLM" if framework == "vllm" else "SGLang"


def line_at_least(version: str, ref: str) -> bool:
    return parse_version(version) >= parse_version(ref)


def known_line(framework: str, version: str) -> str:
    """The line of ``version`` whose rules apply: the newest read line not above it."""
    lines = CHECKED_LINES[framework]
    best = lines[0]
    for line in lines:
        if line_at_least(version, line):
            best = line
    return best


def short_line(version: str) -> str:
    """'0.23.0' -> '0.23', '0.5.5' -> '0.5.5', '0.19.1' -> '0.19.1'."""
    parts = version.split(".")
    if len(parts) == 3 and parts[2] == "0" and parts[0] == "0" and int(parts[1]) >= 10:
        return ".".join(parts[:2])
    return version


def pinned_flashinfer(framework: str, version: str) -> str:
    pin = FLASHINFER_PINS[framework][0][1]
    for since, fi in FLASHINFER_PINS[framework]:
        if line_at_least(version, since):
            pin = fi
    return pin


def pin_source(framework: str, version: str, label: str) -> str:
    """Where ``pinned_flashinfer`` comes from, in words: "<label> pins it", or, where the wheel's pin
    cannot be installed, what installs in its place (PIN_OVERRIDES)."""
    since = None
    for s, _fi in FLASHINFER_PINS[framework]:
        if line_at_least(version, s):
            since = s
    over = PIN_OVERRIDES.get((framework, since))
    return over[1] if over else f"{label} pins it"



def installed_line(framework: str) -> str | None:
    """The installed version of ``framework`` when it is one (importlib.metadata; never imports it)."""
    from guard_core.versions import installed_version
    v = installed_version(framework)
    return v if v and is_version(v) else None



def draft_context_page(v, d, k: int, given: str, page: int, page_words: str) -> None:
    """The fields both servers take alike: draft tokens, context length, page size
    (``page`` and ``page_words``: the server's default page and what it calls it)."""
    v["draft_tokens"] = Derived(k, given if d.draft_tokens is not None else "no speculative decoding",
                                d.draft_tokens is not None)
    if d.max_model_len:
        v["max_model_len"] = Derived(d.max_model_len, given, True)
    elif d.model_max_len:
        v["max_model_len"] = Derived(d.model_max_len, "the model's config.json (max_position_embeddings)")
    v["page_size"] = Derived(d.page_size or page, given if d.page_size else page_words, bool(d.page_size))
