#!/usr/bin/env bash
# The project's test command (README, .ci/run): every suite, on the real thing.
#
#   1. core + conformance: guard_core's unit and property tests,
#      and the planner model checked byte for byte against FlashInfer's own
#      planner code, compiled from the headers of each release's wheel;
#   2. vLLM: the plugin inside the real vLLM lines (ci/vllm/run_tests.sh);
#   3. SGLang: the plugin inside the real SGLang lines (ci/sglang/run_tests.sh).
#
# Every environment comes from a committed lock (ci/locks/, made by
# ci/lock.sh) and proves itself before any test runs (ci/install_env.sh).
# Environments, uv and uv's cache live under ~/.cache/flashinfer-guard
# (FLASHINFER_GUARD_HOME; see ci/lib.sh; `bash ci/clean.sh` removes them).
# Every suite runs even if an earlier one failed; the exit code is non-zero if
# any failed. The last lines are the per-report counts and the total,
# "TOTAL: N passed, M failed".
#
#   FLASHINFER_GUARD_SUITES="core vllm sglang"   (default: all)
#   FLASHINFER_GUARD_REPORTS=DIR                 (default: .reports/<date-time>)
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FG_REPO"
export FLASHINFER_GUARD_REPORTS="${FLASHINFER_GUARD_REPORTS:-$FG_REPO/.reports/$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$FLASHINFER_GUARD_REPORTS"
suites="${FLASHINFER_GUARD_SUITES:-core vllm sglang}"
status=0
t0=$(date +%s)
echo "=== reports (JUnit XML, scenario logs): $FLASHINFER_GUARD_REPORTS"
echo "=== environments: $FG_ENVS (free disk: $(fg_free_gb "$FG_ENVS") GB)"

run_suite() {
  local suite=$1 s0 rc
  echo "=== suite: $suite ($(date -u +%H:%M:%S))"
  s0=$(date +%s)
  case "$suite" in
    core) bash ci/core/run_tests.sh ;;
    vllm) bash ci/vllm/run_tests.sh ;;
    sglang) bash ci/sglang/run_tests.sh ;;
    *) echo "unknown suite $suite"; false ;;
  esac
  rc=$?
  echo "=== suite $suite: exit $rc in $(( $(date +%s) - s0 )) s"
  return $rc
}

# core runs beside the vLLM suite (its lines leave about 12 % of the 2 cores idle, mostly at their
# end; core alone leaves 10 %), its lines prefixed [core]; the SGLang suite after both (measured
# 2026-12-02: all three side by side took longer than one after another, the cores being busy).
# FLASHINFER_GUARD_SERIAL_SUITES=1: every suite one after another.
core_pid=""
for suite in $suites; do
  if [ "$suite" = core ] && [ "${FLASHINFER_GUARD_SERIAL_SUITES:-0}" != 1 ] && [[ " $suites " == *" vllm "* ]]; then
    ( run_suite core 2>&1 | sed -u "s/^/[core] /"; exit "${PIPESTATUS[0]}" ) &
    core_pid=$!
    continue
  fi
  if [ "$suite" = sglang ] && [ -n "$core_pid" ]; then
    wait "$core_pid" || status=1
    core_pid=""
  fi
  run_suite "$suite" || status=1
done
if [ -n "$core_pid" ]; then
  wait "$core_pid" || status=1
fi

echo "=== reports: $FLASHINFER_GUARD_REPORTS"
python3 "$FG_REPO/ci/summarize.py" "$FLASHINFER_GUARD_REPORTS" || status=1
echo "total time $(( $(date +%s) - t0 )) s"
exit $status
