#!/usr/bin/env bash
# Session 28, call 1 (~7 min): every GPU test binary (test_moe holds the small kernel's loop forms
# to the default loop's bits), then the two loop forms against the default, and the closing
# figures beside the roofline.
#  (1) gpu_tests_table.
#  (2) 120b decode 1, 8, 64, 256 and 20b decode 1, 64: the default loop against
#      GPTOSS_MOE_SMALL_LOOP=1 (moe_small.cuh's LOOP 1: the steady loop unrolled by two, without
#      copies or zeroings, 464 -> 430 and 525 -> 473 instructions a batch of six steps) and =2
#      (LOOP 2: the same unbounded loads, not unrolled: no zeroings, the copies stay, 446 and 498),
#      neither reading a byte past the item; three rounds.
#      Prediction (written before the run): session 27's unbounded, unrolled form lost 1.5-3.4 %.
#      If the bytes it read past each item were the cost, both forms gain 0-3 % at 64-256 and 0-1 %
#      at 1-8 (1 more than 2); if the doubled loop's code was, form 1 loses 1-3 % and form 2 gains
#      0-2 %. Decision: the best form beyond the spread at some batch, losing beyond it nowhere,
#      becomes the only loop; if neither, both go.
#  (3) roofline_and_latency (the closing figures), and 120b decode 1024 (the register-A kernel
#      with uniform descriptors; does not fit an H100: on an H200 only).
# Needs .devcarry from scripts/device/prepare.sh, then gzip.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s28c1 "session 28 call 1: the small kernel's two-batch loop; closing figures"
gpu_tests_table
ROUNDS=3 decode_variants "default=- loop1=GPTOSS_MOE_SMALL_LOOP=1 loop2=GPTOSS_MOE_SMALL_LOOP=2" \
  120b:1,8,64,256 20b:1,64
roofline_and_latency
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo -e "\n## 120b decode 1024 (H200) $(t)" | tee -a "$sum"
  timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches 1024 --prefill "" \
    --output-json "$out/latency-120b-1024.json" >"$out/logs/lat-1024.log" 2>&1
  grep -E "^\| synthetic" "$out/logs/lat-1024.log" | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs tests v-* 2>/dev/null) &&
  rm -rf "$out"/logs "$out"/tests "$out"/v-* && mv /tmp/logs.tgz "$out/"
