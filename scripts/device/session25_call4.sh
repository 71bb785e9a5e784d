#!/usr/bin/env bash
# Session 25, call 4 (~7 min): the attention kernel launched early (GPTOSS_ATTN_EARLY=1: PDL's
# attribute beside the cooperative one; the consumers wait for the previous kernel, the producer
# streams its first QKV rows before that). Unrun before this call.
#  (1) every GPU test binary with GPTOSS_ATTN_EARLY=1 in the environment (test_attn_stream also runs
#      its own early cases; the forward test's every decode step at one token launches it early);
#  (2) test_attn_stream --bench's early table (4 layers a graph, the kernel after the kernel);
#  (3) the step: default against early, 120b and 20b batch 1, three interleaved rounds;
#  (4) roofline and bench latency with early on (the figures it would ship with).
# Prediction (session 25, before any run; H100): the early blocks land as the MoE down kernel's
# leave its SMs and their producers fill the ring (16 stages, 184 KB an SM) before the wait returns:
# the launch's ~3 µs hidden and QKV's first ~10 % of bytes in flight early, 3-5 µs a layer: 120b
# batch 1 +3-6 % (334 -> ~350 tok/s), 20b +3-5 %. The bench (kernel after kernel): early / plain
# 0.92-0.96. Decision: above the default beyond the spread at both, and every test passing under
# it -> on by default.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s25c4 "session 25 call 4: the attention kernel launched early"
GPTOSS_ATTN_EARLY=1 gpu_tests_table
echo -e "\n## gpu_test_attn_stream --bench, the early table $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E 'early|^\| [12] \| (full|sliding) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$|checks' | tee -a "$sum"
ROUNDS=3 decode_variants "default=- early=GPTOSS_ATTN_EARLY=1" 120b:1 20b:1
GPTOSS_ATTN_EARLY=1 roofline_and_latency
t | tee -a "$sum"
tar -czf /tmp/bundle.tgz -C "$out" $(cd "$out" && ls -d logs tests v-* 2>/dev/null)
mkdir -p /tmp/s25c4-rest && mv "$out"/logs "$out"/tests "$out"/v-* /tmp/s25c4-rest/ 2>/dev/null
mv /tmp/bundle.tgz "$out/bundle.tgz"
ls -la "$out" | tee -a "$sum"
