#!/usr/bin/env bash
# Session 16, calls 2 and 3 (~5 min). Call 3: the items taken from a counter (forms 3, 4) against
# the static deal (form 2, measured 0.93 in call 2) — the hypothesis that a static deal cannot
# follow the SMs' unequal speeds, which the hardware's block scheduler does. Call 2: the MoE small path's persistent form (GPTOSS_MOE_PERSIST, moe_experts.cu:
# resident blocks looping over the items, each item reading its successor's routing while it streams
# and requesting that item's first k steps into L2 a few batches before its own last). Prediction,
# written before the run: the experts alone at T = 8 / 64 (~0.5 µs per touched expert above the
# bytes' time, a slot's cold start per item) −5-12 %, T = 1 unchanged (≤ 1 item a block), T = 256
# −3-8 %; 120b decode +3-8 % at batch 8-256, batch 1 equal. gpu_test_moe (the same bits, each form
# against the CPU reference), the forward test with form 1; the experts alone at T = 1, 8, 64, 256;
# bench latency 120b decode 1, 8, 64, 256 interleaved (ROUNDS, 2). Needs .devcarry. Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/persist-out "MoE small path: the persistent form (forms 1-3) against a block per item"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
GPTOSS_MOE_PERSIST=3 run_logged forward_persist 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts.*small|^\| case|^\| ---" | grep -v stage-16B | tee -a "$sum"
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=1,8,64,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS="base=- p2=GPTOSS_MOE_PERSIST=2 p3=GPTOSS_MOE_PERSIST=3 p4=GPTOSS_MOE_PERSIST=4" \
  bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/v/vlogs"
