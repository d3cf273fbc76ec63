"""The conformance grid: deterministic (seeded) planner requests for one FlashInfer release.

Every request carries every parameter explicitly (no hidden defaults): the FA2 prefill planner
gets ``qo_indptr, kv_indptr (pages), total_num_rows, batch_size, num_qo_heads, num_kv_heads,
head_dim_qk, head_dim_vo, page_size, enable_cuda_graph, window_left, fixed_split_size,
disable_split_kv, num_colocated_ctas, uniform_q_len, fixed_uniform_q_len, kv_dtype_bytes`` plus
the device (``num_sms, cc_major, cc_minor, max_smem_per_sm, max_smem_per_block_optin``); a
release ignores the parameters its ``PrefillPlan`` does not take (the model must ignore them
too). The CUDA-core decode planner gets ``indptr, batch_size, num_qo_heads, num_kv_heads,
head_dim, page_size, enable_cuda_graph, num_sms, cc_*, blocks_per_sm``; the SM90 planner
``qo_indptr, kv_indptr, kv_len_arr, total_num_rows, batch_size, heads, head dims, page_size,
causal, enable_cuda_graph, num_sms``.

Sections (sizes per release; ``make_grid`` returns about 1,500 requests):
  seeds           the two production crashes (vLLM Qwen3.5, SGLang Qwen3-VL-32B) and neighbours
  graph_decode    CUDA-graph decode through the FA2 planner exactly as vLLM's fast_plan_decode
                  and SGLang's fast_decode_plan call it (total_num_rows == batch_size,
                  uniform_q_len 0), capture sizes 1..1024
  graph_uniform   the same with uniform_q_len=1 (+ fixed_uniform_q_len, FlashInfer 0.7.4's own
                  tensor-core decode wrapper)
  graph_verify    speculative verify under CUDA graphs, q_len = 1 + k (k 1..7), ragged
                  (uniform 0) and uniform
  eager_decode    eager decode (q_len 1, no graph)
  eager_prefill   eager prefill mixes, incl. sliding window, fixed split, disable split, POD
                  colocated CTAs, kv_dtype_bytes 1
  short_vs_long   one (or a few) short queries against a long KV cache (the eager worst case)
  big_head_dims   head dims 512 / 576-512 / 192-128 / 448-256 (tile rules of 0.6.14+/0.7.0+)
  decode_planner  the CUDA-core decode planner, graph and eager, blocks_per_sm 1..8
  sm90            the FA3 planner, graph and eager, causal or not
  errors          requests FlashInfer rejects (heads not divisible, unsupported GQA group ...)
  deterministic   SGLang --enable-deterministic-inference: fixed_split_size prefill (4096) and
                  decode (2048), disable_split_kv graphs; the two public reports (GB10 24/4/256
                  chunk 8192; H200 Qwen3-Next-80B 16/2/256) and long prompts up to 128k
"""

from __future__ import annotations

import random

# (name, num_sms, cc_major, cc_minor): GPUs the grid plans for. SM counts 40..188 (T4, cc 7.5,
# reaches FA2DetermineCtaTileQ's pre-Ampere branch).
GPUS = (
    ("T4", 40, 7, 5),
    ("A100", 108, 8, 0),
    ("A10", 72, 8, 6),
    ("L40S", 142, 8, 9),
    ("H100", 132, 9, 0),
    ("H20", 78, 9, 0),
    ("H100-PCIe", 114, 9, 0),
    ("B200", 148, 10, 0),
    ("B300", 160, 10, 3),
    ("RTX5090", 170, 12, 0),
    ("RTXPRO6000", 188, 12, 0),
    ("GB10", 48, 12, 1),
)

CAPTURE_SIZES = (1, 2, 3, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512,
                 640, 768, 1024)
GROUPS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 20, 32)
KV_HEADS = (1, 2, 4, 8, 16, 32)
PAGE_SIZES = (1, 16, 32, 64)


