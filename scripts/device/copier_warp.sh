#!/usr/bin/env bash
# For the session after 12, ~5 min: the register-A MoE form's prepared copier warp
# (GPTOSS_MOE_RS_COPIER_WARP=1). gpu_test_moe (its bits equal the form's without it) and the forward
# test with it on, the experts alone at T = 512, 1024, 4096 and 16384 ("tma rs" against "tma rs cw"),
# then bench latency interleaved, default against cw, at decode 512 and 1024 and prefill 1k and 8k.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/cw-out "the register-A MoE form with a copier warp of its own"
test_table
run_logged moe 150 $bin/gpu_test_moe
run_logged forward_cw 200 env GPTOSS_MOE_RS_COPIER_WARP=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 512,1024,4096,16384 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E " rs" | tee -a "$sum"
echo -e "\n## bench latency $(t)" | tee -a "$sum"
OUT=$out MODEL=120b BATCHES=512,1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-2} \
  VARIANTS="default=- cw=GPTOSS_MOE_RS_COPIER_WARP=1" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
