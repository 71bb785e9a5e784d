#!/usr/bin/env bash
# Issue 13's fused MoE decode kernel (moe_fused.cu: GPTOSS_MOE_FUSED=1, and =2 with the deep
# prefetch) and issue 14's new wgmma tile rule, in one call (≤ 8 min: BUDGET_S=470; each step under a timeout,
# the optional ones only while time is left):
#   1. gpu_test_moe_fused (fused == unfused bit for bit, both modes, repeats, graph replay) and its
#      --bench (the MoE block alone, four launches vs one, T = 1, 2, 4, 8);
#   2. gpu_test_cuda_forward --skip-tp with GPTOSS_MOE_FUSED=2 (every real-width comparison);
#   3. bench latency 120b decode at batch 1, 2, 4, 8: unfused, fused, fused deep (one round);
#   4. bench latency 120b on the defaults: decode 1, 8, 64, 256, 1024, prefill 1k and 8k (the
#      tile rule); 20b batch 1, 8, 64 and 20b batch 1 with mode 2;
#   5. gpu_test_moe (the tile rule against the CPU reference), then gpu_test_cuda_forward --tp
#      (TP from a checkpoint), if time is left.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/fused-summary.md.
set -uo pipefail
out=${OUT:-/tmp/fused-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/fused-summary.md"
start=$(date +%s)
left() { echo $((${BUDGET_S:-470} - ($(date +%s) - start))); }
# at most $1 seconds, and never past the budget
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"; }
summary_header "$sum" "Fused MoE decode kernel (issue 13), wgmma tile rule (issue 14)"
timeout 90 $bin/gpu_test_moe_fused >"$out/logs/moe_fused.log" 2>&1
echo "- gpu_test_moe_fused: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe_fused.log" | tail -1)" | tee -a "$sum"
grep -E "failed|differing|error" "$out/logs/moe_fused.log" | head -6 | sed 's/^/  /' | tee -a "$sum"
timeout 60 $bin/gpu_test_moe_fused --bench 2>&1 | grep -E "^\|" | tee -a "$sum"
GPTOSS_MOE_FUSED=2 timeout 170 $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward-fused.log" 2>&1
echo "- gpu_test_cuda_forward --skip-tp, GPTOSS_MOE_FUSED=2: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward-fused.log" | tail -1) ($(($(date +%s) - start)) s in)" | tee -a "$sum"
grep -E "FAILED|failed" "$out/logs/forward-fused.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
echo "## bench latency 120b decode: unfused, fused, fused deep" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- fused=GPTOSS_MOE_FUSED=1 deep=GPTOSS_MOE_FUSED=2" BATCHES=1,4,8 \
  ROUNDS=1 timeout $(lim 100) bash scripts/device/variants.sh 2>&1 | tail -14 | tee -a "$sum"
echo "## bench latency on the defaults ($(left) s left)" | tee -a "$sum"
timeout $(lim 110) $bin/gptoss bench latency --model synthetic:120b --batches 1,8,64,256,1024 \
  --prefill 1024,8192 --output-json "$out/latency-120b.json" 2>&1 | grep -E "^\| " | tee -a "$sum"
timeout $(lim 40) $bin/gptoss bench latency --model synthetic:20b --batches 1,8,64 --prefill "" \
  --output-json "$out/latency-20b.json" 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
GPTOSS_MOE_FUSED=2 timeout $(lim 30) $bin/gptoss bench latency --model synthetic:20b --batches 1,8 \
  --prefill "" --output-json "$out/latency-20b-deep.json" 2>&1 | grep -E "^\| synthetic" | sed 's/^/deep /' | tee -a "$sum"
if [ "$(left)" -gt 60 ]; then
  timeout 60 $bin/gpu_test_moe >"$out/logs/moe.log" 2>&1
  echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1)" | tee -a "$sum"
fi
l=$(left)
if [ "$l" -gt 40 ]; then
  GPTOSS_TP_ONE_GPU=1 timeout "$l" $bin/gpu_test_cuda_forward --tp >"$out/logs/forward-tp.log" 2>&1
  echo "- gpu_test_cuda_forward --tp (${l} s allowed): $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward-tp.log" | tail -1)" | tee -a "$sum"
  grep -E "FAILED|failed" "$out/logs/forward-tp.log" | head -6 | sed 's/^/  /' | tee -a "$sum"
fi
for b in 1 8 64; do
  $bin/gptoss roofline --model 120b --batch $b --context 1024
done >"$out/roofline.txt" 2>&1
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out/res/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs res 2>/dev/null && rm -rf "$out/logs" "$out/v" "$out/res"
