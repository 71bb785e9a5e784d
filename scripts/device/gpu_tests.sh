#!/usr/bin/env bash
# On the GPU machine, in one call: run every GPU test binary carried in .devcarry/bin (built here by
# scripts/device/prepare.sh), then each one's benchmark mode, then $BENCH_CMD if set (e.g. the
# `gptoss bench latency` runs, limit $BENCH_CMD_LIMIT seconds), and print a short table at the end.
# Full logs go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
echo "commit $(cat .devcarry/commit.txt 2>/dev/null)" | tee -a "$out/gpu.txt"
mode=${1:-all}            # test | bench | all
tlimit=${TEST_LIMIT:-150} # seconds per test binary
blimit=${BENCH_LIMIT:-120}
summary=""
[ "$mode" = bench ] || for t in .devcarry/bin/gpu_test_*; do
  [ -x "$t" ] || continue
  name=$(basename "$t")
  timeout "$tlimit" "$t" >"$out/$name.log" 2>&1
  rc=$?
  case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL($rc)" ;; esac
  summary+="$name: $r"$'\n'
  tail -5 "$out/$name.log"
done
echo "== benchmarks"
[ "$mode" = test ] || for t in .devcarry/bin/gpu_test_*; do
  [ -x "$t" ] || continue
  timeout "$blimit" "$t" --bench >"$out/$(basename "$t").bench.log" 2>&1
  grep -E '^\|' "$out/$(basename "$t").bench.log" || tail -3 "$out/$(basename "$t").bench.log"
done
if [ -n "${BENCH_CMD:-}" ]; then
  echo "== bench command: $BENCH_CMD"
  if timeout "${BENCH_CMD_LIMIT:-420}" bash -c "$BENCH_CMD" >"$out/bench_cmd.log" 2>&1; then r=PASS; else r="FAIL($?)"; fi
  grep -E '^\||^bench:' "$out/bench_cmd.log" || tail -20 "$out/bench_cmd.log"
  summary+="bench command: $r"$'\n'
fi
echo "== tests"
printf '%s' "$summary"
