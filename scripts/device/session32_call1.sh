#!/usr/bin/env bash
# Session 32, call 1 (~5 min; any card: base and new in the same call).
#   base aacbd49: session 31's head (the step kernel's code made smaller, not yet measured: base of
#        that change dd4b0ca had the layer at 70.0 µs, 0.944 of the loop) + the blocks' probe
#        (bench modes 3 and 4: every block's arrival at each phase's grid barrier).
#   new  base + the expert tiles handed out at run time (sk_take_tile: a fixed share of N/G - 2
#        tiles a block, then one at a time from a ticket counter; the producer tells the consumers
#        what each stage holds, sk_meta), instead of fixed shares alone.
# Why: every phase ends at its slowest block. The stream alone of routing + gate_up is 22.4 µs for
# 34.5 MB (1.5 TB/s) where the ring alone reaches 3.0-3.1 TB/s (session 25); ncu put ~12 % of the
# step kernel's stall samples at gate_up's and down's grid barriers.
# Prediction (before the run):
#   - base's blocks' probe: in phase 5 (whole and stream alone) the median block arrives 3-7 µs
#     before the last, the same few SMs most often last; phase 6 1.5-4 µs.
#   - new: (h) the same figures as base (a tile's chunks are added in chunk order, whichever block);
#     its probe: last - median <= 1.5 µs in phases 5-6; phases 5 + 6 whole 37.7 -> 32-35 µs, the
#     layer 70 -> 64-67.5; the step kernel 0.95 -> 0.98-1.04 of the loop (120b and 20b batch 1).
#   Also in the call: new with GPTOSS_STEP_SLACK=99 (every tile from the counter: (h) and the
#   phases) and =0 (a fixed share of N/G, the rest from the counter), in the decode rounds.
#   Predicted: 99 within 1 µs of 2 (the counter's round trips hide behind the ring); 0 between base
#   and 2.
# Rule: kept if the layer drops by more than 1 % and (h) passes; the default flips only if the step
# kernel beats the loop beyond the spread at both models (then every GPU test in the next call).
# If base's spread is < 1.5 µs (the prediction wrong), new is reverted whatever it measures, and
# the stream's uniform slowness is what to look at next.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s32c1 "session 32 call 1: the blocks' arrivals; expert tiles handed out at run time"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
GPTOSS_STEP_SLACK=99 run_logged step_kernel_all_tickets 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" "$out/logs/step_kernel_all_tickets.log" | tee -a "$sum"
step_kernel_phases base new
echo -e "\n(the next: new with GPTOSS_STEP_SLACK=99, every tile from the counter)" | tee -a "$sum"
GPTOSS_STEP_SLACK=99 step_kernel_phases new
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step1=GPTOSS_STEP_KERNEL=1 step1all=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_SLACK=99 step1fix=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_SLACK=0" 120b:1 20b:1
finish_call
