#!/usr/bin/env bash
# Run tests/sglang against each tested SGLang line, one environment at a time.
#
#   ci/sglang/run_tests.sh                 # all lines
#   ci/sglang/run_tests.sh 0.5.5 0.5.23    # some lines (or FLASHINFER_GUARD_SGLANG_LINES="0.5.5 0.5.23")
#
# JUnit reports go to ${FLASHINFER_GUARD_REPORTS:-.reports}/sglang-<line>.xml.
# FLASHINFER_GUARD_KEEP_ENVS=1 keeps every env; otherwise an env is deleted after
# its tests when less than 12 GB of disk is free (as the vLLM lines: an environment's files are hard
# links into uv's cache, so deleting one frees little and the next run links it again; measured
# 2026-12-03: six framework environments 39 GB on disk together, uv's cache included).
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
# each scenario is its own process (forked from a warm interpreter, tests/common/forkserver.py): let Python cache bytecode
unset PYTHONDONTWRITEBYTECODE
lines=("$@")
[ ${#lines[@]} -gt 0 ] || read -r -a lines <<< "${FLASHINFER_GUARD_SGLANG_LINES:-$FG_SGLANG_LINES_DEFAULT}"

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
  "$py" "$repo/ci/prebuild.py" standin || echo "[ci] building SGLang $v's planner stand-in failed (its tests say why)"
  echo "--- env and stand-in ready in $(( $(date +%s) - start ))s: $py"
  start=$(date +%s)
  # The default run: the whole suite on 0.5.11 (entry-point loader, FlashInfer 0.6.8: both
  # guards act), and on the other two lines what differs there (each scenario is a fresh
  # SGLang process, ~25 s of CPU): 0.5.5, the .pth loader and the seed's overflow on
  # FlashInfer 0.5.0; 0.5.23, the stand-down on FlashInfer 0.7.2, the new capture and draft
  # paths (EAGLE topk, the safety net's entry points), fixed-split sizing after FlashInfer
  # #5177, the differential search, the config corpus and its option table, the plan parity search
  # (per-line rules, and a sample through SGLang's own resolution: test_plan_server_resolution.py).
  # FLASHINFER_GUARD_FULL=1 (and ci/matrix.sh) runs every test on every line.
  t=tests/sglang
  select=(tests/sglang)
  if [ "${FLASHINFER_GUARD_FULL:-0}" != 1 ]; then
    case "$v" in
      0.5.5) select=(tests/sglang/test_mla_net_realcalls.py tests/sglang/test_loading_and_faults.py tests/sglang/test_workspace.py tests/sglang/test_kv_budget.py
                     tests/sglang/test_server_signatures.py
                     tests/sglang/test_defaults_crosscheck.py tests/sglang/test_launch_parser.py tests/sglang/test_capture_replica.py
                     "$t/test_plan_parity.py::test_plan_agrees_with_the_adapter_on_generated_deployments"
                     "$t/test_realcalls.py::test_seed_without_guard_through_sglangs_capture_path"
                     "$t/test_realcalls.py::test_seed_with_guard_loaded_by_sglangs_route_no_call_overflows"
                     "$t/test_realcalls.py::test_safety_net_wraps_every_sglang_planning_entry_point"
                     "$t/test_realcalls.py::test_safety_net_recovers_inside_sglangs_own_capture") ;;
      0.5.23) select=(tests/sglang/test_realcalls.py tests/sglang/test_deterministic.py tests/sglang/test_kv_budget.py
                      tests/sglang/test_differential.py tests/sglang/test_model_groups.py
                      tests/sglang/test_launch_parser.py tests/sglang/test_defaults_crosscheck.py
                      tests/sglang/test_plan_parity.py tests/sglang/test_capture_replica.py tests/sglang/test_workspace_ask.py tests/sglang/test_plan_server_resolution.py tests/sglang/test_plan_no_trace.py tests/sglang/test_plan_refusals.py
                      tests/sglang/test_server_signatures.py
                      "$t/test_workspace.py::test_loaded_by_sglangs_own_mechanism"
                      "$t/test_workspace.py::test_without_guard_the_seed_overflow_reproduces_or_is_fixed_upstream"
                      "$t/test_workspace.py::test_qwen35_shape_without_guard_is_too_small_on_old_flashinfer"
                      "$t/test_moe.py::test_row_bf16_open_default_only_says_so"
                      "$t/test_moe.py::test_row_bf16_open_strict") ;;
      # 0.5.11: plan's parity through the per-line rules; the server-resolved path (its issue-26 item tests and
      # the parity sample through SGLang's own resolution) runs on 0.5.23 (FLASHINFER_GUARD_FULL=1: every line)
      0.5.11) select=(tests/sglang --deselect "$t/test_model_groups.py::test_corpus_read_as_sglang_reads_it"
                      --deselect "$t/test_plan_server_resolution.py" --deselect "$t/test_plan_no_trace.py" --deselect "$t/test_plan_refusals.py"
                      --deselect "$t/test_plan_parity.py::test_server_resolved_plan_agrees_with_the_adapter") ;;
    esac
  fi
  echo "--- SGLang $v selection: ${select[*]}"
  # each scenario is its own process, forked from one warm interpreter per pytest worker: three workers
  # on the 2 cores (with two, 17 % of the cores stayed idle while a line ran, measured 2026-12-02)
  (cd "$repo" && "$py" -m pytest -q -rf -p no:cacheprovider -n "${FLASHINFER_GUARD_SCENARIO_JOBS:-3}" "${select[@]}" \
    --junitxml="$reports/sglang-$v.xml" -o junit_suite_name="sglang-$v")
  rc=$?
  [ "$rc" = 0 ] || status=1
  echo "--- SGLang $v tests took $(( $(date +%s) - start ))s"
  fg_time test "sglang-$v" "$(( $(date +%s) - start ))" "exit=$rc"
  if [ "${FLASHINFER_GUARD_KEEP_ENVS:-0}" != "1" ] && [ "$(free_gb "$envs")" -lt 12 ]; then
    echo "--- removing $envs/sglang-$v (less than 12 GB free)"
    rm -rf "$envs/sglang-$v"
  fi
done
exit $status
