#!/usr/bin/env bash
# Session 15's closing call, ~6 min: every GPU test binary (gpu_tests.sh test mode) on the final
# build (the FP8 cache's prefill on the wgmma kernel by default; the W4A8 experiment removed), then
# the FP8 cache's prefill steps of the final build against its own GPTOSS_ATTN_WGMMA=0 (what the
# default was before: the mma.sync kernel for FP8), interleaved, 120b two rounds and 20b one.
# Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/close-out "session 15 closing call: all GPU tests; FP8-cache prefill, wgmma against mma.sync"
OUT=$out/tests TEST_LIMIT=200 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
echo -e "\n## GPU tests $(t)" | tee -a "$sum"
sed -n '/^== tests/,$p' "$out/logs/gpu_tests.log" | tee -a "$sum"
grep -h "checks passed\|checks FAILED" "$out"/tests/*.log | sed 's/^/    /' | tee -a "$sum"
grep -h "FAILED\|failed" "$out"/tests/*.log | head -12 | sed 's/^/    /' | tee -a "$sum"
tar czf "$out/tests.tgz" -C "$out" tests 2>/dev/null && rm -rf "$out/tests"
for m in 120b 20b; do
  echo -e "\n## $m FP8-cache prefill, wgmma (default) against mma.sync $(t)" | tee -a "$sum"
  OUT=$out/v$m MODEL=$m BATCHES=1 PREFILL=1024,8192 ROUNDS=$([ $m = 120b ] && echo 2 || echo 1) \
    EXTRA="--kv-cache-dtype fp8" VARIANTS="wgmma=- mma=GPTOSS_ATTN_WGMMA=0" \
    bash scripts/device/variants.sh | grep -E "^\|.*prefill|^\| variant|^\| ---|failed" | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v120b v20b 2>/dev/null && rm -rf "$out/logs" "$out"/v120b "$out"/v20b
