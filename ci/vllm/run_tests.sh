#!/usr/bin/env bash
# vllm_guard's tests inside the real vLLM lines, one environment per line.
#
#   ci/vllm/run_tests.sh              # every line below
#   FLASHINFER_GUARD_VLLM_LINES="0.23.0" ci/vllm/run_tests.sh
#
# For each line: ci/vllm/install.sh creates (or reuses) the environment and
# installs this repository into it; pytest runs tests/vllm with that
# environment's python, FLASHINFER_GUARD_VLLM_LINE naming the line. JUnit
# reports go to $FLASHINFER_GUARD_REPORTS/vllm-<line>.xml.
#
# The third line (0.32.0) runs only what differs there (FlashInfer 0.7.0.post1:
# the MoE guard stands down, the 1 GiB heuristic covers capture 512 but not
# 1024); the fault-injection scenarios run on 0.23.0 and 0.33.0. Set
# FLASHINFER_GUARD_VLLM_FULL=1 to run every test on every line.
#
#   FLASHINFER_GUARD_VLLM_DELETE_ENVS=1   delete each environment after its run
#                                         (about 9 GB each); also done when
#                                         less than 12 GB stay free.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
repo="$FG_REPO"
lines="${FLASHINFER_GUARD_VLLM_LINES:-$FG_VLLM_LINES_DEFAULT}"
reports="${FLASHINFER_GUARD_REPORTS:-$repo/.reports}"
envs="$FG_ENVS"
mkdir -p "$reports"
# every scenario is its own process (a forked child of a warm interpreter,
# tests/common/forkserver.py; some fresh): let Python cache bytecode (uv does
# not compile at install), or each fresh one recompiles vLLM and torch
unset PYTHONDONTWRITEBYTECODE
status=0
pids=()
ran=()

