#!/usr/bin/env bash
# Session 29, call 7 (~2 min): the step kernel's phases with the experts' two probes.
#  Call 6 (one copy a chunk) left the experts where they were: gate_up 31.9 µs, down 16.1 (the
#  layer 86.7; decode 0.802 of the loop at 120b, 0.815 at 20b). So copies were not the limit.
#  The probes split the experts' phases: 1 = their chunks streamed and released unmultiplied (the
#  stream alone), 2 = multiplied but not copied (the arithmetic alone).
#  Prediction (before the run): the arithmetic alone ~25-30 µs for gate_up (8 consumer warps an SM
#  are too few to cover the dequantisation's and the MMAs' latencies: the small MoE kernel runs 16
#  a SM; moe_fused measured the same in session 4), the stream alone ~12-15.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c7 "session 29 call 7: the step kernel's expert probes"
echo -e "\n## the step kernel by phase, with the experts' probes $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/bench.log" 2>&1
grep -E "^\||^the |FAILED|passed" "$out/logs/bench.log" | tee -a "$sum"
t | tee -a "$sum"
