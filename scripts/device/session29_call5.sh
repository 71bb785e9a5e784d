#!/usr/bin/env bash
# Session 29, call 5 (~6 min): the step kernel with its experts streamed through the ring. Call 3's
# probe (µs a layer, 120b shapes, 1k context): input norm 5.7, QKV 7.8, attention 12.8, O 13.5,
# MLP norm + router 5.1, routing + gate_up 26.9, down 16.1: the layer 89.0 (the loop's ~70). Call
# 4's form (more registers a warp for the experts' loads) could not launch: 9 warps a block leave
# 168 registers a thread (a fourth of the register file a scheduler, three warps on one). Now the
# producer streams the selected experts' tiles in chunks of 15 k steps (8 KB) through the ring
# once the routing is known: 16 stages an SM in flight (~130 KB) where the warps' loads held ~48.
# Also: down unsplit, the next layer's gains/biases/sinks asked into L2 during down.
#  (1) the (h) checks (eager and graphs, 20b and 120b shapes): must pass.
#  (2) the phases by block 0's clock: default, and GPTOSS_STEP_O_EARLY=1.
#  (3) decode batch 1, two rounds: loop / step / step + O early (120b), loop / step (20b).
#  (4) the forward test with the kernel on (--skip-tp), if (1) passed.
# Predictions (before the run): gate_up 26.9 -> 12-16 µs, down 16.1 -> 6-9, input norm 5.7 ->
# 4-5; the layer 89 -> 62-72; 120b batch 1 0.95-1.15 of the loop (337 tok/s), 20b alike. O early:
# O -2-4 µs, attention +1-2. Decision: the kernel stays off by default this session unless it
# beats the loop beyond the spread at both models AND the whole forward test passes with it on.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c5 "session 29 call 5: the step kernel's experts through the ring"
test_table
run_logged step_kernel 300 $bin/gpu_test_cuda_forward --step-kernel
ok=$?
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
for v in "GPTOSS_STEP_O_EARLY=0" "GPTOSS_STEP_O_EARLY=1"; do
  echo -e "\n## by phase: $v $(t)" | tee -a "$sum"
  env $v timeout 200 $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/bench.log" 2>&1
  grep -E "^\||FAILED" "$out/logs/bench.log" | tee -a "$sum"
done
if [ $ok -eq 0 ]; then
  ROUNDS=2 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1 stepo=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_O_EARLY=1" 120b:1
  ROUNDS=2 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1" 20b:1
  test_table
  run_logged forward_step_on 400 env GPTOSS_STEP_KERNEL=1 $bin/gpu_test_cuda_forward --skip-tp
  grep -E "seed|summary" "$out/logs/forward_step_on.log" | head -6 | tee -a "$sum"
fi
t | tee -a "$sum"
rm -rf "$out"/v-*/vlogs
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs 2>/dev/null) &&
  rm -rf "$out"/logs && mv /tmp/logs.tgz "$out/"
