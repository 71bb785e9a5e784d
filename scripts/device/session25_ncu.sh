#!/usr/bin/env bash
# Session 25, call 5 (~3 min): ncu of the two MoE kernels that own the 120b step's time where the
# session's timelines point (call 3): the small path at T = 8 (moe_small_kernel: 70 % of the batch-8
# step; gate_up at ~2.7 TB/s and down at ~2.35 on this H100) and the register-A wgmma kernel at
# T = 1024 (moe_wgmma_rs_kernel: 76 % of a lone 1k prefill, ~1.8 TB/s of expert bytes), one
# gate_up and one down launch each, through gpu_test_moe's experts-alone bench. The questions:
# small path — is the time over the bytes the grid's start and end (sm__cycles_active well under
# elapsed) or the stream (SMs busy, DRAM under its peak)? rs — issue-bound (issue slots busy, the
# tensor pipe well under its peak) or memory-bound?
# Prediction (session 25, before the run; H100): small path DRAM ~75-80 % of peak, down's SMs
# active well under elapsed (a tail); rs at 1024 issue slots busy ≥ 70 %, tensor pipe 40-55 %,
# DRAM ~55 %: issue-bound on the dequantisation.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s25ncu "session 25 call 5: ncu of moe_small (T = 8) and moe_wgmma_rs (T = 1024)"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=sm__cycles_active.avg,sm__cycles_active.max,sm__cycles_elapsed.avg,dram__bytes_read.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,launch__grid_size,smsp__warps_launched.sum
for kt in moe_small_kernel:8 moe_wgmma_rs_kernel:1024; do
  k=${kt%%:*} T=${kt##*:}
  echo -e "\n## $k, T = $T $(t)" | tee -a "$sum"
  timeout 120 "$ncu" --clock-control none -k "regex:$k" --launch-skip 10 --launch-count 2 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --metrics $M $bin/gpu_test_moe --bench --bench-t $T >"$out/logs/ncu-$k.txt" 2>&1 || echo "ncu $k failed ($?)" | tee -a "$sum"
  grep -E "$k|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|cycles_active|cycles_elapsed|dram__|pipe_|grid_size|warps_launched|Stall|Block Limit" \
    "$out/logs/ncu-$k.txt" | head -80 | tee -a "$sum"
done
t | tee -a "$sum"
tar czf /tmp/logs.tgz -C "$out" logs && rm -rf "$out/logs" && mv /tmp/logs.tgz "$out/"
