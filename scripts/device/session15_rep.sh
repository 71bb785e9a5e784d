#!/usr/bin/env bash
# The MoE small path's items of several row blocks (GPTOSS_MOE_SMALL_REP: one staging of the tokens
# and one routing prologue for 1, 2 or 3 row blocks' weights), ~4 min: gpu_test_moe (the same bits
# at every count), gpu_test_moe_fused, the forward test at 2; the experts alone at T = 1, 8, 64,
# 256 (every count's rows); bench latency 120b decode 1, 8, 64, 256 interleaved (ROUNDS, 2). Needs
# .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/rep-out "MoE small path: items of 1, 2 and 3 row blocks"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
run_logged test_moe_fused 200 $bin/gpu_test_moe_fused
GPTOSS_MOE_SMALL_REP=2 run_logged forward_rep2 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts.*small|^\| case|^\| ---" | tee -a "$sum"
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=1,8,64,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS="rep1=- rep2=GPTOSS_MOE_SMALL_REP=2 rep3=GPTOSS_MOE_SMALL_REP=3" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/v/vlogs"
