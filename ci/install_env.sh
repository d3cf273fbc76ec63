#!/usr/bin/env bash
# Create (or reuse) the test environment of one line from its committed lock,
# prove it, and install this repository into it. Prints the env's python as
# the last line of stdout.
#
#   bash ci/install_env.sh vllm 0.33.0
#   bash ci/install_env.sh sglang 0.5.5
#   bash ci/install_env.sh core
#
# Steps, each of which stops the install with one clear line on failure:
#   1. `uv pip sync --require-hashes ci/locks/<line>.txt`: the lock, nothing
#      resolved, nothing else installed;
#   2. ci/check_env.py records: no two installed distributions write the same
#      file (their RECORD files, with different content);
#   3. ci/check_env.py smoke <framework>: the modules the tests import,
#      FlashInfer included, import;
#   4. the marker file (the lock's hash) is written only after 1-3 passed; a
#      failed env is deleted, never reused. A changed lock rebuilds the env.
# Then our package is installed without dependencies (no resolution either):
# editable for vLLM and core, a real wheel for SGLang (the .pth bootstrap and
# the entry points as a user gets them), and the file check runs again.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

framework="${1:?usage: install_env.sh vllm|sglang|core [VERSION]}"
version="${2:-}"
case "$framework" in
  core) name=core ;;
  vllm|sglang) name="$framework-${version:?$framework needs a version}" ;;
  *) echo "unknown framework $framework" >&2; exit 2 ;;
esac
lock="$FG_LOCKS/$name.txt"
[ -f "$lock" ] || { echo "no lock for $name: $lock (make one with: bash ci/lock.sh $framework $version)" >&2; exit 1; }
env="$FG_ENVS/$name"
py="$env/bin/python"
marker="$env/.flashinfer-guard-lock"
want="$(fg_sha "$lock")"
uv="$(fg_uv)"
start=$(date +%s)

fail() {
  echo "[ci] $name: $*" >&2
  rm -rf "$env"
  exit 1
}

# one installer per environment at a time (parallel suites, several shells)
mkdir -p "$FG_ENVS"
exec 9>"$FG_ENVS/.$name.lock"
flock 9

waited=$(( $(date +%s) - start ))
start=$(date +%s)
if [ -f "$marker" ] && [ "$(cat "$marker")" = "$want" ] && [ -x "$py" ]; then
  fg_log "reusing $env (lock $(echo "$want" | cut -c1-12); ${waited} s waiting for uv and the lock)"
  fg_time install "$name" 0 reused
else
  rm -rf "$env"
  mkdir -p "$FG_ENVS"
  fg_log "creating $env from ${lock#$FG_REPO/}"
  "$uv" venv --quiet --python "python$FG_PYTHON_VERSION" "$env" >&2 || fail "uv venv failed"
  "$uv" pip sync --quiet --require-hashes --python "$py" "$lock" >&2 || fail "install from ${lock#$FG_REPO/} failed"
  # overlays by design (ci/check_env.py OVERLAYS) go in last, so their files win
  for overlay in nvidia-cutlass-dsl-libs-cu13; do
    if grep -q "^$overlay==" "$lock"; then
      "$uv" pip install --quiet --require-hashes --no-deps --python "$py" --reinstall-package "$overlay" -r "$lock" >&2 \
        || fail "reinstalling the overlay $overlay failed"
    fi
  done
  "$py" "$FG_REPO/ci/check_env.py" records >&2 || fail "two distributions write the same file (above); fix the lock (ci/lock.sh)"
  "$py" "$FG_REPO/ci/check_env.py" smoke "$framework" >&2 || fail "import smoke failed (above); the environment is broken"
  echo "$want" > "$marker"
  fg_log "$name ready in $(( $(date +%s) - start )) s ($(du -sh "$env" 2>/dev/null | cut -f1))"
  fg_time install "$name" "$(( $(date +%s) - start ))" created
fi

# Our package, without dependencies and without build isolation (hatchling is
# in the lock). Re-run every time: cheap, and picks up entry-point changes.
t0=$(date +%s)
if [ "$framework" = sglang ]; then
  "$uv" pip install --quiet --python "$py" --no-deps --no-build-isolation \
    --reinstall-package flashinfer-guard "${FLASHINFER_GUARD_SRC:-$FG_REPO}" >&2 || fail "installing flashinfer-guard failed"
else
  "$uv" pip install --quiet --python "$py" --no-deps --no-build-isolation \
    -e "${FLASHINFER_GUARD_SRC:-$FG_REPO}" >&2 || fail "installing flashinfer-guard failed"
fi
"$py" "$FG_REPO/ci/check_env.py" records >&2 || fail "flashinfer-guard shares a file with another distribution (above)"
fg_log "flashinfer-guard installed in $(( $(date +%s) - t0 )) s"
echo "$py"
