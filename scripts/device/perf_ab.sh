#!/usr/bin/env bash
# One device call for a performance change: the GPU tests (unless SKIP_TESTS=1), then
# `gptoss bench latency` for 120b decode at batch sizes $BATCHES (context 1k) with programmatic
# dependent launch on (GPTOSS_PDL=1) and off, and a short table. Logs and JSON go to $OUT
# (packed: the device returns at most 8 files). Needs .devcarry from scripts/device/prepare.sh.
set -uo pipefail
out=${OUT:-/tmp/perf-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
batches=${BATCHES:-1,64,256}
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader | tee "$out/gpu.txt"
echo "commit $(cat .devcarry/commit.txt 2>/dev/null)" | tee -a "$out/gpu.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  OUT="$out/logs" bash scripts/device/gpu_tests.sh test 2>&1 | tail -12
fi
for pdl in ${PDL_MODES:-0 1}; do
  echo "== bench latency 120b, GPTOSS_PDL=$pdl"
  GPTOSS_PDL=$pdl timeout 200 .devcarry/bin/gptoss bench latency --model synthetic:120b --batches "$batches" \
    --prefill ${PREFILL:-1024} --decode-steps 24 --output-json "$out/latency-120b-pdl$pdl.json" \
    >"$out/logs/latency-120b-pdl$pdl.log" 2>&1 || echo "bench failed ($?)"
  grep -E '^\|' "$out/logs/latency-120b-pdl$pdl.log" || tail -5 "$out/logs/latency-120b-pdl$pdl.log"
done
if [ -n "${EXTRA_CMD:-}" ]; then
  echo "== $EXTRA_CMD"
  timeout "${EXTRA_LIMIT:-200}" bash -c "$EXTRA_CMD" >"$out/logs/extra.log" 2>&1 || echo "extra failed ($?)"
  tail -${EXTRA_TAIL:-30} "$out/logs/extra.log"
fi
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
