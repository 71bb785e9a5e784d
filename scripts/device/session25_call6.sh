#!/usr/bin/env bash
# Session 25, call 6 (~2.5 min): the refactor after call 5 (store8_f32 / store_split8_f32 in
# norm_row.cuh for attn_stream's and gemv_norm_route's staging; the same arithmetic) checked:
# test_attn_stream (bit for bit against its references, phase 4 and the early cases included),
# test_gemv, test_norm, the forward test, and 120b / 20b batch 1 against call 3's figures (334 /
# 470 on another lease: only a gross change would show).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s25c6 "session 25 call 6: the staging refactor checked"
test_table
run_logged test_attn_stream 120 $bin/gpu_test_attn_stream
run_logged test_gemv 120 $bin/gpu_test_gemv
run_logged test_norm 60 $bin/gpu_test_norm
run_logged test_cuda_forward 240 $bin/gpu_test_cuda_forward
for m in 120b 20b; do
  timeout 60 $bin/gptoss bench latency --model synthetic:$m --batches 1 --prefill "" 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
done
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" logs && rm -rf "$out/logs" && mv /tmp/logs.tgz "$out/"
