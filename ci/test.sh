#!/usr/bin/env bash
# The project's test command (README, .ci/run): every suite, on the real thing.
#
#   1. core + conformance: guard_core's unit tests, and the planner model
#      checked byte for byte against FlashInfer's own planner code, compiled
#      from the headers of each release's wheel (tests/conformance);
#   2. vLLM: the plugin inside the real vLLM lines (ci/vllm/run_tests.sh);
#   3. SGLang: the plugin inside the real SGLang lines (ci/sglang/run_tests.sh).
#
# Environments live under ${FLASHINFER_GUARD_ENVS:-$HOME/.cache/flashinfer-guard/envs}
# and are reused when complete; framework environments are deleted after their
# suite when the disk runs short (see ci/lib.sh). Every suite runs even if an
# earlier one failed; the exit code is non-zero if any failed. The last line is
# the total: "TOTAL: N passed, M failed".
#
#   FLASHINFER_GUARD_SUITES="core vllm sglang"   (default: all)
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export FLASHINFER_GUARD_REPORTS="${FLASHINFER_GUARD_REPORTS:-$(mktemp -d)}"
suites="${FLASHINFER_GUARD_SUITES:-core vllm sglang}"
status=0
t0=$(date +%s)

for suite in $suites; do
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
  [ $rc -eq 0 ] || status=1
done

python3 "$repo/ci/summarize.py" "$FLASHINFER_GUARD_REPORTS" || status=1
echo "total time $(( $(date +%s) - t0 )) s"
exit $status