def smem_limits(cc_major: int, cc_minor: int) -> tuple[int, int]:
    """(max_smem_per_sm, max_smem_per_block_optin) in bytes, from the CUDA programming guide's
    per-compute-capability table."""
    cc = cc_major * 10 + cc_minor
    if cc in (80, 87):
        return 164 * 1024, 163 * 1024
    if cc in (90, 100, 103, 110):
        return 228 * 1024, 227 * 1024
    if cc in (70, 72):
        return 96 * 1024, 96 * 1024
    if cc == 75:
        return 64 * 1024, 64 * 1024
    return 100 * 1024, 99 * 1024  # 8.6, 8.9, 12.x


def _device(gpu) -> dict:
    _, sms, ma, mi = gpu
    sm, optin = smem_limits(ma, mi)
    return {"num_sms": sms, "cc_major": ma, "cc_minor": mi, "max_smem_per_sm": sm,
            "max_smem_per_block_optin": optin}


def _heads(rng: random.Random, max_q: int = 128) -> tuple[int, int]:
    while True:
        g = rng.choice(GROUPS)
        kv = rng.choice(KV_HEADS)
        if g * kv <= max_q:
            return g * kv, kv


def _indptr(lens) -> list[int]:
    out = [0]
    for n in lens:
        out.append(out[-1] + int(n))
    return out


