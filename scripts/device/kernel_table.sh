#!/usr/bin/env bash
# The per-kernel table of a 120b decode step at batch 1 and 8 (bench/results/kernels-decode-*.md):
# ncu times every kernel of `gptoss bench latency` on a 2-layer synthetic 120b (eager, so each
# kernel is its own launch), then the graph-replayed full model gives the step time, and
# kernel_table.py extrapolates to 36 layers and prints the bubble (step − sum of kernels).
# Needs .devcarry (scripts/device/prepare.sh). Writes $OUT/kernels-decode.md.
set -uo pipefail
out=${OUT:-/tmp/kt-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin/gptoss
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
md="$out/kernels-decode.md"
echo "# 120b decode step, per kernel ($(cat .devcarry/commit.txt), $(nvidia-smi --query-gpu=name --format=csv,noheader))" >"$md"
for B in ${KT_BATCHES:-1 8}; do
  timeout 120 $bin bench latency --model synthetic:120b --batches "$B" --prefill "" \
    --output-json "$out/step-b$B.json" >"$out/step-b$B.log" 2>&1 || echo "bench B=$B failed"
  ms=$(python3 -c "import json;d=json.load(open('$out/step-b$B.json'));print([r['seconds'] for r in d['results'] if r['phase']=='decode'][0]*1e3)" 2>/dev/null || echo 0)
  timeout 240 "$ncu" --clock-control none --cache-control none --csv \
    --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
    $bin bench latency --model synthetic:120b:layers=2 --batches "$B" --prefill "" --enforce-eager \
    --decode-steps 3 --warmup 1 >"$out/ncu-b$B.csv" 2>"$out/ncu-b$B.err" || echo "ncu B=$B failed ($?)"
  python3 scripts/device/kernel_table.py "$out/ncu-b$B.csv" --steps 3 --step-ms "$ms" \
    --title "batch $B, context 1024" >>"$md" 2>&1
  echo >>"$md"
done
cat "$md"
