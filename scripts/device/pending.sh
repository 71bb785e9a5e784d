#!/usr/bin/env bash
# One call (~8 min) for the switches prepared in the previous session and never run: the wgmma MoE
# forms of issue 14 (scripts/device/wgmma_pipe.sh), cuBLASLt without split K at M <= 8
# (GPTOSS_LT_NOSPLIT=1, scripts/device/nosplit.sh's A/B only, one round) and the real timeline of a
# graph-replayed batch-1 step (scripts/device/bubble.sh). Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/pending-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
echo "== wgmma_pipe"
OUT="$out/wg" timeout 400 bash scripts/device/wgmma_pipe.sh 2>&1 | tail -40
echo "== nosplit"
GPTOSS_LT_NOSPLIT=1 timeout 60 .devcarry/bin/gpu_test_gemm >"$out/gemm-nosplit.log" 2>&1
echo "gpu_test_gemm (GPTOSS_LT_NOSPLIT=1): $(res $?) — $(grep -E 'checks passed|FAILED' "$out/gemm-nosplit.log" | tail -1)"
OUT="$out/ns" VARIANTS="base=- nosplit=GPTOSS_LT_NOSPLIT=1" BATCHES=1,8 ROUNDS=1 \
  timeout 90 bash scripts/device/variants.sh 2>&1 | tail -6
echo "== bubble"
OUT="$out/bubble" BATCHES=1 timeout 70 bash scripts/device/bubble.sh 2>&1 | tail -12
cp "$out"/bubble/bubble-b1.md "$out/" 2>/dev/null
