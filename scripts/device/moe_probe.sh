#!/usr/bin/env bash
# The large MoE at T = 1024 (decode 1024, prefill 1k: 64-token tiles) under the microscope, ~6 min:
# gpu_test_moe (the head's correctness, then with the ws kernel's prepared forms on), the experts
# alone at T = 1024, 4096, 16384 under each form (default, folded, suspend hints), then ncu (full
# set, per-SASS source counters) of the two T = 1024 64-token kernels: moe_wgmma.cu and the ws one.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md; ncu text under $OUT/ncu/.
set -uo pipefail
out=${OUT:-/tmp/probe-out}
mkdir -p "$out/logs" "$out/ncu"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "The large MoE at T = 1024: the prepared ws forms, and ncu of the 64-token kernels"
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
run_logged moe 120 $bin/gpu_test_moe
run_logged moe_folded_hint 120 env GPTOSS_MOE_WS_FOLDED=1 GPTOSS_MOE_WS_WAIT_NS=2000 $bin/gpu_test_moe
for v in "0 0" "1 0" "0 2000" "0 300" "1 2000"; do
  set -- $v
  echo -e "\n## experts alone, GPTOSS_MOE_WS_FOLDED=$1 GPTOSS_MOE_WS_WAIT_NS=$2 $(t)" | tee -a "$sum"
  GPTOSS_MOE_WS_FOLDED=$1 GPTOSS_MOE_WS_WAIT_NS=$2 timeout 120 $bin/gpu_test_moe --bench --bench-t 1024,4096,16384 \
    >"$out/logs/bench-$1-$2.log" 2>&1
  grep -E "experts" "$out/logs/bench-$1-$2.log" | grep -E "wgmma" | tee -a "$sum"
done
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
# At T = 1024 each wgmma round is 12 timed calls of gate_up + down (2 warm-ups, 10 reps): the 64-token
# round of a kernel starts after its 128-token round's 24 launches.
for k in moe_wgmma_ws_kernel moe_wgmma_kernel; do
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
