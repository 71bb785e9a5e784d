#!/usr/bin/env bash
# Issue 14's large MoE, two measurement switches of moe_wgmma.cu against kernel 1, in one call
# (~6 min): one MMA group in flight while the next A is dequantised (PIPE, GPTOSS_MOE_WGMMA=2) and
# 64-token tiles (GPTOSS_MOE_WGMMA_N=64, with the crossover lowered to 24 pairs an expert so that
# 1k-token prefills take the large path: GPTOSS_MOE_LARGE_MIN=24).
#   1. gpu_test_moe: every large case on kernels 1 and 2, 128- and 64-token tiles;
#   2. gpu_test_cuda_forward --skip-real --skip-tp with every MoE on kernel 2, then on 64-token tiles
#      (GPTOSS_MOE_LARGE_MIN=1: the whole forward pass on it);
#   3. gpu_test_moe --bench (the experts alone, T = 256 .. 16384: rows "wgmma", "wgmma2", "... n64");
#   4. bench latency synthetic:120b, prefill 1k and 8k, decode 256 and 1024, each variant.
# Prints $OUT/wgmma2-summary.md. Needs .devcarry (scripts/device/prepare.sh); carry [".devcarry"],
# command `bash scripts/device/wgmma_pipe.sh`.
set -uo pipefail
out=${OUT:-/tmp/wgmma2-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/wgmma2-summary.md"
summary_header "$sum" "MoE wgmma: one MMA group in flight, 64-token tiles (issue 14)"
timeout 200 "$bin/gpu_test_moe" >"$out/logs/moe.log" 2>&1
echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1)" | tee -a "$sum"
grep -E "wgmma.*differ|FAILED|failed" "$out/logs/moe.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
for v in GPTOSS_MOE_WGMMA=2 GPTOSS_MOE_WGMMA_N=64; do
  timeout 150 env $v GPTOSS_MOE_LARGE_MIN=1 "$bin/gpu_test_cuda_forward" --skip-real \
    --skip-tp >"$out/logs/forward-$v.log" 2>&1
  echo "- gpu_test_cuda_forward, every MoE on $v: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward-$v.log" | tail -1)" | tee -a "$sum"
done
timeout 200 "$bin/gpu_test_moe" --bench >"$out/logs/moe-bench.log" 2>&1
echo "## experts alone" | tee -a "$sum"
grep -E "^\| (case|---)|moe experts 120b T=[0-9]+ (large|small)" "$out/logs/moe-bench.log" | tee -a "$sum"
echo "## bench latency, synthetic:120b" | tee -a "$sum"
OUT="$out/v" VARIANTS="wg1=- wg2=GPTOSS_MOE_WGMMA=2 n64=GPTOSS_MOE_WGMMA_N=64+GPTOSS_MOE_LARGE_MIN=24 wg2n64=GPTOSS_MOE_WGMMA=2+GPTOSS_MOE_WGMMA_N=64+GPTOSS_MOE_LARGE_MIN=24" BATCHES=256,1024 \
  PREFILL=1024,8192 ROUNDS=${ROUNDS:-1} bash scripts/device/variants.sh 2>&1 | tail -22 | tee -a "$sum"
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out/res/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs res 2>/dev/null && rm -rf "$out/logs" "$out/v" "$out/res"
