#!/usr/bin/env bash
# The 120b decode step's real kernel timeline at batch 1 and 8 (issue 13's bubble: span − the time
# some kernel runs), ~2 min: `gptoss bench latency` (graphs, 36 layers) under the CUPTI injection
# library tools/cupti_trace.c, then scripts/device/bubble.py. Needs .devcarry
# (scripts/device/prepare.sh carries .devcarry/lib/libgptoss_trace.so and libcupti). Writes
# $OUT/bubble-bB.md and the traces.
set -uo pipefail
out=${OUT:-/tmp/bubble-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
lib=$PWD/.devcarry/lib/libgptoss_trace.so
[ -f "$lib" ] || { echo "no $lib (prepare.sh builds it when CUPTI is found)"; exit 1; }
for B in ${BATCHES:-1 8}; do
  CUDA_INJECTION64_PATH=$lib GPTOSS_TRACE_OUT="$out/trace-b$B.csv" timeout 150 \
    .devcarry/bin/gptoss bench latency --model "${MODEL:-synthetic:120b}" --batches "$B" --prefill "" \
    --decode-steps 16 --warmup 3 --output-json "$out/step-b$B.json" >"$out/bench-b$B.log" 2>&1 ||
    echo "bench B=$B failed ($?)"
  grep -E "cupti_trace|^\| synthetic" "$out/bench-b$B.log"
  python3 scripts/device/bubble.py "$out/trace-b$B.csv" --title "batch $B, context 1024" \
    >"$out/bubble-b$B.md" 2>&1
  head -6 "$out/bubble-b$B.md"
  gzip -f "$out/trace-b$B.csv"
done
