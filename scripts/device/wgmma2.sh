#!/usr/bin/env bash
# Issue 14's large MoE with A through shared memory (moe_wgmma.cu's moe_wgmma2_kernel,
# GPTOSS_MOE_WGMMA=2: 4 stages, one block an SM; 3: 3 stages, two), against today's wgmma (1), in
# one call (~6 min):
#   1. gpu_test_moe: every large case on kernels 1, 2, 3 against the CPU reference, twice the same;
#   2. gpu_test_cuda_forward --skip-real --skip-tp with every MoE on kernel 2, then on 3
#      (GPTOSS_MOE_LARGE_MIN=1: the whole forward pass on it);
#   3. gpu_test_moe --bench (the experts alone, T = 256 .. 16384: rows "wgmma", "wgmma2", "wgmma3");
#   4. bench latency synthetic:120b, prefill 1k and 8k, decode 256, kernels 1, 2, 3.
# Prints $OUT/wgmma2-summary.md. Needs .devcarry (scripts/device/prepare.sh); carry [".devcarry"],
# command `bash scripts/device/wgmma2.sh`.
set -uo pipefail
out=${OUT:-/tmp/wgmma2-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/wgmma2-summary.md"
summary_header "$sum" "MoE wgmma with A through shared memory (issue 14)"
timeout 200 "$bin/gpu_test_moe" >"$out/logs/moe.log" 2>&1
echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1)" | tee -a "$sum"
grep -E "wgmma.*differ|FAILED|failed" "$out/logs/moe.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
for v in 2 3; do
  timeout 150 env GPTOSS_MOE_WGMMA=$v GPTOSS_MOE_LARGE_MIN=1 "$bin/gpu_test_cuda_forward" --skip-real \
    --skip-tp >"$out/logs/forward-$v.log" 2>&1
  echo "- gpu_test_cuda_forward, every MoE on kernel $v: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward-$v.log" | tail -1)" | tee -a "$sum"
done
timeout 200 "$bin/gpu_test_moe" --bench >"$out/logs/moe-bench.log" 2>&1
echo "## experts alone" | tee -a "$sum"
grep -E "^\| (case|---)|moe experts 120b T=[0-9]+ large" "$out/logs/moe-bench.log" | tee -a "$sum"
echo "## bench latency, synthetic:120b" | tee -a "$sum"
OUT="$out/v" VARIANTS="wg1=- wg2=GPTOSS_MOE_WGMMA=2 wg3=GPTOSS_MOE_WGMMA=3" BATCHES=256 \
  PREFILL=1024,8192 ROUNDS=${ROUNDS:-1} bash scripts/device/variants.sh 2>&1 | tail -12 | tee -a "$sum"
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out/res/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs res 2>/dev/null && rm -rf "$out/logs" "$out/v" "$out/res"
