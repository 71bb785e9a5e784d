#!/usr/bin/env bash
# Session 30, call 5 (~4 min; an H100 is fine): the step kernel's expert loop rolled (step_moe.cuh's
# sk_chunk: four k steps a trip instead of 23 unrolled, the scale words six a lane), against its
# base (74d1f67: the unrolled loop of call 1). Call 4's ncu source counters: 23-44 % of the expert
# loops' stall samples were no_instruction (~3,800 instructions, 60 KB, an instance).
#  (1) the (h) checks (the same sums in the same order as call 1's loop: its relL2 8.75e-3 / 1.79e-3);
#  (2) the step kernel by phase with the experts' probes, base and new;
#  (3) decode batch 1, the loop against both step kernels, 120b and 20b, two interleaved rounds.
# Prediction (before the run): the (h) figures equal call 1's. The experts' arithmetic alone: phase 5
# (routing + gate_up) 26 -> 18-22 µs, phase 6 (down) 16 -> 12-14; whole: the layer 87 -> 78-82 µs;
# the step kernel 0.81 -> 0.85-0.90 of the loop at 120b batch 1. Rule: the rolled loop stays if the
# arithmetic probe's phases 5 + 6 drop by more than 5 % against the base; else it is reverted. The
# step kernel stays off by default unless it beats the loop beyond the spread at both models.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c5 "session 30 call 5: the step kernel's rolled expert loop against its base"
step_kernel_vs_base
finish_call
