#!/usr/bin/env bash
# Session 8 (2026-12-03), call 1: the early weight streams (gemv.h's early form, runner.h's
# GPTOSS_EARLY_WEIGHTS mask: 1 O, 2 QKV, 4 router, 8 lm_head) against main's defaults. gpu_test_gemv
# (the early form's bytes), bench latency variants interleaved (120b decode 1/2/4), the forward test
# with every early bit on, and the GEMV bench's early rows. Needs .devcarry (prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/s8a-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
budget=${BUDGET_S:-540}
t() { echo "($(($(date +%s) - start)) s)"; }
left() { echo $((budget - ($(date +%s) - start))); }
summary_header "$sum" "Session 8, call 1: early weight streams"
timeout 120 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "| gpu_test_gemv | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/gemv.log" | tail -1) | $(t) |" | tee -a "$sum"
grep -E 'FAIL|differ' "$out/logs/gemv.log" | head -5 | tee -a "$sum"
echo -e "\n## bench latency variants $(t)" | tee -a "$sum"
OUT="$out" ROUNDS=${ROUNDS:-2} MODEL=120b BATCHES=${BATCHES:-1,2,4} \
  VARIANTS=${VARIANTS:-"base=- o=GPTOSS_EARLY_WEIGHTS=1 orl=GPTOSS_EARLY_WEIGHTS=13 all=GPTOSS_EARLY_WEIGHTS=15 all4=GPTOSS_EARLY_WEIGHTS=15+GPTOSS_EARLY_MAX_T=4"} \
  bash "$(dirname "$0")/variants.sh" 2>&1 | tee -a "$sum"
echo "$(t)" | tee -a "$sum"
if [ "$(left)" -gt 100 ]; then
  GPTOSS_EARLY_WEIGHTS=15 GPTOSS_EARLY_MAX_T=4 timeout $(($(left) - 40)) $bin/gpu_test_cuda_forward --skip-tp --skip-real >"$out/logs/fwd.log" 2>&1
  echo "| forward --skip-tp --skip-real, early 15 up to 4 | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/fwd.log" | tail -1) | $(t) |" | tee -a "$sum"
  grep -E 'FAILED|failed|^summary' "$out/logs/fwd.log" | head -6 | tee -a "$sum"
fi
if [ "$(left)" -gt 30 ]; then
  timeout $(($(left) - 5)) $bin/gpu_test_gemv --bench >"$out/logs/gemv-bench.log" 2>&1
  grep -E '^\|' "$out/logs/gemv-bench.log" | grep -E 'qkv|o M|lm_head|router' | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
