#!/usr/bin/env bash
# Session 30, call 3 (~5 min; an H100 is fine): phase 2's split-K merge in one L2 round trip
# (attn_stream_phases.cuh: every partial loaded at once, the sums in the same order), held against
# its base (6fe51ee: the merge reading the (max, sum) pairs twice, a round trip each), and every GPU
# test of the head.
#  (1) every GPU test binary (gpu_test_attn_stream holds the kernel to the launches' bits), and the
#      step kernel's (h) checks (its attention phase is the same code);
#  (2) gpu_test_attn_stream --bench (call 2's "off" table is the base: T = 1 full 33.3 µs);
#  (3) decode batch 1, base against new, 120b and 20b, three interleaved rounds.
# Prediction (before the run): every test passes with the same bits. The last block of each KV
# head's splits saves one L2 round trip under the O stream (~0.7-1.5 µs): the kernel at T = 1
# 33.3 -> 32-32.8 µs; 120b and 20b batch 1 +1-2.5 %. Rule: kept unless it loses beyond the spread
# (the same bits, one round trip fewer); the step kernel (off by default) is compared too.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c3 "session 30 call 3: phase 2's merge in one round trip; every GPU test"
gpu_tests_table
test_table
run_logged step_kernel 200 $bin/gpu_test_cuda_forward --step-kernel
grep -E "step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_attn_stream --bench >"$out/logs/bench.log" 2>&1
grep -E "^\|" "$out/logs/bench.log" | tee -a "$sum"
ROUNDS=3 decode_variants "base=BIN=.devcarry/base/gptoss new=- step0=BIN=.devcarry/base/gptoss+GPTOSS_STEP_KERNEL=1 step1=GPTOSS_STEP_KERNEL=1" 120b:1 20b:1
finish_call
