#!/usr/bin/env bash
# Session 36, call 1 (~7 min; any card): session35_call2.sh, which never ran (its predictions and
# rule below are copied unchanged), then the wait probe's split of a chunk's multiply.
# Prepare with BASE=0926086 BASE_TESTS=gpu_test_cuda_forward PROBE=1 SLIM=all.
#
# (1) session35_call2.sh's builds:
#   base: 0926086 (be86549's step kernel: 0812aab's SASS, the old phase 4).
#   new:  the head: the router by columns, second form, as the step kernel's only way (the step
#         kernel itself stays off by default): phase 4 and its grid barrier gone; each O row's warp
#         loads h and the gain of its row before the row's dot product and writes h + o, its square
#         and g (h + o); the accumulators in 8 groups; in phase 5 warp 0 alone copies the groups
#         and the shares (cp.async), sums them in one order, takes the top-k and releases the
#         producer.
# Predictions (session 35, before any run): (h) passes (relL2 near call 1b's 7.79e-3 / 1.83e-3);
# phases: O 6.8 -> 7.0-7.8, phase 4 -> ~0.3, the routing done 2.7 -> 2.4-3.0; the layer 69.6 ->
# 66-68; decode step vs step0 +2 to +4 % at batch 1 (120b and 20b).
# Rule: kept if step beats step0 by more than 1 % at 120b batch 1, does not lose at 20b batch 1,
# and (h) passes; else the step kernel goes back to be86549's.
#
# (2) The wait probe (.devcarry/probe: the head's forward test built with
# -DGPTOSS_STEP_WAIT_PROBE=1), with a new column: of a chunk's multiply (session 33: 3.4 µs a
# chunk of ~22.5 k steps, of which sessions 31 and 34 put ~1.7 µs in a fixed cost a chunk), the
# cycles until lane 0's scale words are in (an xor of them stored to shared memory before the
# clock is read). Prediction: under 0.3 µs a chunk (SC_L1, asking L1 for them a chunk ahead,
# gained nothing in session 35); if it is over 1 µs, the next trial is the scale words through
# shared memory (cp.async a chunk ahead into a per-warp buffer in xs's free 6 KB); if not, the
# chunk's fixed cost lies in the k loop's first trips (instruction fetch) and the next step is
# ncu's source counters on that loop.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s36c1 "session 36 call 1: the router by columns, second form; the scale words' wait"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
step_kernel_phases new
if [ -x .devcarry/probe/gpu_test_cuda_forward ]; then
  echo "## the wait probe (head $(cat .devcarry/probe/commit.txt), -DGPTOSS_STEP_WAIT_PROBE=1)" | tee -a "$sum"
  timeout 150 .devcarry/probe/gpu_test_cuda_forward --step-kernel --waits >"$out/logs/waits.log" 2>&1
  grep -E "^\||^the |FAILED|passed" "$out/logs/waits.log" | tee -a "$sum"
fi
# every GPU test program (the default path's device code is session 34's; its host side no longer
# builds the step kernel's table with the kernel off)
gpu_tests_table
finish_call
