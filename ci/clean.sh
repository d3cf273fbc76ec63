#!/usr/bin/env bash
# Remove everything the test run created outside the clone: the pinned uv,
# uv's cache, every environment and the compiled planner programs
# (${FLASHINFER_GUARD_HOME:-~/.cache/flashinfer-guard}, about 9 GB per
# framework environment kept), and the reports in .reports/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
du -sh "$FG_HOME" "$FG_ENVS" 2>/dev/null || true
rm -rf "$FG_HOME" "$FG_ENVS" "$FG_REPO/.reports"
echo "removed $FG_HOME${FLASHINFER_GUARD_ENVS:+ and $FG_ENVS} and .reports/"
