#!/usr/bin/env bash
# Session 35, call 1 (~4 min; any card: two builds, each with a runtime knob off and on, in the
# same rounds). Prepare with BASE=7557965 BASE_TESTS=gpu_test_cuda_forward (carry only gptoss and
# gpu_test_cuda_forward of bin/ if the budget is short). Written in session 34, whose device budget
# ran out before it could run (as session34_call2.sh, the knob alone).
#   base 7557965: session 34's head before dd33cff (the redux top-k landed; the step kernel's code
#        0812aab's) with the GPTOSS_STEP_SC_L1 knob.
#   new  dd33cff: the consumers read the layer's expert scale and bias arrays from shared memory
#        (each chunk's scale loads had waited on a global load of the layer table's line).
#   GPTOSS_STEP_SC_L1=1 (a trial, off by default): each consumer warp asks L1 for the scale words
#   and the tile's biases of its next chunk (stage n + 8) as it starts a chunk, and for its first
#   down chunk's as it leaves gate_up (they land during the grid barrier), so the chunk's __ldg of
#   them is an L1 hit.
# Why: session 34's call 1 split each chunk between two warps: gate_up's phase grew by 4.7 µs a
# layer for ~2.7 more chunk starts a warp (~1.7 µs each), which the halved multiply cannot
# explain; the scale words' L2 round trip behind the experts' stream is the candidate (the SASS:
# the first shuffle of a scale word follows the stage's wait, with nothing between to hide it).
# Predictions (before the run): (h) passes with the same figures (8.75e-3 / 1.79e-3) for each;
# SC_L1: phase 5 -0.5 to -1 µs, phase 6 -0.5 to -1 µs, the step kernel +1 to +3 %; new: +0 to
# +0.5 % (the table's line is mostly an L1 hit already).
# Rules: SC_L1 made the step kernel's way (the knob removed) if step_l1 beats step by more than 1 %
# at 120b batch 1 (new's build; base's if new is reverted) and (h) passes with it; else the knob
# and its code are removed. new kept if step (new) beats step0 (base) by more than 0.5 % at 120b
# batch 1 and (h) passes; else dd33cff reverted.
# Added in session 35 (new = dd33cff + the GPTOSS_STEP_QKV_L2 = n trial knob, off by default: the
# block's first n QKV pairs of the next layer asked into L2 while the producer waits for the
# routing, the DRAM idle ~4.5 µs a layer; session 33 asked for every pair, n = 64, and lost 3 %):
# step_q4 and step_q8 ask ~6 and ~12 MB a layer. Prediction: phases 0-1 -1 to -3 µs if the rows
# outlive down's stream in L2, gate_up +0 to +1 µs; the step kernel +0 to +2 %. Rule: the best n
# made the step kernel's way (the knob kept as a count, its default that n) if it beats step by
# more than 1 % at 120b batch 1 and at 20b does not lose more than 0.5 %; else the knob removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s35c1 "session 35 call 1: the next chunk's scale words into L1; expert arrays in shared"
test_table
GPTOSS_STEP_SC_L1=1 run_logged step_kernel_l1 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel_l1.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step0_l1=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_SC_L1=1 step=GPTOSS_STEP_KERNEL=1 step_l1=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_SC_L1=1 step_q4=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_QKV_L2=4 step_q8=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_QKV_L2=8" 120b:1 20b:1
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
GPTOSS_STEP_SC_L1=1 step_kernel_phases new
step_kernel_phases new base
GPTOSS_STEP_QKV_L2=8 step_kernel_phases new
finish_call
