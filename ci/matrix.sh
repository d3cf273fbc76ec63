#!/usr/bin/env bash
# The compatibility matrix: every checked line, installed from its lock one at a
# time, tested like the default run, then probed for the table in
# docs/compatibility.md (which the README's per-version table comes from).
#
#   bash ci/matrix.sh                         # every line below
#   bash ci/matrix.sh vllm-0.19.1 sglang-0.5.15
#
# Per line: the planner conformance suite (tests/conformance) compiled against the
# line's installed FlashInfer headers; the line's suite (tests/vllm or tests/sglang,
# real framework, real plugin loader); then probes: the workspace guard with the Qwen3.5-397B-A17B and
# Qwen3-VL-32B shapes (CUDA-graph capture up to 512, vLLM's or SGLang's own
# buffer, 142/132-SM GPUs as in the suites), and the MoE guard on a simulated
# aarch64 SM100 host. An environment is deleted after its line when less than
# 30 GB stay free (FLASHINFER_GUARD_KEEP_ENVS=1 keeps them all). A line whose
# environment is not there yet, on a disk with less than 60 GB free, downloads
# into its own uv cache under $FG_HOME/matrix-cache, and that cache and the
# environment are both deleted after the line: a line costs about 10 GB while
# it runs and nothing after, and the default run's cache stays as it was.
# Takes about 5-8 minutes per line on 2 cores (install ~1-2 min cold).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FG_REPO"
# every checked line, from the one list (guard_core.flashinfer.releases.CHECKED_LINES)
all="$(python3 -m guard_core.flashinfer.releases --lines)" || { echo "cannot read the checked lines"; exit 2; }
lines=("$@")
[ ${#lines[@]} -gt 0 ] || read -r -a lines <<< "$all"
out="${FLASHINFER_GUARD_MATRIX_DIR:-$FG_REPO/.reports/matrix}"
mkdir -p "$out"
echo "=== matrix results: $out"
status=0
for line in "${lines[@]}"; do
  fw="${line%%-*}"; ver="${line#*-}"
  echo "=== $line ($(date -u +%H:%M:%S))"
  t0=$(date +%s)
  rm -f "$out/$line".*
  own_cache=""
  if [ ! -d "$FG_ENVS/$line" ] && [ "${FLASHINFER_GUARD_KEEP_ENVS:-0}" != 1 ] \
     && [ "$(fg_free_gb "$FG_ENVS")" -lt 60 ]; then
    own_cache="$FG_HOME/matrix-cache/$line"
    echo "--- $line: own uv cache $own_cache (deleted after the line, with the environment)"
  fi
  if ! py="$(UV_CACHE_DIR="${own_cache:-$UV_CACHE_DIR}" bash ci/install_env.sh "$fw" "$ver" | tail -n 1)" \
     || [ ! -x "$py" ]; then
    echo '{"install": "failed"}' > "$out/$line.probe.json"
    status=1
    [ -z "$own_cache" ] || rm -rf "$own_cache" "${FG_ENVS:?}/$line"
    continue
  fi
  "$py" ci/matrix_probe.py "$fw" > "$out/$line.probe.json" 2> "$out/$line.probe.log" || status=1
  # the planner model against this line's installed FlashInfer headers, byte for byte
  fi_ver="$("$py" -c 'from importlib import metadata; print(metadata.version("flashinfer-python"))' 2>/dev/null)"
  FLASHINFER_GUARD_CONFORMANCE_RELEASES="$fi_ver" "$py" -m pytest -q -p no:cacheprovider tests/conformance \
    --junitxml="$out/$line.conformance.xml" -o junit_suite_name="$line-conformance" \
    > "$out/$line.conformance.log" 2>&1 || status=1
  echo "--- $line: planner conformance on FlashInfer ${fi_ver:-?}: $(tail -n 1 "$out/$line.conformance.log")"
  if [ "$fw" = vllm ]; then
    # the differential search: a larger seeded sample than the default run (issue 17)
    # (issue 27 item 4: drawn from the wide space, published models built by vLLM itself)
    FLASHINFER_GUARD_DIFF_N="${FLASHINFER_GUARD_MATRIX_DIFF_N:-4}" \
      FLASHINFER_GUARD_DIFF_SPACE="${FLASHINFER_GUARD_MATRIX_DIFF_SPACE:-wide}" \
      FLASHINFER_GUARD_DIFF_SEARCH="${FLASHINFER_GUARD_MATRIX_DIFF_SEARCH:-800}" \
      FLASHINFER_GUARD_DIFF_GPUS="${FLASHINFER_GUARD_MATRIX_DIFF_GPUS:-a100,l40s,h100,h200,b200,b300,rtx6000}" \
      FLASHINFER_GUARD_VLLM_LINE="$ver" FLASHINFER_GUARD_VLLM_FULL=1 HF_HUB_OFFLINE=1 \
      FLASHINFER_GUARD_SCENARIO_LOGS="$out/$line-scenarios" \
      "$py" -m pytest -q -p no:cacheprovider tests/vllm --junitxml="$out/$line.xml" -o junit_suite_name="$line" \
      > "$out/$line.pytest.log" 2>&1 || status=1
  else
    FLASHINFER_GUARD_DIFF_N="${FLASHINFER_GUARD_MATRIX_DIFF_N:-4}" \
      FLASHINFER_GUARD_DIFF_SEARCH="${FLASHINFER_GUARD_MATRIX_DIFF_SEARCH:-800}" \
      FLASHINFER_GUARD_PARITY_N="${FLASHINFER_GUARD_MATRIX_PARITY_N:-128}" \
      FLASHINFER_GUARD_PARITY_SERVER="${FLASHINFER_GUARD_MATRIX_PARITY_SERVER:-8}" \
      "$py" -m pytest -q -p no:cacheprovider -n 2 tests/sglang --junitxml="$out/$line.xml" -o junit_suite_name="$line" \
      > "$out/$line.pytest.log" 2>&1 || status=1
  fi
  tail -n 1 "$out/$line.pytest.log"
  echo "--- $line: $(( $(date +%s) - t0 )) s"
  if [ -n "$own_cache" ]; then
    echo "--- removing $FG_ENVS/$line and its own uv cache"
    rm -rf "$own_cache" "${FG_ENVS:?}/$line"
  elif [ "${FLASHINFER_GUARD_KEEP_ENVS:-0}" != 1 ] && [ "$(fg_free_gb "$FG_ENVS")" -lt 30 ]; then
    echo "--- removing $FG_ENVS/$line (less than 30 GB free)"
    rm -rf "${FG_ENVS:?}/$line"
  fi
done
python3 ci/matrix_report.py "$out" docs/compatibility.md "bash ci/matrix.sh ${*:-}" README.md || status=1
exit $status
