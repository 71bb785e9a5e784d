#!/usr/bin/env bash
# The tensor-core router's forms (router_mma.h), ~5 min: its test and its bench (against gemv_route,
# the three launches, and for the norm form against gemv_norm_route and norm + router); the forward
# test with every form on (up to 16 tokens, the norm form up to 4); then 120b and 20b decode,
# interleaved, two rounds: off (GPTOSS_ROUTER_MMA=0), the default (2-8 tokens), up to 16 (=2), and
# the norm form at 1 token and at 1-4 (GPTOSS_ROUTER_MMA_NORM=1, 4).
# Session 17 measured 2-8 (session 18 call 1): +2.1 / +3.1 / +2.6 % at batch 2 / 4 / 8.
# Predictions (session 18, before call 2): up to 16 tokens, 120b batch 16 +2-3 % (three launches of
# ~13-19 us a layer become one of ~12); the norm form at one token ~+1 % (8.5 -> ~7.5 us a layer),
# at 2-4 tokens +1-2 % if its blocks' redundant norms cost less than norm_add's ~3.4 us launch.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/rm-out "the tensor-core router's forms (GPTOSS_ROUTER_MMA, GPTOSS_ROUTER_MMA_NORM)"
test_table
run_logged test_router_mma 120 $bin/gpu_test_router_mma
timeout 120 $bin/gpu_test_router_mma --bench 2>&1 | grep -E '^\||^$' | tee -a "$sum"
GPTOSS_ROUTER_MMA=2 GPTOSS_ROUTER_MMA_NORM=4 run_logged forward_router_all 240 $bin/gpu_test_cuda_forward --skip-tp
grep -E "seed" "$out/logs/forward_router_all.log" | head -2 | tee -a "$sum"
V="off=GPTOSS_ROUTER_MMA=0 def=- r16=GPTOSS_ROUTER_MMA=2 n1=GPTOSS_ROUTER_MMA=2+GPTOSS_ROUTER_MMA_NORM=1 n4=GPTOSS_ROUTER_MMA=2+GPTOSS_ROUTER_MMA_NORM=4"
for m in 120b:1,2,4,8,16 20b:1,4,16; do
  echo -e "\n## ${m%%:*} decode ${m##*:}: $V $(t)" | tee -a "$sum"
  OUT=$out/v-${m%%:*} MODEL=${m%%:*} BATCHES=${m##*:} ROUNDS=${ROUNDS:-2} VARIANTS="$V" \
    bash scripts/device/variants.sh | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs" "$out"/v-*/vlogs
