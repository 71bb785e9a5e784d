#!/usr/bin/env bash
# The warpgroup-MMA prefill attention (attn_prefill_wgmma.cuh, the default for full layers) against
# the mma.sync kernel (GPTOSS_ATTN_WGMMA=0), ~2 min: gpu_test_attention (both prefill kernels against the CPU reference),
# the kernels alone (--bench-prefill: 1k, 8k, a 2k chunk at 6k, 8k sliding; TFLOP/s), the forward
# test with FORWARD=1 (the wgmma kernel) if set, ncu of both kernels at 8k (NCU_KERNELS), and bench
# latency prefill 1k and 8k of both, interleaved (variants.sh; SKIP_VAR=1 leaves it out). Needs .devcarry (scripts/device/prepare.sh). Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/awg-out "prefill attention: wgmma (FA3-style) against mma.sync"
test_table
run_logged test_attention 200 $bin/gpu_test_attention
ok=$?
echo -e "\n## the kernels alone $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_attention --bench-prefill 2>&1 | grep -E "^\|" | tee -a "$sum"
if [ $ok -eq 0 ]; then
  test_table
  [ -n "${FORWARD:-}" ] && GPTOSS_ATTN_WGMMA=$FORWARD run_logged forward_wgmma 240 $bin/gpu_test_cuda_forward --skip-tp --skip-real
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  # --bench-prefill8k runs each kernel 100 times (10 in a graph, 3 + 7 graph launches)
  for k in ${NCU_KERNELS:-mma:attn_prefill_kernel:2 wg128:attn_prefill_wg:2}; do
    IFS=: read -r name re skip <<<"$k"
    echo -e "\n## ncu $name, prefill 8k $(t)" | tee -a "$sum"
    timeout 100 "$ncu" --clock-control none -k "regex:$re" --launch-skip "$skip" --launch-count 1 \
      --section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats \
      --section SchedulerStats --section MemoryWorkloadAnalysis \
      $bin/gpu_test_attention --bench-prefill8k >"$out/logs/ncu-$name.txt" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
    if [ "$name" = wg128 ]; then # where its warps stall, per SASS instruction
      timeout 100 "$ncu" --clock-control none -k "regex:$re" --launch-skip "$skip" --launch-count 1 \
        --section SourceCounters --section WarpStateStats --import-source no -o "$out/logs/sass" -f \
        $bin/gpu_test_attention --bench-prefill8k >/dev/null 2>&1 &&
        "$ncu" -i "$out/logs/sass.ncu-rep" --page source --print-source sass --csv >"$out/logs/sass.csv" 2>&1 &&
        python3 scripts/device/sass_stalls.py "$out/logs/sass.csv" 14 | head -40 | tee -a "$sum"
      rm -f "$out/logs/sass.ncu-rep"; gzip -f "$out/logs/sass.csv"
    fi
    grep -E "Duration|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput|Issue Slots Busy|Eligible Warps|Warp Cycles Per Issued|Executed Ipc A|Registers Per|Stall" \
      "$out/logs/ncu-$name.txt" | head -20 | tee -a "$sum"
  done
  if [ "${SKIP_VAR:-0}" != 1 ]; then
    echo -e "\n## bench latency, prefill $(t)" | tee -a "$sum"
    OUT=$out/var MODEL=120b BATCHES=1 PREFILL=1024,8192 ROUNDS=${ROUNDS:-2} \
      VARIANTS="wgmma=- mma=GPTOSS_ATTN_WGMMA=0" bash scripts/device/variants.sh | tee -a "$sum"
  fi
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs var/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/var/vlogs"
