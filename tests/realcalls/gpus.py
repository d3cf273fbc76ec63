"""The tests' own GPU table (issue 27: the expected side of a comparison does not read the GPU's
properties from guard_core.gpus, the table the guard itself uses).

Per GPU: the name the driver reports, the SM count and the compute capability, each from the
vendor's datasheet or architecture whitepaper (cited per row). Per compute capability, the
limits the occupancy calculator uses (max resident threads, max resident blocks, shared memory
per SM, shared memory reserved per block): NVIDIA's CCCL ``cuda/__device/arch_traits.h``
(``arch_traits<arch_id::sm_XX>``, shipped in FlashInfer's wheel under ``data/cccl``; the planner
library reads that header itself where it is there, tests/conformance/harness.cu
FIG_HAS_ARCH_TRAITS; this copy serves FlashInfer releases without it, 0.5.x) and the CUDA C++
Programming Guide's "Technical Specifications per Compute Capability" table.
"""

from __future__ import annotations

# key -> (device name, SMs, compute capability, source)
GPUS = {
    "a100": ("NVIDIA A100-SXM4-80GB", 108, (8, 0), "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs"),
    "l40s": ("NVIDIA L40S", 142, (8, 9), "NVIDIA L40S datasheet: 18,176 CUDA cores = 142 SMs x 128"),
    "h100": ("NVIDIA H100 80GB HBM3", 132, (9, 0), "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs (SXM5)"),
    "h200": ("NVIDIA H200", 132, (9, 0), "NVIDIA H200 datasheet: the GH100 of H100 SXM5, 132 SMs"),
    "b200": ("NVIDIA B200", 148, (10, 0), "NVIDIA Blackwell architecture technical brief: 2 dies x 74 SMs"),
    "b300": ("NVIDIA B300", 160, (10, 3), "NVIDIA Blackwell Ultra technical blog: 160 SMs"),
    "rtx6000": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 188, (12, 0),
                "NVIDIA RTX PRO 6000 Blackwell datasheet: 24,064 CUDA cores = 188 SMs x 128"),
    "rtxpro6000": ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 188, (12, 0),
                   "NVIDIA RTX PRO 6000 Blackwell datasheet: 24,064 CUDA cores = 188 SMs x 128"),
    "gb10": ("NVIDIA GB10", 48, (12, 1), "NVIDIA DGX Spark (GB10) specifications: 6,144 CUDA cores = 48 SMs x 128"),
}

# compute capability -> (max threads per SM, max blocks per SM, shared memory per SM, reserved per block)
CC_LIMITS = {
    (8, 0): (2048, 32, 164 * 1024, 1024),
    (8, 6): (1536, 16, 100 * 1024, 1024),
    (8, 9): (1536, 24, 100 * 1024, 1024),
    (9, 0): (2048, 32, 228 * 1024, 1024),
    (10, 0): (2048, 32, 228 * 1024, 1024),
    (10, 3): (2048, 32, 228 * 1024, 1024),
    (12, 0): (1536, 24, 100 * 1024, 1024),
    (12, 1): (1536, 24, 100 * 1024, 1024),
}


def limits(cc: tuple[int, int]) -> dict:
    """The occupancy limits of ``cc`` as planner-library request fields."""
    t, b, smem, reserved = CC_LIMITS[tuple(cc)]
    return {"max_threads_per_sm": t, "max_blocks_per_sm": b, "max_smem_per_sm": smem,
            "reserved_smem_per_block": reserved}


def gpu(key: str):
    """(name, SMs, cc, shared memory per SM) of a table GPU."""
    name, sms, cc, _src = GPUS[key]
    return name, sms, cc, CC_LIMITS[cc][2]


# key -> device memory in MiB, as the driver reports it (``nvidia-smi --query-gpu=memory.total``;
# datasheet capacity where no report was at hand: A100-80GB 81920, L40S 48 GB = 46068 MiB reported,
# H100 SXM 80 GB = 81559, H200 141 GB = 143771, B200 180 GB = 183359, B300 288 GB = 275040,
# RTX PRO 6000 96 GB = 97887, GB10 128 GB unified = 122502). SGLang's own ServerArgs resolution
# buckets this figure (<20, <35, <60, <90, <160 GiB, else: memory_hook.py 0.5.23:89-165,
# server_args.py 0.5.11:1294) to pick capture sizes and the chunked-prefill size.
MEMORY_MIB = {"a100": 81920, "l40s": 46068, "h100": 81559, "h200": 143771, "b200": 183359, "b300": 275040,
              "rtx6000": 97887, "rtxpro6000": 97887, "gb10": 122502}
