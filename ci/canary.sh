#!/usr/bin/env bash
# The canary: the newest vLLM, SGLang and FlashInfer on the registry, installed the way a user
# installs them, with this repository beside them. Not part of the test command (ci/test.sh, .ci/run):
# nothing here is locked, so its answer changes when the registry does. It says what a release
# nobody has checked yet does with the guard; it proves nothing about the checked lines.
#
#   bash ci/canary.sh              # vLLM, then SGLang
#   bash ci/canary.sh vllm         # one framework
#
# Per framework, in a throwaway environment $FG_HOME/canary/<framework> (deleted before, and after the
# run unless FLASHINFER_GUARD_CANARY_KEEP=1; downloads go to the usual uv cache):
#   1. the newest release on the registry (`uv pip compile` of the bare name, --no-deps), and what an
#      unpinned `uv pip install <framework>` resolves to (the same, unless the newest cannot install);
#   2. `uv pip install <framework>==<newest>`, nothing else: no lock, none of ci/lock.sh's constraints
#      (a user has none). Only where a pin cannot be met ("there is no version of X==Y" from uv: vLLM
#      0.34.0's flashinfer-python==0.7.3) it installs once more with X overridden to the newest X on
#      the registry (uv --overrides), and the table says so;
#   3. this repository as a user installs it (`uv pip install --no-deps .`: a built wheel, the .pth
#      bootstrap and the entry points as published), then ci/check_env.py records (two distributions
#      writing one file);
#   4. the plugin through the server's real loader: vllm.plugins.load_general_plugins() /
#      sglang.srt.plugins.load_plugins(), which must register the guard;
#   5. `flashinfer-guard doctor`;
#   6. `flashinfer-guard plan --json --resolution server --gpu h200` on
#      tests/data/model_configs/Meta-Llama-3.1-8B.json (a Llama-style config), through the server's own
#      resolution (a fall-through to the built-in rules is a failure here, with the server's reason).
# Then one table (ci/canary_report.py): each newest release, whether it is a checked line
# (guard_core.flashinfer.releases), what the guard does there, what failed. Exit 1 if a step failed.
# Steps and logs: $FLASHINFER_GUARD_CANARY_DIR (default .reports/canary/ in the clone).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$FG_REPO"
frameworks=("$@")
[ ${#frameworks[@]} -gt 0 ] || frameworks=(vllm sglang)
out="${FLASHINFER_GUARD_CANARY_DIR:-$FG_REPO/.reports/canary}"
mkdir -p "$out"
uv="$(fg_uv)" || exit 2
platform=(--python-version "$FG_PYTHON_VERSION" --python-platform x86_64-manylinux_2_36)
model="$FG_REPO/tests/data/model_configs/Meta-Llama-3.1-8B.json"
echo "=== canary results: $out"

# The newest release of one distribution on the registry ("" when the registry has none).
newest() {
  echo "$1" | "$uv" pip compile - --no-deps "${platform[@]}" --quiet --no-header --no-annotate 2>/dev/null \
    | sed -n "s/^$1==//p" | head -n 1
}
# What an unpinned install of $1 resolves $1 to (with its dependencies), or "unresolvable".
unpinned() {
  local v
  v="$(echo "$1" | "$uv" pip compile - "${platform[@]}" --quiet --no-header --no-annotate 2>/dev/null \
       | sed -n "s/^$1==//p" | head -n 1)"
  echo "${v:-unresolvable}"
}

# One step's outcome: its line in $steps (step, ok|FAILED, detail) and on the terminal.
step() {
  printf '%s\t%s\t%s\n' "$1" "$2" "$(echo "${3:-}" | tr '\t\n' '  ' | cut -c1-400)" >> "$steps"
  echo "--- $fw: $1: $2${3:+ ($3)}" | cut -c1-300
}

fi_newest="$(newest flashinfer-python)"
printf 'flashinfer\t%s\n' "${fi_newest:-none}" > "$out/flashinfer.facts"
status=0
for fw in "${frameworks[@]}"; do
  case "$fw" in vllm|sglang) ;; *) echo "unknown framework $fw (vllm, sglang)"; exit 2 ;; esac
  echo "=== $fw ($(date -u +%H:%M:%S))"
  facts="$out/$fw.facts" steps="$out/$fw.steps"
  : > "$facts"; : > "$steps"
  ver="$(newest "$fw")"
  if [ -z "$ver" ]; then
    step resolve FAILED "no $fw on the registry"; status=1; continue
  fi
  printf 'release\t%s\nunpinned\t%s\n' "$ver" "$(unpinned "$fw")" >> "$facts"
  env="$FG_HOME/canary/$fw"
  py="$env/bin/python"
  rm -rf "$env"; mkdir -p "$FG_HOME/canary"
  "$uv" venv --quiet --python "python$FG_PYTHON_VERSION" "$env" 2>"$out/$fw.install.log" || {
    step install FAILED "uv venv: $(tail -n 1 "$out/$fw.install.log")"; status=1; continue; }

  # 2. the release as a user installs it; an override only where a pin cannot be met
  t0=$(date +%s)
  if "$uv" pip install --quiet --python "$py" "$fw==$ver" >>"$out/$fw.install.log" 2>&1; then
    step install ok "$fw==$ver in $(( $(date +%s) - t0 )) s, no override"
  else
    # uv: "Because there is no version of flashinfer-python==0.7.3 and vllm==0.34.0 depends on ..."
    missing="$(grep -oE 'no version of [A-Za-z0-9_.-]+==[^ ,]+' "$out/$fw.install.log" | head -n 1 | sed 's/^no version of //')"
    pkg="${missing%%==*}"
    repl="$( [ -n "$pkg" ] && newest "$pkg" )"
    if [ -n "$missing" ] && [ -n "$repl" ]; then
      printf '%s==%s\n' "$pkg" "$repl" > "$out/$fw.overrides.txt"
      printf 'override\t%s==%s (%s pins %s, which the registry does not have)\n' "$pkg" "$repl" "$fw $ver" "$missing" >> "$facts"
      if "$uv" pip install --quiet --python "$py" --overrides "$out/$fw.overrides.txt" "$fw==$ver" \
           >>"$out/$fw.install.log" 2>&1; then
        step install ok "$fw==$ver in $(( $(date +%s) - t0 )) s, override $pkg==$repl ($missing not on the registry)"
      else
        step install FAILED "$(grep -m1 -iE 'error|because' "$out/$fw.install.log")"; status=1; continue
      fi
    else
      step install FAILED "$(grep -m1 -iE 'error|because' "$out/$fw.install.log")"; status=1; continue
    fi
  fi
  printf 'installed_flashinfer\t%s\n' "$("$py" -c 'from importlib import metadata as m; print(m.version("flashinfer-python"))' 2>/dev/null || echo none)" >> "$facts"

  # 3. this repository as a user installs it
  if "$uv" pip install --quiet --python "$py" --no-deps --reinstall-package flashinfer-guard "$FG_REPO" \
       >"$out/$fw.repo.log" 2>&1; then
    step flashinfer-guard ok "installed (wheel)"
  else
    step flashinfer-guard FAILED "$(tail -n 1 "$out/$fw.repo.log")"; status=1; continue
  fi
  if "$py" ci/check_env.py records > "$out/$fw.records.log" 2>&1; then
    step records ok "$(tail -n 1 "$out/$fw.records.log")"
  else
    step records FAILED "$(grep -m1 'file clash' "$out/$fw.records.log")"; status=1
  fi

  # 4. the server's own plugin loader (on this CPU host: no GPU is needed to load plugins)
  if [ "$fw" = vllm ]; then
    load='from vllm.plugins import load_general_plugins; load_general_plugins()
