#!/usr/bin/env bash
# Session 29, call 3 (~3 min): where the step kernel's time goes. Call 2 measured it at 0.805 of
# the layer loop at batch 1 (120b 272 against 338 tok/s, 20b 0.810), bit-identical logits.
#  (1) gpu_test_cuda_forward --step-kernel --bench: its phases by block 0's clock (120b shapes,
#      12 layers, 1k context). Prediction from call 2 (the layer ~90 µs against the loop's ~70):
#      the MoE phases carry the loss — gate_up ~20-25 µs (a warp a tile from registers, 1,056
#      warps for 1,440 tiles: two rounds of a latency-bound stream; the loop's kernel 16.1 with
#      every tile in flight at once), down ~10-12; the attention phases ~30 together (the next
#      layer's QKV rows already in the ring), the router phase ~5.
#  (2) the (h) checks again, now eager (graphs off) and through the graphs.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c3 "session 29 call 3: the step kernel by phase"
echo -e "\n## the step kernel by phase (block 0's clock, 120b x 12 layers, 1k context) $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/bench.log" 2>&1
grep -E "^\||FAILED|passed" "$out/logs/bench.log" | tee -a "$sum"
test_table
run_logged step_kernel 300 $bin/gpu_test_cuda_forward --step-kernel
grep -E "^\(h\)|step kernel vs" "$out/logs/step_kernel.log" | tee -a "$sum"
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" $(cd "$out" && ls -d logs 2>/dev/null) &&
  rm -rf "$out"/logs && mv /tmp/logs.tgz "$out/"
