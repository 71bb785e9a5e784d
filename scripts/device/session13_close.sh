#!/usr/bin/env bash
# Session 13's closing call, ~8 min: every GPU test binary (gpu_tests.sh test mode) on the final
# build; bench latency of the final build against session 12's head (.devcarry/base, built by
# BASE=a01759f scripts/device/prepare.sh), interleaved, 120b decode 1, 8, 64, 256, 512, 1024 and
# prefill 1k, 8k, 20b decode 1, 64, 1024 and prefill 1k; ncu of the register-A kernel at T = 1024;
# then, if time allows, the large path's crossover below 16 pairs an expert (GPTOSS_MOE_LARGE_AVG=12
# at decode 384, 8 at decode 256). Needs .devcarry (scripts/device/prepare.sh). Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/close-out "session 13 closing call: all GPU tests, the final build against session 12's"
OUT=$out/tests TEST_LIMIT=200 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
echo -e "\n## GPU tests $(t)" | tee -a "$sum"
sed -n '/^== tests/,$p' "$out/logs/gpu_tests.log" | tee -a "$sum"
grep -h "checks passed\|checks FAILED" "$out"/tests/*.log | sed 's/^/    /' | tee -a "$sum"
grep -h "FAILED\|failed" "$out"/tests/*.log | head -12 | sed 's/^/    /' | tee -a "$sum"
tar czf "$out/tests.tgz" -C "$out" tests 2>/dev/null && rm -rf "$out/tests"
echo -e "\n## final against session 12's head $(t)" | tee -a "$sum"
OUT=$out/ab SKIP_TESTS=1 SKIP_GEN=1 MODELS="120b 20b" BATCHES=1,8,64,256,512,1024 PREFILL=1024,8192 \
  ROUNDS=1 bash scripts/device/ab.sh 2>&1 | grep -E "^\||failed|new " | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
mkdir -p "$out/ncu"
echo -e "\n## ncu moe_wgmma_rs_kernel, T = 1024 $(t)" | tee -a "$sum"
timeout 150 "$ncu" --clock-control none -k "regex:moe_wgmma_rs_kernel" --launch-skip 4 --launch-count 2 \
  --set full --import-source no -o "$out/ncu/rs" -f $bin/gpu_test_moe --bench --bench-t 1024 \
  >"$out/logs/ncu.log" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
if [ -f "$out/ncu/rs.ncu-rep" ]; then
  "$ncu" -i "$out/ncu/rs.ncu-rep" --page details >"$out/ncu/rs-details.txt" 2>&1
  "$ncu" -i "$out/ncu/rs.ncu-rep" --page source --print-source sass --csv >"$out/ncu/rs-sass.csv" 2>&1
  grep -E "^  [a-z_]+<|Duration|DRAM Throughput|L2 Cache Throughput|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued" \
    "$out/ncu/rs-details.txt" | tee -a "$sum"
  python3 scripts/device/sass_stalls.py "$out/ncu/rs-sass.csv" 8 | head -24 | tee -a "$sum"
  gzip -f "$out/ncu/rs-sass.csv"
  rm -f "$out/ncu/rs.ncu-rep"
fi
if [ $(($(date +%s) - start)) -lt 430 ]; then
  echo -e "\n## crossover below 16 pairs $(t)" | tee -a "$sum"
  OUT=$out/bx MODEL=120b BATCHES=256,384 ROUNDS=1 \
    VARIANTS="default=- large12=GPTOSS_MOE_LARGE_AVG=12 large8=GPTOSS_MOE_LARGE_AVG=8" \
    bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs bx/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/bx/vlogs"
