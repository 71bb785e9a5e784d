#!/usr/bin/env bash
# FP8 decode at 6 stages as the default (~3 min): gpu_test_attention and gpu_test_cuda_forward, the
# decode attention at 8k (--bench-kv), and bench latency 120b at 8k context, batch 64, both dtypes.
# Needs .devcarry.
set -uo pipefail
out=${OUT:-/tmp/fp8v-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
echo "commit $(cat .devcarry/commit.txt)"
for t in gpu_test_attention gpu_test_cuda_forward; do
  args=""; [ $t = gpu_test_cuda_forward ] && args="--skip-tp"
  timeout 60 .devcarry/bin/$t $args >"$out/$t.log" 2>&1
  echo "$t: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/$t.log" | tail -1)"
done
grep -hE "fp8 vs bf16 KV" "$out/gpu_test_cuda_forward.log" | head -2
timeout 60 .devcarry/bin/gpu_test_attention --bench-kv >"$out/bench-kv.md" 2>&1
grep -E "^\| (decode full|B=)|speed-up at" "$out/bench-kv.md"
for dt in bf16 fp8; do
  timeout 80 .devcarry/bin/gptoss bench latency --model synthetic:120b --batches 64 --context 8192 \
    --prefill "" --kv-cache-dtype $dt --output-json "$out/latency-8k-$dt.json" 2>&1 | grep -E "^\| synthetic"
done
