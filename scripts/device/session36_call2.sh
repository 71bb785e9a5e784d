#!/usr/bin/env bash
# Session 36, call 2 (~7-9 min; any card): measurements only. Prepare with
#   SLIM="gptoss gpu_test_cuda_forward" TRACE=1
# 1. gpu_test_cuda_forward with call 1's seed: its test (c) (the default path on a 2-layer 20b
#    checkpoint at real width, CUDA against the fp32 CPU, a 40-token prompt) failed two checks
#    there (relL2 3.9e-2 > 3e-2 and one top-1 flip over the 7 rows whose CPU router gaps are at
#    least 1e-2) though the default path's device code is session 34's, which passed. The test now
#    prints every row's gap and error. Expected: the same failure (the same seed, the same
#    tokens), one row with a gap just above 1e-2 carrying the error: an expert swap the near-tie
#    rule does not excuse (a test threshold question, not a kernel fault).
# 2. `gptoss roofline` and `bench latency` (120b decode 1, 8, 64; 20b 1) at the head.
# 3. The layer loop by kernel at batch 1 and 8 (CUPTI; issue 13's per-kernel table with bubble).
# 4. ncu's source counters on the step kernel (off by default; its expert k loop runs at ~230
#    cycles a k step of ~76 instructions with two warps an SMSP: why), if time is left.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s36c2 "session 36 call 2: the failing seed; roofline and latency; the loop by kernel; ncu"
test_table
run_logged forward_seed 240 $bin/gpu_test_cuda_forward --seed 10216668540260478008
grep -E "20b x 2 layers|^summary" "$out/logs/forward_seed.log" | tee -a "$sum"
roofline_and_latency
decode_by_kernel 1 8
if [ $(($(date +%s) - start)) -lt 240 ]; then ncu_step_kernel head 900 30; fi
finish_call
