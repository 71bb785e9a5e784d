#!/usr/bin/env bash
# Session 6 of 2026-12-02, one device call (~8 min): the router with the routing in its last block
# (gemv_route, GPTOSS_ROUTER_ROUTE=1) against the default, the GPU test suite (with the TP part in
# one-GPU lockstep), and the closing figures (`gptoss bench latency` 120b and 20b next to
# `gptoss roofline`). Every step under a timeout; at most
# 8 files come back, so the logs travel as one archive. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/s6-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 6: gemv_route, GPU tests, closing figures"
timeout 60 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "- gpu_test_gemv: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/gemv.log" | tail -1) $(t)" | tee -a "$sum"
grep -E "FAIL|gemv_route" "$out/logs/gemv.log" | head -6 | sed 's/^/  /' | tee -a "$sum"
GPTOSS_ROUTER_ROUTE=1 timeout 120 $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward-rr.log" 2>&1
echo "- gpu_test_cuda_forward --skip-tp, GPTOSS_ROUTER_ROUTE=1: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward-rr.log" | tail -1) $(t)" | tee -a "$sum"
grep -E "FAILED|failed" "$out/logs/forward-rr.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
echo "## bench latency 120b, router route $(t)" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- rr=GPTOSS_ROUTER_ROUTE=1" BATCHES=1,2,4,8 ROUNDS=2 \
  timeout 150 bash scripts/device/variants.sh 2>&1 | tail -10 | tee -a "$sum"
echo "## bench latency 20b $(t)" | tee -a "$sum"
OUT="$out/v20" MODEL=20b VARIANTS="base=- rr=GPTOSS_ROUTER_ROUTE=1" BATCHES=1,4 ROUNDS=1 \
  timeout 60 bash scripts/device/variants.sh 2>&1 | tail -6 | tee -a "$sum"
echo "## GPU tests $(t)" | tee -a "$sum"
TEST_LIMIT=100 BUDGET_S=330 OUT="$out/c" bash scripts/device/closing.sh >/dev/null 2>&1
grep -vE "^# |^NVIDIA|^commit" "$out/c/closing-summary.md" | tee -a "$sum"
echo "## closing figures $(t)" | tee -a "$sum"
timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches 1,8,64,256,1024 \
  --prefill 1024,8192 --output-json "$out/latency-120b.json" 2>&1 | grep -E "^\| " | tee -a "$sum"
timeout 45 $bin/gptoss bench latency --model synthetic:20b --batches 1,8,64 --prefill "" \
  --output-json "$out/latency-20b.json" 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
for b in 1 8 64; do
  $bin/gptoss roofline --model 120b --batch $b --context 1024
  $bin/gptoss roofline --model 20b --batch $b --context 1024
done >"$out/logs/roofline.txt" 2>&1
tail -12 "$out/logs/roofline.txt" | tee -a "$sum"
echo "## DEP2 in one-GPU lockstep (gpu_test_cuda_forward --dep) $(t)" | tee -a "$sum"
left=$((590 - ($(date +%s) - start)))
if [ $left -gt 40 ]; then
  GPTOSS_AR_TIMEOUT_S=10 timeout $left $bin/gpu_test_cuda_forward --dep >"$out/logs/forward-dep.log" 2>&1
  echo "- gpu_test_cuda_forward --dep: $(res $?) — $(tail -1 "$out/logs/forward-dep.log")" | tee -a "$sum"
  grep -E "DEP2 vs|\(g\)|FAIL|failed|timed out" "$out/logs/forward-dep.log" | head -16 | sed 's/^/  /' |
    tee -a "$sum"
else
  echo "- not run: $left s left" | tee -a "$sum"
fi
t | tee -a "$sum"
mv "$out/c/logs.tgz" "$out/logs/tests-logs.tgz" 2>/dev/null
mv "$out/v" "$out/v20" "$out/logs/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs" "$out/c"
