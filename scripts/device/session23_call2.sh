#!/usr/bin/env bash
# Session 23, the attention stream kernel's second form (~4 min): its checks, its bench (with
# session 22's form as the "O early" column), the forward test under GPTOSS_ATTN_STREAM=1 and =2,
# 120b decode at batch 1, 2, 4 (two interleaved rounds) and 20b at 1: base / attn1 / attn2; then
# ncu's stall table of the kernel at T = 1. Needs .devcarry. Prints $OUT/summary.md.
#
# What changed (session 23's ncu of the first form, on an H100: 38.5 µs; ~7 µs before phase 1
# began, ~9 µs at QKV's grid barrier, DRAM at 1.49 TB/s):
#  - the consumers' loads (x, the biases, positions, slots, phase 2's item fields) go out at the
#    kernel's start, all at once, before the producer's first copy: one latency, not ~8 in a row
#    behind 24 MB of weight copies;
#  - O's copies wait for phase 1's grid barrier, so QKV's rows have DRAM to themselves and no
#    block's late QKV refill queues behind another block's O rows;
#  - phase 2's first chunk is asked for at the end of phase 1 (its table read no longer holds the
#    consumers back before phase 1).
# Predictions (written before the run; H100 if that is what comes):
#  - the kernel alone at T = 1, full layer: 34.5 -> 21-26 µs (launches 35.3: ratio 0.60-0.75);
#    sliding the same; T = 2 ~25-30 (launches 37.9); T = 4 ~32-38 (launches 39.4: ~0.9);
#    the "O early" column between the two (the early loads alone: ~28-31 at T = 1);
#  - to QKV's barrier 17.4 -> 11-13 µs at T = 1;
#  - 120b decode batch 1: attn1 +8-15 % over base (36 layers x 9-13 µs of a 3.07 ms step);
#    batch 2 +5-12 %; batch 4 0-5 %; attn2 (the norm inside) +1-2 % over attn1; 20b batch 1 +8-15 %.
# Decision: GPTOSS_ATTN_STREAM becomes the default at each batch where it gains beyond the rounds'
# spread (and then the H200 run confirms it); where it loses at every batch, the ncu table names
# the next culprit.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script "${OUT:-/tmp/s23c2}" "session 23 call 2: the attention stream kernel, second form"
test_table
run_logged test_attn_stream 150 $bin/gpu_test_attn_stream
GPTOSS_ATTN_STREAM=1 run_logged forward_attn1 120 $bin/gpu_test_cuda_forward --skip-tp
GPTOSS_ATTN_STREAM=2 run_logged forward_attn2 120 $bin/gpu_test_cuda_forward --skip-tp
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
V="base=- attn1=GPTOSS_ATTN_STREAM=1 attn2=GPTOSS_ATTN_STREAM=2"
ROUNDS=2 decode_variants "$V" 120b:1,2,4
ROUNDS=1 decode_variants "$V" 20b:1
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo -e "\n## ncu attn_stream_kernel (T = 1) $(t)" | tee -a "$sum"
timeout 120 "$ncu" --clock-control none -k "regex:attn_stream_kernel" --launch-skip 8 --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section SourceCounters \
  --import-source no -o "$out/logs/attn" -f $bin/gpu_test_attn_stream --bench >"$out/logs/ncu-attn.log" 2>&1
"$ncu" -i "$out/logs/attn.ncu-rep" --print-details all >"$out/logs/ncu-attn.txt" 2>&1
grep -E "Duration|DRAM Throughput|Eligible Warps|Warp Cycles Per Issued" "$out/logs/ncu-attn.txt" | head -8 | tee -a "$sum"
"$ncu" -i "$out/logs/attn.ncu-rep" --page source --print-source sass --csv >"$out/logs/sass-attn.csv" 2>&1 &&
  python3 scripts/device/sass_stalls.py "$out/logs/sass-attn.csv" 16 | head -24 | tee -a "$sum"
rm -f "$out/logs/attn.ncu-rep"; gzip -f "$out/logs/sass-attn.csv"
t | tee -a "$sum"
