#!/usr/bin/env bash
# Session 34, call 1 (~8 min; any card: four builds in the same call). Prepare with
# BASE=0812aab BASE_TESTS=gpu_test_cuda_forward, then 38292b3's gptoss and gpu_test_cuda_forward into
# .devcarry/base2/, and new2's into .devcarry/new2/.
#   base  0812aab (session 33's head: the early keys reverted, the wait probe compiled out; its
#         cubin not byte-equal to the measured a44d95a-without-the-move, so base is measured here).
#   base2 38292b3: base + down's activations staged by cp.async, every copy of a thread in flight
#         at once (they were ~6 serial L2 round trips: 2.7 µs of phase 6 in session 33's probe).
#   new   base2 + (a) the top-k's rounds by redux.sync max/min on order-preserving keys (every
#         caller of topk_warp: the loop's moe_route too, so the default path changes) + (b) the
#         producer reads the layer's expert arrays before the routing's wait.
#   new2  new + down's chunks by two warps each, half the k steps each (warp w: half w / 4 of the
#         stages n = w mod 4); the second to finish releases the stage; the tile meets 4 parts.
#         With GPTOSS_STEP_UP_HALVES=1 (a trial knob, off by default) gate_up's chunks the same way.
# Predictions (before the run):
#   base2: (h) the same figures (8.75e-3 / 1.79e-3); phase 6 12.9 -> 10.5-11.5 µs; the step kernel
#          0.972 -> 0.99-1.0 of the loop at 120b batch 1.
#   new:   the same experts as cpu_topk_softmax (test_moe's ties, signed zeros added); the top-k's
#          rounds 2.0 -> ~0.8 µs, the first chunk ~0.3 µs sooner: phase 5 -1 to -1.5 µs, the step
#          kernel +1 to +2 % over base2; the loop +0 to +0.5 % (its moe_route's top-k).
#   new2:  (h) passes with relL2 within 1.5x of new's; phase 6 -1.5 to -2 µs (the warps' worst
#          work 2 chunks -> 1.5); the step kernel +2 to +3 % over new.
#   new2 + GPTOSS_STEP_UP_HALVES=1: (h) passes; gate_up's tail (its last chunk's multiply) halved:
#          phase 5 -1 to -1.5 µs, the step kernel +1 to +2 % over new2.
# Rules: base2 kept if its step decode beats base's by more than 1 % at 120b batch 1 and new's (h)
# passes, else 38292b3 reverted. new's top-k kept if every GPU test passes and the loop is not
# slower than base's by more than 0.5 % at 120b or 20b batch 1; the producer's reads kept if the
# step kernel gains over base2 (either model) and (h) passes. new2 kept if it beats new by more
# than 1 % at 120b batch 1 and its (h) passes. GPTOSS_STEP_UP_HALVES made the step kernel's way if
# it beats new2 by more than 1 % at 120b batch 1 and (h) passes with it, else removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s34c1 "session 34 call 1: cp.async staging; redux top-k; expert arrays read early; down by half chunks"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
run_logged step_kernel_new2 200 .devcarry/new2/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel_new2.log" | tee -a "$sum"
GPTOSS_STEP_UP_HALVES=1 run_logged step_kernel_new2_uph 200 .devcarry/new2/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel_new2_uph.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop0=BIN=.devcarry/base/gptoss loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step1=BIN=.devcarry/base2/gptoss+GPTOSS_STEP_KERNEL=1 step2=GPTOSS_STEP_KERNEL=1 step3=BIN=.devcarry/new2/gptoss+GPTOSS_STEP_KERNEL=1 step4=BIN=.devcarry/new2/gptoss+GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_UP_HALVES=1" 120b:1 20b:1
step_kernel_phases new2 new base2
GPTOSS_STEP_UP_HALVES=1 step_kernel_phases new2
echo -e "\n## GPU tests (new) $(t)" | tee -a "$sum"
gpu_tests_table
step_kernel_phases base
finish_call
