"""Issue 17's SGLang EAGLE report against FlashInfer's compiled planner (oracle.py).

SGLang's multi-step EAGLE draft backend plans ``topk x bs`` decode requests per draft
step (flashinfer_backend.py 0.5.5:1446 and 0.5.23:2501 ``bs = self.topk * num_seqs``; the
CUDA-graph capture passes ``num_tokens = batch_size * topk``, 0.5.5:1519-1528). With
tensor-core decode (Llama-3.1-8B's 32 q / 8 kv heads: GQA group 4) that is FlashInfer's
PrefillPlan with one query row per request, CUDA-graph mode. The expected bytes are the
compiled planner's; the guard's envelope for the draft runner (``decode_requests_per_seq``
= topk) must cover every one of them, and the envelope without topk did not (the report:
39.8 MiB sized, 40.2 MiB planned).
"""

from __future__ import annotations

import pytest

from guard_core.gpus import lookup_gpu
from guard_core.flashinfer.sizing import AttentionLayout, Planners, ServingLimits, compute_requirement

from . import grid, oracle

RELEASES = [v for v in oracle.selected_releases() if v in ("0.5.0", "0.7.2.post1")]
H200 = ("H200", 132, 9, 0)
# SGLang's decode capture list up to --cuda-graph-max-bs 64 (server_args: 1, 2, 4, 8, 12, ..., 64)
CAPTURE = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64)


def _draft_requests(topk: int, steps: int = 3):
    out = []
    for bs in CAPTURE:
        n = bs * topk
        for i in range(steps):  # step i: every branch holds the committed length + i + 1 tokens
            for kv in (1, 4096):
                out.append(grid.prefill_request(
                    f"draft_bs{bs}_k{topk}_s{i}_kv{kv}", [1] * n, [kv + i + 1] * n, num_qo_heads=32,
                    num_kv_heads=8, head_dim_qk=128, head_dim_vo=128, page_size=1, enable_cuda_graph=True,
                    gpu=H200))
    return out


@pytest.mark.parametrize("version", RELEASES)
@pytest.mark.parametrize("topk", [4, 8])
def test_eagle_topk_draft_decode_is_covered(version, topk):
    oracle.build_many([version])
    replies = oracle.run_oracle(version, _draft_requests(topk))
    assert all(r["ok"] for r in replies), [r for r in replies if not r["ok"]][:1]
    real = max(r["float_bytes"] for r in replies)
    gpu = lookup_gpu("H200")
    layout = AttentionLayout(32, 8, 128, 128, 1, 2)

    def need(per_seq):
        limits = ServingLimits(capture_sizes=CAPTURE, max_num_seqs=64, max_num_batched_tokens=8192,
                               max_model_len=131072, decode_requests_per_seq=per_seq)
        return compute_requirement(layout, limits, gpu, version, Planners("fa2", "fa2"), "sglang").float_bytes

    assert need(topk) >= real, (version, topk, need(topk), real)
    assert need(1) < real, "the report's deployment should exceed the envelope without topk"
    print(f"\nFlashInfer {version}, topk {topk}, bs <= 64: draft decode plans {real} B; "
          f"guard {need(topk)} B (was {need(1)} B without topk)")
