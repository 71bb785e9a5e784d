#!/usr/bin/env bash
# Session 13's first call, ~9 min: every GPU test binary on the head (gpu_tests.sh test mode); the
# experts alone at T = 512, 1024 and 4096 (the register-A form against its prepared copier warp,
# fitted B boxes, and both); then ncu (full set, per-SASS source counters) of moe_wgmma_rs_kernel at
# T = 1024 (gate_up and down of the automatic plan's third call), under the defaults and with the
# fitted B boxes (GPTOSS_MOE_RS_FIT_B=1). Needs .devcarry (scripts/device/prepare.sh).
# Prints $OUT/summary.md; ncu text under $OUT/ncu/.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s13a-out "session 13 call 1: GPU tests, the register-A MoE's prepared forms, ncu at T = 1024"
mkdir -p "$out/ncu"
OUT=$out/tests TEST_LIMIT=200 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
echo -e "\n## GPU tests $(t)" | tee -a "$sum"
sed -n '/^== tests/,$p' "$out/logs/gpu_tests.log" | tee -a "$sum"
grep -h "checks passed\|checks FAILED" "$out"/tests/*.log | sed 's/^/    /' | tee -a "$sum"
grep -h "FAILED\|failed" "$out"/tests/*.log | head -12 | sed 's/^/    /' | tee -a "$sum"
tar czf "$out/tests.tgz" -C "$out" tests 2>/dev/null && rm -rf "$out/tests"
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 512,1024,4096 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E " rs|auto" | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for v in default fit; do
  envs=()
  [ "$v" = fit ] && envs=(GPTOSS_MOE_RS_FIT_B=1)
  echo -e "\n## ncu moe_wgmma_rs_kernel, T = 1024, $v $(t)" | tee -a "$sum"
  env "${envs[@]}" timeout 150 "$ncu" --clock-control none -k "regex:moe_wgmma_rs_kernel" --launch-skip 4 \
    --launch-count 2 --set full --import-source no -o "$out/ncu/rs-$v" -f \
    $bin/gpu_test_moe --bench --bench-t 1024 >"$out/logs/ncu-$v.log" 2>&1 ||
    echo "ncu $v failed ($?)" | tee -a "$sum"
  if [ -f "$out/ncu/rs-$v.ncu-rep" ]; then
    "$ncu" -i "$out/ncu/rs-$v.ncu-rep" --page details >"$out/ncu/rs-$v-details.txt" 2>&1
    "$ncu" -i "$out/ncu/rs-$v.ncu-rep" --page source --print-source sass --csv >"$out/ncu/rs-$v-sass.csv" 2>&1
    grep -E "^  [a-z_]+<|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|L1/TEX Hit|L2 Hit|Issue Slots Busy|Issued Warp Per Scheduler|No Eligible|Active Warps Per|Eligible Warps|Warp Cycles Per Issued|Registers Per|Achieved Occupancy|L2 Cache Throughput|L1/TEX Cache Throughput" \
      "$out/ncu/rs-$v-details.txt" | tee -a "$sum"
    python3 scripts/device/sass_stalls.py "$out/ncu/rs-$v-sass.csv" 12 >"$out/ncu/rs-$v-stalls.txt" 2>&1
    head -60 "$out/ncu/rs-$v-stalls.txt" | tee -a "$sum"
    gzip -f "$out/ncu/rs-$v-sass.csv"
    rm -f "$out/ncu/rs-$v.ncu-rep"
  fi
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null && rm -rf "$out/logs"
