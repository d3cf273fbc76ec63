"""The MLA decision (guard_core/decide/mla.py) against the MLA planner mirror, both directions.

The mirror (``mla_planner.mla_plan``) is checked against the compiled ``MLAPlan`` of every pinned
release (tests/conformance/test_mla_conformance.py); the batches here are built from the path's
limits alone (decode batches up to the request limit, verify batches at and under the draft
length, extend chunks split every way a small search finds), never from the decision's own worst
batch. Seeded: the same cases every run.
"""

import itertools
import random

import pytest

from guard_core.decide import mla as dm
from guard_core.flashinfer.mla_planner import capacity, mla_plan
from guard_core.flashinfer.planner import PlannerError

VERSION = "0.7.4"
CAP = capacity(VERSION)
SMS = (132, 148, 170, 78)
HEADS = (128, 64, 32, 16, 8, 4, 2, 1)
COUNTS = {"cases": 0, "batches": 0, "under": 0, "refused": 0, "exact_equal": 0}


def _mirror(q, kv, heads, sms, causal):
    ind = [0]
    for x in q:
        ind.append(ind[-1] + x)
    try:
        return mla_plan(VERSION, ind, kv, num_heads=heads, head_dim_o=512, causal=causal, num_sms=sms)
    except PlannerError:  # FlashInfer's own "merge_cta_counter" refusal: no plan, no works
        COUNTS["refused"] += 1
        return None


def _kv(rng, q, causal, long_kv):
    """KV lengths a server can hold: >= the query (causal), a few long ones to force splits."""
    kv = []
    for x in q:
        base = x if causal else 1
        kv.append(base + rng.choice((0, 0, rng.randrange(1, 4096), rng.randrange(1, long_kv))))
    kv[rng.randrange(len(kv))] = max(kv[0], long_kv)
    return kv


def _split(rng, total, parts):
    """``total`` tokens in ``parts`` requests of at least one token, at random."""
    cuts = sorted(rng.sample(range(1, total), parts - 1)) if parts > 1 else []
    return [b - a for a, b in zip([0] + cuts, cuts + [total])]


def _batches(rng, path, n):
    """Batches a server can form under the path's limits alone (not the decision's witness)."""
    for _ in range(n):
        if path.q_min == path.q_max:
            b = rng.choice((path.max_requests, rng.randrange(1, path.max_requests + 1)))
            yield [path.q_min] * b
            continue
        b = rng.randrange(1, min(path.max_requests, path.tokens) + 1)
        if path.q_max < path.tokens:  # per-request cap (draft extend)
            yield [rng.randrange(path.q_min, path.q_max + 1) for _ in range(b)]
        else:
            total = rng.randrange(b, path.tokens + 1)
            yield _split(rng, total, b)


def _paths(rng):
    """Generated limits per path kind."""
    h = rng.choice(HEADS)
    yield dm.MlaPath("decode", h, rng.randrange(1, 24000), limit="--max-running-requests")
    d = rng.randrange(2, 9)
    yield dm.MlaPath("verify", h, rng.randrange(1, 6000), q_min=d, q_max=d, causal=True,
                     limit="--max-running-requests")
    yield dm.MlaPath("verify", h, rng.randrange(1, 3000), q_min=1, q_max=d, causal=True,
                     limit="--max-running-requests")
    t = rng.randrange(1, 20000)
    yield dm.MlaPath("extend", h, rng.randrange(1, 600), q_min=1, q_max=t, max_tokens=t, causal=True,
                     drives="tokens", limit="--chunked-prefill-size")


@pytest.mark.parametrize("seed", range(20))
def test_never_under_the_mirror_on_generated_limits(seed):
    rng = random.Random(3800 + seed)
    for path in _paths(rng):
        sms = rng.choice(SMS)
        worst = dm.worst_tiles(path, sms)
        COUNTS["cases"] += 1
        for q in _batches(rng, path, 5):
            plan = _mirror(q, _kv(rng, q, path.causal, rng.choice((2048, 163840, 10_000_000))), path.heads, sms,
                           path.causal)
            if plan is None:
                continue
            COUNTS["batches"] += 1
            COUNTS["under"] += plan.total_num_works > worst.works
            assert plan.total_num_works <= worst.works, (path, sms, len(q), sum(q))
            assert len(plan.tiles) <= worst.tiles or not worst.tiles_exact
        # the decision's own batch: the mirror's tiles there equal the tiles claimed (exactness)
        plan = _mirror(list(worst.q_lens), [x for x in worst.q_lens], path.heads, sms, path.causal)
        assert len(plan.tiles) == worst.tiles and plan.cluster_size == worst.cluster_size, (path, sms)
        assert plan.total_num_works <= worst.works


