#!/usr/bin/env bash
# Session 14's closing call, ~6 min: every GPU test binary (gpu_tests.sh test mode) on the final
# build (the wgmma prefill attention on by default); the kernels alone (gpu_test_attention
# --bench-prefill); bench latency of the final build against session 13's head (.devcarry/base,
# built by BASE=a53b34d scripts/device/prepare.sh), interleaved, 120b decode 1, 64, 1024 and
# prefill 1k, 8k, 20b decode 1, 1024 and prefill 1k, 8k. Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/close-out "session 14 closing call: all GPU tests, the final build against session 13's"
OUT=$out/tests TEST_LIMIT=200 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
echo -e "\n## GPU tests $(t)" | tee -a "$sum"
sed -n '/^== tests/,$p' "$out/logs/gpu_tests.log" | tee -a "$sum"
grep -h "checks passed\|checks FAILED" "$out"/tests/*.log | sed 's/^/    /' | tee -a "$sum"
grep -h "FAILED\|failed" "$out"/tests/*.log | head -12 | sed 's/^/    /' | tee -a "$sum"
tar czf "$out/tests.tgz" -C "$out" tests 2>/dev/null && rm -rf "$out/tests"
echo -e "\n## the prefill attention kernels alone $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_attention --bench-prefill 2>&1 | grep -E "^\|" | tee -a "$sum"
echo -e "\n## final against session 13's head $(t)" | tee -a "$sum"
OUT=$out/ab SKIP_TESTS=1 SKIP_GEN=1 MODELS="120b 20b" BATCHES=${AB_BATCHES:-1,64,1024} PREFILL=1024,8192 \
  ROUNDS=1 bash scripts/device/ab.sh 2>&1 | grep -E "^\||failed|new " | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
