#!/usr/bin/env bash
# Issue 13: the ring form of the GEMV (gemv.h: one block an SM, rows streamed through shared-memory
# stages by the bulk copy engine) for the QKV and O projections of small decode steps, in one device
# call (~3 min; every step under a timeout, since a ring that deadlocks would hang):
#   1. gpu_test_gemv (both forms against the double-precision reference, byte-identical to each
#      other) and its --bench (rows form, ring form, cuBLASLt at QKV, O, router, lm_head shapes);
#   2. gpu_test_cuda_forward --skip-tp with GPTOSS_GEMV_DENSE=4;
#   3. bench latency 120b decode at batch 1, 2, 4, 8: cuBLASLt (base), ring (gd), ring with PDL;
#      20b at batch 1 and 4, base vs gd.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/ring-summary.md.
set -uo pipefail
out=${OUT:-/tmp/ring-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/ring-summary.md"
start=$(date +%s)
summary_header "$sum" "Ring GEMV for QKV and O (issue 13)"
timeout 60 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "- gpu_test_gemv: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/gemv.log" | tail -1)" | tee -a "$sum"
grep -E "failed|differ" "$out/logs/gemv.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
timeout 90 $bin/gpu_test_gemv --bench >"$out/logs/gemv-bench.log" 2>&1
echo "- gpu_test_gemv --bench: $(res $?)" | tee -a "$sum"
grep -E "^\|" "$out/logs/gemv-bench.log" | tee -a "$sum"
GPTOSS_GEMV_DENSE=4 timeout 90 $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward.log" 2>&1
echo "- gpu_test_cuda_forward --skip-tp, GPTOSS_GEMV_DENSE=4: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward.log" | tail -1)" | tee -a "$sum"
grep -E "FAILED|failed" "$out/logs/forward.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
echo "## bench latency 120b ($(($(date +%s) - start)) s in)" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- gd=GPTOSS_GEMV_DENSE=4 gdpdl=GPTOSS_GEMV_DENSE=4+GPTOSS_PDL=1 base2=-" \
  BATCHES=1,2,4,8 ROUNDS=1 timeout 200 bash scripts/device/variants.sh 2>&1 | tail -18 | tee -a "$sum"
echo "## bench latency 20b ($(($(date +%s) - start)) s in)" | tee -a "$sum"
OUT="$out/v20" MODEL=20b VARIANTS="base=- gd=GPTOSS_GEMV_DENSE=4" BATCHES=1,4 ROUNDS=1 \
  timeout 80 bash scripts/device/variants.sh 2>&1 | tail -6 | tee -a "$sum"
echo "($(($(date +%s) - start)) s)" | tee -a "$sum"
