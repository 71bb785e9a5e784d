#!/usr/bin/env bash
# cuBLASLt without split K at M <= 8 (GPTOSS_LT_NOSPLIT=1, issue 13), ~3 min: gpu_test_gemm and
# gpu_test_cuda_forward with the switch, then bench latency 120b decode at batch 1, 8, 64 with and
# without it (2 rounds, interleaved), and the batch-1 kernel list of one step with it (ncu) to see
# which algorithms cuBLASLt picked. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/nosplit-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
for t in gpu_test_gemm gpu_test_cuda_forward; do
  args=""; [ $t = gpu_test_cuda_forward ] && args="--skip-tp --skip-real"
  GPTOSS_LT_NOSPLIT=1 timeout 90 .devcarry/bin/$t $args >"$out/$t.log" 2>&1
  echo "$t (GPTOSS_LT_NOSPLIT=1): $(res $?) — $(grep -E 'checks passed|FAILED' "$out/$t.log" | tail -1)"
done
OUT="$out/v" VARIANTS="base=- nosplit=GPTOSS_LT_NOSPLIT=1" BATCHES=1,8,64 ROUNDS=2 \
  bash scripts/device/variants.sh 2>&1 | tail -8
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
GPTOSS_LT_NOSPLIT=1 timeout 120 "$ncu" --clock-control none --metrics gpu__time_duration.sum \
  .devcarry/bin/gptoss bench latency --model synthetic:120b:layers=2 --batches 1 --prefill "" \
  --enforce-eager --decode-steps 1 --warmup 0 2>&1 | grep -E "^  [a-zA-Z_].*\(|gpu__time" | head -40
