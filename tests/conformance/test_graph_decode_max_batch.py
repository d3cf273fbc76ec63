"""vLLM plans every pure decode batch of up to ``_decode_cudagraph_max_bs`` tokens with the CUDA-graph
decode wrapper, captured or not.

``use_cudagraph = enable_cuda_graph and pure_decode and num_decode_tokens <= _decode_cudagraph_max_bs``
(v1/attention/backends/flashinfer.py 0.23.0:1210-1214), ``_decode_cudagraph_max_bs = min((1 +
num_spec_tokens) x max_num_reqs, max_cudagraph_capture_size)`` (0.23.0:588-592), and vLLM 0.23's
capture ceiling is ``min(2 x max_num_seqs x (1 + spec), 512)`` (vllm/config/vllm.py 0.23.0:1678-1680, the list 1709-1722)
with the list ``[1, 2, 4] + range(8, 256, 8) + range(256, ceiling + 1, 16)``. With ``--max-num-seqs
353`` the largest capture size at most 353 is 352, but a step of 353 one-token decodes (the batch
runs PIECEWISE, its plan still goes through the graph wrapper with ``enable_cuda_graph``) plans
``max(2 x SMs / kv_heads, ceil(353 x gqa / cta_tile_q) + 352)`` entries. Found by the differential
search (issue 27 item 4): vLLM 0.23, H100, microsoft/phi-4 at TP 8, ``--max-num-seqs 353
--max-num-batched-tokens 23728 --max-model-len 2000``: 10,377,792 B where the guard said 10,328,256 B.

The expected value never comes from guard_core: the test computes vLLM's graph batch limit from
the rules above, asks the compiled planner (oracle.py) for every batch size from 1 to it (one query
token each, KV at max_model_len, ``enable_cuda_graph``) and keeps the largest; the guard's need,
from the deployment as the ``plan`` command derives it (guard_core.deployment), must reach it.
"""

from __future__ import annotations

import pytest

from guard_core.decide.workspace import vllm_graph_limits
from guard_core.deployment.deployment_record import Deployment
from guard_core.deployment.server_defaults import derive
from guard_core.flashinfer.sizing import AttentionLayout, Planners, compute_requirement
from guard_core.gpus import find_spec, lookup_gpu

from . import grid, oracle

# (id, vLLM line, its FlashInfer, GPU, (q, kv heads, head dim) per rank, page size, max seqs,
#  max batched tokens, max_model_len)
SHAPES = (
    ("phi4-tp8-h100-353", "0.23.0", "0.6.12", "h100", (3, 1, 128), 16, 353, 23728, 2000),
    ("llama8b-a100-100", "0.23.0", "0.6.12", "a100", (32, 8, 128), 16, 100, 8192, 4096),
)


def _vllm_023_graph_max(seqs: int, spec: int = 0) -> int:
    ceiling = min(2 * seqs * (1 + spec), 512)
    sizes = [b for b in [1, 2, 4, *range(8, 256, 8), *range(256, ceiling + 1, 16)] if b <= ceiling]
    return min((1 + spec) * seqs, max(sizes))


@pytest.mark.parametrize("shape", SHAPES, ids=[s[0] for s in SHAPES])
def test_every_graph_planned_decode_batch_covered(shape):
    sid, line, fi, gpu_key, (hq, hkv, hd), page, seqs, tokens, max_len = shape
    oracle.build_many([fi])
    gpu = lookup_gpu(gpu_key)
    top = _vllm_023_graph_max(seqs)
    reqs = [grid.prefill_request(f"{sid}-{b}", [1] * b, [max_len] * b, num_qo_heads=hq, num_kv_heads=hkv,
                                 head_dim_qk=hd, head_dim_vo=hd, page_size=page, enable_cuda_graph=True,
                                 gpu=(gpu_key, gpu.num_sms, gpu.cc[0], gpu.cc[1]))
            for b in range(1, top + 1)]
    replies = oracle.run_oracle(fi, reqs)
    real, b = max((r["float_bytes"] if r.get("ok") else -1, i + 1) for i, r in enumerate(replies))

    spec = find_spec(gpu_key)
    d = derive(Deployment(framework="vllm", line=line, gpu_key=spec.key, cc=spec.cc, gpu_name=spec.name, tp=8,
                          max_num_seqs=seqs, max_batched_tokens=tokens, max_model_len=max_len, page_size=page))
    limits = vllm_graph_limits(capture_sizes=d.decode_graph_sizes, max_num_seqs=seqs, max_num_batched_tokens=tokens,
                               draft_tokens=0, max_model_len=max_len, reorder_batch_threshold=1)
    req = compute_requirement(AttentionLayout(hq, hkv, hd, hd, page, 2), limits, gpu, fi, Planners("fa2", "fa2"),
                              "vllm")
    graph = max(s.float_bytes for s in req.scenarios if s.name == "cuda_graph_decode")
    print(f"\n{sid}: graph-planned decode batches 1..{top}; worst {real} B at {b}; guard graph decode {graph} B "
          f"(sizes up to {max(d.decode_graph_sizes)})")
    assert graph >= real, (sid, graph, real, b)