@pytest.mark.parametrize("heads,sms", [(128, 4), (16, 6), (32, 3), (64, 5), (8, 7), (2, 2), (1, 3)])
def test_tiles_equal_an_exhaustive_search_on_small_limits(heads, sms):
    """Every extend batch of up to 4 requests and 16 tokens: the most tiles (+ C of its cluster
    size) the mirror gives equals the decision's, where it says exact."""
    for max_req, max_tok in ((1, 7), (3, 12), (4, 16)):
        path = dm.MlaPath("extend", heads, max_req, q_min=1, q_max=max_tok, max_tokens=max_tok, causal=True,
                          drives="tokens")
        best = 0
        for b in range(1, max_req + 1):
            for cut in itertools.combinations(range(1, max_tok), b - 1):
                for end in range(b, max_tok + 1):
                    if cut and cut[-1] >= end:
                        continue
                    q = [y - x for x, y in zip((0,) + cut, cut + (end,))]
                    plan = _mirror(q, q, heads, sms, True)
                    best = max(best, len(plan.tiles) + plan.num_clusters)
        worst = dm.worst_tiles(path, sms)
        assert worst.tiles_exact
        assert worst.works == best, (heads, sms, max_req, max_tok)
        COUNTS["exact_equal"] += 1


@pytest.mark.parametrize("seed", range(8))
def test_the_largest_fitting_value_fits_and_one_past_the_bound_is_over(seed):
    rng = random.Random(5100 + seed)
    h = rng.choice((128, 64, 16, 32))
    sms = rng.choice(SMS)
    d = rng.randrange(2, 6)
    for path in (dm.MlaPath("decode", h, 30000, drives="requests"),
                 dm.MlaPath("verify", h, 9000, q_min=d, q_max=d, causal=True),
                 dm.MlaPath("extend", h, 4096, q_min=1, q_max=40000, max_tokens=40000, causal=True,
                            drives="tokens")):
        worst = dm.worst_tiles(path, sms)
        if worst.works <= CAP:
            continue
        n = dm.largest_fitting(path, sms, CAP)
        assert n is not None
        at = dm._with(path, n)
        w = dm.worst_tiles(at, sms)
        assert w.works <= CAP
        # at the value, batches a server forms stay within capacity on the mirror (long KV included)
        for q in [list(w.q_lens)] + list(_batches(rng, at, 2)):
            plan = _mirror(q, _kv(rng, q, path.causal, 10_000_000), h, sms, path.causal)
            assert plan is None or plan.total_num_works <= CAP
        # one past: the bound is over; and the bound is tight within C: the smallest value whose
        # tiles alone (no split at all) pass the capacity is at most C tiles' worth above ``n``, and
        # the mirror on that batch, every KV as short as it can be, is over
        assert dm.worst_tiles(dm._with(path, n + 1), sms).works > CAP
        lo, hi = n, n + 1
        while dm.worst_tiles(dm._with(path, hi), sms).tiles <= CAP:
            lo, hi = hi, hi * 2
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if dm.worst_tiles(dm._with(path, mid), sms).tiles <= CAP else (lo, mid)
        per_tile = max(1, 128 // h) if path.drives == "tokens" else 1
        assert hi - n <= w.clusters * per_tile + 1, (path, sms, n, hi)
        w2 = dm.worst_tiles(dm._with(path, hi), sms)
        plan = _mirror(list(w2.q_lens), list(w2.q_lens), h, sms, path.causal)
        assert plan.total_num_works > CAP


def test_the_verified_examples():
    """docs/mla-guard.md's grid examples, computed by hand: 20,000 one-token decodes at 16 heads
    are 20,000 tiles; 4,200 verify requests of 4 tokens at 128 heads, 16,800; one 16,384-token
    prefill at 128 heads, 16,384 tiles."""
    assert dm.worst_tiles(dm.MlaPath("decode", 16, 20000), 132).tiles == 20000
    assert dm.worst_tiles(dm.MlaPath("verify", 128, 4200, q_min=4, q_max=4, causal=True), 132).tiles == 16800
    ext = dm.worst_tiles(dm.MlaPath("extend", 128, 1, q_min=1, q_max=16384, max_tokens=16384, causal=True), 132)
    assert (ext.tiles, ext.cluster_size, ext.clusters) == (16384, 2, 66)
    # 16,252 decodes + 132 clusters = 16,384: the largest request count that fits on 132 SMs at 16 heads
    assert dm.largest_fitting(dm.MlaPath("decode", 16, 20000), 132, CAP) == 16384 - 132


def test_decide_outcome_and_line():
    facts = dm.MlaFacts("sglang", VERSION, 132, (dm.MlaPath("decode", 16, 20000, limit="--max-running-requests"),
                                                 dm.MlaPath("decode", 16, 1000, limit="--max-running-requests")))
    out = dm.decide(facts)
    assert out.over and out.paths[0].over and not out.paths[1].over
    assert out.paths[0].remedy() == "--max-running-requests <= 16,252"
    assert out.paths[0].reached > CAP  # the mirror on the constructed batch (one long KV) is over too
    assert "PR #5170" in out.line() and "16,252" in out.line()
    ok = dm.decide(dm.MlaFacts("sglang", VERSION, 132, (facts.paths[1],)))
    assert not ok.over and ok.line().startswith("mla: ok, largest 1,132 works")


def test_counts_reported():
    """The counts of the generated search (printed with -s), and that it ran."""
    print(f"MLA decision search: {COUNTS}")
    assert COUNTS["under"] == 0
