#!/usr/bin/env bash
# The MoE small path's register batch (GPTOSS_MOE_SMALL_U: 6, the default, 8 or 12 k steps), ~4
# min: gpu_test_moe (the same bits at every batch), gpu_test_moe_fused, the forward test at 8 and
# 12; the experts alone at T = 1, 8, 64, 256 (every batch's rows); bench latency 120b decode 1, 8,
# 64, 256 interleaved (ROUNDS, 2). Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/batch-out "MoE small path: register batches of 6, 8 and 12 k steps"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
run_logged test_moe_fused 200 $bin/gpu_test_moe_fused
GPTOSS_MOE_SMALL_U=8 run_logged forward_u8 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
GPTOSS_MOE_SMALL_U=12 run_logged forward_u12 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts.*small|^\| case|^\| ---" | tee -a "$sum"
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=1,8,64,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS="u6=- u8=GPTOSS_MOE_SMALL_U=8 u12=GPTOSS_MOE_SMALL_U=12" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/v/vlogs"
