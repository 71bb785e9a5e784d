#!/usr/bin/env bash
# Session 25, call 3 (closing, ~7 min): every GPU test binary at the head (phase 4 off by default,
# dense_ring removed); the forward test again on call 2's seed with everything at its default
# (its one failure there, "20b x 2 layers, 40-token prompt", is one T = 40 step, which phase 4
# cannot reach: prediction, the same top-1 8/9 and relL2 2.03e-2 with phase 4 off, i.e. the seed);
# test_attn_stream --bench with the router's two forms (phase 4's own cost: prediction ~8-10 µs a
# layer, as much as gemv_norm_route's launch, which is what the step said); then roofline and
# bench latency.
set -uo pipefail
root=${OUT:-/tmp/s25c3}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 25 call 3: closing"
gpu_tests_table
test_table
run_logged test_cuda_forward_seed 240 $bin/gpu_test_cuda_forward --seed 11748258804345499309
grep -E "40-token prompt|seed" "$out/logs/test_cuda_forward_seed.log" | head -4 | tee -a "$sum"
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
roofline_and_latency
cp "$sum" "$root/summary.md"
t | tee -a "$root/summary.md"
