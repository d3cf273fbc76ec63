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
# the compiled planner programs and FlashInfer headers (tests/conformance/oracle.py) under the same home
export FLASHINFER_GUARD_CACHE="${FLASHINFER_GUARD_CACHE:-$FG_HOME}"
# uv must not read a user's uv.toml or pick a managed Python on its own
export UV_NO_CONFIG=1
export UV_PYTHON_DOWNLOADS=never

# The lines the default test command runs (ci/vllm/run_tests.sh, ci/sglang/run_tests.sh, and
# ci/test.sh's install prefetch read them here).
FG_VLLM_LINES_DEFAULT="0.23.0 0.33.0 0.32.0"
FG_SGLANG_LINES_DEFAULT="0.5.5 0.5.11 0.5.23"

fg_log() { echo "[ci] $*" >&2; }

# The uv executable: uv==FG_UV_VERSION under $FG_HOME/tools/uv-<version>,
# installed once with the machine's python3 -m pip (--target: nothing goes into
# your global or user Python). UV=/path/to/uv uses another one.
#
# Any number of shells may ask at once on an empty FG_HOME (the suites start
# side by side): one installs under a lock, into a temporary folder that is
# renamed into place only once its uv answers with the right version; the
# others wait on the lock and take that one. A half-made folder is never seen
# under the final name.
fg_uv_ok() { [ -x "$1/bin/uv" ] && [ "$("$1/bin/uv" --version 2>/dev/null | awk '{print $2}')" = "$FG_UV_VERSION" ]; }

fg_uv() {
  if [ -n "${UV:-}" ]; then echo "$UV"; return; fi
  local dir="$FG_HOME/tools/uv-$FG_UV_VERSION" tmp t0
  if ! fg_uv_ok "$dir"; then
    mkdir -p "$FG_HOME/tools"
    (
      flock 8
      fg_uv_ok "$dir" && exit 0
      t0=$(date +%s)
      fg_log "installing uv $FG_UV_VERSION into $dir"
      tmp="$(mktemp -d "$dir.partial.XXXXXX")"
      python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
        --target "$tmp" "uv==$FG_UV_VERSION" >&2 || { rm -rf "$tmp"; exit 1; }
      fg_uv_ok "$tmp" || { fg_log "uv in $tmp does not run"; rm -rf "$tmp"; exit 1; }
      chmod 755 "$tmp"
      rm -rf "$dir"
      mv "$tmp" "$dir"
      fg_log "uv $FG_UV_VERSION installed in $(( $(date +%s) - t0 )) s"
      fg_time install uv "$(( $(date +%s) - t0 ))" created
    ) 8>"$FG_HOME/tools/.uv-$FG_UV_VERSION.lock" || { fg_log "installing uv $FG_UV_VERSION failed"; return 1; }
  fi
  echo "$dir/bin/uv"
}

fg_free_gb() {
  mkdir -p "$1"
  df -Pk "$1" | awk 'NR==2 {print int($4 / 1048576)}'
}

fg_sha() { sha256sum "$1" | awk '{print $1}'; }

# One row per install, build or test step into $FG_TIMINGS (ci/test.sh sets it; ci/timings.py
# sums it): fg_time KIND NAME SECONDS STATE, KIND one of install/build/test, STATE
# created/reused/built/cached/exit=N. Appends are single short writes: safe side by side.
fg_time() {
  [ -n "${FG_TIMINGS:-}" ] || return 0
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >> "$FG_TIMINGS"
}
