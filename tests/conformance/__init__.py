"""Conformance of guard_core's planner model with FlashInfer's real host planner code.

oracle.py fetches each release's headers from its wheel at test time and compiles harness.cu
against them; grid.py is the request grid; test_planner_conformance.py compares.

What the oracle shows differs between the covered releases (0.5.0, 0.6.12, 0.6.14, 0.6.16,
0.7.0.post1, 0.7.2.post1, 0.7.4), read from scheduler.cuh / utils.cuh of each wheel:

FA2 ``PrefillPlan``
  * signature: 0.5.0 no ``num_colocated_ctas`` (max grid = 2 * SMs); 0.6.12+ adds it
    (max grid = max(0, 2 * SMs - num_colocated_ctas)); 0.6.16 adds ``uniform_q_len``; 0.7.0.post1
    adds trailing ``kv_dtype_bytes`` (csrc passes sizeof(DTypeKV)) and first uses
    ``head_dim_qk``; 0.7.4 adds ``fixed_uniform_q_len``.
  * scheduler.cuh of 0.6.12 and 0.6.14 is identical; the 0.6.14 change is FA2DetermineCtaTileQ
    in utils.cuh: head_dim_vo >= 512 -> 16 if packed len <= 32 else 32 (checked first).
  * 0.7.0.post1: head_dim_qk >= 512 (vo < 512) -> 16; and in the (cc >= 8, packed <= 16) branch
    an smem probe: 16*qk*2 + (qk+vo)*16*4*kv_dtype_bytes > cudaDevAttrMaxSharedMemoryPerBlockOptin
    -> 64 instead of 16.
  * 0.6.16: CUDA graph with uniform_q_len > 0: every request must have packed length
    uniform_q_len * group (else FlashInfer error), cta from u*g, tiles = B * ceil(u*g / cta).
    Eager plans ignore uniform_q_len.
  * 0.7.2.post1 (PR #5177): tmp_v/tmp_s rows = ceil(padded * cta / group) (was padded * cta);
    ``batch_prefill_block_valid_mask`` is allocated iff enable_cuda_graph (after merge_indptr
    when split), where <= 0.7.0.post1 allocated it iff split_kv; so int sizes change too (eager
    split plans lose it, graph non-split plans gain it).
  * 0.7.4: fixed_uniform_q_len && uniform_q_len > 0 && tiles > max_batch_size_if_split ->
    split_kv = false (not applied with disable_split_kv or fixed_split_size > 0).
  * all: int order request_indices, qo_tile_indices, kv_tile_indices (4*padded each, align 16),
    o_indptr 4*(batch_size+1), kv_chunk_size_ptr 4 (align 1), [graph] total_num_rows 4; float
    tmp_v, tmp_s; int merge_indptr 4*(total_num_rows PARAMETER + 1); then block_valid_mask.
    Graph + fixed_split_size can raise "new batch size should not exceed padded batch size".

CUDA-core ``DecodePlan`` (identical code in all seven, the 0.6.16 MATERIALIZE refactor aside)
  * int: request_indices 4P, kv_tile_indices 4P, o_indptr 4*(P+1) (P, not batch_size),
    kv_chunk_size_ptr 4 (align 1); split: float tmp_v Hq*P*HEAD_DIM*4, tmp_s Hq*P*4, int
    block_valid_mask P bytes. P = graph ? (split ? blocks_per_sm*SMs/Hkv : B) : new_batch_size.
  * the supported GQA groups (FlashInfer's DISPATCH_GQA_GROUP_SIZE in csrc/batch_decode.cu) grow:
    {1,2,3,4,8} up to 0.6.16, +6 in 0.7.0.post1, +16 in 0.7.2.post1; any other group is an
    error ("Unsupported group_size: N").

``PrefillSM90Plan`` and heap.h: byte-identical in all seven releases.

``MLAPlan`` (test_mla_conformance.py, docs/mla-guard.md)
  * body byte-identical 0.5.0..0.6.16 and 0.7.0.post1..0.7.4; 0.7.0 adds the output
    ``size_t& staged_int_workspace_bytes`` and drops its own cudaMemcpyAsync (FIG_MLA_STAGED).
  * ``int max_total_num_works = 16384`` in all seven, never compared with total_num_works.
"""
