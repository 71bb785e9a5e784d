#!/usr/bin/env bash
# Session 30, call 4 (~3 min; an H100 is fine): where the step kernel's warps wait, per SASS
# instruction (ncu's source counters), for the next session's work on it. Calls 1 and 3 said the
# experts' arithmetic is neither the MMAs' dependent chains nor the per-step branch (four
# accumulators, two steps at a time, no exit: the arithmetic alone unchanged, 26.1 -> 26.2 µs for
# routing + gate_up); ~78 instructions a k step issue at ~0.34 a cycle a scheduler with two warps.
#  (1) the kernel with the experts' chunks not copied (their arithmetic alone), a launch at ~900
#      tokens of context (gpu_test_cuda_forward --step-kernel --bench: modes 0, 1, 2 of ~1,014
#      launches each; launch 2,900);
#  (2) the kernel whole (launch 900).
# No prediction to test: a measurement to read (sass_stalls.py: stall reasons overall, the most
# sampled instructions and what they wait on).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c4 "session 30 call 4: the step kernel's stalls per SASS instruction"
ncu_step_kernel arith 2900 40
ncu_step_kernel whole 900 40
finish_call
