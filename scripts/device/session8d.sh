#!/usr/bin/env bash
# Session 8 (2026-12-03), call 4: the MLP norm inside the router's kernel (gemv.h's
# gemv_norm_route, GPTOSS_NORM_ROUTE=1) and the attention norm inside the down projection's last
# block (moe.h's moe_down_norm, GPTOSS_DOWN_NORM=1) against main's defaults (early O at one token),
# and main's defaults against early O off. gpu_test_gemv and gpu_test_moe (their bytes against the
# two launches), bench latency variants interleaved (120b decode 1/2/4/8), the forward test with
# both on, and the batch-1 CUPTI timeline with both on. Needs .devcarry (prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/s8d-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 8, call 4: the MLP norm inside the router's kernel"
timeout 120 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "| gpu_test_gemv | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/gemv.log" | tail -1) | $(t) |" | tee -a "$sum"
grep -E 'FAIL|differ|norm_route' "$out/logs/gemv.log" | head -5 | tee -a "$sum"
timeout 150 $bin/gpu_test_moe >"$out/logs/moe.log" 2>&1
echo "| gpu_test_moe | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/moe.log" | tail -1) | $(t) |" | tee -a "$sum"
grep -E 'FAIL|differ' "$out/logs/moe.log" | head -5 | tee -a "$sum"
echo -e "\n## bench latency variants $(t)" | tee -a "$sum"
OUT="$out" ROUNDS=${ROUNDS:-3} MODEL=120b BATCHES=${BATCHES:-1,2,4,8} \
  VARIANTS=${VARIANTS:-"base=- nr=GPTOSS_NORM_ROUTE=1 dn=GPTOSS_DOWN_NORM=1 both=GPTOSS_NORM_ROUTE=1+GPTOSS_DOWN_NORM=1 no_early=GPTOSS_EARLY_WEIGHTS=0"} \
  bash "$(dirname "$0")/variants.sh" 2>&1 | tee -a "$sum"
OUT="$out" ROUNDS=2 MODEL=20b BATCHES=1 VARIANTS="base=- both=GPTOSS_NORM_ROUTE=1+GPTOSS_DOWN_NORM=1" \
  bash "$(dirname "$0")/variants.sh" 2>&1 | grep -E '^\| (base|both) ' | tee -a "$sum"
GPTOSS_NORM_ROUTE=1 GPTOSS_DOWN_NORM=1 timeout 200 $bin/gpu_test_cuda_forward --skip-tp --skip-real >"$out/logs/fwd.log" 2>&1
echo "| forward --skip-tp --skip-real, NORM_ROUTE=1 DOWN_NORM=1 | $(res $?) | $(grep -E 'checks (passed|FAILED)' "$out/logs/fwd.log" | tail -1) | $(t) |" | tee -a "$sum"
grep -E 'FAILED|failed' "$out/logs/fwd.log" | head -6 | tee -a "$sum"
GPTOSS_NORM_ROUTE=1 GPTOSS_DOWN_NORM=1 OUT="$out/bubble" BATCHES=1 bash "$(dirname "$0")/bubble.sh" >/dev/null 2>&1
head -8 "$out/bubble/bubble-b1.md" | tail -3 | tee -a "$sum"
grep -E '^\| [0-9]+ \|' "$out/bubble/bubble-b1.md" | sed -n 1,22p | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
