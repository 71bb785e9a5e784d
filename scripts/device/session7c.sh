#!/usr/bin/env bash
# Session 7 (2026-12-03), third call (~7 min): three builds side by side — base (.devcarry/base:
# 1d40301), the MoE small path's setup diet (item records from the routing, staging loads before
# stores, the epilogue's loads at the start, the bias kept as raw bits until the epilogue:
# .devcarry/mid) and the diet with the k loop's two register batches taking turns and no zero fill
# (.devcarry/bin). GPU tests of the MoE and routing code (new build), the forward test on the seed
# whose engine check failed and on a fresh seed, bench latency of the three builds interleaved (two
# rounds, prefill in the first), ncu's stall samples of moe_small_kernel at batch 1 and 8 (new).
set -uo pipefail
out=${OUT:-/tmp/s7c-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 7, call 3: base, the setup diet (mid), and the diet with the two-batch loop (new)"
echo "base $(cat .devcarry/base/commit.txt), mid $(cat .devcarry/mid/commit.txt)" | tee -a "$sum"
for tst in gpu_test_moe gpu_test_gemv gpu_test_moe_fused; do
  timeout 120 $bin/$tst >"$out/logs/$tst.log" 2>&1
  echo "- $tst: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/$tst.log" | tail -1) $(t)" | tee -a "$sum"
done
for s in 8805477850756882405 -; do
  a=(--seed "$s"); [ "$s" = - ] && a=()
  timeout 150 $bin/gpu_test_cuda_forward --skip-tp "${a[@]}" >"$out/logs/fwd-$s.log" 2>&1
  echo "- forward --skip-tp ${a[*]}: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/fwd-$s.log" | tail -1); $(grep -o 'seed [0-9]*' "$out/logs/fwd-$s.log" | head -1) $(t)" | tee -a "$sum"
  grep -E "CPU margin|forward pass over|summary:" "$out/logs/fwd-$s.log" | head -8 | sed 's/^/  /' | tee -a "$sum"
done
echo "## bench latency, base, mid, new, two rounds $(t)" | tee -a "$sum"
for r in 1 2; do
  for b in base mid new; do
    x=$bin/gptoss; [ $b = base ] && x=.devcarry/base/gptoss; [ $b = mid ] && x=.devcarry/mid/gptoss
    pf=""; [ $r = 1 ] && pf=1024,8192
    timeout 120 $x bench latency --model synthetic:120b --batches 1,2,4,8,64 --prefill "$pf" \
      --output-json "$out/logs/lat-120b-$b-$r.json" 2>&1 | grep -E "^\| synthetic" | sed "s/^/$b $r /" | tee -a "$sum"
    timeout 60 $x bench latency --model synthetic:20b --batches 1,8 --prefill "" \
      --output-json "$out/logs/lat-20b-$b-$r.json" 2>&1 | grep -E "^\| synthetic" | sed "s/^/$b $r /" | tee -a "$sum"
  done
done
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
left=$((560 - ($(date +%s) - start)))
for B in 1 8; do
left=$((560 - ($(date +%s) - start)))
echo "## ncu moe_small_kernel batch $B, new ($left s left) $(t)" | tee -a "$sum"
if [ $left -gt 50 ]; then
  timeout $((left - 15)) "$ncu" --clock-control none -k "regex:moe_small" --launch-skip 4 --launch-count 2 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SourceCounters --section InstructionStats -o "$out/logs/moe-b$B" \
    $bin/gptoss bench latency --model synthetic:120b:layers=2 --batches $B --prefill "" \
    --enforce-eager --decode-steps 3 --warmup 1 >"$out/logs/ncu-run-b$B.txt" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
  "$ncu" --import "$out/logs/moe-b$B.ncu-rep" >"$out/ncu-b$B.txt" 2>&1
  "$ncu" --import "$out/logs/moe-b$B.ncu-rep" --page source --csv --print-source sass >"$out/logs/sass-b$B.csv" 2>&1
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Eligible Warps|Registers Per|Executed Instructions  " \
    "$out/ncu-b$B.txt" | head -20 | tee -a "$sum"
fi
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
