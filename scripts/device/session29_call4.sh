#!/usr/bin/env bash
# Session 29, call 4 (~6 min): the step kernel's MoE phases with more bytes in flight. Call 3's
# probe (120b shapes, 1k context, block 0's clock, µs a layer): input norm + preloads 5.7, QKV 7.8,
# attention 12.8, O 13.5, MLP norm + router 5.1, routing + gate_up 26.9, down 16.1; the layer 89.0
# (the loop's kernels: ~70). Changed since: the experts' register batches (GPTOSS_STEP_MOE_U = 6,
# 9 or 12 k steps: 6, 9 or 12 KB in flight a warp, two batches; registers up to 224, no spill),
# down unsplit in the kernel (k MoE rows: the norm replays read 5 rows, not 9), the next layer's
# gains, biases and sinks asked into L2 during down, and GPTOSS_STEP_O_EARLY=1 (O's rows not held
# for the QKV barrier).
# Predictions (before the run): U = 12: gate_up ~13-16 µs (the bytes: 35 MB at ~3 TB/s ~12),
# down ~7-9; input norm 5.7 -> ~4; the layer ~65-72; 120b batch 1 0.95-1.10 of the loop. O early:
# O -3 µs, attention +1-2. Decision (this call): the best U and O rule become the kernel's
# defaults; it stays off by default unless it beats the loop beyond the spread at both models.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c4 "session 29 call 4: the step kernel's MoE bytes in flight"
test_table
run_logged step_kernel_u6 300 $bin/gpu_test_cuda_forward --step-kernel
grep -E "step kernel vs" "$out/logs/step_kernel_u6.log" | tee -a "$sum"
run_logged step_kernel_u12 300 env GPTOSS_STEP_MOE_U=12 $bin/gpu_test_cuda_forward --step-kernel
grep -E "step kernel vs" "$out/logs/step_kernel_u12.log" | tee -a "$sum"
for v in "GPTOSS_STEP_MOE_U=6" "GPTOSS_STEP_MOE_U=9" "GPTOSS_STEP_MOE_U=12" \
  "GPTOSS_STEP_MOE_U=12 GPTOSS_STEP_O_EARLY=1"; do
  echo -e "\n## by phase: $v $(t)" | tee -a "$sum"
  env $v timeout 200 $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/bench.log" 2>&1
  grep -E "^\||FAILED" "$out/logs/bench.log" | tee -a "$sum"
done
ROUNDS=2 decode_variants "loop=- u6=GPTOSS_STEP_KERNEL=1 u12=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_MOE_U=12 u12o=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_MOE_U=12+GPTOSS_STEP_O_EARLY=1" 120b:1
ROUNDS=2 decode_variants "loop=- u12=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_MOE_U=12" 20b:1
t | tee -a "$sum"
rm -rf "$out"/v-*/vlogs
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs 2>/dev/null) &&
  rm -rf "$out"/logs && mv /tmp/logs.tgz "$out/"
