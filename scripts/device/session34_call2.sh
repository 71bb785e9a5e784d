#!/usr/bin/env bash
# Session 34, call 2 (~3.5 min; any card: one build, a runtime knob held against itself in the same
# rounds). Build here and carry .devcarry/bin/{gptoss,gpu_test_cuda_forward}.
#   GPTOSS_STEP_SC_L1=1 (a trial, off by default): each consumer warp asks L1 for the scale words of
#   its next chunk (stage n + 8) as it starts a chunk, and for its first down chunk's as it leaves
#   gate_up (they land during the grid barrier), so the chunk's __ldg of them is an L1 hit; the
#   tile's two biases the same way.
# Why: call 1 split each chunk between two warps: gate_up's phase grew by 4.7 µs a layer for ~2.7
# more chunk starts a warp (~1.7 µs each), which the halved multiply cannot explain; the scale
# words' L2 round trip behind the experts' stream is the candidate.
# Prediction (before the run): (h) the same figures as call 1's new (8.75e-3 / 1.79e-3); phase 5
# -0.5 to -1 µs, phase 6 -0.5 to -1 µs (the warps' second chunks); the step kernel +1 to +3 %.
# Rule: made the step kernel's way (the knob removed) if step_l1 beats step by more than 1 % at
# 120b batch 1 and (h) passes with it; else the knob and its code are removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s34c2 "session 34 call 2: the next chunk's scale words into L1"
test_table
GPTOSS_STEP_SC_L1=1 run_logged step_kernel_l1 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel_l1.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1 step_l1=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_SC_L1=1" 120b:1 20b:1
GPTOSS_STEP_SC_L1=1 step_kernel_phases new
step_kernel_phases new
finish_call
