#!/usr/bin/env bash
# Session 18, call 3 (~8 min): every GPU test binary on the new default (the tensor-core router at
# 2-16 tokens, now 8 warps a tile of 8 tokens); the forward test with it up to 32 tokens
# (GPTOSS_ROUTER_MMA_MAX_T=32, the routing in its kernel for up to 128 pairs); its bench; 120b and
# 20b decode with it off, up to 16 (the default) and up to 32, interleaved, two rounds; the 120b
# decode step by kernel at batch 1, 8 and 16; `gptoss bench latency` with its defaults for 120b and
# 20b (the closing figures). Prediction (before the call): up to 32, batch 32 +1-1.5 % (four
# launches of ~20 us a layer become one of ~15); batches 2-16 as in call 2 (+2.4 / +3.3 / +2.9 /
# +1.0 % at 2 / 4 / 8 / 16). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s18c3-out "session 18 call 3: GPU tests; the router up to 32 tokens; closing figures"
gpu_tests_table
test_table
GPTOSS_ROUTER_MMA_MAX_T=32 run_logged forward_router32 240 $bin/gpu_test_cuda_forward --skip-tp
grep -E "seed" "$out/logs/forward_router32.log" | head -2 | tee -a "$sum"
timeout 120 $bin/gpu_test_router_mma --bench 2>&1 | grep -E '^\|' | tee -a "$sum"
V="off=GPTOSS_ROUTER_MMA_MAX_T=0 def=- r32=GPTOSS_ROUTER_MMA_MAX_T=32"
for m in 120b:2,4,8,16,32 20b:4,16,32; do
  echo -e "\n## ${m%%:*} decode ${m##*:}: $V $(t)" | tee -a "$sum"
  OUT=$out/v-${m%%:*} MODEL=${m%%:*} BATCHES=${m##*:} ROUNDS=${ROUNDS:-2} VARIANTS="$V" \
    bash scripts/device/variants.sh | tee -a "$sum"
done
decode_by_kernel 1 8 16
echo -e "\n## gptoss bench latency, defaults $(t)" | tee -a "$sum"
OUT=$out/lat SKIP_TESTS=1 bash scripts/device/latency_all.sh 2>&1 | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs tests lat v-120b v-20b 2>/dev/null && rm -rf "$out/logs" "$out/tests" "$out/lat" "$out"/v-*
