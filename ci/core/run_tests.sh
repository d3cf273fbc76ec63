#!/usr/bin/env bash
# guard_core unit tests and the planner conformance suite, in a small venv
# holding only this package and pytest (no torch, no frameworks).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
envs="${FLASHINFER_GUARD_ENVS:-$HOME/.cache/flashinfer-guard/envs}"
env="$envs/core"
reports="${FLASHINFER_GUARD_REPORTS:-$repo/.reports}"
mkdir -p "$envs" "$reports"
if [ ! -x "$env/bin/python" ] || ! "$env/bin/python" -c "import pytest" 2>/dev/null; then
  rm -rf "$env"
  python3 -m venv "$env"
  "$env/bin/python" -m pip install -q --disable-pip-version-check pytest
fi
"$env/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$repo"
cd "$repo"
"$env/bin/python" -m pytest -q -p no:cacheprovider tests/core tests/conformance \
  --junitxml="$reports/core.xml"
