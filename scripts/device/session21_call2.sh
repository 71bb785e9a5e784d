#!/usr/bin/env bash
# Session 21, second device call (~8 min): every GPU test binary on the head, the forward test
# again with the MoE stream form forced (GPTOSS_MOE_FUSED=3) and forced off (=0), and
# `gptoss bench latency` with `gptoss roofline` (120b decode 1, 2, 8, 64; 20b decode 1, 2).
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script "${OUT:-/tmp/s21c2}" "session 21 call 2: GPU tests, forward test per MoE form, bench latency"
test_table
TEST_LIMIT=${TEST_LIMIT:-120} OUT=$out/logs/tests timeout 330 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
grep -E "^gpu_test_[a-z_]+: " "$out/logs/gpu_tests.log" | tee -a "$sum"
for f in "$out"/logs/tests/gpu_test_*.log; do
  echo "| $(basename "$f" .log) | $(grep -E 'checks (passed|FAILED)|checks? failed|SKIP' "$f" | tail -1) |" >>"$sum"
done
for m in 3 0; do
  GPTOSS_MOE_FUSED=$m run_logged forward_moe_fused_$m 90 $bin/gpu_test_cuda_forward --skip-tp
done
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
