#!/usr/bin/env bash
# Session 29, call 8 (~7 min): the closing call.
#  (1) every GPU test binary at the head (the step kernel off by default; the forward test runs
#      its (h) checks against the layer loop, eager and graphs);
#  (2) the step kernel by phase with the experts' probes, after two accumulators a chunk (call 7:
#      the experts' arithmetic alone 26.5 µs for gate_up, the stream alone 23.5, whole 31.7);
#  (3) decode batch 1, the loop against the step kernel, 120b, two rounds;
#  (4) the closing figures (roofline and bench latency, the default).
# Prediction (before the run): the arithmetic alone 26.5 -> 19-23 µs, gate_up whole 31.7 -> 26-29,
# the layer 87 -> 81-85; the step kernel 0.80 -> 0.82-0.86 of the loop. It stays off by default
# (the rule of calls 5-6: only if it beats the loop beyond the spread at both models).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c8 "session 29 call 8: the head's GPU tests, the step kernel's probes, closing figures"
gpu_tests_table
grep -E "^\(h\)|step kernel vs" "$out"/tests/gpu_test_cuda_forward.log | tee -a "$sum"
echo -e "\n## the step kernel by phase, with the experts' probes $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/bench.log" 2>&1
grep -E "^\||^the |FAILED|passed" "$out/logs/bench.log" | tee -a "$sum"
ROUNDS=2 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1" 120b:1
roofline_and_latency
t | tee -a "$sum"
rm -rf "$out"/v-*/vlogs
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests && mv /tmp/logs.tgz "$out/"
