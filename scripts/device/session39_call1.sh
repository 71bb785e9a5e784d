#!/usr/bin/env bash
# Session 39, call 1 (~5-6 min; any card; written in session 38 as its call 4, which the device
# refused: its budget ran out on refused starts). Prepare with
#   SLIM=all TRACE=1 bash scripts/device/prepare.sh
# The trial (off by default): GPTOSS_QKV_PREFETCH=N, the routed attn_stream kernel's producer lane,
# after its last copy, asks L2 (cp.async.bulk.prefetch) for its block's first N QKV pairs of the
# next layer (a block has ~20 pairs at 120b: N = 64 is all of them, 29.5 MB over the grid);
# GPTOSS_QKV_PREFETCH_KEEP=1 adds an evict_last hint. DRAM then fetches them during route_sums
# (4.2 µs, DRAM idle) and the experts (~27 µs at ~2 TB/s of the card's ~3.2), so the next layer's
# phase 1 (16.8 µs for 29.5 MB, launch included) reads them from L2. Predictions (120b batch 1,
# over the default): N = 6 (~9 MB) +1 to +2 %; N = 64 +2 to +6 % if L2 keeps them through the
# experts' 53 MB (50 MB L2), less without the hint. Risks: the experts slowed by the extra DRAM
# traffic; the lines evicted before use (then a loss of the prefetch's bandwidth).
# Rule: the best setting becomes the default if it gains more than the rounds' spread at 120b
# batch 1 without a loss at 20b, and gpu_test_attn_stream (its router case runs it: the same bits)
# and the forward test with it pass; else the trial is removed.
# Second trial (off by default, new in session 39): GPTOSS_ROUTE_DIRECT=1, route_sums' kernel
# with the one token's grouping written directly from the k chosen experts (group_one_token:
# counts, offsets, touched list, tiles, the pairs' places from the k indices in shared memory) in
# place of route_small_block's counting loop and three block scans (two block barriers). The
# same routing buffer, byte for byte (gpu_test_attn_stream's router case, step 3). Prediction:
# route_sums 4.15 -> 3.5-3.8 µs a launch (CUPTI), 120b batch 1 +0.3 to +0.8 % (inside the
# spread: the CUPTI table decides). Rule: the default if its launch is >= 0.3 µs shorter, the
# batch-1 rounds show no loss beyond the spread and the tests pass; else removed.
# Then: the loop by kernel at batch 1 (default and N = 64 with the hint), roofline and latency,
# every GPU test program at the head as time allows.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s39c1 "session 39 call 1: the next layer's QKV into L2 (GPTOSS_QKV_PREFETCH), the direct one-token grouping (GPTOSS_ROUTE_DIRECT); the head's tests"
test_table
ROUNDS=3 decode_variants "base=- pf6=GPTOSS_QKV_PREFETCH=6 pf12k=GPTOSS_QKV_PREFETCH=12+GPTOSS_QKV_PREFETCH_KEEP=1 pf64=GPTOSS_QKV_PREFETCH=64 pf64k=GPTOSS_QKV_PREFETCH=64+GPTOSS_QKV_PREFETCH_KEEP=1 direct=GPTOSS_ROUTE_DIRECT=1" 120b:1 20b:1
run_logged attn_stream 120 $bin/gpu_test_attn_stream
grep -E "router by columns|FAILED" "$out/logs/attn_stream.log" | head -8 | tee -a "$sum"
if before 220; then # both trials at once (a failure is then traced with each alone)
  GPTOSS_QKV_PREFETCH=64 GPTOSS_QKV_PREFETCH_KEEP=1 GPTOSS_ROUTE_DIRECT=1 run_logged forward_pf 120 $bin/gpu_test_cuda_forward --skip-tp
  grep -E "^summary|FAILED" "$out/logs/forward_pf.log" | head -8 | tee -a "$sum"
fi
if before 290; then
  GPTOSS_QKV_PREFETCH=64 GPTOSS_QKV_PREFETCH_KEEP=1 decode_by_kernel 1
  mv "$out/bubble-b1.md" "$out/bubble-b1-pf64k.md"
  GPTOSS_ROUTE_DIRECT=1 decode_by_kernel 1
  mv "$out/bubble-b1.md" "$out/bubble-b1-direct.md"
  decode_by_kernel 1
fi
before 330 && roofline_and_latency
before 370 && TEST_LIMIT=150 gpu_tests_table
finish_call
