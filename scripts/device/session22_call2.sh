#!/usr/bin/env bash
# Session 22, second device call (~9 min): every GPU test binary on the head; the forward test again
# with both stream kernels forced on, their norms inside (GPTOSS_ATTN_STREAM=2, GPTOSS_MOE_FUSED=4),
# and with the attention one alone; `gptoss bench latency` beside `gptoss roofline` (120b decode 1,
# 2, 8, 64; 20b decode 1, 2). Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script "${OUT:-/tmp/s22c2}" "session 22 call 2: GPU tests, forward test per stream form, bench latency"
test_table
TEST_LIMIT=${TEST_LIMIT:-120} OUT=$out/logs/tests timeout 300 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
grep -E "^gpu_test_[a-z_]+: " "$out/logs/gpu_tests.log" | tee -a "$sum"
for f in "$out"/logs/tests/gpu_test_*.log; do
  echo "| $(basename "$f" .log) | $(grep -E 'checks (passed|FAILED)|checks? failed|SKIP' "$f" | tail -1) |" >>"$sum"
done
GPTOSS_ATTN_STREAM=2 GPTOSS_MOE_FUSED=4 run_logged forward_both 90 $bin/gpu_test_cuda_forward --skip-tp
GPTOSS_ATTN_STREAM=1 run_logged forward_attn 90 $bin/gpu_test_cuda_forward --skip-tp
echo -e "\n## roofline and bench latency $(t)" | tee -a "$sum"
for rb in 120b:1 120b:2 120b:8 120b:64 20b:1 20b:2; do
  $bin/gptoss roofline --model ${rb%%:*} --batch ${rb##*:} --context 1024 | grep -E "^model|^bound" | tee -a "$sum"
done
for m in 120b:1,2,8,64 20b:1,2; do
  timeout 100 $bin/gptoss bench latency --model synthetic:${m%%:*} --batches ${m##*:} --prefill "" \
    --output-json "$out/latency-${m%%:*}.json" >"$out/logs/lat-${m%%:*}.log" 2>&1
  grep -E "^\| synthetic" "$out/logs/lat-${m%%:*}.log" | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
