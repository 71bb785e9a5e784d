#!/usr/bin/env bash
# The tensor-core router (router_mma.h; GPTOSS_ROUTER_MMA, off by default), prepared in session 17
# without device time (~6 min): its test and its bench against gemv_route and the three launches of
# 5-8 token steps; the forward test with it on at 2-8 tokens (mode 2); then 120b decode at batch 2,
# 4 and 8 with it off, at 5-8 tokens (1) and at 2-8 (2), interleaved, two rounds. Prediction (before
# any run): the router at 8 tokens 13.3 -> ~7 us a layer, 120b decode batch 8 +3 %; batch 2-4 (mode 2
# against gemv_route) within +-1 %. Make mode 1 the default if batch 8 gains beyond the spread,
# else remove the form. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/rm-out "the tensor-core router (GPTOSS_ROUTER_MMA)"
test_table
run_logged test_router_mma 120 $bin/gpu_test_router_mma
timeout 120 $bin/gpu_test_router_mma --bench 2>&1 | grep -E '^\|' | tee -a "$sum"
GPTOSS_ROUTER_MMA=2 run_logged forward_router_mma 240 $bin/gpu_test_cuda_forward --skip-tp
echo -e "\n## 120b decode: the router off, at 5-8 tokens, at 2-8 $(t)" | tee -a "$sum"
OUT=$out/v-120b MODEL=120b BATCHES=2,4,8 ROUNDS=${ROUNDS:-2} \
  VARIANTS="off=- rm1=GPTOSS_ROUTER_MMA=1 rm2=GPTOSS_ROUTER_MMA=2" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs" "$out"/v-*/vlogs
