#!/usr/bin/env bash
# The register-A MoE kernel's block shapes (GPTOSS_MOE_RS_SHAPE, moe_wgmma_rs.cuh; prepared in
# session 20 without device time, ~7 min): 0 the default (64 tokens x 128 weight rows, two blocks an
# SM), 1 = 128 tokens x 128 rows, 2 = 64 x 256, 3 = 128 x 192 (one block an SM each).
#   - gpu_test_moe: each shape gives the default's bits (folded and two-multiply) and meets the CPU
#     reference; the forward test under shapes 1 and 3 (the prefills take the large path);
#   - the experts alone at T = 1024, 4096, 8192, 16384 (120b, E = 128), every shape;
#   - bench latency interleaved, two rounds: 120b prefill 1k and 8k and decode 1024; 20b prefill 1k
#     and 8k (E = 32: 128 pairs an expert already at 1k tokens);
#   - NCU=1 adds ncu of gate_up at T = 8192 under shapes 0 and 3 (pipes, L2, issue), ~1.5 min.
# Prediction (session 20, before any run). Premise: at T >= 4096 a 64-token block dequantises the
# same weights as the other half of its routing tile (every weight 2-8 times at 4k-16k tokens) and
# copies 12.3 KB of codes + B from L2 a 1.05 MFLOP step; the experts alone reach ~335 TFLOP/s at
# T = 16384 (session 12) against ~790 dense. Shape 1 dequantises once a routing tile (half the
# instructions a FLOP) but runs 8 consumer warps an SM instead of 16; shape 3 also shares B among
# three warpgroups (L2 bytes a FLOP 0.0117 -> 0.0071 B) with 12 warps an SM; shape 2 changes only
# B's sharing. Expected: T = 1024 all shapes within +-5 % of the default (tiles of ~32 tokens: no
# second half to share); T = 8192-16384 shape 3 -15-30 % (335 -> 400-480 TFLOP/s), shape 1 -5-20 %,
# shape 2 -0-10 %; 120b prefill 8k +8-15 % with shape 3, prefill 1k and decode 1024 within +-3 %;
# 20b prefill 1k/8k +5-15 %. A shape that wins beyond the spread at T >= 4096 and loses nothing at
# T = 1024 becomes the default for plans whose tiles average >= 64 tokens (or for all, if it ties
# at 1024); the shapes that lose are removed. Needs .devcarry (scripts/device/prepare.sh). Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/rs-shapes-out "the register-A MoE kernel's block shapes (GPTOSS_MOE_RS_SHAPE)"
test_table
run_logged moe 200 $bin/gpu_test_moe
grep -E "register-A|block shape" "$out/logs/moe.log" | sort | uniq -c | head -8 | tee -a "$sum"
run_logged forward_s1 240 env GPTOSS_MOE_RS_SHAPE=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real
run_logged forward_s3 240 env GPTOSS_MOE_RS_SHAPE=3 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone, 120b (E = 128) $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1024,4096,8192,16384 >"$out/logs/bench.log" 2>&1 ||
  echo "bench failed ($?)" | tee -a "$sum"
grep -E "experts.*tma rs" "$out/logs/bench.log" | tee -a "$sum"
V="s0=- s1=GPTOSS_MOE_RS_SHAPE=1 s2=GPTOSS_MOE_RS_SHAPE=2 s3=GPTOSS_MOE_RS_SHAPE=3"
echo -e "\n## 120b bench latency: $V $(t)" | tee -a "$sum"
OUT=$out/v-120b MODEL=120b BATCHES=1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-2} VARIANTS="$V" \
  bash scripts/device/variants.sh | tee -a "$sum"
echo -e "\n## 20b bench latency: $V $(t)" | tee -a "$sum"
OUT=$out/v-20b MODEL=20b BATCHES=1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-2} VARIANTS="$V" \
  bash scripts/device/variants.sh | tee -a "$sum"
if [ "${NCU:-0}" = 1 ]; then
  ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  for S in 0 3; do
    echo -e "\n## ncu, gate_up at T = 8192, shape $S $(t)" | tee -a "$sum"
    GPTOSS_MOE_RS_SHAPE=$S timeout 90 "$ncu" --clock-control none -k "regex:moe_wgmma_rs_kernel" \
      --launch-skip 2 --launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
      --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
      --metrics sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum \
      $bin/gpu_test_moe --bench --bench-t 8192 >"$out/logs/ncu-s$S.txt" 2>&1 || echo "ncu shape $S failed ($?)" | tee -a "$sum"
    grep -E "moe_wgmma_rs_kernel|Duration|Throughput|Issue Slots Busy|Eligible Warps|Active Warps Per|Warp Cycles Per Issued|Registers Per|L2 Hit|pipe_|inst_executed" \
      "$out/logs/ncu-s$S.txt" | head -40 | tee -a "$sum"
  done
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v-120b/vlogs v-20b/vlogs 2>/dev/null && rm -rf "$out/logs" "$out"/v-*/vlogs
