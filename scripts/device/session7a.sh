#!/usr/bin/env bash
# Session 7 (2026-12-03), first call (~5 min): (1) the forward test's engine check, which failed 2 of
# ~8 runs in session 6: the two failing seeds replayed with each default-off path (GPTOSS_LM_HEAD_GEMV,
# GPTOSS_ROUTER_ROUTE) off and on, then fresh seeds with both on; (2) ncu's warp states and per-SASS
# stall samples of moe_small_kernel (gate_up and down) at batch 1 and 8; (3) bench latency 120b at
# batch 1 and 8 with the paths off and on. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/s7a-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 7, call 1: the failing seeds replayed; moe_small_kernel under ncu"
echo "## forward --skip-tp --skip-real replays $(t)" | tee -a "$sum"
run_fwd() { # NAME ENV... -- ARGS...
  local name=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" timeout 120 $bin/gpu_test_cuda_forward --skip-tp --skip-real "$@" \
    >"$out/logs/fwd-$name.log" 2>&1
  local rc=$?
  echo "- $name: $(res $rc) — $(grep -E 'checks passed|FAILED' "$out/logs/fwd-$name.log" | tail -1 | cut -c1-80); $(grep -o 'engine greedy.*' "$out/logs/fwd-$name.log" | head -1); $(grep -o 'seed [0-9]*' "$out/logs/fwd-$name.log" | head -1) $(t)" | tee -a "$sum"
  grep -E "CPU margin" "$out/logs/fwd-$name.log" | head -3 | sed 's/^/  /' | tee -a "$sum"
}
for seed in 571710953577017952 8805477850756882405; do
  run_fwd "s${seed:0:4}-off" X=0 -- --seed $seed
  run_fwd "s${seed:0:4}-off2" X=0 -- --seed $seed
  run_fwd "s${seed:0:4}-lm" GPTOSS_LM_HEAD_GEMV=1 -- --seed $seed
  run_fwd "s${seed:0:4}-route" GPTOSS_ROUTER_ROUTE=1 -- --seed $seed
  run_fwd "s${seed:0:4}-both" GPTOSS_LM_HEAD_GEMV=1 GPTOSS_ROUTER_ROUTE=1 -- --seed $seed
done
for i in 1 2 3 4 5 6; do
  run_fwd "fresh$i-both" GPTOSS_LM_HEAD_GEMV=1 GPTOSS_ROUTER_ROUTE=1 --
done
echo "## bench latency 120b decode $(t)" | tee -a "$sum"
for v in "X=0" "GPTOSS_LM_HEAD_GEMV=1 GPTOSS_ROUTER_ROUTE=1"; do
  echo "- $v" | tee -a "$sum"
  env $v timeout 60 $bin/gptoss bench latency --model synthetic:120b --batches 1,8 --prefill "" \
    2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
done
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for B in 1 8; do
  left=$((560 - ($(date +%s) - start)))
  echo "## ncu moe_small_kernel batch $B ($left s left) $(t)" | tee -a "$sum"
  [ $left -gt 60 ] || break
  timeout $((left - 20)) "$ncu" --clock-control none -k "regex:moe_small" --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters \
    --section InstructionStats -o "$out/logs/moe-b$B" \
    $bin/gptoss bench latency --model synthetic:120b:layers=2 --batches $B --prefill "" \
    --enforce-eager --decode-steps 3 --warmup 1 >"$out/logs/ncu-run-b$B.txt" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
  "$ncu" --import "$out/logs/moe-b$B.ncu-rep" >"$out/ncu-b$B.txt" 2>&1
  "$ncu" --import "$out/logs/moe-b$B.ncu-rep" --page source --csv --print-source sass \
    >"$out/logs/sass-b$B.csv" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Eligible Warps|Warp Cycles Per Issued|Achieved Active|Stall" \
    "$out/ncu-b$B.txt" | head -40 | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
