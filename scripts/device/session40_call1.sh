#!/usr/bin/env bash
# Session 40, call 1 (written in session 39 as its call 2, which the device refused: its budget went
# to refused starts; ~3-4 min; any card). Prepare with
#   SLIM="gptoss gpu_test_cuda_forward gpu_test_moe" TRACE=1 bash scripts/device/prepare.sh
# Session 39's call 1 removed GPTOSS_QKV_PREFETCH and GPTOSS_ROUTE_DIRECT. Its CUPTI table (H100): gate_up 16.2-16.9
# µs and down 9.7-10.0 a layer for 35.3 and 17.6 MB (2.1 and 1.8 TB/s against ~3.1), so ~5 µs of
# each launch is not streaming. The small kernel's start is a chain of L2 loads before the first
# weight request and before the token row is staged: n_touched, then touched[i], then count and
# offset, then (gate_up) pair_sorted, then the row; its end is another: the bias (model memory),
# and for down pair_sorted then topk_w, after the last multiply of every warp.
# The trial (GPTOSS_MOE_ONE=1, off by default; moe_small.cuh's ONE form, own instantiations, the
# default kernels byte-equal): at one token the touched count and the expert are loaded together,
# count = 1 and offset = i (a token's experts are distinct), gate_up's row is 0, and the epilogue's
# bias, pair and weight are asked for at the item's start. The same bits (gpu_test_moe at T = 1,
# folded and two-multiply and under expert parallelism; the forward test whole with it on).
# Prediction: gate_up -1.5 to -2.5 µs, down -1 to -2 µs a launch (CUPTI); 120b batch 1 +3 to +6 %,
# 20b alike. Rule: the default if it gains more than the rounds' spread at 120b batch 1 with no loss
# at 20b and the tests pass; else removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s40c1 "session 40 call 1: the small MoE kernels' one-token form (GPTOSS_MOE_ONE)"
test_table
# the order for a short budget (~200 s): the bits, the rounds, the kernel table, then the forward test
run_logged moe 100 $bin/gpu_test_moe
grep -E "one-token|FAILED" "$out/logs/moe.log" | head -8 | tee -a "$sum"
ROUNDS=3 decode_variants "base=- one=GPTOSS_MOE_ONE=1" 120b:1 20b:1
if before 120; then
  GPTOSS_MOE_ONE=1 decode_by_kernel 1
  mv "$out/bubble-b1.md" "$out/bubble-b1-one.md"
fi
if before 150; then
  GPTOSS_MOE_ONE=1 run_logged forward_one 90 $bin/gpu_test_cuda_forward --skip-tp
  grep -E "^summary|FAILED" "$out/logs/forward_one.log" | head -12 | tee -a "$sum"
fi
before 230 && decode_by_kernel 1
finish_call
