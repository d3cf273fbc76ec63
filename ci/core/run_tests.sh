#!/usr/bin/env bash
# guard_core unit tests and the planner conformance suite, in the small locked
# core environment (ci/locks/core.txt: pytest, hypothesis; no torch, no frameworks).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
reports="${FLASHINFER_GUARD_REPORTS:-$FG_REPO/.reports}"
mkdir -p "$reports"
py="$(bash "$FG_REPO/ci/install_env.sh" core | tail -n 1)" && [ -x "$py" ] || {
  python3 "$FG_REPO/ci/summarize.py" --install-failure core "$reports"; exit 1; }
cd "$FG_REPO"
"$py" ci/prebuild.py conformance || echo "[ci] building the conformance planners failed (the conformance tests say why)"
t0=$(date +%s)
# lint (ruff.toml: F, E9, B) as a test case of its own in the totals
"$py" -m pytest -q -p no:cacheprovider ci/test_lint.py --junitxml="$reports/lint.xml" -o junit_suite_name=lint || lint=1
# both cores (pytest-xdist, in the lock): measured 2026-12-02, 780 tests in 64 s with -n 2
"$py" -m pytest -q -p no:cacheprovider -n "${FLASHINFER_GUARD_CORE_JOBS:-2}" --dist loadgroup tests/core tests/conformance \
  --junitxml="$reports/core.xml" -o junit_suite_name=core || core=1
fg_time test core "$(( $(date +%s) - t0 ))" "exit=$(( ${lint:-0} | ${core:-0} ))"
# either failing fails the suite (the totals come from the reports either way)
exit $(( ${lint:-0} | ${core:-0} ))
