#!/usr/bin/env bash
# Session 4 of 2026-12-01, call 3: device-side constrained sampling as the default (its GPU test and
# scripts/device/structured.sh), then the served 1k/1k sweep at concurrency 64 and 256 with
# --target-tpot-ms 35 (issue 14's step budget) and without it, on synthetic:120b.
set -uo pipefail
out=${OUT:-/tmp/call3-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
sum="$out/call3-summary.md"
echo "# call 3, commit $(cat .devcarry/commit.txt)" >"$sum"
timeout 200 .devcarry/bin/gpu_test_masked_sampling >"$out/masked.log" 2>&1
echo "- gpu_test_masked_sampling (device path the default): exit $? — $(grep -E 'checks passed|FAILED' "$out/masked.log" | tail -1)" >>"$sum"
OUT="$out/st" SKIP_TESTS=1 bash scripts/device/structured.sh >/dev/null 2>&1
sed -n '/bench latency/,$p' "$out/st/structured-summary.md" >>"$sum"
for v in t35 base; do
  args=""
  [ "$v" = t35 ] && args="--target-tpot-ms 35"
  echo "## sweep 1k/1k, $v ($args)" >>"$sum"
  OUT="$out/sw" SERVE_ARGS="$args" TAG="-$v" LEVELS_1K=64,256 LEVELS_8K=none \
    timeout ${SWEEP_LIMIT:-230} bash scripts/device/sweep.sh >"$out/sweep-$v.txt" 2>&1
  echo "exit $?" >>"$sum"
  grep -E "concurrency|Output token|Total Token|Median TPOT|Median TTFT|Failed" "$out/sweep-$v.txt" >>"$sum"
done
mkdir -p "$out/res"; cp "$out"/sw/sweep-*.json "$out"/st/lat-*.json "$out/res/" 2>/dev/null
tar czf "$out/call3-files.tgz" -C "$out" res masked.log sweep-t35.txt sweep-base.txt sw/serve.log 2>/dev/null
rm -rf "$out/st" "$out/sw" "$out/res" "$out"/*.txt "$out/masked.log"
cat "$sum"
