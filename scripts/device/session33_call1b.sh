#!/usr/bin/env bash
# Session 33, call 1b: call 1 with the wait probe first (little device time was left: a run cut
# short still returns what it wrote). Call 1 (~3.5 min; any card: the builds held against each
# other in the same call).
#   base  262601f (session 32 call 1's new: expert tiles from a ticket counter; the layer 68.8 µs,
#         0.970 of the loop at 120b and 20b batch 1 on an H100).
#   base2 a44d95a: base + phase 2's first chunk of keys asked for at phase 0's end (0fc8519), the
#         attention's inner marks in the blocks' probe (1f26b43), the review's shared expert_chunk
#         (4efad34). Session 32's call 2, not run then.
#   new   base2 + the wait probe (step_kernel_set_wait_probe: off unless set; its off path adds a
#         few selects and branches to the expert loops); step4 = new with GPTOSS_STEP_QKV_L2=64:
#         the producer asks the next layer's QKV pairs of its block into L2 while it waits for the
#         routing (the DRAM idle ~3.5 µs a layer).
# Predictions (before the run):
#   (h) at new: the same figures as before (8.75e-3 / 1.79e-3, top-1 1.0000 on the clear rows).
#   base2 vs base: phase 2 9.6 -> 7-8.5 µs, phases 0 + 1 within +0.5 µs, the layer 68.8 -> 66.5-68,
#   decode 0.970 -> 0.98-1.0 of the loop. Rule: 0fc8519's prefetch move kept if base2's decode
#   beats base's by more than 1 % at 120b batch 1 (the phases of base2 only, against session 32
#   call 1's base: refused starts left too little device time for both) and (h) passes; else
#   reverted.
#   new vs base2: within the rounds' spread (the probe's off path); if new is slower by more than
#   1 %, the probe goes behind a compile-time switch.
#   step4 vs new: gate_up's arithmetic alone took as long as the kernel whole (session 32: 22.3
#   against 23.9 µs), so its stream is not what bounds it, and 29.5 MB more asked during it should
#   cost little there, while down's end and phase 1 then copy QKV from L2: the layer -2 to -5 µs,
#   decode +3-7 %. Rule: kept (the default inside the step kernel) if step4 beats new by more than
#   1 % at both models; else removed.
#   The wait probe (what I expect, to be read, not a rule): gate_up's consumer warps wait mostly for
#   the copies (> 50 % of their loop), the producer seldom for a free stage (< 20 %); the routing's
#   3.5 µs mostly before the logits are in (the barrier's exit and an L2 round trip: ~2 µs).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s33c1 "session 33 call 1: the early keys; the expert phases' waits"
echo -e "\n## the wait probe: new $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_cuda_forward --step-kernel --waits >"$out/logs/waits.log" 2>&1
grep -E "^\||^the |FAILED|passed" "$out/logs/waits.log" | tee -a "$sum"
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step2=BIN=.devcarry/base2/gptoss+GPTOSS_STEP_KERNEL=1 step3=GPTOSS_STEP_KERNEL=1 step4=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_QKV_L2=64" 120b:1 20b:1
step_kernel_phases base2
finish_call
