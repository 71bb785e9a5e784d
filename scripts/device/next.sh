#!/usr/bin/env bash
# The first call of the session after 2026-12-02's second (~7 min): what that session built without
# running it.
#   1. scripts/device/closing.sh with the tests whose code changed: issue 17's TP in lockstep on one
#      GPU (tp.sh: gpu_test_allreduce with the watchdog's child case and the lockstep halves,
#      gpu_test_cuda_forward --tp, bench latency -tp 1/2), gpu_test_cuda_forward, gpu_test_attention
#      (FP8 decode, now only by the exact conversion), gpu_test_moe;
#   2. gpu_test_attention --bench-kv: decode at 8k, bf16 vs FP8 (issue 15: >= 1.8x at batch 64).
# Prints $OUT/closing-summary.md and $OUT/bench-kv.md. Needs .devcarry (scripts/device/prepare.sh);
# carry [".devcarry"], command `bash scripts/device/next.sh`.
set -uo pipefail
out=${OUT:-/tmp/next-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
ONLY="gpu_test_cuda_forward gpu_test_attention gpu_test_moe" TEST_LIMIT=${TEST_LIMIT:-60} \
  BUDGET_S=${BUDGET_S:-480} OUT="$out" bash scripts/device/closing.sh >/dev/null 2>&1
timeout 100 .devcarry/bin/gpu_test_attention --bench-kv >"$out/bench-kv.md" 2>&1
cat "$out/closing-summary.md"
grep -E "^\| (decode full|B=)|speed-up" "$out/bench-kv.md"
