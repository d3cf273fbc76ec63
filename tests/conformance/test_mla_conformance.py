"""Conformance of guard_core's MLA planner mirror with FlashInfer's real ``MLAPlan``, per release.

For every release in ``oracle.RELEASES`` the harness (``harness.cu``, planner ``"mla"``) calls the
release's own ``MLAPlan<int32_t>`` (scheduler.cuh, CUDA runtime stubbed, the SM count from each
request) and reports what FlashInfer wrote: ``total_num_works`` (the tail of ``mla_work_indptr``),
the cluster size and count (``num_blks_x/y``), the merge CTAs, every allocation (name, buffer,
bytes, alignment, offset) and, while the works fit the stride, every work
(``q_indptr, kv_indptr, partial_indptr, q_len, kv_len, q_start, kv_start, kv_end``).
``guard_core.flashinfer.mla_planner`` must give the same for every request of

* a grid (decode, verify with draft tokens, extend, mixed; heads 16/32/64/128; SMs
  78/132/148/160/170; page sizes 1/64; causal and not), and
* a generated search (seeded random batches of the same kinds, padding rows included),

both with batches past 16,384 works (the compiled planner reports them; the real kernel would
read spilled arrays). Equality is checked both ways (each side's numbers, allocations and the
multiset of works; the KV chunk limit against the longest chunk of a split tile), the
release's ``max_total_num_works`` constant against ``capacity(version)``, and the reading
``tiles <= works <= tiles + clusters`` on every request. The works are listed on every request
of the first selected release of each family and on every ``WORKS_EVERY``-th of the others (the
JSON of every work of every release was most of this module's 2 x 165 s in CI); everything else on
every request of every release. Counts per release are printed (``-s``). Nothing skips: a missing nvcc or download is a failure.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re

import pytest

from guard_core.flashinfer import mla_planner

from . import oracle

RELEASES = oracle.selected_releases()
HEADS = (16, 32, 64, 128)
SMS = (78, 132, 148, 160, 170)
PAGES = (1, 64)
HEAD_DIM_CKV = 512
GENERATED = 400


def _req(rid: str, qo_lens, kv_lens, *, heads: int, sms: int, page: int, causal: bool = True) -> dict:
    qo, kvp = [0], [0]
    for q, k in zip(qo_lens, kv_lens):
        qo.append(qo[-1] + q)
        kvp.append(kvp[-1] + -(-k // page))
    return {"id": rid, "planner": "mla", "kind": rid.split(":")[0],
            "params": {"qo_indptr": qo, "kv_indptr": kvp, "kv_len_arr": list(kv_lens),
                       "batch_size": len(qo_lens), "num_heads": heads, "head_dim_o": HEAD_DIM_CKV,
                       "causal": causal, "num_sms": sms, "page_size": page, "want_works": True}}


def make_grid() -> list[dict]:
    out = []
    for heads in HEADS:
        for sms in SMS:
            for page in PAGES:
                tag = f"h{heads}-sm{sms}-p{page}"
                for b in (1, 7, 64, 256, 1024):
                    out.append(_req(f"decode:{tag}-b{b}-u", [1] * b, [4096] * b, heads=heads, sms=sms, page=page))
                    kv = [1 + (i * 9973) % 60000 for i in range(b)]
                    out.append(_req(f"decode:{tag}-b{b}-m", [1] * b, kv, heads=heads, sms=sms, page=page))
                for draft in (1, 3, 7):
                    for b in (8, 128, 1024):
                        kv = [draft + 1 + (i * 7919) % 30000 for i in range(b)]
                        out.append(_req(f"verify:{tag}-d{draft}-b{b}", [draft + 1] * b, kv, heads=heads,
                                        sms=sms, page=page))
                for q in (17, 1000, 8192):
                    out.append(_req(f"extend:{tag}-q{q}", [q], [q], heads=heads, sms=sms, page=page))
                    out.append(_req(f"extend:{tag}-q{q}-prefix", [q], [q + 50000], heads=heads, sms=sms, page=page))
                out.append(_req(f"mixed:{tag}", [2048, 1, 1, 512, 0, 0], [2048, 30000, 5, 9000, 0, 0],
                                heads=heads, sms=sms, page=page))
                out.append(_req(f"mixed:{tag}-nc", [2048, 1, 1, 512], [2048, 30000, 5, 9000],
                                heads=heads, sms=sms, page=page, causal=False))
                out.append(_req(f"extend:{tag}-short-kv", [300, 40], [20, 0], heads=heads, sms=sms, page=page))
    # past the 16,384-work stride
    for sms in (132, 170):
        out.append(_req(f"decode:big-sm{sms}", [1] * 20000, [1000] * 20000, heads=16, sms=sms, page=1))
        out.append(_req(f"verify:big-sm{sms}", [4] * 4200, [3000] * 4200, heads=128, sms=sms, page=64))
        out.append(_req(f"extend:at-cap-sm{sms}", [16384], [16384], heads=128, sms=sms, page=64))
        out.append(_req(f"extend:past-cap-sm{sms}", [16385], [16385], heads=128, sms=sms, page=64))
        out.append(_req(f"extend:big16-sm{sms}", [50000] * 3, [50000, 60000, 70000], heads=16, sms=sms, page=1))
        out.append(_req(f"extend:edge-sm{sms}", [16384 - sms], [16384 - sms], heads=128, sms=sms, page=1))
        # below the stride in tiles, past it only by the KV chunks of one long request
        out.append(_req(f"decode:split-over-sm{sms}", [1] * 16300, [100] * 16299 + [10_000_000], heads=16,
                        sms=sms, page=64))
    return out


def make_generated(n: int = GENERATED, seed: int = 3801) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        heads, sms, page = rng.choice(HEADS), rng.choice(SMS), rng.choice(PAGES)
        causal = rng.random() < 0.8
        kind = rng.choice(("decode", "verify", "extend", "mixed"))
        big = rng.random() < 0.12

        def kvlen(lo=0):
            r = rng.random()
            if r < 0.05:
                return lo
            if r < 0.5:
                return lo + rng.randint(0, 4096)
            return lo + int(rng.lognormvariate(9, 1.5)) % 262144

        if kind == "decode":
            b = rng.randint(16385, 24000) if big else rng.choice((rng.randint(1, 64), rng.randint(65, 3000)))
            q = [1] * b
            kv = [kvlen(1) for _ in range(b)]
        elif kind == "verify":
            d = rng.randint(1, 7)
            cap_b = max(1, 20000 // max(1, (d + 1) * heads // 64))
            b = rng.randint(cap_b // 2, cap_b) if big else rng.randint(1, 2000)
            q = [d + 1] * b
            kv = [kvlen(d + 1) for _ in range(b)]
        elif kind == "extend":
            b = rng.randint(1, 16)
            if big:
                tot = rng.randint(16384 * 64 // heads, 3 * 16384 * 64 // heads)
                cuts = sorted(rng.randint(0, tot) for _ in range(b - 1))
                q = [y - x for x, y in zip([0] + cuts, cuts + [tot])]
            else:
                q = [rng.randint(1, 8192) for _ in range(b)]
            kv = [x + (0 if rng.random() < 0.4 else kvlen()) for x in q]
            if rng.random() < 0.1:
                kv = [rng.randint(0, x) for x in q]  # shorter KV than query (zero-KV tiles)
        else:
            nd, ne = rng.randint(0, 600), rng.randint(1, 6)
            q = [1] * nd + [rng.randint(1, 4096) for _ in range(ne)]
            kv = [kvlen(1) for _ in range(nd)] + [x + kvlen() for x in q[nd:]]
        pad = rng.choice((0, 0, 0, rng.randint(1, 64)))  # CUDA-graph padding rows
        q += [0] * pad
        kv += [0] * pad
        out.append(_req(f"{kind}:gen{k}", q, kv, heads=heads, sms=sms, page=page, causal=causal))
    return out


# Every request of every release is compared on its counts and layout (works, cluster size and
# count, merge CTAs, every allocation and offset). The works themselves (eight ints each, up to
# 16,384 per request: ~40 MB of JSON per release) are listed on every request of the first
# selected release of each MLAPlan family and on every WORKS_EVERY-th request of the others.
WORKS_EVERY = 8


def _full_works(version: str) -> bool:
    fam = mla_planner.family(version)
    return version == next(v for v in RELEASES if mla_planner.family(v) == fam)


def _requests(version: str, which: str) -> list[dict]:
    reqs = make_grid() if which == "grid" else make_generated()
    if not _full_works(version):
        for i, r in enumerate(reqs):
            r["params"]["want_works"] = i % WORKS_EVERY == 0
    return reqs


def _works_facts(works) -> tuple:
    """(count, digest of the sorted multiset, longest split KV chunk) of a list of works: what is
    compared, without holding millions of works per release (the whole lists of 14 release x
    request sets took a test worker to 6.5 GB and the OOM killer in the CI run of 2026-12-04)."""
    ws = sorted(tuple(w) for w in works)
    split = [w[7] - w[6] for w in ws if w[2] >= 0]
    return len(ws), hash(tuple(ws)), max(split) if split else None


def _slim(rep: dict) -> dict:
    if "works" in rep:
        rep["works_facts"] = _works_facts(rep.pop("works"))
    return rep


def _replies(version: str, which: str) -> tuple[list, list]:
    """The requests and the release's replies, works reduced to their facts (each pair is used by
    one test: nothing is kept)."""
    reqs = _requests(version, which)
    return reqs, oracle.run_oracle(version, reqs, each=_slim)


@pytest.fixture(scope="module")
def compiled():
    oracle.build_many(RELEASES)


def _group(version: str):
    # one xdist worker per MLAPlan family (ci/core/run_tests.sh: --dist loadgroup): the mirror's
    # answers, computed once per family, are shared by that family's releases
    return pytest.param(version, marks=pytest.mark.xdist_group(f"mla-{mla_planner.family(version)}"))


_mirrors: dict = {}


def _mirror(version: str, req: dict):
    # mla_plan reads the version only through its family: one run per (family, request)
    key = (mla_planner.family(version), req["id"])
    if key not in _mirrors:
        m = _plan(version, req)
        _mirrors[key] = (dataclasses.replace(m, works=None), None if m.works is None else _works_facts(m.works))
    return _mirrors[key]


def _plan(version: str, req: dict):
    p = req["params"]
    return mla_planner.mla_plan(version, p["qo_indptr"], p["kv_len_arr"], num_heads=p["num_heads"],
                                head_dim_o=p["head_dim_o"], causal=p["causal"], num_sms=p["num_sms"],
                                batch_size=p["batch_size"], kv_indptr=p["kv_indptr"], want_works=True)


def _compare(version: str, req: dict, rep: dict) -> tuple[list, object]:
    """Differences between the compiled reply and the mirror, both ways; [] when equal."""
    assert rep.get("ok"), f"{version} {req['id']}: MLAPlan failed: {rep.get('error')}"
    m, m_works = _mirror(version, req)
    probs = []
    for key, mine in (("total_num_works", m.total_num_works), ("cluster_size", m.cluster_size),
                      ("num_clusters", m.num_clusters), ("merge_ctas", m.merge_ctas),
                      ("stride", m.capacity), ("int_bytes", m.int_bytes), ("float_bytes", m.float_bytes)):
        if rep[key] != mine:
            probs.append(f"{key}: MLAPlan {rep[key]} vs mirror {mine}")
    got = [(a["name"], a["buffer"], a["bytes"], a["align"], a["offset"]) for a in rep["allocations"]]
    want = [tuple(a) for a in m.allocations]
    if got != want:
        probs.append(f"allocations: MLAPlan {got} vs mirror {want}")
    if rep["plan_info"][:2] != [m.cluster_size, m.num_clusters]:
        probs.append(f"num_blks_x/y: MLAPlan {rep['plan_info'][:2]}")
    if "works_valid" not in rep:  # works not asked for (_requests)
        return probs, m
    if rep["work_indptr"][-1] != rep["total_num_works"]:
        probs.append("work_indptr tail is not total_num_works")
    if rep["works_valid"] != (not m.overflows):
        probs.append(f"works_valid {rep['works_valid']} vs mirror overflows {m.overflows}")
    if rep["works_valid"]:
        (n_ref, h_ref, split), (n_mine, h_mine, _) = rep["works_facts"], m_works or (None, None, None)
        if (n_ref, h_ref) != (n_mine, h_mine):  # the lists again, for the message only
            ref = {tuple(w) for w in oracle.run_oracle(version, [req])[0]["works"]}
            mine = set(_plan(version, req).works or ())
            probs.append(f"works differ ({n_ref} vs {n_mine}; e.g. {sorted(ref ^ mine)[:4]})")
        if split is not None and split != m.kv_len_limit:
            probs.append(f"kv_len_limit: longest split chunk {split} vs mirror {m.kv_len_limit}")
    return probs, m


def _check(version: str, which: str) -> dict:
    reqs, reps = _replies(version, which)
    counts = {"requests": 0, "works_compared": 0, "past_capacity": 0, "at_capacity": 0, "split_tiles": 0,
              "max_works": 0, "max_slack": 0}
    by_kind: dict = {}
    bad = []
    for req, rep in zip(reqs, reps):
        probs, m = _compare(version, req, rep)
        if probs:
            bad.append(f"{req['id']}: {'; '.join(probs)}")
            continue
        tiles = len(m.tiles)
        assert tiles <= m.total_num_works <= tiles + m.num_clusters, req["id"]
        counts["requests"] += 1
        counts["works_compared"] += bool(rep.get("works_valid"))
        counts["past_capacity"] += m.overflows
        counts["at_capacity"] += m.total_num_works == m.capacity
        counts["split_tiles"] += sum(t.split_kv for t in m.tiles)
        counts["max_works"] = max(counts["max_works"], m.total_num_works)
        counts["max_slack"] = max(counts["max_slack"], m.total_num_works - tiles)
        by_kind[req["kind"]] = by_kind.get(req["kind"], 0) + 1
    assert not bad, f"FlashInfer {version} {which}: {len(bad)} differ:\n" + "\n".join(bad[:10])
    counts["kinds"] = by_kind
    print(f"\nMLA {which} {version}: {json.dumps(counts, sort_keys=True)}")
    return counts


def test_grid_and_search_are_deterministic():
    assert make_grid() == make_grid()
    assert make_generated() == make_generated()
    assert len(make_grid()) >= 1000


@pytest.mark.parametrize("version", [_group(v) for v in RELEASES])
def test_grid_matches_compiled_mlaplan(compiled, version):
    c = _check(version, "grid")
    assert c["past_capacity"] >= 8 and c["requests"] == len(make_grid())
    assert c["works_compared"] >= (900 if _full_works(version) else 100), c


@pytest.mark.parametrize("version", [_group(v) for v in RELEASES])
def test_generated_matches_compiled_mlaplan(compiled, version):
    c = _check(version, "generated")
    assert c["past_capacity"] >= 10 and c["requests"] == GENERATED
    assert c["works_compared"] >= (300 if _full_works(version) else 35), c


@pytest.mark.parametrize("version", RELEASES)
def test_capacity_is_the_release_constant(version):
    text = (oracle.fetch(version) / "include/flashinfer/attention/scheduler.cuh").read_text()
    body = text[text.index("inline cudaError_t MLAPlan"):]
    body = body[:body.index("\n}\n")]
    consts = re.findall(r"int\s+max_total_num_works\s*=\s*(\d+)\s*;", body)
    assert consts == [str(mla_planner.capacity(version))]
    # no comparison of the works count with it (the bug this guard exists for)
    assert not re.search(r"total_num_works\s*[<>]=?\s*max_total_num_works", body)
    staged = oracle.signature_features(version)["mla_staged"]
    assert staged == (mla_planner.family(version) == "staged")


def test_compiled_replies_equal_across_releases(compiled):
    """The planning arithmetic is the same in every pinned release: same replies (every 16th
    request of the grid and of the search, works listed)."""
    for which in ("grid", "generated"):
        reqs = (make_grid() if which == "grid" else make_generated())[::16]
        replies = {v: [{k: x for k, x in r.items() if k != "id"} for r in oracle.run_oracle(v, reqs)]
                   for v in RELEASES}
        assert sum("works" in r for r in replies[RELEASES[0]]) >= 20
        for v in RELEASES[1:]:
            diff = [i for i, (a, b) in enumerate(zip(replies[RELEASES[0]], replies[v])) if a != b]
            assert not diff, f"{which}: {v} differs from {RELEASES[0]} on {len(diff)} requests"
