#!/usr/bin/env bash
# Session 17, call 1 (~8 min): the loads of model memory moved off the kernels' dependent chains
# (the norms' gains before their PDL wait, the decode merge's sinks, the small MoE kernel's epilogue
# biases and routing entries and the ring GEMV's biases requested into L1 at the start). Every GPU
# test binary on the new build; then 120b decode at batch 1, 8, 64 against the base build
# (.devcarry/base: BASE=REV scripts/device/prepare.sh) and two variants the hoists may change
# (GPTOSS_PDL=1: every kernel launched early, so the hoisted loads overlap the previous kernel;
# GPTOSS_EARLY_WEIGHTS=5: the router's kernel launched early too), interleaved, two rounds; 20b at
# batch 1 and 8, one round; the batch-1 step by kernel (CUPTI); the register-A MoE reading its
# codes a step ahead (GPTOSS_MOE_RS_LOOKAHEAD), the experts alone. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s17-out "session 17 call 1: hoisted model-memory loads"
echo "base $(cat .devcarry/base/commit.txt)" | tee -a "$sum"
gpu_tests_table
echo -e "\n## 120b decode: base, new, new + PDL, new + router early $(t)" | tee -a "$sum"
OUT=$out/v-120b MODEL=120b BATCHES=${BATCHES:-1,8,64} ROUNDS=${ROUNDS:-2} \
  VARIANTS="base=BIN=.devcarry/base/gptoss new=- pdl=GPTOSS_PDL=1 early5=GPTOSS_EARLY_WEIGHTS=5" \
  bash scripts/device/variants.sh | tee -a "$sum"
echo -e "\n## the register-A MoE reading its codes a step ahead: the experts alone (GPTOSS_MOE_RS_LOOKAHEAD 0 / 1, twice) $(t)" | tee -a "$sum"
for r in 1 2; do
  for l in 0 1; do
    echo "### lookahead $l, round $r" | tee -a "$sum"
    GPTOSS_MOE_RS_LOOKAHEAD=$l timeout 120 $bin/gpu_test_moe --bench --bench-t ${LOOK_T:-512,1024,4096} \
      >"$out/logs/look-$l-$r.log" 2>&1 || echo "look $l failed ($?)" | tee -a "$sum"
    grep -E "\(auto\)" "$out/logs/look-$l-$r.log" | head -12 | tee -a "$sum"
  done
done
echo -e "\n## 20b decode: base, new $(t)" | tee -a "$sum"
OUT=$out/v-20b MODEL=20b BATCHES=1 ROUNDS=1 VARIANTS="base=BIN=.devcarry/base/gptoss new=-" \
  bash scripts/device/variants.sh | tee -a "$sum"
decode_by_kernel 1
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs tests 2>/dev/null && rm -rf "$out/logs" "$out/tests" "$out"/v-*/vlogs
