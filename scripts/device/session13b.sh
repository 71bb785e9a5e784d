#!/usr/bin/env bash
# Session 13's second call, ~7 min: the register-A MoE form with its copier warp by default (call 1:
# the experts alone at T = 1024 1,068 → 906 µs). gpu_test_moe and the forward test on the new
# default; the experts alone at T = 512, 1024, 4096 (default against the prepared ring depths and L2
# hints); bench latency of the new build against session 12's (.devcarry/base: BASE=a01759f
# scripts/device/prepare.sh), interleaved, 120b decode 1, 64, 512, 1024 and prefill 1k, 8k; then the
# prepared variants (GPTOSS_MOE_RS_RING=1, 2, GPTOSS_MOE_RS_L2_HINTS=1) at decode 1024 and prefill
# 1k; ncu of the new default at T = 1024. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s13b-out "session 13 call 2: the copier warp by default; ring depths, L2 hints"
test_table
run_logged moe 150 $bin/gpu_test_moe
run_logged forward 240 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 512,1024,4096 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E " rs" | tee -a "$sum"
echo -e "\n## new against base (session 12's head) $(t)" | tee -a "$sum"
OUT=$out/ab SKIP_TESTS=1 SKIP_GEN=1 MODELS=120b BATCHES=1,64,512,1024 PREFILL=1024,8192 ROUNDS=1 \
  bash scripts/device/ab.sh 2>&1 | grep -E "^\||failed|new " | tee -a "$sum"
echo -e "\n## prepared variants $(t)" | tee -a "$sum"
OUT=$out/var MODEL=120b BATCHES=1024 PREFILL=1024 ROUNDS=1 \
  VARIANTS="default=- ring12=GPTOSS_MOE_RS_RING=1 ring10=GPTOSS_MOE_RS_RING=2 hints=GPTOSS_MOE_RS_L2_HINTS=1" \
  bash scripts/device/variants.sh | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
mkdir -p "$out/ncu"
echo -e "\n## ncu moe_wgmma_rs_kernel (copier warp), T = 1024 $(t)" | tee -a "$sum"
timeout 150 "$ncu" --clock-control none -k "regex:moe_wgmma_rs_kernel" --launch-skip 4 --launch-count 2 \
  --set full --import-source no -o "$out/ncu/rs-cw" -f $bin/gpu_test_moe --bench --bench-t 1024 \
  >"$out/logs/ncu.log" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
if [ -f "$out/ncu/rs-cw.ncu-rep" ]; then
  "$ncu" -i "$out/ncu/rs-cw.ncu-rep" --page details >"$out/ncu/rs-cw-details.txt" 2>&1
  "$ncu" -i "$out/ncu/rs-cw.ncu-rep" --page source --print-source sass --csv >"$out/ncu/rs-cw-sass.csv" 2>&1
  grep -E "^  [a-z_]+<|Duration|DRAM Throughput|L2 Cache Throughput|L2 Hit Rate|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued" \
    "$out/ncu/rs-cw-details.txt" | tee -a "$sum"
  python3 scripts/device/sass_stalls.py "$out/ncu/rs-cw-sass.csv" 12 >"$out/ncu/rs-cw-stalls.txt" 2>&1
  head -40 "$out/ncu/rs-cw-stalls.txt" | tee -a "$sum"
  gzip -f "$out/ncu/rs-cw-sass.csv"
  rm -f "$out/ncu/rs-cw.ncu-rep"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs var/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/var/vlogs"
