#!/usr/bin/env bash
# Session 23 (~5 min): why the two stream kernels lose (session 23's first call, on an H100: the
# attention kernel 34.5 us against the launches' 35.3 at T = 1, weights at 1.5 TB/s; the MoE stream
# form 0.81 of the base step at batch 1). (1) gpu_test_moe_fused --bench (the MoE block alone:
# unfused, fused, stream); (2) ncu of attn_stream_kernel at T = 1, full layer, 1k context (speed of
# light, warp states, memory, and the per-SASS stall table); (3) the same for moe_stream_kernel at
# T = 1. Needs .devcarry. Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script "${OUT:-/tmp/s23n}" "session 23: the stream kernels under ncu"
echo -e "\n## gpu_test_moe_fused --bench $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe_fused --bench 2>&1 | grep -E '^\|' | head -12 | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for k in attn:attn_stream_kernel:8:gpu_test_attn_stream moe:moe_stream_kernel:20:gpu_test_moe_fused; do
  IFS=: read -r name re skip prog <<<"$k"
  echo -e "\n## ncu $name (T = 1) $(t)" | tee -a "$sum"
  timeout 150 "$ncu" --clock-control none -k "regex:$re" --launch-skip "$skip" --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section SourceCounters --section LaunchStats \
    --import-source no -o "$out/logs/$name" -f $bin/$prog --bench >"$out/logs/ncu-$name.log" 2>&1 ||
    echo "ncu $name failed ($?)" | tee -a "$sum"
  "$ncu" -i "$out/logs/$name.ncu-rep" --print-details all >"$out/logs/ncu-$name.txt" 2>&1
  grep -E "Duration|DRAM Throughput|Memory Throughput|L2 Cache Throughput|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued|Active Warps|Stall|Registers Per|Dynamic Shared" \
    "$out/logs/ncu-$name.txt" | head -30 | tee -a "$sum"
  "$ncu" -i "$out/logs/$name.ncu-rep" --page source --print-source sass --csv >"$out/logs/sass-$name.csv" 2>&1 &&
    python3 scripts/device/sass_stalls.py "$out/logs/sass-$name.csv" 24 | head -60 | tee -a "$sum"
  rm -f "$out/logs/$name.ncu-rep"
  gzip -f "$out/logs/sass-$name.csv"
done
t | tee -a "$sum"
