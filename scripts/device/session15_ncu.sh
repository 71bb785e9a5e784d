#!/usr/bin/env bash
# ncu of the MoE small path (moe_small_kernel, the bf16 decode MoE: 78-84 % of the 120b decode
# step at batch 64-256, session 15) at T = 64 and 256 through gpu_test_moe's experts-alone bench:
# one gate_up and one down launch each (speed of light, pipes, scheduler, warp states), then the
# gate_up kernel at T = 256 per SASS instruction (sass_stalls.py), ~4 min. Needs .devcarry.
# Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/ncu-out "ncu of the MoE small path at T = 64 and 256"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for T in 64 256; do
  echo -e "\n## T = $T $(t)" | tee -a "$sum"
  timeout 150 "$ncu" --clock-control none -k "regex:moe_small_kernel" --launch-skip 20 --launch-count 2 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy \
    --metrics sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
    $bin/gpu_test_moe --bench --bench-t $T >"$out/logs/ncu-t$T.txt" 2>&1 || echo "ncu T=$T failed ($?)" | tee -a "$sum"
  grep -E "moe_small_kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|pipe_|inst_executed.sum|Stall" \
    "$out/logs/ncu-t$T.txt" | head -60 | tee -a "$sum"
done
echo -e "\n## T = 256, gate_up per SASS instruction $(t)" | tee -a "$sum"
timeout 150 "$ncu" --clock-control none -k "regex:moe_small_kernel" --launch-skip 20 --launch-count 1 \
  --section SourceCounters --section WarpStateStats --import-source no -o "$out/logs/sass" -f \
  $bin/gpu_test_moe --bench --bench-t 256 >/dev/null 2>&1 &&
  "$ncu" -i "$out/logs/sass.ncu-rep" --page source --print-source sass --csv >"$out/logs/sass.csv" 2>&1 &&
  python3 scripts/device/sass_stalls.py "$out/logs/sass.csv" 14 | head -60 | tee -a "$sum"
rm -f "$out/logs/sass.ncu-rep"; gzip -f "$out/logs/sass.csv"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
