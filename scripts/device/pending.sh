#!/usr/bin/env bash
# What session 3 of 2026-12-01 built without device time, measured in one call (~9 minutes):
#   1. the GPU tests that cover it: gpu_test_attention (the fused split merge, bit for bit),
#      gpu_test_sampling (the mask kernel), gpu_test_masked_sampling (constrained rows on the device
#      through the engine), gpu_test_cuda_forward (the whole forward pass, unchanged by default);
#   2. constrained sampling, host vs device (scripts/device/structured.sh, SKIP_TESTS=1);
#   3. the fused split merge against the merge kernel (scripts/device/variants.sh).
# Everything lands in $OUT/pending-summary.md (plus logs.tgz). Needs .devcarry
# (bash scripts/device/prepare.sh here); the device call: carry [".devcarry"], command
# `bash scripts/device/pending.sh`. SKIP_TESTS=1 / SKIP_MASKS=1 / SKIP_FUSED=1 skip a part.
set -uo pipefail
out=${OUT:-/tmp/pending-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
sum="$out/pending-summary.md"
{
  echo "# Pending measurements (session 3 of 2026-12-01)"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  echo "commit $(cat .devcarry/commit.txt 2>/dev/null)"
} | tee "$sum"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  echo "## GPU tests" | tee -a "$sum"
  for t in gpu_test_attention gpu_test_sampling gpu_test_masked_sampling gpu_test_cuda_forward; do
    timeout 200 ".devcarry/bin/$t" >"$out/logs/$t.log" 2>&1
    rc=$?
    case $rc in 0) r=PASS ;; 77) r=SKIP ;; *) r="FAIL($rc)" ;; esac
    echo "- $t: $r — $(grep -E 'checks passed|FAILED' "$out/logs/$t.log" | tail -1)" | tee -a "$sum"
  done
fi
if [ "${SKIP_MASKS:-0}" != 1 ]; then
  OUT="$out/masks" SKIP_TESTS=1 BATCHES=${BATCHES:-1,8,64} bash scripts/device/structured.sh >/dev/null 2>&1
  cat "$out/masks/structured-summary.md" >>"$sum" 2>/dev/null || echo "(structured.sh left no summary)" >>"$sum"
fi
if [ "${SKIP_FUSED:-0}" != 1 ]; then
  echo "## Fused split merge (GPTOSS_ATTN_FUSED_MERGE=1) vs the merge kernel" >>"$sum"
  OUT="$out/fused" VARIANTS="base=- fused=GPTOSS_ATTN_FUSED_MERGE=1" ROUNDS=${ROUNDS:-2} \
    bash scripts/device/variants.sh >"$out/fused.txt" 2>&1
  tail -20 "$out/fused.txt" >>"$sum"
fi
tar czf "$out/logs.tgz" -C "$out" logs masks fused 2>/dev/null
rm -rf "$out/logs" "$out/masks" "$out/fused" "$out/fused.txt"
cat "$sum"
