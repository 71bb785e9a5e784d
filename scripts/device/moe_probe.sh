#!/usr/bin/env bash
# The large MoE at T = 1024 (decode 1024, prefill 1k: 64-token tiles) under the microscope, ~4 min:
# gpu_test_moe, the experts alone at T = 1024, 4096, 16384, then ncu (full set, per-SASS source
# counters) of the T = 1024 64-token kernels named in $KERNELS (default: moe_wgmma_tma.cu's, the
# default there, and moe_wgmma.cu's). Session 10's first call ran its earlier form (git history:
# 08ec806), which also timed the ws kernel's prepared forms.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md; ncu text under $OUT/ncu/.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/probe-out "The large MoE at T = 1024: the experts alone, and ncu of the 64-token kernels"
mkdir -p "$out/ncu"
test_table
run_logged moe 120 $bin/gpu_test_moe
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_moe --bench --bench-t 1024,4096,16384 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "wgmma" | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# At T = 1024 each wgmma round is 12 timed calls of gate_up + down (2 warm-ups, 10 reps): the 64-token
# round of a kernel starts after its 128-token round's 24 launches (the ws and tma kernels run only
# in their own rounds).
for k in ${KERNELS:-moe_wgmma_tma_kernel moe_wgmma_kernel}; do
  echo -e "\n## ncu $k, T = 1024, 64-token tiles $(t)" | tee -a "$sum"
  timeout 200 "$ncu" --clock-control none -k "regex:^$k\$" --launch-skip 24 --launch-count 2 --set full \
    --import-source no -o "$out/ncu/$k" -f $bin/gpu_test_moe --bench --bench-t 1024 >"$out/logs/ncu-$k.log" 2>&1 ||
    echo "ncu $k failed ($?)" | tee -a "$sum"
  if [ -f "$out/ncu/$k.ncu-rep" ]; then
    "$ncu" -i "$out/ncu/$k.ncu-rep" --page details >"$out/ncu/$k-details.txt" 2>&1
    "$ncu" -i "$out/ncu/$k.ncu-rep" --page source --print-source sass --csv >"$out/ncu/$k-sass.csv" 2>&1
    grep -E "^  [a-z_]+<|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per|Shared Memory Configuration Size|Achieved Occupancy" \
      "$out/ncu/$k-details.txt" | tee -a "$sum"
    gzip -f "$out/ncu/$k-sass.csv"
    rm -f "$out/ncu/$k.ncu-rep"
  fi
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
