#!/usr/bin/env bash
# Session 31, call 1 (~7 min; an H100 is fine): the step kernel, three builds:
#   base  b4a32a2 (session 30's head: the rolled loop, a warp-uniform exit after every k step);
#   base2 e1ef45a = base +
#         (a) a full trip of four k steps has no exit: its 4 shuffles and 12 shared loads issue
#             together (the SASS of the base ran each step as its own chain — shuffle, loads,
#             dequantisation, MMAs — the next step's loads waiting for the branch);
#         (b) each warp asks for its next chunk's scale words while it multiplies this one (their
#             L2 round trip off the chain between chunks; 160 B of spills, 6 words a chunk);
#         (c) the tiles' biases behind an mbarrier only a gate_up epilogue waits on (no block sync
#             after their DRAM loads: session 30's ncu put 3.9 % of the stall samples there);
#   new   base2 + grid barriers in two L2 round trips (grid_barrier_counted: a release reduction and
#         an acquire poll, against grid_barrier_with's ~5 round trips on the last block's chain:
#         generation read, fence, add, reset, fence, advance). Six a layer; session 30's ncu put
#         36 % of the stall samples at barriers.
#  (1) the (h) checks of new; (2) the phases with the experts' probes of all three; (3) decode
#      batch 1: the loop and the three step kernels, 120b and 20b, two interleaved rounds;
#  (4) ncu's source counters on new's kernel whole (where its warps wait now), if time is left.
# Prediction (before the run): (h) figures equal session 30's (relL2 8.75e-3 20b, 1.79e-3 120b:
# the same sums in the same order in all three). base2: arithmetic alone, routing + gate_up 23.4 µs
# -> 16-20, down 13.3 -> 9-12; the layer 75.9 -> 69-73 µs; the step kernel against the loop 0.915
# -> 0.95-1.00 (120b batch 1). new: each of the five barriers a layer 0.5-1.5 µs shorter: the layer
# -> 63-70 µs, the step kernel 1.00-1.10 of the loop. Rule: each step is kept if its layer time
# drops by more than 2 % against its predecessor; else it is reverted. The default flips only if
# the step kernel beats the loop beyond the spread at both models (then every GPU test runs before
# that commit, in the next call).
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s31c1 "session 31 call 1: the step kernel's expert loop and grid barrier, three builds"
# step_kernel_vs_base ends with finish_call; the ncu part goes first when time allows, so run the
# pieces here in order: (1)-(3), then (4), then finish.
_fc=$(declare -f finish_call); finish_call() { :; }
step_kernel_vs_base
eval "$_fc"
if [ $(($(date +%s) - start)) -lt 400 ]; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  echo -e "\n## ncu: new's step kernel whole (launch 900) $(t)" | tee -a "$sum"
  timeout 150 "$ncu" --clock-control none -k "regex:step_kernel" --launch-skip 900 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --section SchedulerStats --import-source no \
    -o "$out/logs/sass-whole" -f $bin/gpu_test_cuda_forward --step-kernel --bench >"$out/logs/ncu-whole.log" 2>&1 ||
    echo "ncu failed ($?)" | tee -a "$sum"
  "$ncu" -i "$out/logs/sass-whole.ncu-rep" --page details >"$out/logs/details-whole.txt" 2>&1
  grep -E "Warp Cycles Per Issued|Issued Warp|Eligible Warps|Active Warps Per|No Eligible|One or More" \
    "$out/logs/details-whole.txt" | head -12 | tee -a "$sum"
  "$ncu" -i "$out/logs/sass-whole.ncu-rep" --page source --print-source sass --csv >"$out/logs/sass-whole.csv" 2>&1 &&
    python3 scripts/device/sass_stalls.py "$out/logs/sass-whole.csv" 40 | head -50 | tee -a "$sum"
  rm -f "$out/logs/sass-whole.ncu-rep"
  gzip -f "$out/logs/sass-whole.csv" && cp "$out/logs/sass-whole.csv.gz" "$out/"
fi
finish_call
