#!/usr/bin/env bash
# Session 35, call 2 (~2 min, ~6 with the GPU tests at its end; any card). It did not run in
# session 35 (too little device time left after refused starts): run it first in session 36,
# prepared with BASE=0926086 BASE_TESTS=gpu_test_cuda_forward SLIM=all (the GPU tests at its end
# need every test binary: ~113 MB, gzipped to fit the carry). Builds:
#   base: 0926086 (be86549's step kernel: 0812aab's SASS, the old phase 4).
#   new:  the head (4ec404a on): the router by columns, second form, as the step kernel's only
#         way (no knob; the step kernel itself stays off by default): phase 4 and its grid
#         barrier gone; each O row's warp loads h and the gain of its row before the row's dot
#         product and writes h + o, its
#         square and g (h + o) (one block sync after O instead of two, no extra L2 round trip);
#         the accumulators in 8 groups (block b into b % 8: 132 blocks no longer queue on 8 L2
#         lines); in phase 5 warp 0 alone copies the groups and the shares (cp.async), sums them
#         in one order, takes the top-k and releases the producer, with no block sync before.
# Why: call 1b's first form removed phase 4 (3.7 -> 0.4 µs) but O grew 1.9 µs and the routing
# 1.3 µs (2.7 -> 4.0 µs after phase 5's start): h's L2 round trip and two syncs after O, and
# the shares summed by the block behind two syncs before the top-k; the single accumulator group
# (16,896 atomic adds on 8 lines) is the other suspect for O.
# Predictions (before the run): (h) passes (relL2 near call 1b's 7.79e-3 / 1.83e-3); phases:
# O 6.8 -> 7.0-7.8, phase 4 -> ~0.3, the routing done 2.7 -> 2.4-3.0; the layer 69.6 -> 66-68;
# decode step vs step0 +2 to +4 % at batch 1 (120b and 20b).
# Rule: kept if step beats step0 by more than 1 % at 120b batch 1, does not lose at 20b batch 1,
# and (h) passes; else the step kernel goes back to be86549's.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s35c2 "session 35 call 2: the router by columns, second form"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
step_kernel_phases new
# every GPU test program (the default path's device code is session 34's; its host side no longer
# builds the step kernel's table with the kernel off)
gpu_tests_table
finish_call
