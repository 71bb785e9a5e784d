#!/usr/bin/env bash
# Session 32, call 2 (~2.5 min, the decode rounds before the phases: little device time was left; any card: base and new in the same call).
#   base 262601f (call 1's new: expert tiles from a ticket counter, slack 2; the layer 68.8 µs,
#        0.970 of the loop at 120b and 20b batch 1 on an H100).
#   new  base + phase 2's first chunk of keys asked for at phase 0's end instead of phase 1's (the
#        buffer is free since the layer before's down loop; during phase 1 the DRAM carries little),
#        and the slack knob removed (fixed at 2); since 0fc8519 also the attention's inner marks in
#        the blocks' probe (as_attention's mark hook: off unless the probe is set; attn_stream's
#        cubin compared byte-equal), whose table (bench modes 3-4) says which round trip of the
#        attention phase is long.
# Why: call 1's blocks' probe put the attention phase's blocks at a median 6-7 µs in the full
# layers and the last at ~9 µs, for one chunk of 64 keys a split: the chunk's DRAM round trip is
# taken under O's rows' flood (they stream from phase 1's barrier on).
# Prediction (before the run): (h) the same figures (8.75e-3 / 1.79e-3); phase 2 9.6 -> 7-8.5 µs,
# phase 0 + 1 within +0.5 µs; the layer 68.8 -> 66.5-68; the step kernel 0.970 -> 0.98-1.0 of the
# loop. Rule: kept if the layer drops by more than 1 % and (h) passes; else reverted.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s32c2 "session 32 call 2: the attention's first keys asked for a phase earlier"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step1=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
step_kernel_phases new
finish_call
