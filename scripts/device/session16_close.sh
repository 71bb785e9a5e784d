#!/usr/bin/env bash
# Session 16's closing call (~5 min): every GPU test binary on the final code (gpu_tests.sh test
# mode, its table), then the small path's new NTP bound (8 tokens a pass up to 4 pairs an expert,
# session 16 call 6) against the old one (GPTOSS_MOE_NTP1_MAX_AVG=3) in the steps it changes:
# 120b decode 128 and 20b decode 32, interleaved, ROUNDS (2). Needs .devcarry. Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/close-out "session 16 closing: GPU tests; the NTP bound 4 against 3"
gpu_tests_table
for m in 120b:128 20b:32; do
  echo -e "\n## ${m%%:*} decode ${m##*:}: NTP bound 4 (default) against 3 $(t)" | tee -a "$sum"
  OUT=$out/v-${m%%:*} MODEL=${m%%:*} BATCHES=${m##*:} ROUNDS=${ROUNDS:-2} \
    VARIANTS="bound4=- bound3=GPTOSS_MOE_NTP1_MAX_AVG=3" bash scripts/device/variants.sh | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs tests 2>/dev/null && rm -rf "$out/logs" "$out/tests" "$out"/v-*/vlogs
