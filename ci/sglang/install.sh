#!/usr/bin/env bash
# Create (or reuse) a CPU-machine test environment for one SGLang line and install
# this repository into it the way a user would (a real wheel build, so the .pth
# bootstrap and the entry points are the installed ones).
#
#   ci/sglang/install.sh 0.5.5      -> prints the env's python on the last line
#
# Env location: ${FLASHINFER_GUARD_ENVS:-$HOME/.cache/flashinfer-guard/envs}/sglang-VERSION
# A complete env (marker file written after the SGLang install succeeded) is reused;
# an incomplete one is removed and rebuilt. Our package is reinstalled every time.
set -euo pipefail

version="${1:?usage: install.sh SGLANG_VERSION}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
envs="${FLASHINFER_GUARD_ENVS:-$HOME/.cache/flashinfer-guard/envs}"
env="$envs/sglang-$version"
marker="$env/.flashinfer-guard-complete"
py="$env/bin/python"

log() { echo "[ci/sglang/install] $*" >&2; }

if ! command -v uv >/dev/null 2>&1; then
  log "installing uv"
  python3 -m pip install -q uv >&2
fi
uv_bin="$(command -v uv || echo "$(python3 -m site --user-base)/bin/uv")"

mkdir -p "$envs"
if [ -f "$marker" ] && [ -x "$py" ]; then
  log "reusing $env"
else
  rm -rf "$env"
  log "creating $env (sglang==$version, full pinned install)"
  start=$(date +%s)
  "$uv_bin" venv -q --python "${FLASHINFER_GUARD_PYTHON:-python3.11}" "$env" >&2
  # The full pinned install: SGLang's own torch/torchvision/flashinfer pins resolve
  # together (a CPU torch would need a CPU torchvision, which PyPI does not offer).
  # Unpinned transitive deps released after an old SGLang line can break its import
  # (0.5.11 + kernels 0.17 fails inside transformers 5.6): resolve such lines as of
  # their release date.
  extra=()
  case "$version" in
    0.5.11) extra=(--exclude-newer 2026-05-08) ;;
  esac
  "$uv_bin" pip install -q --python "$py" "${extra[@]}" "sglang==$version" pytest >&2
  "$py" -c "import sglang.srt.server_args" >&2
  echo "sglang==$version installed in $(( $(date +%s) - start ))s" > "$marker"
  log "$(cat "$marker")"
fi

# The runner spreads scenario processes over the cores (pytest-xdist); cheap when present.
"$uv_bin" pip install -q --python "$py" pytest-xdist >&2

# Our package, built and installed as a user would get it (a wheel, not editable).
# FLASHINFER_GUARD_SRC: install from another checkout (default: this one).
start=$(date +%s)
"$uv_bin" pip install -q --python "$py" --reinstall-package flashinfer-guard --no-deps \
  "${FLASHINFER_GUARD_SRC:-$repo}" >&2
log "flashinfer-guard installed in $(( $(date +%s) - start ))s"
echo "$py"
