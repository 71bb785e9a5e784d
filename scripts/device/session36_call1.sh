#!/usr/bin/env bash
# Session 36, call 1 (~8-9 min; any card). Three builds of the step kernel (off by default) and
# the wait probe. Prepare with
#   BASE=0926086 BASE2=974a3ed BASE_TESTS=gpu_test_cuda_forward PROBE=1 SLIM=all
# Builds:
#   base (step0):  0926086, be86549's step kernel (0812aab's SASS, the old phase 4).
#   base2 (step1): 974a3ed, the router by columns, second form (session 35's, never measured):
#     phase 4 and its grid barrier gone; each O row's warp loads h and the gain of its row before
#     the row's dot product and writes h + o, its square and g (h + o); the accumulators in 8
#     groups; in phase 5 warp 0 alone copies the groups and the shares (cp.async), sums them in one
#     order, takes the top-k and releases the producer.
#   new (step):    0d393c2 on, base2 + down beside gate_up: the tiles' fixed shares strided (the
#     grid completes the expert slots in order), each slot's down tiles in the ring as soon as the
#     block's gate_up moves past the slot, per-slot done counters, the slot's activations staged
#     by the block's first warp to need them; the grid barrier between gate_up and down (and the
#     staging of every activation behind it) gone.
# Predictions (before any run):
#   base2 (session 35's): (h) passes (relL2 near 7.79e-3 / 1.83e-3); O 6.8 -> 7.0-7.8, the routing
#     done 2.7 -> 2.4-3.0 µs; the layer 69.6 -> 66-68; step1 vs step0 +2 to +4 % at batch 1.
#   new: (h) gives base2's figures exactly (the same sums: each tile's chunks in chunk order);
#     phases 5 + 6 (routing, gate_up, down) 37.2 -> 29-33 µs (down's chunks of the first three
#     slots multiplied during gate_up's stream; the last slot's after it); step vs step1 +4 to +9 %
#     at batch 1 (120b and 20b). Risks: a warp waiting for a slot's count holds its stage and, a
#     ring later, the block's stream; the fence a gate_up tile's completion now costs; 28 B of
#     spills once a layer (0 before).
# Rules: base2 kept if step1 beats step0 by more than 1 % at 120b batch 1, does not lose at 20b
# batch 1, and (h) passes; else the step kernel goes back to be86549's (and new with it). new kept
# if step beats step1 by more than 1 % at 120b batch 1, does not lose at 20b, and (h) passes;
# else reverted to base2. Either way the step kernel stays off by default while it trails the
# loop.
# The wait probe (.devcarry/probe: new built with -DGPTOSS_STEP_WAIT_PROBE=1) adds a column: of a
# chunk's multiply, the cycles until lane 0's scale words are in. Prediction: under 0.3 µs a
# chunk (SC_L1 gained nothing in session 35); over 1 µs would make the scale words through shared
# memory the next trial.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s36c1 "session 36 call 1: router by columns (2nd form); down beside gate_up; scale words' wait"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step1=BIN=.devcarry/base2/gptoss+GPTOSS_STEP_KERNEL=1 step=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
echo -e "\n## (h) of base2 $(cat .devcarry/base2/commit.txt)" | tee -a "$sum"
timeout 200 .devcarry/base2/gpu_test_cuda_forward --step-kernel >"$out/logs/step_kernel_base2.log" 2>&1
grep -E "^\(h\)|step kernel vs|FAILED|passed" "$out/logs/step_kernel_base2.log" | tail -8 | tee -a "$sum"
step_kernel_phases new
if [ -x .devcarry/probe/gpu_test_cuda_forward ]; then
  echo -e "\n## the wait probe (new, -DGPTOSS_STEP_WAIT_PROBE=1) $(t)" | tee -a "$sum"
  timeout 150 .devcarry/probe/gpu_test_cuda_forward --step-kernel --waits >"$out/logs/waits.log" 2>&1
  grep -E "^\||^the |FAILED|passed" "$out/logs/waits.log" | tee -a "$sum"
fi
step_kernel_phases base2
# every GPU test program last (the default path's device code is session 34's; the host side
# builds the step kernel's table only with the kernel on)
gpu_tests_table
finish_call
