#!/usr/bin/env bash
# Session 38, call 3 (~4-5 min; any card). Prepare with
#   SLIM="gptoss gpu_test_cuda_forward gpu_test_attn_stream" TRACE=1 bash scripts/device/prepare.sh
# Calls 1-2 measured the trials and removed the losers (GPTOSS_ROUTER_COLS=2-4, GPTOSS_MOE_EARLY_E,
# GPTOSS_ATTN_PDL); call 1's CUPTI table (H100) gives route_sums 5.3 µs a launch, 191 µs a 120b step
# (6.8 %) for one block's work: its chain is four L2 round trips in a row (the shares, then the
# sums, then the logits read back, then h's row) besides the top-k.
# The trial (GPTOSS_ROUTER_COLS=2, route_sums.cu's route_sums_early_kernel; the same bits, held by
# gpu_test_attn_stream's router case): every load at the block's start, the logits handed to the
# top-k in shared memory, the MoE's row written before the top-k. Prediction: route_sums 5.3 ->
# 3.3-4.0 µs, 120b batch 1 +1.5 to +3 % over the default (=1), 20b alike.
# Rule: the default becomes 2 if it gains more than the rounds' spread at 120b batch 1 (and no loss
# at 20b) and gpu_test_attn_stream and the forward test whole with it pass; then route_sums_kernel
# goes. Else the early form is removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s38c3 "session 38 call 3: route_sums' early form (GPTOSS_ROUTER_COLS=2)"
test_table
run_logged attn_stream 120 $bin/gpu_test_attn_stream
grep -E "router by columns|FAILED" "$out/logs/attn_stream.log" | head -8 | tee -a "$sum"
ROUNDS=3 decode_variants "rc1=- rs2=GPTOSS_ROUTER_COLS=2 loop=GPTOSS_ROUTER_COLS=0" 120b:1 20b:1
if before 200; then
  GPTOSS_ROUTER_COLS=2 run_logged forward_rs2 200 $bin/gpu_test_cuda_forward --skip-tp
  grep -E "^summary|FAILED" "$out/logs/forward_rs2.log" | head -12 | tee -a "$sum"
fi
if before 420; then
  GPTOSS_ROUTER_COLS=2 decode_by_kernel 1
  mv "$out/bubble-b1.md" "$out/bubble-b1-rs2.md"
fi
before 480 && roofline_and_latency
finish_call
