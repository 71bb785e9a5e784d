#!/usr/bin/env bash
# Session 7 (2026-12-03), fourth call (~5 min): the MoE small path's deep form (each warp's tile
# through a ring of D k steps in shared memory, moe_small.cuh; GPTOSS_MOE_DEEP=8|16, T ≤ 4) against
# the register form, in one build: gpu_test_moe (the deep form's bits against the register form's),
# the forward test with GPTOSS_MOE_DEEP=16, bench latency with the form off / 8 / 16 interleaved (two
# rounds), and ncu of the deep kernels at batch 1. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/s7d-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 7, call 4: the MoE small path's deep form"
timeout 150 $bin/gpu_test_moe >"$out/logs/moe.log" 2>&1
echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1) $(t)" | tee -a "$sum"
grep -E "deep|FAIL" "$out/logs/moe.log" | head -12 | sed 's/^/  /' | tee -a "$sum"
GPTOSS_MOE_DEEP=16 timeout 150 $bin/gpu_test_cuda_forward --skip-tp --skip-real >"$out/logs/fwd.log" 2>&1
echo "- forward --skip-tp --skip-real, GPTOSS_MOE_DEEP=16: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/fwd.log" | tail -1); $(grep -o 'seed [0-9]*' "$out/logs/fwd.log" | head -1) $(t)" | tee -a "$sum"
echo "## bench latency: deep off, 8, 16; two rounds $(t)" | tee -a "$sum"
for r in 1 2; do
  for d in off 8 16; do
    v=X=0; [ $d != off ] && v=GPTOSS_MOE_DEEP=$d
    env $v timeout 60 $bin/gptoss bench latency --model synthetic:120b --batches 1,2,4,8 --prefill "" \
      2>&1 | grep -E "decode" | sed "s/^/$d $r /" | tee -a "$sum"
    env $v timeout 40 $bin/gptoss bench latency --model synthetic:20b --batches 1,4 --prefill "" \
      2>&1 | grep -E "decode" | sed "s/^/$d $r /" | tee -a "$sum"
  done
done
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
left=$((500 - ($(date +%s) - start)))
echo "## ncu deep kernels, batch 1 ($left s left) $(t)" | tee -a "$sum"
if [ $left -gt 50 ]; then
  GPTOSS_MOE_DEEP=16 timeout $((left - 15)) "$ncu" --clock-control none -k "regex:moe_small" --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section LaunchStats --section InstructionStats --section SourceCounters -o "$out/logs/deep-b1" \
    $bin/gptoss bench latency --model synthetic:120b:layers=2 --batches 1 --prefill "" \
    --enforce-eager --decode-steps 3 --warmup 1 >"$out/logs/ncu-run.txt" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
  "$ncu" --import "$out/logs/deep-b1.ncu-rep" >"$out/ncu-deep-b1.txt" 2>&1
  "$ncu" --import "$out/logs/deep-b1.ncu-rep" --page source --csv --print-source sass >"$out/logs/sass-deep-b1.csv" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Eligible Warps|Registers Per|Executed Instructions  |Achieved Active" \
    "$out/ncu-deep-b1.txt" | head -20 | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
