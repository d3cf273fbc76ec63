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
# every install, build and test step appends its time here (ci/lib.sh fg_time); the summary at
# the end says cold or warm and gives the three apart (ci/timings.py)
export FG_TIMINGS="$FLASHINFER_GUARD_REPORTS/timings.tsv"
: > "$FG_TIMINGS"
echo "=== reports (JUnit XML, scenario logs): $FLASHINFER_GUARD_REPORTS"
echo "=== environments: $FG_ENVS (free disk: $(fg_free_gb "$FG_ENVS") GB)"

# The uv tool first, once, before anything starts beside anything (every installer below asks
# for it; fg_uv is locked and atomic anyway, tests/core/test_concurrent_installs.py).
fg_uv > /dev/null || { echo "=== the uv tool did not install (above)"; status=1; }

# Prefetch: on a cold machine the SGLang lines' environments and planner stand-ins are made in
# the background while core and the vLLM suite run, one at a time, so the SGLang suite finds them
# ready instead of installing between its lines (each install locks its environment, and a
# suite asking for one being made waits and reuses it). Stops where the disk runs short (the
# suites then install as before). FLASHINFER_GUARD_PREFETCH=0: no prefetch.
prefetch_pid=""
if [ "${FLASHINFER_GUARD_PREFETCH:-1}" = 1 ] && [[ " $suites " == *" sglang "* ]] && [[ " $suites " == *" vllm "* ]]; then
  (
    read -r -a plines <<< "${FLASHINFER_GUARD_SGLANG_LINES:-$FG_SGLANG_LINES_DEFAULT}"
    # not beside the vLLM suite's first install (its tests are the run's longest path; measured
    # 2026-12-03 cold: vLLM 0.23.0 251 s and SGLang 0.5.5 362 s installed side by side): wait for
    # that environment, at most 10 minutes
    read -r first _ <<< "${FLASHINFER_GUARD_VLLM_LINES:-$FG_VLLM_LINES_DEFAULT}"
    for _ in $(seq 600); do [ -f "$FG_ENVS/vllm-$first/.flashinfer-guard-lock" ] && break; sleep 1; done
    for v in "${plines[@]}"; do
      if [ "$(fg_free_gb "$FG_ENVS")" -lt 20 ]; then echo "[prefetch] stopping: under 20 GB free"; break; fi
      py="$(bash ci/install_env.sh sglang "$v" 2> >(sed -u "s/^/[prefetch] /" >&2) | tail -n 1)"
      [ -x "$py" ] || { echo "[prefetch] sglang-$v did not install (the suite retries it)"; continue; }
      "$py" ci/prebuild.py standin 2>&1 | sed -u "s/^/[prefetch] /"
    done
  ) > "$FLASHINFER_GUARD_REPORTS/prefetch.log" 2>&1 &
  prefetch_pid=$!
  echo "=== prefetching the SGLang environments in the background: $FLASHINFER_GUARD_REPORTS/prefetch.log"
fi

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

[ -z "$prefetch_pid" ] || wait "$prefetch_pid"
echo "=== reports: $FLASHINFER_GUARD_REPORTS"
python3 "$FG_REPO/ci/timings.py" "$FG_TIMINGS" "$(( $(date +%s) - t0 ))" || true
python3 "$FG_REPO/ci/summarize.py" "$FLASHINFER_GUARD_REPORTS" || status=1
echo "total time $(( $(date +%s) - t0 )) s"
exit $status
