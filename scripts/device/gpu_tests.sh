#!/usr/bin/env bash
# On the GPU machine, in one call: use the carried build (build/, made here with nvcc for sm_90a),
# run every GPU test (ctest label gpu), then each GPU test's benchmark mode, and print a short table.
# Logs go to $OUT.
set -uo pipefail
out=${OUT:-/tmp/gpu-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee "$out/commit.txt"
cd build || exit 1
ctest -L gpu --output-on-failure 2>&1 | tee "$out/gpu_tests.log" | tail -40
echo "== benchmarks"
for t in tests/gpu/gpu_test_*; do
  [ -x "$t" ] || continue
  "$t" --bench 2>&1 | tee -a "$out/gpu_bench.log" | grep -E '^\|' || true
done
