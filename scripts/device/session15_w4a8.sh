#!/usr/bin/env bash
# Session 15's second call, ~9 min: (1) the tests of what changed: gpu_test_moe (the W4A8 layout's
# relayout and the small path with e4m3 activations against the CPU reference), gpu_test_attention
# (the FP8 cache's prefill now on the wgmma kernel by default) and the forward test; (2) the experts
# alone, bf16 against W4A8 (gpu_test_moe --bench at T = 1, 8, 64, 256); (3) bench latency of 120b
# and 20b decode with GPTOSS_MOE_W4A8=1 against the default, interleaved; (4) the FP8 cache's
# prefill steps, wgmma (the new default) against mma.sync; (5) the forward test with W4A8 on, for
# its accuracy lines (informative: its bounds are bf16's). Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/w4a8-out "session 15: W4A8 small MoE path; FP8 prefill on wgmma by default"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
grep -E "w4a8" "$out/logs/test_moe.log" | head -12 | tee -a "$sum"
run_logged test_attention 200 $bin/gpu_test_attention
run_logged forward 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone, bf16 and W4A8 $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts|^\| case|^\| ---" | tee -a "$sum"
echo -e "\n## bench latency 120b decode, W4A8 against bf16 activations $(t)" | tee -a "$sum"
OUT=$out/v120 MODEL=120b BATCHES=1,8,64,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS="bf16=- w4a8=GPTOSS_MOE_W4A8=1" bash scripts/device/variants.sh | tee -a "$sum"
echo -e "\n## bench latency 20b decode $(t)" | tee -a "$sum"
OUT=$out/v20 MODEL=20b BATCHES=1,8,64 ROUNDS=1 \
  VARIANTS="bf16=- w4a8=GPTOSS_MOE_W4A8=1" bash scripts/device/variants.sh | tee -a "$sum"
echo -e "\n## FP8 cache prefill, wgmma (default) against mma.sync $(t)" | tee -a "$sum"
OUT=$out/vfp8 MODEL=120b BATCHES="" PREFILL=1024,8192 ROUNDS=1 EXTRA="--kv-cache-dtype fp8" \
  VARIANTS="wgmma=- mma=GPTOSS_ATTN_WGMMA=0" bash scripts/device/variants.sh | tee -a "$sum"
echo -e "\n## the forward test with W4A8 on (accuracy lines) $(t)" | tee -a "$sum"
GPTOSS_MOE_W4A8=1 timeout 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real >"$out/logs/forward_w4a8.log" 2>&1
echo "exit $?" | tee -a "$sum"
grep -E "relL2|checks" "$out/logs/forward_w4a8.log" | head -40 | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v120/vlogs v20/vlogs vfp8/vlogs 2>/dev/null && rm -rf "$out/logs" "$out"/v*/vlogs
