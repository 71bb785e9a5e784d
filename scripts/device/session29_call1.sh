#!/usr/bin/env bash
# Session 29, call 1 (~5 min on an H100; on an H200 run session28_h200.sh first): every GPU test
# binary at the head, then the attention block at one token by phase (gpu_test_attn_stream --bench:
# the kernel whole, ended after QKV's barrier, after the attention's, the launch alone, one grid
# barrier, the ring alone), the figure the step kernel's design needs: how much of the attention
# block's ~36 µs a layer (session 28 call 3) is chain and how much is bytes.
# Prediction (session 23's figures, H100): whole ~34 µs, to QKV's barrier ~17, to the attention's
# ~25, launch 3.0, one barrier +2, ring alone ~20.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c1 "session 29 call 1: the head's GPU tests; the attention block by phase"
gpu_tests_table
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 240 $bin/gpu_test_attn_stream --bench >"$out/logs/attn-bench.log" 2>&1
grep -E "^\|" "$out/logs/attn-bench.log" | tee -a "$sum"
roofline_and_latency
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests && mv /tmp/logs.tgz "$out/"
