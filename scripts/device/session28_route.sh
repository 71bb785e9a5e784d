#!/usr/bin/env bash
# Session 28, last call (~2.5 min, whatever budget is left): the routing inside the attention kernel
# at one token (attn_stream_layer_route, GPTOSS_ATTN_ROUTE=1, off): its test, the tests whose
# helpers it changed (the _with forms of the routing and the last-block hand-off: moe_route.cu's
# SASS moved), then the step against the default.
# The change: O's epilogue adds each block's O rows into h and multiplies them by the router's
# columns of those rows (read before phase 1) into per-block partial logits and a partial sum of
# squares; the last block sums them, scales by 1 / rms, writes y and routes. No grid barrier and no
# norm replay (session 25's phase 4 had both and cost what the launch did), and no launch: the
# router kernel's 8.5 µs a layer (session 28 call 3, H100) go.
# Prediction (written before the run): 120b batch 1 +4-7 % (-5 to -6 µs a layer: the router's 8.5
# µs less ~2-3 µs of tail: partials, arrival, the last block's reads of 132 partial rows, top-k),
# 20b batch 1 +4-7 %. Decision: on by default at one token if it gains beyond the spread at both
# models and the tests pass; else removed.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s28r "session 28: the routing inside the attention kernel"
echo "| test | rc | result |" | tee -a "$sum"
for tb in gpu_test_attn_stream gpu_test_moe gpu_test_gemv gpu_test_router_mma; do
  timeout 120 $bin/$tb >"$out/logs/$tb.log" 2>&1
  echo "| $tb | $? | $(grep -E 'checks (passed|FAILED)|checks? failed' "$out/logs/$tb.log" | tail -1) |" | tee -a "$sum"
done
grep -E "FAILED|failed" "$out/logs/gpu_test_attn_stream.log" | head -5 | tee -a "$sum"
ROUNDS=2 decode_variants "default=- route=GPTOSS_ATTN_ROUTE=1" 120b:1 20b:1
GPTOSS_ATTN_ROUTE=1 timeout 150 $bin/gpu_test_cuda_forward >"$out/logs/fwd-route.log" 2>&1
echo "| gpu_test_cuda_forward (route) | $? | $(grep -E 'checks (passed|FAILED)|checks? failed' "$out/logs/fwd-route.log" | tail -1) |" | tee -a "$sum"
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs v-* 2>/dev/null) && rm -rf "$out"/logs "$out"/v-* && mv /tmp/logs.tgz "$out/"
