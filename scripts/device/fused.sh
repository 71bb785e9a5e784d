#!/usr/bin/env bash
# Issue 13's fused MoE decode kernel (moe_fused.cu, GPTOSS_MOE_FUSED=1, and =2: deep prefetch) and issue 14's new defaults
# (64-token wgmma tiles below 128 pairs an expert, the large path from 24), in one call (~8 min):
#   1. gpu_test_moe_fused (fused == unfused bit for bit, repeats, graph replay), then its --bench;
#   2. gpu_test_cuda_forward --skip-tp with the fused path on (every real-width comparison);
#   3. gpu_test_moe (the new tile rule against the CPU reference);
#   4. bench latency 120b decode at batch 1, 2, 4, 8 without the fused path, with it, and with its
#      deep prefetch, 2 rounds interleaved; 20b batch 1 the three ways.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/fused-summary.md.
set -uo pipefail
out=${OUT:-/tmp/fused-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/fused-summary.md"
summary_header "$sum" "Fused MoE decode kernel (issue 13), wgmma tile rule (issue 14)"
timeout 120 $bin/gpu_test_moe_fused >"$out/logs/moe_fused.log" 2>&1
echo "- gpu_test_moe_fused: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe_fused.log" | tail -1)" | tee -a "$sum"
grep -E "failed|differing|error" "$out/logs/moe_fused.log" | head -6 | sed 's/^/  /' | tee -a "$sum"
timeout 90 $bin/gpu_test_moe_fused --bench 2>&1 | grep -E "^\|" | tee -a "$sum"
GPTOSS_MOE_FUSED=2 timeout 200 $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward-fused.log" 2>&1
echo "- gpu_test_cuda_forward --skip-tp, GPTOSS_MOE_FUSED=2: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward-fused.log" | tail -1)" | tee -a "$sum"
grep -E "FAILED|failed" "$out/logs/forward-fused.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
timeout 150 $bin/gpu_test_moe >"$out/logs/moe.log" 2>&1
echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1)" | tee -a "$sum"
echo "## bench latency 120b decode, fused vs unfused" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- fused=GPTOSS_MOE_FUSED=1 deep=GPTOSS_MOE_FUSED=2" BATCHES=1,2,4,8 \
  ROUNDS=2 timeout 280 bash scripts/device/variants.sh 2>&1 | tail -14 | tee -a "$sum"
echo "## bench latency 20b decode batch 1" | tee -a "$sum"
OUT="$out/v20" MODEL=20b VARIANTS="base=- fused=GPTOSS_MOE_FUSED=1 deep=GPTOSS_MOE_FUSED=2" BATCHES=1 ROUNDS=1 \
  timeout 80 bash scripts/device/variants.sh 2>&1 | tail -3 | tee -a "$sum"
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out"/v20/var-*.json "$out/res/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs res 2>/dev/null && rm -rf "$out/logs" "$out/v" "$out/v20" "$out/res"