def _pages(kv_tokens, page_size) -> list[int]:
    return _indptr([(t + page_size - 1) // page_size for t in kv_tokens])


def _kv_tokens(rng: random.Random, n: int, lo: int = 1, hi: int = 32768) -> list[int]:
    mode = rng.random()
    if mode < 0.25:
        return [rng.randint(lo, min(hi, 256)) for _ in range(n)]
    if mode < 0.5:
        return [rng.randint(lo, hi) for _ in range(n)]
    if mode < 0.75:  # log-uniform
        return [max(lo, int(2 ** rng.uniform(0, 15))) for _ in range(n)]
    base = rng.randint(lo, hi)
    return [base] * n


def prefill_request(rid: str, q_lens, kv_tokens, *, num_qo_heads, num_kv_heads, head_dim_qk,
                    head_dim_vo, page_size, enable_cuda_graph, gpu, total_num_rows=None,
                    window_left=-1, fixed_split_size=-1, disable_split_kv=False,
                    num_colocated_ctas=0, uniform_q_len=0, fixed_uniform_q_len=False,
                    kv_dtype_bytes=2) -> dict:
    qo = _indptr(q_lens)
    params = {
        "qo_indptr": qo,
        "kv_indptr": _pages(kv_tokens, page_size),
        "total_num_rows": qo[-1] if total_num_rows is None else total_num_rows,
        "batch_size": len(q_lens),
        "num_qo_heads": num_qo_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim_qk": head_dim_qk,
        "head_dim_vo": head_dim_vo,
        "page_size": page_size,
        "enable_cuda_graph": bool(enable_cuda_graph),
        "window_left": window_left,
        "fixed_split_size": fixed_split_size,
        "disable_split_kv": bool(disable_split_kv),
        "num_colocated_ctas": num_colocated_ctas,
        "uniform_q_len": uniform_q_len,
        "fixed_uniform_q_len": bool(fixed_uniform_q_len),
        "kv_dtype_bytes": kv_dtype_bytes,
    }
    params.update(_device(gpu))
    return {"id": rid, "planner": "prefill", "params": params}


def decode_request(rid: str, kv_tokens, *, num_qo_heads, num_kv_heads, head_dim, page_size,
                   enable_cuda_graph, gpu, blocks_per_sm) -> dict:
    params = {
        "indptr": _pages(kv_tokens, page_size),
        "batch_size": len(kv_tokens),
        "num_qo_heads": num_qo_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "page_size": page_size,
        "enable_cuda_graph": bool(enable_cuda_graph),
        "blocks_per_sm": blocks_per_sm,
    }
    params.update(_device(gpu))
    return {"id": rid, "planner": "decode", "params": params}


def sm90_request(rid: str, q_lens, kv_tokens, *, num_qo_heads, num_kv_heads, head_dim_qk,
                 head_dim_vo, page_size, causal, enable_cuda_graph, gpu) -> dict:
    qo = _indptr(q_lens)
    params = {
        "qo_indptr": qo,
        "kv_indptr": _pages(kv_tokens, page_size),
        "kv_len_arr": [int(t) for t in kv_tokens],
        "total_num_rows": qo[-1],
        "batch_size": len(q_lens),
        "num_qo_heads": num_qo_heads,
        "num_kv_heads": num_kv_heads,
        "head_dim_qk": head_dim_qk,
        "head_dim_vo": head_dim_vo,
        "page_size": page_size,
        "causal": bool(causal),
        "enable_cuda_graph": bool(enable_cuda_graph),
    }
    params.update(_device(gpu))
    return {"id": rid, "planner": "sm90", "params": params}


GPU_BY_NAME = {g[0]: g for g in GPUS}


def seed_requests() -> list[dict]:
    """The two production seeds, as the frameworks issue them (CUDA-graph decode, batch 512)."""
    B = 512
    out = []
    # (a) vLLM, Qwen3.5-397B-A17B per rank: 32 q / 2 kv heads, head dim 256, page 16, B300.
    out.append(prefill_request(
        "seed_vllm_qwen35", [1] * B, [16] * B, num_qo_heads=32, num_kv_heads=2, head_dim_qk=256,
        head_dim_vo=256, page_size=16, enable_cuda_graph=True, gpu=GPU_BY_NAME["B300"]))
    # (b) SGLang, Qwen3-VL-32B: 64 q / 8 kv heads, head dim 128, page 1, H100.
    out.append(prefill_request(
        "seed_sglang_qwen3vl", [1] * B, [1] * B, num_qo_heads=64, num_kv_heads=8,
        head_dim_qk=128, head_dim_vo=128, page_size=1, enable_cuda_graph=True,
        gpu=GPU_BY_NAME["H100"]))
    # Neighbours: the same shapes on other GPUs, with FlashInfer 0.7.4's own decode call
    # (uniform_q_len=1, fixed_uniform_q_len) and at other capture sizes.
    for gname in ("B200", "H100", "RTXPRO6000", "GB10"):
        for bs in (256, 512, 1024):
            out.append(prefill_request(
                f"seed_vllm_{gname}_b{bs}_u1f", [1] * bs, [16] * bs, num_qo_heads=32,
                num_kv_heads=2, head_dim_qk=256, head_dim_vo=256, page_size=16,
                enable_cuda_graph=True, gpu=GPU_BY_NAME[gname], uniform_q_len=1,
                fixed_uniform_q_len=True))
            out.append(prefill_request(
                f"seed_sglang_{gname}_b{bs}", [1] * bs, [1] * bs, num_qo_heads=64,
                num_kv_heads=8, head_dim_qk=128, head_dim_vo=128, page_size=1,
                enable_cuda_graph=True, gpu=GPU_BY_NAME[gname]))
    return out


def _head_dims(rng: random.Random) -> tuple[int, int]:
    d = rng.choice((64, 128, 128, 256, 256))
    return d, d


def make_grid(version: str = "", seed: int = 20261129, scale: float = 1.0) -> list[dict]:
    """Deterministic grid (same requests for every release; ``version`` is accepted for API
    symmetry and does not change the grid, so families can be compared request by request)."""
    rng = random.Random(seed)
    n = lambda k: max(1, int(round(k * scale)))  # noqa: E731
    out: list[dict] = list(seed_requests())
    out += deterministic_requests()

    def gpu():
        return rng.choice(GPUS)

    # CUDA-graph decode through the FA2 planner (fast_plan_decode / fast_decode_plan).
    for i in range(n(320)):
        q, kv = _heads(rng)
        dqk, dvo = _head_dims(rng)
        bs = rng.choice(CAPTURE_SIZES)
        ps = rng.choice(PAGE_SIZES)
        out.append(prefill_request(
            f"graph_decode_{i}", [1] * bs, _kv_tokens(rng, bs), num_qo_heads=q, num_kv_heads=kv,
            head_dim_qk=dqk, head_dim_vo=dvo, page_size=ps, enable_cuda_graph=True, gpu=gpu(),
            num_colocated_ctas=rng.choice((0, 0, 0, 0, 16, 132))))

    # Same with uniform_q_len=1 (and fixed_uniform_q_len as FlashInfer 0.7.4's decode passes).
    for i in range(n(160)):
        q, kv = _heads(rng)
        dqk, dvo = _head_dims(rng)
        bs = rng.choice(CAPTURE_SIZES)
        ps = rng.choice(PAGE_SIZES)
        out.append(prefill_request(
            f"graph_uniform_{i}", [1] * bs, _kv_tokens(rng, bs), num_qo_heads=q, num_kv_heads=kv,
            head_dim_qk=dqk, head_dim_vo=dvo, page_size=ps, enable_cuda_graph=True, gpu=gpu(),
            uniform_q_len=1, fixed_uniform_q_len=rng.random() < 0.6))

    # Speculative verify under CUDA graphs: q_len = 1 + k.
    for i in range(n(200)):
        q, kv = _heads(rng)
        dqk, dvo = _head_dims(rng)
        bs = rng.choice(CAPTURE_SIZES[:-3])
        k = rng.randint(1, 7)
        ql = 1 + k
        ps = rng.choice(PAGE_SIZES)
        mode = rng.random()
        uq = ql if mode < 0.5 else 0
        out.append(prefill_request(
            f"graph_verify_{i}", [ql] * bs, [t + ql for t in _kv_tokens(rng, bs)],
            num_qo_heads=q, num_kv_heads=kv, head_dim_qk=dqk, head_dim_vo=dvo, page_size=ps,
            enable_cuda_graph=True, gpu=gpu(), uniform_q_len=uq,
            fixed_uniform_q_len=uq > 0 and rng.random() < 0.5))

    # Eager decode (q_len 1, no graph).
    for i in range(n(120)):
        q, kv = _heads(rng)
        dqk, dvo = _head_dims(rng)
        bs = rng.randint(1, 1024) if rng.random() < 0.5 else rng.choice(CAPTURE_SIZES)
        out.append(prefill_request(
            f"eager_decode_{i}", [1] * bs, _kv_tokens(rng, bs), num_qo_heads=q, num_kv_heads=kv,
            head_dim_qk=dqk, head_dim_vo=dvo, page_size=rng.choice(PAGE_SIZES),
            enable_cuda_graph=False, gpu=gpu()))

    # Eager prefill mixes.
    for i in range(n(280)):
        q, kv = _heads(rng)
        dqk, dvo = _head_dims(rng)
        bs = rng.choice((1, 2, 3, 4, 8, 16, 32, 64, 128, 256, rng.randint(1, 512)))
        q_lens = []
        for _ in range(bs):
            r = rng.random()
            q_lens.append(1 if r < 0.3 else rng.randint(2, 64) if r < 0.6 else
                          rng.randint(65, 2048) if r < 0.9 else rng.randint(2049, 8192))
        kvt = [ql + c for ql, c in zip(q_lens, _kv_tokens(rng, bs, lo=0))]
        extra = {}
        r = rng.random()
        if r < 0.12:
            extra["window_left"] = rng.choice((127, 1023, 4095))
        elif r < 0.2:
            # fixed_split_size is in pages; keep the chunk count realistic (<= 64 per request).
            ps_fixed = rng.choice(PAGE_SIZES)
            kvt = [min(t, 64 * 4096) for t in kvt]
            longest_pages = max((t + ps_fixed - 1) // ps_fixed for t in kvt)
            extra["fixed_split_size"] = max(rng.choice((8, 64, 512)), -(-longest_pages // 64))
            extra["page_size"] = ps_fixed
        elif r < 0.26:
            extra["disable_split_kv"] = True
        elif r < 0.34:
            extra["num_colocated_ctas"] = rng.choice((16, 64, 132, 300))
        if rng.random() < 0.15:
            extra["kv_dtype_bytes"] = 1
        page_size = extra.pop("page_size", None) or rng.choice(PAGE_SIZES)
        out.append(prefill_request(
            f"eager_prefill_{i}", q_lens, kvt, num_qo_heads=q, num_kv_heads=kv, head_dim_qk=dqk,
            head_dim_vo=dvo, page_size=page_size, enable_cuda_graph=False, gpu=gpu(), **extra))

    # A single short query (or a few) against a long KV cache.
    for i in range(n(90)):
        q, kv = _heads(rng)
        dqk, dvo = _head_dims(rng)
        g = q // kv
        bs = rng.choice((1, 1, 1, 2, 3))
        q_lens = [rng.randint(1, max(1, 256 // g)) for _ in range(bs)]
        kvt = [rng.choice((8192, 65536, 262144, 1048576)) + rng.randint(0, 999) for _ in q_lens]
        out.append(prefill_request(
            f"short_vs_long_{i}", q_lens, kvt, num_qo_heads=q, num_kv_heads=kv, head_dim_qk=dqk,
            head_dim_vo=dvo, page_size=rng.choice(PAGE_SIZES), enable_cuda_graph=False, gpu=gpu()))

    # Big / asymmetric head dims (query-tile rules of 0.6.14+ and 0.7.0+, smem fallback).
    dims = ((512, 512), (576, 512), (192, 128), (448, 256), (512, 128), (320, 256))
    for i in range(n(90)):
        q, kv = _heads(rng, 64)
        dqk, dvo = rng.choice(dims)
        graph = rng.random() < 0.6
        bs = rng.choice(CAPTURE_SIZES[:-2]) if graph else rng.randint(1, 64)
        if graph:
            ql = rng.choice((1, 1, 2, 4, 8))
            q_lens = [ql] * bs
            uq = ql if rng.random() < 0.4 else 0
        else:
            q_lens = [rng.choice((1, 8, 40, 300)) for _ in range(bs)]
            uq = 0
        out.append(prefill_request(
            f"big_head_dims_{i}", q_lens, [x + 64 for x in _kv_tokens(rng, bs)],
            num_qo_heads=q, num_kv_heads=kv, head_dim_qk=dqk, head_dim_vo=dvo,
            page_size=rng.choice(PAGE_SIZES), enable_cuda_graph=graph, gpu=gpu(),
            uniform_q_len=uq, fixed_uniform_q_len=uq > 0 and rng.random() < 0.5,
            kv_dtype_bytes=rng.choice((1, 2, 2))))

    # The CUDA-core decode planner.
    for i in range(n(200)):
        while True:
            g = rng.choice((1, 2, 3, 4, 4, 6, 8, 8, 16))
            kv = rng.choice(KV_HEADS)
            if g * kv <= 128:
                break
        graph = rng.random() < 0.5
        bs = rng.choice(CAPTURE_SIZES) if graph else rng.randint(1, 1024)
        out.append(decode_request(
            f"decode_planner_{i}", _kv_tokens(rng, bs), num_qo_heads=g * kv, num_kv_heads=kv,
            head_dim=rng.choice((64, 128, 128, 256, 512)), page_size=rng.choice(PAGE_SIZES),
            enable_cuda_graph=graph, gpu=gpu(), blocks_per_sm=rng.choice((1, 2, 2, 3, 4, 8))))

    # The SM90 / FA3 planner (int buffer only).
    for i in range(n(130)):
        q, kv = _heads(rng)
        dvo = rng.choice((64, 128, 256))
        graph = rng.random() < 0.5
        if graph:
            bs = rng.choice(CAPTURE_SIZES)
            ql = rng.choice((1, 1, 2, 4))
            q_lens = [ql] * bs
        else:
            bs = rng.randint(1, 256)
            q_lens = [rng.choice((1, 7, 100, 1000, 3000)) for _ in range(bs)]
        kvt = [x + ql for x, ql in zip(_kv_tokens(rng, bs), q_lens)]
        out.append(sm90_request(
            f"sm90_{i}", q_lens, kvt, num_qo_heads=q, num_kv_heads=kv, head_dim_qk=dvo,
            head_dim_vo=dvo, page_size=rng.choice(PAGE_SIZES), causal=rng.random() < 0.6,
            enable_cuda_graph=graph, gpu=rng.choice([g for g in GPUS if g[2] == 9] or GPUS)))

    # Requests FlashInfer rejects.
    h100 = GPU_BY_NAME["H100"]
    out.append(prefill_request("error_heads_prefill", [1] * 8, [10] * 8, num_qo_heads=30,
                               num_kv_heads=8, head_dim_qk=128, head_dim_vo=128, page_size=16,
                               enable_cuda_graph=True, gpu=h100))
    out.append(prefill_request("error_uniform_mismatch", [1, 2, 1, 1], [10] * 4, num_qo_heads=32,
                               num_kv_heads=8, head_dim_qk=128, head_dim_vo=128, page_size=16,
                               enable_cuda_graph=True, gpu=h100, uniform_q_len=1))
    out.append(prefill_request("error_fixed_split_graph", [1] * 64, [100000] * 64,
                               num_qo_heads=32, num_kv_heads=8, head_dim_qk=128,
                               head_dim_vo=128, page_size=1, enable_cuda_graph=True, gpu=h100,
                               fixed_split_size=16))
    out.append(sm90_request("error_heads_sm90", [1] * 4, [10] * 4, num_qo_heads=30,
                            num_kv_heads=8, head_dim_qk=128, head_dim_vo=128, page_size=16,
                            causal=True, enable_cuda_graph=True, gpu=h100))
    for g in (5, 6, 7, 12, 16, 32):
        out.append(decode_request(f"decode_group_{g}", [100] * 16, num_qo_heads=g * 2,
                                  num_kv_heads=2, head_dim=128, page_size=16,
                                  enable_cuda_graph=True, gpu=h100, blocks_per_sm=2))
    for d in (96, 192):
        out.append(decode_request(f"decode_head_dim_{d}", [100] * 16, num_qo_heads=16,
                                  num_kv_heads=4, head_dim=d, page_size=16,
                                  enable_cuda_graph=True, gpu=h100, blocks_per_sm=2))
    ids = [r["id"] for r in out]
    assert len(ids) == len(set(ids)), "grid ids must be unique"
    return out


def deterministic_requests() -> list[dict]:
    """SGLang deterministic inference (flashinfer_backend.py, every line 0.5.5-0.5.23): eager
    prefill with ``fixed_split_size = SGLANG_FLASHINFER_PREFILL_SPLIT_TILE_SIZE`` (4096), eager
    tensor-core decode with ``SGLANG_FLASHINFER_DECODE_SPLIT_TILE_SIZE`` (2048), CUDA graphs
    with ``disable_split_kv=True``; page size 1 (SGLang's FlashInfer default)."""
    out = []
    gb10, h100 = GPU_BY_NAME["GB10"], GPU_BY_NAME["H100"]
    gb10_heads = dict(num_qo_heads=24, num_kv_heads=4, head_dim_qk=256, head_dim_vo=256, page_size=1)
    # GB10 report (SGLang PR #30244's thread): an 8192-token chunk against its own 8192-token KV.
    out.append(prefill_request("det_gb10_report", [8192], [8192], enable_cuda_graph=False, gpu=gb10,
                               fixed_split_size=4096, **gb10_heads))
    # The same deployment on FlashInfer 0.7.1+: 10 KV chunks fit 2 GiB, 11 do not.
    for kv in (40960, 40961, 131072):
        out.append(prefill_request(f"det_gb10_q8192_kv{kv}", [8192], [kv], enable_cuda_graph=False,
                                   gpu=gb10, fixed_split_size=4096, **gb10_heads))
    # H200 report: Qwen3-Next-80B-A3B (16 q / 2 kv heads, head_dim 256 full-attention layers), TP 1,
    # an 8192-token chunk (H200's default chunked prefill size) against 8192 tokens of KV.
    out.append(prefill_request("det_h200_qwen3next_report", [8192], [8192], num_qo_heads=16,
                               num_kv_heads=2, head_dim_qk=256, head_dim_vo=256, page_size=1,
                               enable_cuda_graph=False, gpu=h100, fixed_split_size=4096))
    # decode: 256 requests, one of them at 32k / 128k, split 2048; and the capture (no split)
    for kv in (32768, 131072):
        out.append(prefill_request(f"det_gb10_decode_kv{kv}", [1] * 256, [kv] + [1] * 255,
                                   enable_cuda_graph=False, gpu=gb10, fixed_split_size=2048, **gb10_heads))
    for bs in (1, 64, 256, 512):
        out.append(prefill_request(f"det_gb10_graph_decode_b{bs}", [1] * bs, [1] * bs,
                                   enable_cuda_graph=True, gpu=gb10, disable_split_kv=True, **gb10_heads))
    # a seeded spread: one prompt chunk (up to 16k) against a long KV (up to 128k), split sizes
    # 1024..8192 pages, page sizes 1 / 16, every GQA group and head dim of the grid
    rng = random.Random(20261201)
    for i in range(48):
        q, kv = _heads(rng, max_q=64)
        d = rng.choice((64, 128, 256))
        ps = rng.choice((1, 1, 16))
        ctx = rng.choice((8192, 32768, 131072, rng.randint(4097, 131072)))
        chunk = min(ctx, rng.choice((2048, 4096, 8192, 16384)))
        out.append(prefill_request(
            f"det_spread_{i}", [chunk], [ctx], num_qo_heads=q, num_kv_heads=kv, head_dim_qk=d,
            head_dim_vo=d, page_size=ps, enable_cuda_graph=False, gpu=rng.choice(GPUS),
            fixed_split_size=rng.choice((1024, 2048, 4096, 8192)) // ps))
    return out


# Published numbers of the deterministic-inference reports, checked against the oracle.
DET_GB10_TMP_V = 2415919104  # "batch_prefill_tmp_v with size 2415919104 ... only 2147483648 bytes available"
DET_H200_TMP_S = 8388608  # "batch_prefill_tmp_s with size 8388608 ... 0 bytes available"
DET_FORCED = 2 * 1024 ** 3  # SGLang's envs.SGLANG_FLASHINFER_WORKSPACE_SIZE.set(2048 * 1024 * 1024)

# Seed expectations (bytes), checked against the oracle itself by the test.
SEED_EXPECT_OLD = {  # FlashInfer <= 0.7.0.post1 (before PR #5177)
    "seed_vllm_qwen35": {"batch_prefill_tmp_v": 536346624},
    "seed_sglang_qwen3vl": {"batch_prefill_tmp_v": 402128896, "batch_prefill_tmp_s": 3141632},
}
SEED_EXPECT_NEW_FLOAT_TOTAL = {  # FlashInfer >= 0.7.1: rows divided by the GQA group
    "seed_vllm_qwen35": 33652608,
    "seed_sglang_qwen3vl": 50658816,
}
