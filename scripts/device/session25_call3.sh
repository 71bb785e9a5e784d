#!/usr/bin/env bash
# Session 25, call 3 (~8 min): every GPU test binary at the head (phase 4 off by default,
# dense_ring removed); the forward test again on call 2's seed with everything at its default
# (its one failure there, "20b x 2 layers, 40-token prompt", is one T = 40 step, which phase 4
# cannot reach: prediction, the same top-1 8/9 and relL2 2.03e-2 with phase 4 off, i.e. the seed);
# test_attn_stream --bench with the router's two forms (phase 4's own cost: prediction ~8-10 µs a
# layer, as much as gemv_norm_route's launch, which is what the step said); roofline and bench
# latency; then kernel timelines for the next session: 120b decode at batch 8 and 64 (bubble.py's
# tables), and a lone 1k and 8k prefill (CUPTI CSV, summed by kernel offline). Everything but the
# summary comes back in bundle.tgz (8 files at most come back).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s25c3 "session 25 call 3: GPU tests, phase 4 alone, closing figures, timelines"
gpu_tests_table
test_table
run_logged test_cuda_forward_seed 240 $bin/gpu_test_cuda_forward --seed 11748258804345499309
grep -E "40-token prompt|seed" "$out/logs/test_cuda_forward_seed.log" | head -4 | tee -a "$sum"
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
roofline_and_latency
decode_by_kernel 8 64
for P in 1024 8192; do
  echo -e "\n## prefill $P under the CUPTI timeline $(t)" | tee -a "$sum"
  CUDA_INJECTION64_PATH=$PWD/.devcarry/lib/libgptoss_trace.so GPTOSS_TRACE_OUT="$out/logs/trace-p$P.csv" \
    timeout 150 $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill $P \
    >"$out/logs/bench-p$P.log" 2>&1 || echo "prefill $P failed ($?)" | tee -a "$sum"
  grep -E "^\| synthetic" "$out/logs/bench-p$P.log" | tee -a "$sum"
  gzip -f "$out/logs/trace-p$P.csv"
done
t | tee -a "$sum"
# $OUT is $out here: bundle the logs, then move every file but the summary and the bundle away
tar -czf /tmp/bundle.tgz -C "$out" $(cd "$out" && ls -d logs tests bubble-*.md 2>/dev/null)
mkdir -p /tmp/s25c3-rest && mv "$out"/logs "$out"/tests "$out"/bubble-*.md /tmp/s25c3-rest/ 2>/dev/null
mv /tmp/bundle.tgz "$out/bundle.tgz"
ls -la "$out" | tee -a "$sum"
