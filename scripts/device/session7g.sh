#!/usr/bin/env bash
# Session 7 (2026-12-03), last call (~3 min): 6d9c296, the fix of the KH 2 kernels' shared-memory
# request that failed every MoE call at 6f72d7b. gpu_test_moe (default and GPTOSS_MOE_KH=2),
# gpu_test_moe_fused, the forward test without TP and real width, bench latency with KH off / 2, then
# the forward test's TP part while the budget lasts. Needs .devcarry.
set -uo pipefail
out=${OUT:-/tmp/s7g-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
export GPTOSS_AR_TIMEOUT_S=10 CUDA_DEVICE_MAX_CONNECTIONS=32
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
budget=${BUDGET_S:-170}
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 7, last call: the fix of 6f72d7b's MoE failure, and KH 2"
run() { # NAME ENV LIMIT ARGS...
  local name=$1 e=$2 lim=$3; shift 3
  env $e timeout "$lim" $bin/$name "$@" >"$out/logs/$name-$e$*.log" 2>&1
  echo "- $name $e $*: $(res $?) — $(grep -E 'checks (passed|FAILED)' "$out/logs/$name-$e$*.log" | tail -1) $(t)" | tee -a "$sum"
  grep -E 'FAILED|failed' "$out/logs/$name-$e$*.log" | head -3 | sed 's/^/    /' | tee -a "$sum"
}
run gpu_test_moe X=0 40
run gpu_test_moe GPTOSS_MOE_KH=2 40
run gpu_test_moe_fused X=0 30
run gpu_test_cuda_forward X=0 60 --skip-tp --skip-real
for v in off 2; do
  e=X=0; [ $v = 2 ] && e=GPTOSS_MOE_KH=2
  env $e timeout 40 $bin/gptoss bench latency --model synthetic:120b --batches 1,2,4 --prefill "" \
    2>&1 | grep -E "^\| synthetic" | sed "s/^/kh-$v /" | tee -a "$sum"
done
l=$((budget - ($(date +%s) - start)))
[ $l -gt 40 ] && run gpu_test_cuda_forward X=0 $((l - 5)) --tp
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
