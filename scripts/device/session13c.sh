#!/usr/bin/env bash
# Session 13's third call, ~5 min: the register-A MoE form's prepared lean k loop
# (GPTOSS_MOE_RS_LEAN=1: one ring, one wait and one release a step, slots from the step number,
# 32-bit descriptors). gpu_test_moe (its bits equal the default's) and the forward test with it on;
# the experts alone at T = 512, 1024, 4096; ncu of the lean kernel at T = 1024; bench latency,
# default against lean interleaved, 120b decode 512 and 1024, prefill 1k and 8k.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s13c-out "session 13 call 3: the register-A MoE form's lean k loop"
test_table
run_logged moe 150 $bin/gpu_test_moe
run_logged forward_lean 240 env GPTOSS_MOE_RS_LEAN=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 512,1024,4096 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E " rs" | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
mkdir -p "$out/ncu"
echo -e "\n## ncu moe_wgmma_rs_lean_kernel, T = 1024 $(t)" | tee -a "$sum"
GPTOSS_MOE_RS_LEAN=1 timeout 150 "$ncu" --clock-control none -k "regex:moe_wgmma_rs" --launch-skip 4 \
  --launch-count 2 --set full --import-source no -o "$out/ncu/lean" -f $bin/gpu_test_moe --bench \
  --bench-t 1024 >"$out/logs/ncu.log" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
if [ -f "$out/ncu/lean.ncu-rep" ]; then
  "$ncu" -i "$out/ncu/lean.ncu-rep" --page details >"$out/ncu/lean-details.txt" 2>&1
  "$ncu" -i "$out/ncu/lean.ncu-rep" --page source --print-source sass --csv >"$out/ncu/lean-sass.csv" 2>&1
  grep -E "^  [a-z_]+<|Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued" \
    "$out/ncu/lean-details.txt" | tee -a "$sum"
  python3 scripts/device/sass_stalls.py "$out/ncu/lean-sass.csv" 8 | head -24 | tee -a "$sum"
  gzip -f "$out/ncu/lean-sass.csv"
  rm -f "$out/ncu/lean.ncu-rep"
fi
echo -e "\n## bench latency $(t)" | tee -a "$sum"
OUT=$out/var MODEL=120b BATCHES=512,1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-1} \
  VARIANTS="default=- lean=GPTOSS_MOE_RS_LEAN=1" bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs var/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/var/vlogs"
