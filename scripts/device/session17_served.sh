#!/usr/bin/env bash
# Session 17, call 3 (~8 min): (1) the forward test's real-width check with the router-gap excusal
# (rows whose CPU router has a k-th vs (k+1)-th gap under 2e-2 are excused, instead of the worst
# row), on the seeds that have failed or needed the excusal (12268047980063385605: two swapped rows
# in session 16; 7271119250326059773 and 9628026347155089174 from the test's comments); (2) the served 1k/1k frontier at C = 16 and 64 with InferenceMAX's settings (10 x C prompts,
# 2 x C warm-ups), `gptoss serve` as served_close.sh starts it. The tokenizer travels gzipped.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s17s-out "session 17 call 3: the forward test's router-gap excusal; served 1k/1k at InferenceMAX settings"
test_table
for S in 12268047980063385605 7271119250326059773 9628026347155089174; do
  args=(--skip-tp); [ $S = random ] || args+=(--seed $S)
  run_logged "forward_$S" 200 $bin/gpu_test_cuda_forward "${args[@]}"
  grep -hE "seed|20b x 2 layers" "$out/logs/forward_$S.log" | head -8 | tee -a "$sum"
done
served_10xc "${LEVELS:-16,64}"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
