#!/usr/bin/env bash
# One device call for a closing measurement: the GPU tests, then `gptoss bench latency` with its
# defaults (decode at batch 1, 8, 64, 256, 1024, context 1k; prefill 1k and 8k) for synthetic:120b
# and synthetic:20b, JSON to $OUT and the markdown tables printed. Needs .devcarry
# (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/latency-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
echo "commit $(cat .devcarry/commit.txt 2>/dev/null)" | tee -a "$out/gpu.txt"
[ "${SKIP_TESTS:-0}" = 1 ] || OUT="$out/logs" bash scripts/device/gpu_tests.sh test 2>&1 | tail -8
for m in ${MODELS:-120b 20b}; do
  echo "== gptoss bench latency --model synthetic:$m"
  timeout "${LIMIT:-200}" .devcarry/bin/gptoss bench latency --model "synthetic:$m" \
    --output-json "$out/latency-$m.json" >"$out/logs/latency-$m.log" 2>&1 || echo "bench failed ($?)"
  grep -E '^\|' "$out/logs/latency-$m.log" || tail -5 "$out/logs/latency-$m.log"
done
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
