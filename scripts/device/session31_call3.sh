#!/usr/bin/env bash
# Session 31, call 3 (~7 min; an H100 is fine): more independent work a warp in the step kernel's
# expert loops. Three builds:
#   base  c7c77d1 (call 2's base2: the counted barrier; 71.0 µs a layer, 0.951 of the loop);
#   base2 44bf1bf = base + a warp multiplies its chunks q and q + 8 in one trip (sk_chunk2: two
#         independent load-dequantise-MMA chains for its in-order issue; each chunk's sums are
#         sk_chunk's, same bits); 124 B of spills at 168 registers;
#   new   = base2 + three warpgroups (384 threads): the producer's warpgroup gives its registers
#         back (setmaxnreg 40) and the consumers take them (232): spills 8 B.
#  (1) the (h) checks of base2 and new (the same figures as the base: the same sums);
#  (2) the phases with the experts' probes of all three; (3) decode batch 1: the loop and the three
#      step kernels, 120b and 20b, two interleaved rounds; (4) ncu on new's kernel whole.
# Prediction (before the run): (h) relL2 8.75e-3 (20b) / 1.79e-3 (120b) in both. Arithmetic alone:
# routing + gate_up 21.4 µs -> base2 16-19 -> new 15-18; down 12.7 -> 9-11 -> 8.5-10.5. The layer
# 71.0 -> base2 66-69 (spills may cost phase 0 ~1 µs, as call 1's did) -> new 64-68; the step kernel
# against the loop 0.951 -> base2 0.97-1.01 -> new 0.99-1.04 (120b batch 1). Rules: each kept if its
# layer drops by more than 2 % against its predecessor; else reverted. A step kernel above the loop
# beyond the spread at both models makes the default flip a candidate (every GPU test first).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31c3 "session 31 call 3: two chunks a warp; setmaxnreg"
test_table
for b in base2 new; do
  tb=$bin/gpu_test_cuda_forward; [ $b != new ] && tb=.devcarry/$b/gpu_test_cuda_forward
  run_logged step_kernel-$b 200 $tb --step-kernel
  grep -E "step kernel vs" "$out/logs/step_kernel-$b.log" | tee -a "$sum"
done
step_kernel_phases base base2 new
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step0b=BIN=.devcarry/base2/gptoss+GPTOSS_STEP_KERNEL=1 step1=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
if [ $(($(date +%s) - start)) -lt 430 ]; then
  ncu_step_kernel whole 900 25
fi
finish_call
