"""The MLA planner limit: the largest number of works any batch a server can form reaches on
each MLA path, against the release's capacity, and the largest value of the driving limit that
keeps it within.

FlashInfer's ``MLAPlan`` (``include/flashinfer/attention/scheduler.cuh``: 0.5.0 :1438 with
``int max_total_num_works = 16384`` at :1598; 0.6.12/0.6.14 :1440/:1600; 0.6.16 :1578/:1738;
0.7.0.post1 :1580/:1741; 0.7.2.post1 :1614/:1775; 0.7.4 :1622/:1783, docs/mla-guard.md) lays its
per-work arrays out at that fixed stride and never compares the real works count with it: past
it the arrays spill (silently wrong attention rows, then an illegal address; FlashInfer PR #5170,
open through 0.7.4). ``guard_core.flashinfer.mla_planner`` mirrors the planner exactly.

One work is one (request, query tile, KV chunk). With ``H`` query heads per rank, a batch of
``B`` requests of ``q_i`` query tokens, ``cluster_size = 2`` when ``sum(q_i * H) // B > 64``
(else 1), ``ct = 64 * cluster_size`` and ``C = SMs // cluster_size``, the verified bound is
(docs/mla-guard.md, checked on every compiled release)::

    sum_i ceil(q_i * H / ct)  <=  works  <=  sum_i ceil(q_i * H / ct) + C

The KV lengths only enter through the splits (the ``+ C``), and a server's KV lengths are free
(any context up to the model's), so the largest works on a path is taken as the largest tiles
over the batches the limits allow plus ``C`` (``basis`` says so): it may over-state the real
largest by at most ``C``, never under-state it. The tiles part is exact (a closed form per
batch size and cluster size, checked against the mirror in ``tests/core/test_mla_decision.py``)
where ``64`` and ``H`` divide one another (every published MLA model at every TP); otherwise
it is an upper bound (``tiles_exact`` False). Each path also gives the mirror's works on one
constructed worst batch (one request at the longest context, the rest short): a count the
planner reaches, to show the bound is not empty.

A path (``MlaPath``): the query tokens per request (batch row) lie in ``[q_min, q_max]`` and one batch
holds at most ``max_requests`` requests (CUDA-graph padding rows included) and ``max_tokens``
query tokens. Decode: ``q = 1``; verify: ``q = 1 + draft tokens`` (draft extend: up to it);
paged extend: ``1 .. chunk`` tokens, at most the chunk in all. The driving limit is the request
count for decode and verify, the token budget for an extend. Pure functions, no framework.
"""

from __future__ import annotations

from dataclasses import dataclass

from guard_core.flashinfer.mla_planner import capacity, mla_plan
from guard_core.flashinfer.planner import PlannerError

__all__ = ["MlaPath", "MlaFacts", "Worst", "MlaPathOutcome", "MlaOutcome", "worst_tiles", "largest_works",
           "largest_fitting", "decide", "PR"]

PR = "FlashInfer PR #5170"
_ROWS_PER_TILE = 64  # CTA_TILE_Q in MLAPlan
_LONG_KV = 10_000_000  # the witness's long request where the context length is not known


@dataclass(frozen=True)
class MlaPath:
    """One MLA path a server plans through FlashInfer's ``MLAPlan`` (framework-free)."""

    kind: str  # "decode" | "verify" | "extend"
    heads: int  # query heads per rank (num_heads as the server passes it to plan)
    max_requests: int  # the most requests in one batch (CUDA-graph padding rows included)
    q_min: int = 1  # query tokens per request
    q_max: int = 1
    max_tokens: int | None = None  # the most query tokens in one batch (None: max_requests * q_max)
    causal: bool = False
    drives: str = "requests"  # "requests" | "tokens": the limit whose largest fitting value is given
    limit: str = ""  # the option that sets the driving limit, e.g. "--max-running-requests"
    limit_scale: int = 1  # the option's value is this many times the per-rank limit (SGLang DP attention)
    per_request: int = 1  # batch rows per request of the option (EAGLE's draft decode: topk rows a request)
    source: str = ""  # the server rule that makes this path (file:line)

    @property
    def tokens(self) -> int:
        cap = self.max_requests * self.q_max
        return cap if self.max_tokens is None else min(cap, self.max_tokens)


@dataclass(frozen=True)
class MlaFacts:
    framework: str
    flashinfer_version: str
    num_sms: int
    paths: tuple  # (MlaPath, ...)
    max_kv: int | None = None  # the longest context (the witness's long request)


@dataclass(frozen=True)
class Worst:
    """The batch with the most tiles under a path's limits, and its works bound."""

    tiles: int
    clusters: int  # C = SMs // cluster_size: the most works the splits add
    works: int  # tiles + clusters: the bound
    batch: int  # requests
    tokens: int  # query tokens
    cluster_size: int
    tiles_exact: bool
    q_lens: tuple = ()  # one batch reaching ``tiles`` (where tiles_exact)


