#!/usr/bin/env bash
# A session's last call (~7 min): every GPU test (scripts/device/closing.sh without the TP part,
# which tp.sh covers and which did not change), then the per-kernel table of the 120b decode step at
# batch 1 and 8 (scripts/device/kernel_table.sh, with the graph-replayed step), the 20b decode at
# batch 1 and `gptoss roofline`. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/final-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
SKIP_TP=1 TEST_LIMIT=${TEST_LIMIT:-60} BUDGET_S=${BUDGET_S:-200} OUT="$out/c" bash scripts/device/closing.sh >/dev/null 2>&1
cp "$out/c/closing-summary.md" "$out/"
grep -E "^\| gpu_test|FAILED|failed" "$out/closing-summary.md" | head -24
OUT="$out/kt" bash scripts/device/kernel_table.sh >/dev/null 2>&1
cp "$out/kt/kernels-decode.md" "$out/"; cp "$out"/kt/ncu-b*.csv "$out"/kt/step-b*.json "$out/" 2>/dev/null
grep -E "^#|Sum of kernel|Graph-replayed" "$out/kernels-decode.md"
timeout 90 .devcarry/bin/gptoss bench latency --model synthetic:20b --batches 1,8,64 --prefill "" \
  --output-json "$out/latency-20b.json" 2>&1 | grep -E "^\| synthetic" | tee "$out/latency-20b.md"
for b in 1 8 64; do .devcarry/bin/gptoss roofline --model 120b --batch $b --context 1024; .devcarry/bin/gptoss roofline --model 20b --batch $b --context 1024; done >"$out/roofline.txt" 2>&1
tail -12 "$out/roofline.txt"
