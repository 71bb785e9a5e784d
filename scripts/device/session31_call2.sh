#!/usr/bin/env bash
# Session 31, call 2 (~7 min; an H100 is fine): the counted grid barrier on the default path, and
# the step kernel's next-layer QKV rows asked into L2 ahead. Three builds:
#   base  b4a32a2 (session 30's head);
#   base2 4279dca: call 1's counted barrier in the step kernel (the expert loop as the base's) and
#         in attn_stream (the layer loop's attention at one token: two barriers a layer);
#   new   a57664e = base2 + the step kernel's producer asks the next layer's QKV rows of its block
#         into L2 (evict_last) once it has issued O's rows and the router row (phases 3-4, DRAM
#         ~1.1 TB/s), so that their ring copies during the experts' phases (which streamed ~25 MB
#         of them beside the experts' 53 MB at ~3 TB/s) come from L2.
#  (1) every GPU test of new (attn_stream's barrier is on the default path), the (h) checks;
#  (2) the phases with the experts' probes of base2 and new;
#  (3) decode batch 1: the loop of base and of new, the step kernels of base2 and new, 120b and
#      20b, two interleaved rounds.
# Prediction (before the run): every GPU test passes. The loop: ~1 µs a barrier, 2 a layer -> 120b
# decode 1 +2-3 % (339 -> 346-350 tok/s), 20b +2-3 %. The step kernel base2: the layer 77.0 ->
# 70-71.5 µs, 0.96-0.99 of the new loop. new: phases 5 + 6 whole 41 -> 36-38 µs, phases 3-4 up by
# 0.5-1.5; the layer 2-5 µs shorter than base2's; the stream-alone phases 5 + 6 at least 4 µs
# shorter (if the prefetched lines outlive the experts' stream; if not, no gain or a loss).
# Rules: attn_stream's barrier stays if the new loop is faster beyond the spread, or equal and
# every test passes (it is also simpler to reason about: no generation word); the prefetch stays if
# the layer drops by more than 2 % against base2; the default flips only when the step kernel beats
# the loop beyond the spread at both models.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31c2 "session 31 call 2: counted barriers on the default path; QKV into L2 ahead"
echo -e "\n## GPU tests (new) $(t)" | tee -a "$sum"
echo -e "| test | checks |\n| --- | --- |" | tee -a "$sum"
gpu_tests_table
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
step_kernel_phases base2 new
ROUNDS=2 decode_variants "loop0=BIN=.devcarry/base/gptoss loop1=- step1b=BIN=.devcarry/base2/gptoss+GPTOSS_STEP_KERNEL=1 step1=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
finish_call
