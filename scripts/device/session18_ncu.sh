#!/usr/bin/env bash
# ncu of the MoE small path (moe_small_kernel) at T = 8 and 16 through gpu_test_moe's experts-alone
# bench: one gate_up and one down launch each (speed of light, SM activity, pipes, scheduler, warp
# states, occupancy), ~2.5 min. Why: at batch 8-16 the experts are 68-76 % of the 120b step and
# stream at ~3.2 TB/s; session 15 profiled only T = 64 and 256. The question for the next form: is the
# ~13 µs over the bytes the grid's start and end (SMs idle: sm__cycles_active well under the
# elapsed cycles) or the stream itself (SMs busy, DRAM under its peak)? Needs .devcarry.
# Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/ncu18-out "ncu of the MoE small path at T = 8 and 16"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for T in ${TS:-8 16}; do
  echo -e "\n## T = $T $(t)" | tee -a "$sum"
  timeout "${LIMIT:-75}" "$ncu" --clock-control none -k "regex:moe_small_kernel" --launch-skip 20 --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --metrics sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,launch__grid_size,smsp__warps_launched.sum \
    $bin/gpu_test_moe --bench --bench-t $T >"$out/logs/ncu-t$T.txt" 2>&1 || echo "ncu T=$T failed ($?)" | tee -a "$sum"
  grep -E "moe_small_kernel|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|cycles_active|cycles_elapsed|dram__|pipe_|grid_size|warps_launched|Stall" \
    "$out/logs/ncu-t$T.txt" | head -70 | tee -a "$sum"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
