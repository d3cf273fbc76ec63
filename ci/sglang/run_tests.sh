#!/usr/bin/env bash
# Run tests/sglang against each tested SGLang line, one environment at a time.
#
#   ci/sglang/run_tests.sh                 # all lines
#   ci/sglang/run_tests.sh 0.5.5 0.5.23    # some lines (or FLASHINFER_GUARD_SGLANG_LINES="0.5.5 0.5.23")
#
# JUnit reports go to ${FLASHINFER_GUARD_REPORTS:-.reports}/sglang-<line>.xml.
# FLASHINFER_GUARD_KEEP_ENVS=1 keeps every env; otherwise an env is deleted after
# its tests when less than 40 GB of disk is free (each env is about 8-10 GB).
set -uo pipefail

source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
here="$FG_REPO/ci/sglang"
repo="$FG_REPO"
envs="$FG_ENVS"
# 0.5.5: .pth bootstrap, FlashInfer 0.5.0, the seed's 384 MiB overflow.
# 0.5.11: entry point, FlashInfer 0.6.8.post1 (< 0.6.16 and < 0.7.1): both guards act.
# 0.5.23: FlashInfer 0.7.2: both guards stand down.
reports="${FLASHINFER_GUARD_REPORTS:-$repo/.reports}"
mkdir -p "$reports"
# each scenario is a fresh SGLang process: let Python cache bytecode
unset PYTHONDONTWRITEBYTECODE
lines=("$@")
[ ${#lines[@]} -gt 0 ] || read -r -a lines <<< "${FLASHINFER_GUARD_SGLANG_LINES:-0.5.5 0.5.11 0.5.23}"

free_gb() { fg_free_gb "$1"; }

status=0
for v in "${lines[@]}"; do
  echo "=== SGLang $v"
  start=$(date +%s)
  if ! py="$(bash "$here/install.sh" "$v" | tail -n 1)" || [ ! -x "$py" ]; then
    echo "install of SGLang $v failed"
    python3 "$repo/ci/summarize.py" --install-failure "sglang-$v" "$reports"
    status=1
    continue
  fi
  echo "--- env ready in $(( $(date +%s) - start ))s: $py"
  start=$(date +%s)
  # each scenario is a fresh SGLang interpreter (mostly import time): one per core
  (cd "$repo" && "$py" -m pytest -q -rf -p no:cacheprovider -n "${FLASHINFER_GUARD_SCENARIO_JOBS:-2}" tests/sglang \
    --junitxml="$reports/sglang-$v.xml" -o junit_suite_name="sglang-$v") || status=1
  echo "--- SGLang $v tests took $(( $(date +%s) - start ))s"
  if [ "${FLASHINFER_GUARD_KEEP_ENVS:-0}" != "1" ] && [ "$(free_gb "$envs")" -lt 40 ]; then
    echo "--- removing $envs/sglang-$v (less than 40 GB free)"
    rm -rf "$envs/sglang-$v"
  fi
done
exit $status
