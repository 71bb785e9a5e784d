#!/usr/bin/env bash
# Issue 13: the wide GEMV form (gemv.h) for the QKV and O projections of small decode steps, in one
# device call (~4 min):
#   1. gpu_test_gemv (both forms against the double-precision reference, and bit-identical to each
#      other) and its --bench (rows form, wide form, cuBLASLt at QKV, O, router, lm_head shapes);
#   2. gpu_test_cuda_forward --skip-tp with GPTOSS_GEMV_DENSE=8 (every real-width comparison with
#      QKV and O on the GEMV up to 8 tokens);
#   3. bench latency 120b decode at batch 1, 2, 4, 8: cuBLASLt (base), GEMV (gd), and both with PDL;
#      20b at batch 1 and 8, base vs gd.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/gemv-summary.md.
set -uo pipefail
out=${OUT:-/tmp/gemv-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/gemv-summary.md"
start=$(date +%s)
summary_header "$sum" "Wide GEMV for QKV and O (issue 13)"
timeout 60 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "- gpu_test_gemv: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/gemv.log" | tail -1)" | tee -a "$sum"
grep -E "failed|differ" "$out/logs/gemv.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
timeout 60 $bin/gpu_test_gemv --bench 2>&1 | grep -E "^\|" | grep -v lm_head | tee -a "$sum"
GPTOSS_GEMV_DENSE=8 timeout 90 $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward.log" 2>&1
echo "- gpu_test_cuda_forward --skip-tp, GPTOSS_GEMV_DENSE=8: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward.log" | tail -1)" | tee -a "$sum"
grep -E "FAILED|failed" "$out/logs/forward.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
echo "## bench latency 120b ($(($(date +%s) - start)) s in)" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- gd=GPTOSS_GEMV_DENSE=8 gdpdl=GPTOSS_GEMV_DENSE=8+GPTOSS_PDL=1 pdl=GPTOSS_PDL=1" \
  BATCHES=1,2,4,8 ROUNDS=1 timeout 200 bash scripts/device/variants.sh 2>&1 | tail -18 | tee -a "$sum"
echo "## bench latency 20b ($(($(date +%s) - start)) s in)" | tee -a "$sum"
OUT="$out/v20" MODEL=20b VARIANTS="base=- gd=GPTOSS_GEMV_DENSE=8" BATCHES=1,8 ROUNDS=1 \
  timeout 80 bash scripts/device/variants.sh 2>&1 | tail -6 | tee -a "$sum"
echo "($(($(date +%s) - start)) s)" | tee -a "$sum"
