#!/usr/bin/env bash
# Issue 14's first compute-bound kernel on the GPU machine, in one call (~5 min): the large-batch MoE
# grouped GEMM on the warpgroup MMA (src/backend/cuda/moe_wgmma.cu, GPTOSS_MOE_WGMMA=1, off until
# this measures it).
#   1. gpu_test_moe: every large-path case also on wgmma, against the CPU reference, twice the same;
#   2. gpu_test_cuda_forward --skip-real with GPTOSS_MOE_WGMMA=1 GPTOSS_MOE_LARGE_MIN=1 (every step's
#      MoE on the large path, so the whole forward pass runs the new kernel);
#   3. gpu_test_moe --bench: the experts alone, mma.sync vs wgmma, T = 256 .. 16384;
#   4. bench latency (synthetic:120b) at decode batch 256 and 1024 and prefill 1k and 8k: base,
#      wgmma, and wgmma with the large path from 24 and from 8 pairs per expert.
# Prints $OUT/wgmma-summary.md. Needs .devcarry (bash scripts/device/prepare.sh); the device call:
# carry [".devcarry"], command `bash scripts/device/wgmma.sh`.
set -uo pipefail
out=${OUT:-/tmp/wgmma-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/wgmma-summary.md"
summary_header "$sum" "MoE on wgmma (issue 14)"
timeout 200 "$bin/gpu_test_moe" >"$out/logs/moe.log" 2>&1
echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1)" | tee -a "$sum"
grep -A1 "(wgmma)" "$out/logs/moe.log" | grep "rel err" | head -12 | sed 's/^/  /' | tee -a "$sum"
timeout 200 env GPTOSS_MOE_WGMMA=1 GPTOSS_MOE_LARGE_MIN=1 "$bin/gpu_test_cuda_forward" --skip-real \
  >"$out/logs/forward.log" 2>&1
echo "- gpu_test_cuda_forward --skip-real, every MoE on wgmma: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward.log" | tail -1)" | tee -a "$sum"
timeout 200 "$bin/gpu_test_moe" --bench >"$out/logs/moe-bench.log" 2>&1
echo "## experts alone (gpu_test_moe --bench)" | tee -a "$sum"
grep -E "^\| (case|---)|moe experts" "$out/logs/moe-bench.log" | tee -a "$sum"
echo "## bench latency, synthetic:120b" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- wgmma=GPTOSS_MOE_WGMMA=1 wg24=GPTOSS_MOE_WGMMA=1+GPTOSS_MOE_LARGE_MIN=24 wg8=GPTOSS_MOE_WGMMA=1+GPTOSS_MOE_LARGE_MIN=8" \
  BATCHES=256,1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-1} bash scripts/device/variants.sh 2>&1 |
  tail -20 | tee -a "$sum"
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out/res/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs res 2>/dev/null && rm -rf "$out/logs" "$out/v" "$out/res"
