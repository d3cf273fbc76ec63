"""GPUs: SM count and compute capability, live or from a table.

The SM count matters to FlashInfer's planners (``max_batch_size_if_split =
2 * SMs / kv_heads`` for FA2 prefill, the CUDA-core decode grid, the SM90 work
index). Live detection uses torch lazily (never at import); offline planning
uses the table. Each row says where its number comes from; rows marked
``confirmed=False`` could not be checked against a primary source.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["GPU_MEMORY", "GPU_TABLE", "Gpu", "detect_gpu", "find_spec", "gpu_memory", "gpu_names", "is_aarch64_gpu",
           "lookup_gpu"]


@dataclass(frozen=True)
class Gpu:
    name: str
    num_sms: int
    cc: tuple[int, int]
    max_smem_per_sm: int | None = None  # bytes; None = unknown

    @property
    def sm(self) -> int:
        return self.cc[0] * 10 + self.cc[1]


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    num_sms: int
    cc: tuple[int, int]
    smem_per_sm_kib: int
    source: str
    confirmed: bool = True
    aliases: tuple[str, ...] = ()
    # total memory: (bytes torch reports as total_memory, MiB nvidia-smi reports as memory.total);
    # datasheet capacities: the exact figures a driver reports differ by a few hundred MiB, far from
    # every threshold the servers' defaults use (guard_core.deployment.server_defaults)
    memory: tuple[int, int] | None = None
    arm_host: bool = False  # the host's CPU is Arm (Grace, DGX Spark): the MoE guard's question

    def gpu(self) -> Gpu:
        return Gpu(self.name, self.num_sms, self.cc, self.smem_per_sm_kib * 1024)


# Sources: NVIDIA architecture whitepapers / datasheets, and
# torch.cuda.get_device_properties(...).multi_processor_count printed in
# public bug reports (vLLM / SGLang / FlashInfer issues) where noted.
GPU_TABLE: tuple[GpuSpec, ...] = (
    GpuSpec("a100", "NVIDIA A100 (SXM4/PCIe)", 108, (8, 0), 164,
            "NVIDIA A100 Tensor Core GPU Architecture whitepaper: 108 SMs", aliases=("a100-sxm", "a100-pcie", "a100-80gb", "a100-40gb"),
            memory=(85899345920, 81920)),
    GpuSpec("a10g", "NVIDIA A10G", 80, (8, 6), 100, "AWS/NVIDIA A10G spec (GA102, 80 SMs)", aliases=("a10",),
            memory=(23836229632, 23028)),
    GpuSpec("l4", "NVIDIA L4", 58, (8, 9), 100, "NVIDIA Ada Lovelace whitepaper / L4 datasheet: 58 SMs",
            memory=(23580639232, 23034)),
    GpuSpec("l40s", "NVIDIA L40S", 142, (8, 9), 100, "NVIDIA L40S datasheet (AD102, 142 SMs)", aliases=("l40",),
            memory=(47697362944, 46068)),
    GpuSpec("rtx6000ada", "NVIDIA RTX 6000 Ada Generation", 142, (8, 9), 100,
            "NVIDIA RTX 6000 Ada datasheet: 142 SMs (18,176 CUDA cores / 128)", aliases=("rtx-6000-ada", "rtx6000-ada"),
            memory=(50880987136, 49140)),
    GpuSpec("rtx4090", "NVIDIA GeForce RTX 4090", 128, (8, 9), 100, "Ada whitepaper: 128 SMs", aliases=("4090",),
            memory=(25393692672, 24564)),
    GpuSpec("h100", "NVIDIA H100 SXM5", 132, (9, 0), 228,
            "NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs (SXM5)", aliases=("h100-sxm", "h100-sxm5", "h100-80gb-hbm3"),
            memory=(85520809984, 81559)),
    GpuSpec("h100-pcie", "NVIDIA H100 PCIe", 114, (9, 0), 228,
            "NVIDIA H100 whitepaper: 114 SMs (PCIe)",
            memory=(85520809984, 81559)),
    GpuSpec("h100-nvl", "NVIDIA H100 NVL", 132, (9, 0), 228, "NVIDIA H100 NVL product brief: 132 SMs", confirmed=False,
            memory=(100485038080, 95830)),
    GpuSpec("h200", "NVIDIA H200", 132, (9, 0), 228,
            "NVIDIA H200 datasheet (GH100, same 132 SMs as H100 SXM)", aliases=("h200-sxm", "h200-nvl"),
            memory=(150754820096, 143771)),
    GpuSpec("gh200", "NVIDIA GH200 (Grace Hopper)", 132, (9, 0), 228, "GH200 datasheet: H100-class GPU, 132 SMs",
            memory=(102625181696, 97871), arm_host=True),
    GpuSpec("h20", "NVIDIA H20", 78, (9, 0), 228, "multi_processor_count 78 in public vLLM/SGLang issue logs", confirmed=False,
            memory=(102625181696, 97871)),
    GpuSpec("b200", "NVIDIA B200", 148, (10, 0), 228,
            "multi_processor_count 148 in public vLLM/FlashInfer issue logs (2 dies x 74 SMs)", aliases=("b200-sxm",),
            memory=(192265846784, 183359)),
    GpuSpec("gb200", "NVIDIA GB200 (Grace Blackwell)", 148, (10, 0), 228,
            "same B200 GPU as the HGX part; assumed 148, not confirmed on a GB200 host", confirmed=False,
            memory=(198672089088, 189471), arm_host=True),
    GpuSpec("b300", "NVIDIA B300 (Blackwell Ultra)", 160, (10, 3), 228,
            "NVIDIA 'Inside Blackwell Ultra' material: 160 SMs; one public issue log prints 160; "
            "some lists say 148: prefer live detection or --sms", confirmed=False,
            memory=(288398671872, 275040)),
    GpuSpec("gb300", "NVIDIA GB300 (Grace Blackwell Ultra)", 160, (10, 3), 228,
            "assumed like B300; not confirmed", confirmed=False,
            memory=(288398671872, 275040), arm_host=True),
    GpuSpec("gb10", "NVIDIA GB10 (DGX Spark)", 48, (12, 1), 100, "48 SMs per public DGX Spark reports", confirmed=False,
            memory=(128526278656, 122570), arm_host=True),
    GpuSpec("rtx5090", "NVIDIA GeForce RTX 5090", 170, (12, 0), 100, "Blackwell GeForce whitepaper: 170 SMs", aliases=("5090",),
            memory=(34190917632, 32607)),
    GpuSpec("rtxpro6000", "NVIDIA RTX PRO 6000 Blackwell", 188, (12, 0), 100,
            "NVIDIA RTX PRO 6000 Blackwell datasheet: 24,064 CUDA cores / 128 = 188 SMs",
            aliases=("rtx-pro-6000", "rtx-pro-6000-blackwell", "rtxpro6000-blackwell"),
            memory=(102642204672, 97887)),
    GpuSpec("mi300x", "AMD MI300X (not a FlashInfer target)", 304, (9, 4), 64, "AMD CDNA3 whitepaper: 304 CUs", confirmed=False,
            memory=(206141652992, 196592)),
)


def _norm(name: str) -> str:
    n = name.lower().strip()
    n = re.sub(r"^nvidia\s+", "", n)
    n = re.sub(r"geforce\s+", "", n)
    return re.sub(r"[\s_]+", "-", n)


_BY_KEY: dict[str, GpuSpec] = {s.key: s for s in GPU_TABLE}
_INDEX: dict[str, GpuSpec] = {}
for _spec in GPU_TABLE:
    for _k in (_spec.key, *_spec.aliases):
        _INDEX[_norm(_k)] = _spec
        _INDEX[_norm(_k).replace("-", "")] = _spec


# the memory column by key (the servers' memory tiers read it)
GPU_MEMORY: dict[str, tuple[int, int]] = {s.key: s.memory for s in GPU_TABLE if s.memory}


def gpu_memory(gpu_key: str | None) -> tuple[int, int] | None:
    """(bytes torch reports, MiB nvidia-smi reports) of a table GPU, None for another."""
    return GPU_MEMORY.get(gpu_key or "")


def is_aarch64_gpu(gpu_key: str | None) -> bool:
    """Whether the table GPU sits on an Arm host (Grace, DGX Spark)."""
    spec = _BY_KEY.get(gpu_key or "")
    return bool(spec and spec.arm_host)


def gpu_names() -> list[str]:
    return [s.key for s in GPU_TABLE]


def find_spec(name: str) -> GpuSpec | None:
    n = _norm(name)
    return _INDEX.get(n) or _INDEX.get(n.replace("-", ""))


def lookup_gpu(name: str) -> Gpu:
    spec = find_spec(name)
    if spec is None:
        raise KeyError(name)
    return spec.gpu()


def detect_gpu(device=None) -> Gpu | None:
    """The live GPU of ``device`` (torch), or None when there is none.

    This is the seam the adapters call and the tests replace on CPU machines.
    """
    import sys

    torch = sys.modules.get("torch")
    if torch is None:
        try:
            import torch  # noqa: F811  (only called from inside a server that has it)
        except Exception:
            return None
    try:
        if not torch.cuda.is_available():
            return None
        dev = device
        if dev is None or getattr(dev, "type", "cuda") != "cuda":
            dev = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(dev)
        smem = getattr(props, "shared_memory_per_multiprocessor", None)
        return Gpu(props.name, int(props.multi_processor_count), (int(props.major), int(props.minor)), smem)
    except Exception:
        return None
