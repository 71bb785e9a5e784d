#!/usr/bin/env bash
# The MoE small path's token staging: a warp a row by cp.async (the default since session 15)
# against a thread per 16 bytes (GPTOSS_MOE_STAGE_ROWS=0, the form before), ~5 min: gpu_test_moe
# (the same bits both ways), gpu_test_moe_fused, the forward test; the experts alone at T = 1, 8,
# 64, 256 (both forms' rows); bench latency 120b decode 1, 8, 64, 256 interleaved (ROUNDS, 2).
# Session 15 measured the new form first as the switch's non-default (809feeb). Needs .devcarry.
# Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/stage-out "MoE small path: row-wise cp.async staging (default) against 16-byte pieces"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
run_logged test_moe_fused 200 $bin/gpu_test_moe_fused
run_logged forward 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts.*small|^\| case|^\| ---" | tee -a "$sum"
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=1,8,64,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS="default=- old=GPTOSS_MOE_STAGE_ROWS=0" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/v/vlogs"
