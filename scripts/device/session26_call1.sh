#!/usr/bin/env bash
# The next session's first call (~6 min), written in session 25: the head's baselines on whatever
# card comes (an H200 above all: the last H200 figures are session 20's), and the two default-off
# form of session 25 kept behind a switch re-measured there, where a launch is a larger share of a
# shorter step.
#  (1) every GPU test binary;
#  (2) roofline and bench latency (120b decode 1 / 8 / 64, 20b decode 1), a lone 1k and 8k prefill;
#  (3) the step: default against the early launch (GPTOSS_ATTN_EARLY=1), 120b and 20b batch 1,
#      three interleaved rounds.
# Prediction (session 25, H100 figures: early +0.6 to +1.7 %): on an H200 early +1-3 %. Decision:
# early beyond the spread at both models -> on by default (every test passed under it in session
# 25's call 4); otherwise it is removed.
# Needs .devcarry (scripts/device/prepare.sh, then gzip). Prints $OUT/summary.md; the logs come
# back in logs.tgz.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s26c1 "session 26 call 1: baselines and the early launch"
gpu_tests_table
roofline_and_latency
echo -e "\n## lone prefill $(t)" | tee -a "$sum"
timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill 1024,8192 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
ROUNDS=3 decode_variants "default=- early=GPTOSS_ATTN_EARLY=1" 120b:1 20b:1
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests v-* 2>/dev/null) && rm -rf "$out"/logs "$out"/tests "$out"/v-* && mv /tmp/logs.tgz "$out/"
