#!/usr/bin/env bash
# Session 25, call 7 (~3 min), asked of an H200 (the last H200 figures are session 20's): roofline
# and bench latency at the head (120b decode 1 / 8 / 64, 20b decode 1), a lone 1k and 8k prefill,
# and the early launch against the default at batch 1 (two rounds). On whatever card comes: the
# reply names it, and the figures are that card's.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s25c7 "session 25 call 7: the head's figures (an H200 if lent)"
roofline_and_latency
echo -e "\n## lone prefill $(t)" | tee -a "$sum"
timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill 1024,8192 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
ROUNDS=2 decode_variants "default=- early=GPTOSS_ATTN_EARLY=1" 120b:1 20b:1
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" logs v-* 2>/dev/null && rm -rf "$out/logs" "$out"/v-* && mv /tmp/logs.tgz "$out/"
