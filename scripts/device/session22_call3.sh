#!/usr/bin/env bash
# Session 22, third device call (~8 min, if the budget allows): compute-sanitizer's memcheck and
# racecheck over gpu_test_attn_stream --quick (the stream kernel's shared-memory protocol and its
# global accesses); the batch-1 step by kernel with the stream forms on as the first two calls left
# them (STREAM_ENV, e.g. "GPTOSS_ATTN_STREAM=2 GPTOSS_MOE_FUSED=4": issue 13's per-kernel table
# and bubble); then the layer probe's stream forms (scripts/device/layer_probe.sh: its prediction
# and decision rule) in the time left. Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
root=${OUT:-/tmp/s22c3}
source "$(dirname "$0")/env.sh"
device_script "$root/main" "session 22 call 3: sanitizers, the step by kernel, the layer probe"
echo -e "\n## compute-sanitizer over gpu_test_attn_stream --quick $(t)" | tee -a "$sum"
OUT=$out/sanitize TESTS=gpu_test_attn_stream TOOLS="memcheck racecheck" LIMIT=100 \
  bash scripts/device/sanitize.sh 2>&1 | grep -E "^- " | tee -a "$sum"
# shellcheck disable=SC2086
[ -n "${STREAM_ENV:-}" ] && export ${STREAM_ENV} && echo "(with $STREAM_ENV)" | tee -a "$sum"
decode_by_kernel 1
left=$((520 - ($(date +%s) - start)))
if [ $left -gt 120 ]; then
  OUT=$root/probe timeout $left bash scripts/device/layer_probe.sh
  cat "$root/probe/summary.md" >>"$sum"
fi
cp "$sum" "$root/summary.md"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null
