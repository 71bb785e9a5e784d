#!/usr/bin/env bash
# Session 28, call 3 (~6 min): the head as it lands (the small kernel's two-batch loop, the
# register-A MoE's descriptor built once, the early down projection removed): every GPU test binary,
# the closing figures beside the roofline, the batch-1 step by kernel, and one user served 1k/1k
# (issue 13's served figure; 10 prompts, 2 warm-ups).
# Prediction (written before the run): the figures of call 1 within the spread at decode (the
# loop +1.5 % at batch 1 is inside the lease-to-lease spread), prefill 1k +2 %; served one user
# ~335 tok/s (session 24: 330.5 on an H100).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s28c3 "session 28 call 3: the head's GPU tests and closing figures"
gpu_tests_table
roofline_and_latency
echo -e "\n## 120b prefill 1k, 8k $(t)" | tee -a "$sum"
timeout 150 $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill 1024,8192 \
  --output-json "$out/latency-120b-prefill.json" >"$out/logs/lat-prefill.log" 2>&1
grep -E "^\| synthetic" "$out/logs/lat-prefill.log" | tee -a "$sum"
decode_by_kernel 1
SERVE_LIMIT=200 served_10xc 1
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests && mv /tmp/logs.tgz "$out/"
