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
