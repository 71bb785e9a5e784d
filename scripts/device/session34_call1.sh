#!/usr/bin/env bash
# Session 34, call 1 (~2.5 min; any card: base and new in the same call). Prepare with
# BASE=0812aab BASE_TESTS=gpu_test_cuda_forward.
#   base 0812aab (session 33's head: the early keys reverted, the wait probe compiled out; its
#        cubin not byte-equal to the measured a44d95a-without-the-move, so base is measured here).
#   new  base + down's activations staged by cp.async, every copy of a thread in flight at once
#        (they were ~6 serial L2 round trips: 2.7 µs of phase 6 in session 33's wait probe).
# Prediction (before the run): (h) the same figures (8.75e-3 / 1.79e-3); phase 6 12.9 -> 10.5-11.5
# µs; the layer -2 to -3 %; the step kernel 0.972 -> 0.99-1.0 of the loop at 120b batch 1.
# Rule: kept if new's decode beats base's by more than 1 % at 120b batch 1 and (h) passes; else
# reverted.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s34c1 "session 34 call 1: down's activations staged by cp.async"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step1=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
step_kernel_phases new base
finish_call
