#!/usr/bin/env bash
# Session 29, call 6 (~6 min): the ring-fed experts with one copy a chunk. Call 5 (the experts'
# chunks through the ring, codes and scale words as two copies a chunk of 15 steps): the layer
# 89.0 -> 79.2 µs (O 13.5 -> 7.8, attention 12.8 -> 10.5) but gate_up 29.6 and down 13.9: 66 and
# 36 copies a block, ~0.45 µs a copy; session 24 measured an SM's copies, not its bytes, as the
# limit below 8-16 KB. Now a tile's codes are two chunks of 23 and 22 steps (11.5 KB, one copy each:
# 22 copies a block for gate_up, 12 for down; stages of 11.75 KB), the scale words loaded by the
# consumer warp before it waits for the stage (asked into L2 at the routing). The (h) bound is now
# (f)'s (rounding-order noise, as TP: call 5 measured 7.8e-3 / 1.8e-3 with top-1 all equal).
#  (1) the (h) checks; (2) the phases, default and O early; (3) decode batch 1, loop / step /
#  step + O early (120b), loop / step (20b), two rounds; (4) the forward test with it on.
# Predictions (before the run): gate_up 29.6 -> 13-18 µs, down 13.9 -> 6-9; the layer 79 -> 60-68;
# 120b batch 1 1.00-1.15 of the loop. Decision: default stays off this session unless it beats
# the loop beyond the spread at both models and the forward test passes with it on.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c6 "session 29 call 6: the ring-fed experts, one copy a chunk"
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