def _tiles_in(b: int, q_total: int, heads: int, ct: int, q_min: int, q_max: int) -> tuple[int, bool]:
    """The most ``sum ceil(q_i * heads / ct)`` over ``b`` requests, ``q_min <= q_i <= q_max``,
    ``sum q_i <= q_total`` (itself >= b * q_min): (tiles, exact)."""
    if heads % ct == 0:  # every token is heads // ct whole tiles
        return heads // ct * q_total, True
    if ct % heads == 0:  # a tile every x tokens: f(q) = ceil(q / x)
        x = ct // heads
        f_min, f_max = -(-q_min // x), -(-q_max // x)
        steps = f_max - f_min  # tiles a request can add above q_min
        left = q_total - b * q_min
        if steps <= 0 or left <= 0:
            return b * f_min, True
        first = x * f_min + 1 - q_min  # tokens to the next tile from q_min (<= x)
        k1 = min(b, left // first)
        k2 = min(b * (steps - 1), (left - k1 * first) // x) if k1 == b else 0
        return b * f_min + k1 + k2, True
    bound = (q_total * heads + b * (ct - 1)) // ct  # ceil(y) <= y + (ct - 1) / ct
    return min(bound, b * -(-q_max * heads // ct)), False


def _q_lens(b: int, q_total: int, heads: int, ct: int, q_min: int, q_max: int) -> tuple:
    """A batch reaching ``_tiles_in`` (the greedy of its closed form)."""
    q = [q_min] * b
    left = q_total - b * q_min
    if heads % ct == 0 or ct % heads:
        for i in range(b):
            add = min(q_max - q[i], left)
            q[i] += add
            left -= add
        return tuple(q)
    x = ct // heads
    first = x * -(-q_min // x) + 1 - q_min
    for i in range(b):  # first steps, then whole tiles
        if left >= first and q[i] + first <= q_max:
            q[i] += first
            left -= first
    for i in range(b):
        while left >= x and q[i] + x <= q_max:
            q[i] += x
            left -= x
    for i in range(b):  # what is left over raises no tile count but keeps the average
        add = min(q_max - q[i], left)
        q[i] += add
        left -= add
    return tuple(q)


def worst_tiles(path: MlaPath, num_sms: int) -> Worst:
    """The batch the path's limits allow with the largest tiles + C, over every batch size and
    both cluster sizes (MLAPlan's ``cluster_size = 2 if sum(q_i * H) // B > 64``)."""
    h = int(path.heads)
    best = None
    top_b = min(path.max_requests, path.tokens // max(path.q_min, 1))
    # a fixed query length: every batch size has the same cluster size, the tiles grow with it
    sizes = (top_b,) if path.q_min == path.q_max else range(1, top_b + 1)
    for b in sizes:
        q_cap = min(b * path.q_max, path.tokens)
        for cs in (1, 2):
            q_total = min(q_cap, (65 * b - 1) // h) if cs == 1 else q_cap
            if q_total < b * path.q_min or (cs == 2 and q_total * h < 65 * b):
                continue
            ct = _ROWS_PER_TILE * cs
            tiles, exact = _tiles_in(b, q_total, h, ct, path.q_min, path.q_max)
            c = num_sms // cs
            if best is None or tiles + c > best.works:
                best = Worst(tiles, c, tiles + c, b, q_total, cs, exact)
    if best is None:
        raise ValueError(f"no batch fits the {path.kind} path's limits")
    ct = _ROWS_PER_TILE * best.cluster_size
    return Worst(**{**best.__dict__, "q_lens": _q_lens(best.batch, best.tokens, h, ct, path.q_min, path.q_max)})


def largest_works(path: MlaPath, num_sms: int) -> int:
    return worst_tiles(path, num_sms).works


def _with(path: MlaPath, value: int) -> MlaPath:
    from dataclasses import replace

    return replace(path, max_requests=value) if path.drives == "requests" else replace(path, max_tokens=value)


def largest_fitting(path: MlaPath, num_sms: int, cap: int) -> int | None:
    """The largest value of the path's driving limit whose largest works stay within ``cap``
    (None: not even 1 does). The works grow with the limit, so a bisection finds it."""
    now = path.max_requests if path.drives == "requests" else path.tokens
    lo_ok = 1 if path.drives == "requests" else max(path.q_min, 1)
    if largest_works(_with(path, lo_ok), num_sms) > cap:
        return None
    lo, hi = lo_ok, max(now, lo_ok)
    if largest_works(_with(path, hi), num_sms) <= cap:
        return hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if largest_works(_with(path, mid), num_sms) <= cap:
            lo = mid
        else:
            hi = mid
    return lo


def witness_works(version: str, path: MlaPath, worst: Worst, num_sms: int, max_kv: int | None) -> int | None:
    """The mirror's works on the worst batch with one request at the longest context (the KV
    chunks split it) and the others as short as the path allows; None where the mirror refuses."""
    q = list(worst.q_lens) or [path.q_min] * worst.batch
    long_kv = max(int(max_kv or _LONG_KV), max(q))
    kv = [qi for qi in q]
    kv[0] = long_kv
    indptr = [0]
    for qi in q:
        indptr.append(indptr[-1] + qi)
    for kv_lens in (kv, list(q)):  # the long request, else (FlashInfer refuses the split) none
        try:
            return mla_plan(version, indptr, kv_lens, num_heads=path.heads, head_dim_o=512, causal=path.causal,
                            num_sms=num_sms).total_num_works
        except PlannerError:
            continue
    return None


@dataclass(frozen=True)
class MlaPathOutcome:
    path: MlaPath
    worst: Worst
    capacity: int
    reached: int | None  # the mirror's works on the constructed worst batch
    fits_up_to: int | None  # the largest value of the driving limit that fits

    @property
    def works(self) -> int:
        return self.worst.works

    @property
    def over(self) -> bool:
        return self.worst.works > self.capacity

    @property
    def basis(self) -> str:
        w = self.worst
        tiles = "tiles exact" if w.tiles_exact else "tiles an upper bound (64 and the heads do not divide)"
        return (f"bound: {w.tiles:,} tiles + C = {w.clusters} (KV lengths free: may over-state by at most "
                f"{w.clusters}, never under; {tiles})")

    def remedy(self) -> str | None:
        if not self.over:
            return None
        unit = "requests" if self.path.drives == "requests" else "tokens"
        if self.fits_up_to is None:
            return f"no {unit} value keeps the {self.path.kind} path within {self.capacity:,} works"
        k, rows = self.path.limit_scale, self.path.per_request
        if self.fits_up_to < rows:
            return f"no {self.path.limit} value keeps the {self.path.kind} path within {self.capacity:,} works"
        fits = self.fits_up_to // rows  # requests whose rows fit
        value = fits * k + k - 1  # the option's value whose per-rank share is ``fits``
        per_rank = f" ({fits:,} per rank)" if k > 1 else ""
        return f"{self.path.limit} <= {value:,}{per_rank}"

    def as_dict(self) -> dict:
        w = self.worst
        return {"kind": self.path.kind, "heads": self.path.heads, "max_requests": self.path.max_requests,
                "q_len": [self.path.q_min, self.path.q_max], "max_tokens": self.path.tokens,
                "causal": self.path.causal, "source": self.path.source, "largest_works": w.works,
                "tiles": w.tiles, "clusters": w.clusters, "cluster_size": w.cluster_size,
                "worst_batch": {"requests": w.batch, "tokens": w.tokens}, "tiles_exact": w.tiles_exact,
                "basis": self.basis, "mirror_reached": self.reached, "capacity": self.capacity,
                "over": self.over, "limit": self.path.limit, "largest_fitting": self.fits_up_to,
                "rows_per_request": self.path.per_request, "limit_scale": self.path.limit_scale,
                "remedy": self.remedy()}


@dataclass(frozen=True)
class MlaOutcome:
    facts: MlaFacts
    capacity: int
    paths: tuple  # (MlaPathOutcome, ...)

    @property
    def over(self) -> bool:
        return any(p.over for p in self.paths)

    def line(self) -> str:
        """The decision's one line, in the format of the others."""
        if not self.paths:
            return "mla: ok, no batch plans through FlashInfer's MLA planner"
        top = max(self.paths, key=lambda p: p.works)
        if not self.over:
            return (f"mla: ok, largest {top.works:,} works ({top.path.kind}) within the {self.capacity:,} of "
                    f"FlashInfer {self.facts.flashinfer_version}'s MLA planner")
        bad = [p for p in self.paths if p.over]
        fixes = "; ".join(f"{p.path.kind}: {p.works:,} works, {p.remedy()}" for p in bad)
        return (f"mla: over, FlashInfer {self.facts.flashinfer_version}'s MLA planner holds {self.capacity:,} works "
                f"and the server can plan more ({fixes}): silent wrong attention, then an illegal address ({PR})")


def decide(facts: MlaFacts) -> MlaOutcome:
    """The largest works per path, the capacity, and the largest value of each driving limit that fits."""
    cap = capacity(facts.flashinfer_version)
    out = []
    for p in facts.paths:
        w = worst_tiles(p, facts.num_sms)
        reached = witness_works(facts.flashinfer_version, p, w, facts.num_sms, facts.max_kv)
        fits = largest_fitting(p, facts.num_sms, cap) if w.works > cap else None
        out.append(MlaPathOutcome(p, w, cap, reached, fits))
    return MlaOutcome(facts, cap, tuple(out))
