#!/usr/bin/env bash
# A short closing call (~6 min) for a session whose forward test already ran on the candidate build:
# every other GPU test (scripts/device/closing.sh with SKIP_TP=1, ONLY=$ONLY_TESTS), the TP part of
# the forward test (one-GPU lockstep: synthetic and checkpoint, `gpu_test_cuda_forward --tp`), then
# `gptoss bench latency` 120b (decode 1, 8, 64, 256, 1024; prefill 1k, 8k) and 20b (1, 8, 64), and
# `gptoss roofline`. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/close-summary.md.
set -uo pipefail
out=${OUT:-/tmp/close-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
sum="$out/close-summary.md"
summary_header "$sum" "Closing measurements"
ONLY="${ONLY_TESTS:-}" SKIP_TP=1 TEST_LIMIT=${TEST_LIMIT:-90} BUDGET_S=${BUDGET_S:-170} OUT="$out/c" \
  bash scripts/device/closing.sh >/dev/null 2>&1
grep -E "^\| gpu_test|FAILED|failed" "$out/c/closing-summary.md" | tee -a "$sum"
cp "$out/c/logs.tgz" "$out/tests-logs.tgz" 2>/dev/null
GPTOSS_TP_ONE_GPU=1 timeout 150 .devcarry/bin/gpu_test_cuda_forward --tp >"$out/forward-tp.log" 2>&1
echo "- gpu_test_cuda_forward --tp: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/forward-tp.log" | tail -1)" | tee -a "$sum"
grep -E "^\| |FAILED|failed|TP[0-9]" "$out/forward-tp.log" | head -20 | sed 's/^/  /' | tee -a "$sum"
echo "## bench latency" | tee -a "$sum"
timeout 150 .devcarry/bin/gptoss bench latency --model synthetic:120b --batches 1,8,64,256,1024 \
  --prefill 1024,8192 --output-json "$out/latency-120b.json" 2>&1 | grep -E "^\| " | tee -a "$sum"
timeout 60 .devcarry/bin/gptoss bench latency --model synthetic:20b --batches 1,8,64 --prefill "" \
  --output-json "$out/latency-20b.json" 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
for b in 1 8 64; do
  .devcarry/bin/gptoss roofline --model 120b --batch $b --context 1024
  .devcarry/bin/gptoss roofline --model 20b --batch $b --context 1024
done >"$out/roofline.txt" 2>&1
tail -12 "$out/roofline.txt" | tee -a "$sum"
