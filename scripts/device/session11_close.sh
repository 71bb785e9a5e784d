#!/usr/bin/env bash
# Session 11's closing call, ~6 min: every GPU test binary (scripts/device/gpu_tests.sh test mode) on
# the final build, then bench latency beside its roofline: 120b with the default against the ws
# kernel at full width (GPTOSS_MOE_WS_NARROW=0), interleaved, at decode 1, 8, 64, 256 and 1024 and
# prefill 1k and 8k; 20b decode 1 and 64. Needs .devcarry (scripts/device/prepare.sh). Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/close-out "session 11 closing call: all GPU tests, final figures"
OUT=$out/tests TEST_LIMIT=200 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
echo -e "\n## GPU tests $(t)" | tee -a "$sum"
sed -n '/^== tests/,$p' "$out/logs/gpu_tests.log" | tee -a "$sum"
grep -h "checks passed\|checks FAILED" "$out"/tests/*.log | sed 's/^/    /' | tee -a "$sum"
tar czf "$out/tests.tgz" -C "$out" tests 2>/dev/null && rm -rf "$out/tests"
echo -e "\n## 120b bench latency $(t)" | tee -a "$sum"
OUT=$out/b120 MODEL=120b BATCHES=1,8,64,256,1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-1} \
  VARIANTS="default=- wide=GPTOSS_MOE_WS_NARROW=0" bash scripts/device/variants.sh | tee -a "$sum"
echo -e "\n## 20b bench latency $(t)" | tee -a "$sum"
OUT=$out/b20 MODEL=20b BATCHES=1,64 ROUNDS=1 VARIANTS="default=-" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs b120/vlogs b20/vlogs 2>/dev/null && rm -rf "$out/logs" "$out"/b*/vlogs
