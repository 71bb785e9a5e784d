#!/usr/bin/env bash
# Session 29, call 9 (~3.5 min): the next layer's QKV rows into L2 during the attention
# (GPTOSS_STEP_L2_NEXT=1). Call 8's probes: with the experts' arithmetic removed the layer is still
# 69.7 µs (the loop's 70): phases 0-4 stream only ~30 MB (O's rows, the rest of QKV, the router
# rows) in ~36 µs, because the ring's next items are the experts, which wait for the routing; the
# next layer's QKV rows then stream during down, beside its chunks. The producer now asks L2 for
# the next layer's QKV rows of its block (cp.async.bulk.prefetch.L2) once its layer's QKV barrier
# has passed; the ring's copies of them during down should hit L2 — if L2 keeps 29.5 MB through O's
# 23.6 MB and the experts' 53 MB, which stream with the evict_first policy.
# Prediction (before the run): down 16.2 -> 11-13 µs, attention/O/router +0-2, the layer 87 ->
# 81-84; 120b batch 1 0.80 -> 0.82-0.85 of the loop. If down does not move, L2 did not keep the
# rows (or the copies were not the cost there).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s29c9 "session 29 call 9: the next layer's QKV rows into L2"
for v in "GPTOSS_STEP_L2_NEXT=0" "GPTOSS_STEP_L2_NEXT=1"; do
  echo -e "\n## by phase: $v $(t)" | tee -a "$sum"
  env $v timeout 200 $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/bench.log" 2>&1
  grep -E "^\||^the |FAILED|passed" "$out/logs/bench.log" | head -12 | tee -a "$sum"
done
ROUNDS=2 decode_variants "loop=- step=GPTOSS_STEP_KERNEL=1 l2next=GPTOSS_STEP_KERNEL=1+GPTOSS_STEP_L2_NEXT=1" 120b:1
t | tee -a "$sum"
rm -rf "$out"/v-*/vlogs "$out"/logs