for line in $lines; do
  if [ "$(fg_free_gb "$envs")" -lt 30 ]; then  # little disk: no new install beside running lines
    for i in "${!pids[@]}"; do [ "${pids[$i]}" = 0 ] || { wait "${pids[$i]}" || status=1; pids[$i]=0; }; done
  fi
  echo "--- vLLM $line"
  t0=$(date +%s)
  if ! py="$(bash "$repo/ci/vllm/install.sh" "$line" | tail -n 1)" || [ ! -x "$py" ]; then
    echo "install of vLLM $line failed"
    # one failure in the totals, with its cause above, not one per scenario
    python3 "$repo/ci/summarize.py" --install-failure "vllm-$line" "$reports"
    status=1
    continue
  fi
  t1=$(date +%s)
  # The default run: every test on 0.23.0 (both guards act) but the config corpus, which
  # runs on 0.33.0 (the newest model code); on 0.33.0 (FlashInfer 0.7.x: the workspace guard
  # stands down) and 0.32.0 what differs there: the line, the plugin loader, the MoE rows
  # that still apply, the real calls and the differential search through that line's
  # builders (0.33.0), its defaults, its option table and the model corpus (0.33.0).
  # plan through vLLM's own resolution (issue 26 item 2, test_server_resolution): the speculative
  # case on 0.23.0, gpt-oss's ceiling and the refusals on 0.33.0, the fall-through on both, and 20
  # deployments of the parity search on every line (test_plan_parity).
  # plan as a user runs it, leaving no trace (test_plan_no_trace, issue 42 items 1-2), and generated
  # deployments vLLM refuses (test_plan_refusals, item 3) on 0.33.0 only: on 0.32.0, whose model-inspection
  # cache the run does not prewarm (each plan inspects in a subprocess), 169 s and 159 s in the test
  # command (2026-12-04), where both passed; the refusals pass on 0.23.0 too (ci/matrix.sh runs every test).
  # plan on a simulated GPU host (test_gpu_host_resolution: two plans through vLLM, 280-300 s per line
  # in CI 2026-12-04) runs on 0.33.0 only, the newest default line; the GPU-count patch is found by
  # feature on every line and ci/matrix.sh runs it on each.
  # FLASHINFER_GUARD_FULL=1 (FLASHINFER_GUARD_VLLM_FULL=1, ci/matrix.sh) runs everything.
  select=()
  if [ "${FLASHINFER_GUARD_FULL:-${FLASHINFER_GUARD_VLLM_FULL:-0}}" != 1 ]; then
    case "$line" in
      0.23.0) select=(-k "not gpu_host and not plan_no_trace and not plan_refusals and not corpus_read_as_vllm_reads_it and not named_models_read_as_vllm and not server_resolution_gpt_oss") ;;
      0.33.0|0.34.0) select=(-k "plan_refusals or plan_no_trace or plan_one_process or gpu_host or server_signatures or server_resolution_gpt_oss or server_resolution_falls or line_under_test or discovered or moe_aarch64_auto or moe_x86_auto or row_bf16 or workspace_exact_need or realcalls or defaults_crosscheck or differential or capture_replica or launch_parser or model_groups or plan_parity or published_configs or model_defaults or kv_budget or buffer_rule") ;;
      0.32.0) select=(-k "server_signatures or line_under_test or discovered or moe_aarch64_auto or workspace_exact_need or capture_1024 or realcalls or defaults_crosscheck or plan_parity or capture_replica") ;;
    esac
  fi
  # The lines' tests run side by side: one line keeps about one core busy (its tests run one after
  # another in one pytest process; the scenario pool beside it drains early), measured 2026-12-02:
  # 0.23.0 alone 392 s with half of the 2 cores left to other work. Installs stay one at a time.
  # FLASHINFER_GUARD_VLLM_SERIAL=1: one line after another. 0.33.0, the longest (578 s side by side
  # against 451 s for 0.23.0), runs as two pytest processes: its config-corpus files, and the rest.
  shards=("tests/vllm")
  if { [ "$line" = 0.33.0 ] || [ "$line" = 0.34.0 ]; } && [ "${FLASHINFER_GUARD_VLLM_SERIAL:-0}" != 1 ]; then
    corpus=(tests/vllm/test_defaults_crosscheck.py tests/vllm/test_model_groups.py tests/vllm/test_published_configs.py)
    shards=("${corpus[*]}" "tests/vllm $(printf -- '--ignore=%s ' "${corpus[@]}")")
  fi
  for i in "${!shards[@]}"; do
    name="vllm-$line"; [ "$i" = 0 ] || name="vllm-$line-part$((i + 1))"
    (
      # vLLM caches each model class's inspection in VLLM_CACHE_ROOT/modelinfos under a name without
      # vLLM's version (model_executor/models/registry.py 0.33.0:1013-1016, keyed inside by the model
      # file's hash): with one shared root the lines overwrite each other's entries and every miss
      # re-imports vLLM in a subprocess (_run_in_subprocess). One root per line.
      cd "$repo" && export VLLM_CACHE_ROOT="$FG_HOME/vllm-cache/$line" || exit 1
      if [ "$i" = 0 ]; then  # once per line, timed apart from its tests (a class the other shard misses first goes vLLM's own way)
        "$py" "$repo/ci/prebuild.py" standin 2>&1 | sed -u "s/^/[$name] /"
        # the model corpora (published configs, model groups, defaults) inspect ~45 model classes: where this
        # run reads them, fill vLLM's cache once instead of ~45 vLLM imports in subprocesses (ci/prewarm_vllm.py)
        if [[ "${shards[$i]}" == *test_published_configs* ]] || [ "${FLASHINFER_GUARD_FULL:-${FLASHINFER_GUARD_VLLM_FULL:-0}}" = 1 ]; then
          FLASHINFER_GUARD_VLLM_LINE="$line" HF_HUB_OFFLINE=1 "$py" "$repo/ci/prewarm_vllm.py" 2>&1 \
            | grep --line-buffered '^\[ci\]' | sed -u "s/^/[$name] /"
        fi
        t1=$(date +%s)
      fi
      FLASHINFER_GUARD_VLLM_LINE="$line" HF_HUB_OFFLINE=1 \
        FLASHINFER_GUARD_SCENARIO_LOGS="$reports/vllm-$line-scenarios" \
        "$py" -m pytest -q -p no:cacheprovider -rf ${shards[$i]} "${select[@]}" \
          --junitxml="$reports/$name.xml" -o junit_suite_name="$name" 2>&1 | sed -u "s/^/[$name] /"
      rc=${PIPESTATUS[0]}
      echo "--- $name: install and build $(( t1 - t0 )) s, tests $(( $(date +%s) - t1 )) s (exit $rc)"
      fg_time test "$name" "$(( $(date +%s) - t1 ))" "exit=$rc"
      exit "$rc"
    ) &
    pids+=($!)
  done
  ran+=("$line")
  if [ "${FLASHINFER_GUARD_VLLM_SERIAL:-0}" = 1 ]; then
    wait "${pids[-1]}" || status=1
    pids[-1]=0
  fi
done
for pid in "${pids[@]}"; do
  [ "$pid" = 0 ] || wait "$pid" || status=1
done
for line in "${ran[@]}"; do
  free_gb=$(fg_free_gb "$envs")
  if [ "${FLASHINFER_GUARD_VLLM_DELETE_ENVS:-0}" = 1 ] || [ "$free_gb" -lt 12 ]; then
    echo "deleting $envs/vllm-$line (free: ${free_gb} GB)"
    rm -rf "$envs/vllm-$line"
  fi
done
exit $status
