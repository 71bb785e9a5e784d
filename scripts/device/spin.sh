#!/usr/bin/env bash
# A short call (≤ BUDGET_S, default 300 s): the fused MoE kernel's grid barrier with a sleep between
# polls (gpu_test_moe_fused --bench: spin 0, 64, 256, 1024 ns), the GPU tests the previous call did
# not run (ONLY_TESTS), and issue 15's accuracy with its noise floor (gpu_test_cuda_forward
# --kv-accuracy) in the time left. Needs .devcarry.
set -uo pipefail
out=${OUT:-/tmp/spin-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
start=$(date +%s)
left() { echo $((${BUDGET_S:-300} - ($(date +%s) - start))); }
summary_header "$out/spin-summary.md" "Fused MoE barrier spin, remaining GPU tests, FP8 accuracy"
timeout 60 .devcarry/bin/gpu_test_moe_fused --bench 2>&1 | grep -E "^\|" | tee -a "$out/spin-summary.md"
ONLY="${ONLY_TESTS:-}" SKIP_TP=1 TEST_LIMIT=60 BUDGET_S=$(($(left) - 60)) OUT="$out/c" \
  bash scripts/device/closing.sh >/dev/null 2>&1
grep -E "^\| gpu_test|FAILED|failed" "$out/c/closing-summary.md" | tee -a "$out/spin-summary.md"
l=$(left)
[ "$l" -gt 20 ] && timeout "$l" .devcarry/bin/gpu_test_cuda_forward --kv-accuracy 2>&1 | grep -E "^\||target" | tee -a "$out/spin-summary.md"
