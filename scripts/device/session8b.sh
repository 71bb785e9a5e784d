#!/usr/bin/env bash
# Session 8 (2026-12-03), call 2: the early weight streams (gemv.h's early form, runner.h's
# GPTOSS_EARLY_WEIGHTS mask: 1 O, 2 QKV, 4 router, 8 lm_head) against main's defaults. gpu_test_gemv
# (the early form's bytes), bench latency variants interleaved (120b decode 1/2/4), the forward test
# with every early bit on and PDL, then DEP2 in lockstep (main's defaults). Needs .devcarry (prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/s8b-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
budget=${BUDGET_S:-540}
t() { echo "($(($(date +%s) - start)) s)"; }
left() { echo $((budget - ($(date +%s) - start))); }
summary_header "$sum" "Session 8, call 2: early weight streams with the carveout, and PDL"
timeout 120 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "| gpu_test_gemv | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/gemv.log" | tail -1) | $(t) |" | tee -a "$sum"
grep -E 'FAIL|differ' "$out/logs/gemv.log" | head -5 | tee -a "$sum"
echo -e "\n## bench latency variants $(t)" | tee -a "$sum"
OUT="$out" ROUNDS=${ROUNDS:-2} MODEL=120b BATCHES=${BATCHES:-1,2,4} \
  VARIANTS=${VARIANTS:-"base=- o=GPTOSS_EARLY_WEIGHTS=1 o_nocarve=GPTOSS_EARLY_WEIGHTS=1+GPTOSS_CARVEOUT=none pdl=GPTOSS_PDL=1 o_pdl=GPTOSS_EARLY_WEIGHTS=1+GPTOSS_PDL=1 orl_pdl=GPTOSS_EARLY_WEIGHTS=13+GPTOSS_PDL=1 all_pdl=GPTOSS_EARLY_WEIGHTS=15+GPTOSS_PDL=1"} \
  bash "$(dirname "$0")/variants.sh" 2>&1 | tee -a "$sum"
echo "$(t)" | tee -a "$sum"
if [ "$(left)" -gt 100 ]; then
  GPTOSS_EARLY_WEIGHTS=15 GPTOSS_PDL=1 timeout $(($(left) - 40)) $bin/gpu_test_cuda_forward --skip-tp --skip-real >"$out/logs/fwd.log" 2>&1
  echo "| forward --skip-tp --skip-real, early 15 + PDL | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/fwd.log" | tail -1) | $(t) |" | tee -a "$sum"
  grep -E 'FAILED|failed|^summary' "$out/logs/fwd.log" | head -6 | tee -a "$sum"
fi
if [ "$(left)" -gt 240 ]; then
  timeout $(($(left) - 10)) $bin/gpu_test_cuda_forward --dep >"$out/logs/dep.log" 2>&1
  echo "| forward --dep (main's defaults) | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/dep.log" | tail -1) | $(t) |" | tee -a "$sum"
  grep -E 'FAILED|failed|DEP2 vs TP1|^summary' "$out/logs/dep.log" | head -6 | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
