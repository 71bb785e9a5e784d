#!/usr/bin/env bash
# The MoE small path's tokens staged a warp a row by cp.async (GPTOSS_MOE_STAGE_ROWS=1) against the
# default, ~7 min: gpu_test_moe (same bits both ways), gpu_test_moe_fused, the forward test with it
# on; the experts alone at T = 1, 8, 64, 256 (both forms' rows); bench latency 120b decode 1, 8, 64,
# 256 interleaved, two rounds. Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/stage-out "MoE small path: row-wise cp.async staging against the default"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
run_logged test_moe_fused 200 $bin/gpu_test_moe_fused
GPTOSS_MOE_STAGE_ROWS=1 run_logged forward_stage_rows 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts.*small|^\| case|^\| ---" | tee -a "$sum"
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=1,8,64,256 ROUNDS=2 \
  VARIANTS="default=- rows=GPTOSS_MOE_STAGE_ROWS=1" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/v/vlogs"
