#!/usr/bin/env bash
# Session 17, call 4 (~8 min): the forward test with the final router-gap excusal (gap < 1e-2, at
# least 5 of 11 rows left) on call 3's three seeds and two fresh ones; then the served 1k/1k point
# at C = 128 with InferenceMAX's settings (call 3's script, LEVELS=128). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s17f-out "session 17 call 4: the forward test's router-gap excusal at 1e-2"
test_table
for S in 12268047980063385605 7271119250326059773 9628026347155089174 random1 random2; do
  args=(--skip-tp); case $S in random*) ;; *) args+=(--seed $S) ;; esac
  run_logged "forward_$S" 200 $bin/gpu_test_cuda_forward "${args[@]}"
  grep -hE "seed|20b x 2 layers" "$out/logs/forward_$S.log" | head -8 | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs-tests.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
[ -f .devcarry/bin/gptoss ] || exit 0
mkdir -p "$out/logs"
served_10xc "${LEVELS:-128}"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
