#!/usr/bin/env bash
# Session 30, call 4 (~3 min; an H100 is fine): where the step kernel's warps wait, per SASS
# instruction (ncu's source counters), for the next session's work on it. Calls 1 and 3 said the
# experts' arithmetic is neither the MMAs' dependent chains nor the per-step branch (four
# accumulators, two steps at a time, no exit: the arithmetic alone unchanged, 26.1 -> 26.2 µs for
# routing + gate_up); ~78 instructions a k step issue at ~0.34 a cycle a scheduler with two warps.
#  (1) the kernel with the experts' chunks not copied (their arithmetic alone), a launch at ~900
#      tokens of context (gpu_test_cuda_forward --step-kernel --bench: modes 0, 1, 2 of ~1,014
#      launches each; launch 2,900);
#  (2) the kernel whole (launch 900).
# No prediction to test: a measurement to read (sass_stalls.py: stall reasons overall, the most
# sampled instructions and what they wait on).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s30c4 "session 30 call 4: the step kernel's stalls per SASS instruction"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for ms in arith:2900 whole:900; do
  IFS=: read -r name skip <<<"$ms"
  echo -e "\n## step_kernel, $name (launch $skip) $(t)" | tee -a "$sum"
  timeout 200 "$ncu" --clock-control none -k "regex:step_kernel" --launch-skip "$skip" --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --import-source no \
    -o "$out/logs/sass-$name" -f $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/ncu-$name.log" 2>&1 ||
    echo "ncu $name failed ($?)" | tee -a "$sum"
  "$ncu" -i "$out/logs/sass-$name.ncu-rep" --page details >"$out/logs/details-$name.txt" 2>&1
  grep -E "Warp Cycles Per Issued|Issued Warp|Eligible Warps|Active Warps Per|No Eligible|One or More" \
    "$out/logs/details-$name.txt" | head -12 | tee -a "$sum"
  "$ncu" -i "$out/logs/sass-$name.ncu-rep" --page source --print-source sass --csv >"$out/logs/sass-$name.csv" 2>&1 &&
    python3 scripts/device/sass_stalls.py "$out/logs/sass-$name.csv" 40 | head -70 | tee -a "$sum"
  rm -f "$out/logs/sass-$name.ncu-rep"
  gzip -f "$out/logs/sass-$name.csv"
  cp "$out/logs/sass-$name.csv.gz" "$out/"
done
finish_call
