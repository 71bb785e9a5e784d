#!/usr/bin/env bash
# Session 30, call 1 (~4 min; an H100 is fine): the step kernel's new expert loop (step_moe.cuh's
# sk_chunk: four accumulators issued round-robin, two steps at a time, no exit) against its base
# (98a756d, session 29's loop: one step at a time, a step's four HMMAs one dependent chain).
#  (1) the (h) checks: the step kernel against the layer loop, eager and graphs;
#  (2) the step kernel by phase with the experts' probes, base and new (same card, same call);
#  (3) decode batch 1, the loop against both step kernels, 120b and 20b, two interleaved rounds.
# Prediction (before the run): the (h) checks pass (relL2 ~2-3e-3, top-1 equal). The experts'
# arithmetic alone: phase 5 (routing + gate_up) 26.3 -> 18-22 µs, phase 6 (down) 16.3 -> 11-14;
# whole: phase 5 32 -> 26-29, phase 6 16.2 -> 12-14, the layer 87 -> 78-83 µs; the step kernel
# 0.80 -> 0.85-0.90 of the loop at 120b batch 1. Rule: the new loop stays if the arithmetic probe's
# phases 5 + 6 drop by more than 5 % against the base in this call; else it is reverted. The step
# kernel stays off by default unless it beats the loop beyond the spread at both models.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c1 "session 30 call 1: the step kernel's expert loop against its base"
step_kernel_vs_base
finish_call
