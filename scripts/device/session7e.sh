#!/usr/bin/env bash
# Session 7 (2026-12-03), fifth call (~4 min): the MoE small kernels' k-step MMAs over 1, 2 or 4
# accumulators (GPTOSS_MOE_NACC, moe_small.cuh), in one build: gpu_test_moe with each, the forward
# test with 2, bench latency with each interleaved (two rounds). Needs .devcarry.
set -uo pipefail
out=${OUT:-/tmp/s7e-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 7, call 5: the MoE small kernels with 1, 2 or 4 accumulators"
for n in 1 2 4; do
  GPTOSS_MOE_NACC=$n timeout 120 $bin/gpu_test_moe >"$out/logs/moe-$n.log" 2>&1
  echo "- gpu_test_moe NACC=$n: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe-$n.log" | tail -1) $(t)" | tee -a "$sum"
done
GPTOSS_MOE_NACC=2 timeout 150 $bin/gpu_test_cuda_forward --skip-tp --skip-real >"$out/logs/fwd.log" 2>&1
echo "- forward --skip-tp --skip-real, NACC=2: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/fwd.log" | tail -1); $(grep -o 'seed [0-9]*' "$out/logs/fwd.log" | head -1) $(t)" | tee -a "$sum"
echo "## bench latency: NACC 1, 2, 4; two rounds $(t)" | tee -a "$sum"
for r in 1 2; do
  for n in 1 2 4; do
    GPTOSS_MOE_NACC=$n timeout 80 $bin/gptoss bench latency --model synthetic:120b --batches 1,2,4,8,64 --prefill "" \
      2>&1 | grep -E "^\| synthetic" | sed "s/^/$n $r /" | tee -a "$sum"
    GPTOSS_MOE_NACC=$n timeout 40 $bin/gptoss bench latency --model synthetic:20b --batches 1,8 --prefill "" \
      2>&1 | grep -E "^\| synthetic" | sed "s/^/$n $r /" | tee -a "$sum"
  done
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
