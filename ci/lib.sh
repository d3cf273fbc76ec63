# Shared by every ci/ script (source it): where things live, the one uv we use,
# disk checks.
#
# Everything the test run creates lives under one folder, outside the clone:
#
#   ${FLASHINFER_GUARD_HOME:-$HOME/.cache/flashinfer-guard}/
#     tools/uv-<version>/   the pinned uv (a small venv; nothing goes into your
#                           global or user Python)
#     uv-cache/             uv's download cache (the envs hard-link from it)
#     envs/<line>/          one environment per framework line, from ci/locks/
#     build/                compiled planner programs (conformance, real calls)
#
# `bash ci/clean.sh` removes it. FLASHINFER_GUARD_ENVS overrides envs/ alone.

FG_UV_VERSION="0.13.9"
FG_PYTHON_VERSION="3.11"
FG_HOME="${FLASHINFER_GUARD_HOME:-$HOME/.cache/flashinfer-guard}"
FG_ENVS="${FLASHINFER_GUARD_ENVS:-$FG_HOME/envs}"
FG_REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
FG_LOCKS="$FG_REPO/ci/locks"
export UV_CACHE_DIR="${UV_CACHE_DIR:-$FG_HOME/uv-cache}"
# uv must not read a user's uv.toml or pick a managed Python on its own
export UV_NO_CONFIG=1
export UV_PYTHON_DOWNLOADS=never

fg_log() { echo "[ci] $*" >&2; }

# The uv executable: uv==FG_UV_VERSION in its own small venv under
# $FG_HOME/tools, installed once with the machine's python3 -m pip.
# UV=/path/to/uv uses another one (it must report the same version).
fg_uv() {
  if [ -n "${UV:-}" ]; then echo "$UV"; return; fi
  local dir="$FG_HOME/tools/uv-$FG_UV_VERSION"
  if [ ! -x "$dir/bin/uv" ] || [ "$("$dir/bin/uv" --version 2>/dev/null | awk '{print $2}')" != "$FG_UV_VERSION" ]; then
    fg_log "installing uv $FG_UV_VERSION into $dir"
    rm -rf "$dir"
    mkdir -p "$FG_HOME/tools"
    python3 -m venv "$dir" >&2
    "$dir/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$FG_UV_VERSION" >&2
  fi
  echo "$dir/bin/uv"
}

fg_free_gb() {
  mkdir -p "$1"
  df -Pk "$1" | awk 'NR==2 {print int($4 / 1048576)}'
}

fg_sha() { sha256sum "$1" | awk '{print $1}'; }
