#!/usr/bin/env bash
# Session 25, call 2 (~5 min): attn_stream's phase 4 (the MLP norm, the router and its routing
# inside the attention kernel: GPTOSS_ATTN_ROUTE=1, off by default, unrun before this call).
#  (1) gpu_test_attn_stream: its checks, with phase 4 against the kernel without it followed by
#      gemv_norm_route, bit for bit (h, y over x, logits, the whole routing buffer, every output),
#      eager, graph, eager again; E = 128 and 32; with and without the attention norm inside.
#  (2) gpu_test_cuda_forward under GPTOSS_ATTN_ROUTE=1.
#  (3) the step: default against route=1, 120b decode 1 and 20b decode 1, three rounds; then the
#      120b batch-1 step by kernel with route=1 (CUPTI timeline).
# Prediction (session 25, before any run; H100): phase 4 costs ~3-4 µs inside the kernel (a grid
# barrier ~1.4, the norm ~1, one router row < 1, the last block's routing ~1-1.5) and removes
# gemv_norm_route's launch (9.9 µs at batch 1 in session 24's table): ~6 µs a layer, ~215 µs of
# 120b's 3.02 ms step: +6-8 % at batch 1 (332 -> ~355 tok/s on an H100); 20b +5-7 %.
# Decision: above the default beyond the spread at both -> on by default at one token.
set -uo pipefail
root=${OUT:-/tmp/s25c2}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 25 call 2: the router inside the attention kernel"
test_table
run_logged test_attn_stream 120 $bin/gpu_test_attn_stream
GPTOSS_ATTN_ROUTE=1 run_logged test_cuda_forward_route 240 $bin/gpu_test_cuda_forward
V="default=- route=GPTOSS_ATTN_ROUTE=1"
ROUNDS=3 decode_variants "$V" 120b:1 20b:1
GPTOSS_ATTN_ROUTE=1 decode_by_kernel 1
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