import sys; m = sys.modules.get("vllm_guard.plugin"); print("REGISTERED", bool(m and m._registered))'
  else
    load='import sglang; from sglang.srt.plugins import load_plugins; load_plugins()
import sys; m = sys.modules.get("sglang_guard.plugin"); print("REGISTERED", bool(m and m.is_registered()))'
  fi
  (cd "$out" && HF_HUB_OFFLINE=1 VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES="" timeout 600 "$py" -c "$load") \
    > "$out/$fw.loader.log" 2>&1
  if grep -q '^REGISTERED True' "$out/$fw.loader.log"; then
    note="$(grep -m1 -o 'support: .*' "$out/$fw.loader.log")"
    step loader ok "registered by the server's loader${note:+; $note}"
  else
    step loader FAILED "$(grep -m1 -E 'Error|REGISTERED|flashinfer-guard' "$out/$fw.loader.log")"; status=1
  fi

  # 5. doctor
  if (cd "$out" && HF_HUB_OFFLINE=1 timeout 600 "$env/bin/flashinfer-guard" doctor) > "$out/$fw.doctor.log" 2>&1; then
    step doctor ok "$(grep -m1 -iE "^ *$fw lines|${fw} lines" "$out/$fw.doctor.log")"
  else
    step doctor FAILED "$(grep -m1 -iE 'error|traceback' "$out/$fw.doctor.log")"; status=1
  fi

  # 6. plan through the server's own resolution, one Llama-style config
  mdir="$(mktemp -d)"; cp "$model" "$mdir/config.json"
  if [ "$fw" = vllm ]; then
    launch=(vllm serve "$mdir" --attention-backend FLASHINFER --max-model-len 32768)
  else
    launch=(python -m sglang.launch_server --model-path "$mdir" --attention-backend flashinfer --context-length 32768)
  fi
  (cd "$FG_REPO" && HF_HUB_OFFLINE=1 timeout 900 "$env/bin/flashinfer-guard" plan --json --resolution server \
     --gpu h200 -- "${launch[@]}") > "$out/$fw.plan.json" 2> "$out/$fw.plan.log"
  rc=$?
  rm -rf "$mdir"
  summary="$("$py" - "$out/$fw.plan.json" <<'EOF' 2>/dev/null
import json, sys
r = json.load(open(sys.argv[1]))
g = r.get("guard") or {}
print("\t".join([r.get("resolution", {}).get("used", "?"), str(r.get("verdict")), g.get("line", "?"),
                 (r.get("moe") or {}).get("verdict", "?")]))
EOF
)"
  if [ "$rc" = 0 ] && [ -n "$summary" ]; then
    IFS=$'\t' read -r used verdict gline moe <<< "$summary"
    printf 'plan_used\t%s\nplan_verdict\t%s\nguard_line\t%s\nmoe\t%s\n' "$used" "$verdict" "$gline" "$moe" >> "$facts"
    step plan ok "$used: $verdict"
  else
    step plan FAILED "$(grep -v '^\s*$' "$out/$fw.plan.log" | tail -n 1)"; status=1
  fi
  if [ "${FLASHINFER_GUARD_CANARY_KEEP:-0}" != 1 ]; then
    rm -rf "$env"
  fi
done
python3 ci/canary_report.py "$out" "${frameworks[@]}" | tee "$out/table.md"
exit $status
