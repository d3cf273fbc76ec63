#!/usr/bin/env bash
# Create (or reuse, when complete) a vLLM environment for one vLLM line and
# install this repository into it. Prints the environment's python path as
# the last line of stdout.
#
#   ci/vllm/install.sh 0.23.0
#
# Env:
#   FLASHINFER_GUARD_ENVS   where environments live
#                           (default: $HOME/.cache/flashinfer-guard/envs)
#   UV                      uv executable (default: found on PATH, else
#                           `python3 -m pip install --user uv`)
set -euo pipefail

VERSION="${1:?usage: install.sh VLLM_VERSION}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ENVS="${FLASHINFER_GUARD_ENVS:-$HOME/.cache/flashinfer-guard/envs}"
ENV_DIR="$ENVS/vllm-$VERSION"
PY="$ENV_DIR/bin/python"
STAMP="$ENV_DIR/.flashinfer-guard-complete"

log() { echo "[ci/vllm/install] $*" >&2; }

find_uv() {
  if [ -n "${UV:-}" ]; then echo "$UV"; return; fi
  if command -v uv >/dev/null 2>&1; then command -v uv; return; fi
  local py; py="$(command -v python3 || command -v python)"
  if ! "$py" -m uv --version >/dev/null 2>&1; then
    log "installing uv with pip"
    "$py" -m pip install --quiet --user uv >&2 || "$py" -m pip install --quiet uv >&2
  fi
  echo "$py -m uv"
}
UVCMD="$(find_uv)"

start=$(date +%s)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "vllm==$VERSION" ] && [ -x "$PY" ]; then
  log "reusing $ENV_DIR"
else
  log "creating $ENV_DIR (vllm==$VERSION, full pinned install)"
  rm -rf "$ENV_DIR"
  mkdir -p "$ENVS"
  $UVCMD venv --quiet --python 3.11 "$ENV_DIR" >&2
  # The full pinned install (CUDA torch wheels from PyPI); on a CPU-only
  # machine torch simply reports no CUDA device.
  VIRTUAL_ENV="$ENV_DIR" $UVCMD pip install --quiet --python "$PY" \
    "vllm==$VERSION" pytest >&2
  echo "vllm==$VERSION" > "$STAMP"
fi

# Our repo, editable, without touching the pinned dependencies. Re-run every
# time: cheap, and picks up entry-point changes in pyproject.toml.
VIRTUAL_ENV="$ENV_DIR" $UVCMD pip install --quiet --python "$PY" --no-deps -e "$REPO" >&2

log "ready in $(( $(date +%s) - start )) s"
echo "$PY"
