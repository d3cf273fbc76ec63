#!/usr/bin/env bash
# guard_core unit tests and the planner conformance suite, in the small locked
# core environment (ci/locks/core.txt: pytest, hypothesis; no torch, no frameworks).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
reports="${FLASHINFER_GUARD_REPORTS:-$FG_REPO/.reports}"
mkdir -p "$reports"
py="$(bash "$FG_REPO/ci/install_env.sh" core | tail -n 1)"
cd "$FG_REPO"
"$py" -m pytest -q -p no:cacheprovider tests/core tests/conformance \
  --junitxml="$reports/core.xml" -o junit_suite_name=core
