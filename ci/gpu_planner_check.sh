#!/usr/bin/env bash
# FlashInfer's real planner with the REAL CUDA runtime vs guard_core's model, on an NVIDIA GPU.
#
#   ci/gpu_planner_check.sh [FLASHINFER_VERSION]
#
# Needs: an NVIDIA GPU, nvidia-smi, nvcc (CUDA 12.x/13.x), python3 with this repository importable.
# The release's headers come from, in order: the cache (${FLASHINFER_GUARD_CACHE:-~/.cache/
# flashinfer-guard}/flashinfer/<V>/), the installed flashinfer-python when it is exactly <V>,
# $FLASHINFER_GUARD_WHEEL_DIR/flashinfer_python-<V>-*.whl, or `pip download` (needs network;
# on an offline GPU box copy the cache directory or a wheel over first).
# Version: the argument, else $FLASHINFER_VERSION, else the installed flashinfer-python, else 0.7.4.
#
# What it does (ci/gpu/planner_check.py): builds tests/conformance/harness.cu without the CUDA
# stubs (real device SM count, compute capability, shared-memory limits, and the occupancy of
# FlashInfer's real decode kernel compiled for this GPU) and with them; runs the conformance grid
# plus the two seed shapes with this device's values through both and through
# guard_core.flashinfer.planner.run_planner; prints "N requests, N equal" for real-vs-stub and
# real-vs-model with the first differences. Exit 0 only if all are equal. Budget: < 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v nvidia-smi >/dev/null || { echo "gpu_planner_check: nvidia-smi not found (no NVIDIA GPU?)" >&2; exit 2; }
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || { echo "gpu_planner_check: nvcc not found" >&2; exit 2; }
command -v nvcc >/dev/null || export PATH="/usr/local/cuda/bin:$PATH"
nvidia-smi --query-gpu=name,compute_cap,memory.total --format=csv,noheader

VERSION="${1:-${FLASHINFER_VERSION:-}}"
if [ -z "$VERSION" ]; then
  VERSION="$(python3 - <<'EOF'
try:
    from importlib.metadata import version
    print(version("flashinfer-python"))
except Exception:
    print("0.7.4")
EOF
)"
fi

exec timeout "${GPU_PLANNER_CHECK_TIMEOUT:-470}" python3 ci/gpu/planner_check.py "$VERSION"
