#!/usr/bin/env bash
# Session 41, call 1 (~7-8 min; an H200 if one is lent). Prepare with SLIM=all TRACE=1
# bash scripts/device/prepare.sh. No new device code: the head's figures, every GPU test at the head,
# and one host-only question asked again.
# 1. roofline_and_latency: the head's figures beside the H200's roofline.
# 2. GPTOSS_ATTN_STREAM=2 at 2 and 4 tokens (attn_stream with the attention norm inside; the router
#    then is router_mma, the routing by columns being one-token only). Session 23 measured the
#    kernel's first form there: -0.2 to -2.6 % at 2 tokens, -7 to -12 % at 4, so the default takes
#    it at one token only. Since then the kernel itself has gained (ring depth, phases, loads at
#    its start: sessions 24-38), and the launches it replaces at 2-4 tokens cost QKV (cuBLASLt),
#    rope_kv, attn_decode + merge, dense_mma O and the norm_add (~38 µs a layer at 8 tokens on an
#    H100, session 40's call-3 table) against attn_stream's ~35 µs at one token.
#    Prediction: 2 tokens +0 to +3 %, 4 tokens -3 to +1 %.
#    Rule (written before the run): the default at a token count where both 120b and 20b gain
#    more than the rounds' spread; else nothing changes.
# 3. Every GPU test program at the head.
# 4. On an H200 only (no H200 figure since session 20/23): the step by kernel at batch 1, 8, 64, and
#    issue 14's bench latency rows (decode 256 and 1024, prefill 1k and 8k).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s41c1 "session 41 call 1: the head's figures, attn_stream at 2-4 tokens, every GPU test"
roofline_and_latency
ROUNDS=3 decode_variants "base=- as2=GPTOSS_ATTN_STREAM=2" 120b:2,4 20b:2,4
test_table
before 420 && TEST_LIMIT=150 gpu_tests_table
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  if before 470; then decode_by_kernel 1 8 64; fi
  # issue 14's rows on the H200 (decode 256 and 1024 do not fit an H100 beside the 120b weights)
  if before 480; then
    echo -e "\n## issue 14: 120b decode 256, 1024, prefill 1k, 8k $(t)" | tee -a "$sum"
    for rb in 120b:256 120b:1024; do
      $bin/gptoss roofline --model ${rb%%:*} --batch ${rb##*:} --context 1024 | grep -E "^bound" | sed "s/^/${rb} /" | tee -a "$sum"
    done
    timeout 100 $bin/gptoss bench latency --model synthetic:120b --batches 256,1024 --prefill 1024,8192 \
      --output-json "$out/latency-120b-large.json" >"$out/logs/lat-120b-large.log" 2>&1
    grep -E "^\| synthetic" "$out/logs/lat-120b-large.log" | tee -a "$sum"
  fi
fi
finish_call
