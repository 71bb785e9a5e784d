#!/usr/bin/env bash
# A session's last call (~8 min): every GPU test (scripts/device/closing.sh without the TP part,
# which tp.sh covers and which did not change), ncu of the large MoE (prefill 8k) and of FP8 decode
# attention (8k x 64), then the per-kernel table of the 120b decode step at batch KT_BATCHES (1) (scripts/device/kernel_table.sh, with the graph-replayed step), the 20b decode at
# batch 1 and `gptoss roofline`. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/final-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
SKIP_TP=1 TEST_LIMIT=${TEST_LIMIT:-60} BUDGET_S=${BUDGET_S:-200} OUT="$out/c" bash scripts/device/closing.sh >/dev/null 2>&1
cp "$out/c/closing-summary.md" "$out/"
grep -E "^\| gpu_test|FAILED|failed" "$out/closing-summary.md" | head -24
# ncu of the large MoE (prefill 8k: where its 259 of 790 TFLOP/s goes) and of FP8 decode attention
# at 8k × 64 (what keeps it at 1.63x of bf16), for the next kernel steps
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
sec="--section SpeedOfLight --section ComputeWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section MemoryWorkloadAnalysis --section Occupancy --section InstructionStats"
timeout 100 "$ncu" --clock-control none -k "regex:moe_wgmma_kernel" --launch-count 2 $sec \
  .devcarry/bin/gptoss bench latency --model synthetic:120b:layers=2 --batches "" --prefill 8192 \
  --enforce-eager --warmup 0 >"$out/ncu-wgmma-prefill8k.txt" 2>&1 || echo "ncu wgmma failed ($?)"
timeout 100 "$ncu" --clock-control none -k "regex:attn_decode_kernel" --launch-skip 2 --launch-count 2 $sec \
  .devcarry/bin/gptoss bench latency --model synthetic:120b:layers=2 --batches 64 --context 8192 \
  --prefill "" --kv-cache-dtype fp8 --enforce-eager --decode-steps 2 --warmup 1 \
  >"$out/ncu-attn-fp8-b64-8k.txt" 2>&1 || echo "ncu attn failed ($?)"
grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|Eligible Warps|highest-utilized|Achieved Occupancy" \
  "$out"/ncu-wgmma-prefill8k.txt "$out"/ncu-attn-fp8-b64-8k.txt | cut -c1-200 | head -40
KT_BATCHES=${KT_BATCHES:-1} OUT="$out/kt" bash scripts/device/kernel_table.sh >/dev/null 2>&1
cp "$out/kt/kernels-decode.md" "$out/"; cp "$out"/kt/ncu-b*.csv "$out"/kt/step-b*.json "$out/" 2>/dev/null
grep -E "^#|Sum of kernel|Graph-replayed" "$out/kernels-decode.md"
timeout 90 .devcarry/bin/gptoss bench latency --model synthetic:20b --batches 1,8,64 --prefill "" \
  --output-json "$out/latency-20b.json" 2>&1 | grep -E "^\| synthetic" | tee "$out/latency-20b.md"
for b in 1 8 64; do .devcarry/bin/gptoss roofline --model 120b --batch $b --context 1024; .devcarry/bin/gptoss roofline --model 20b --batch $b --context 1024; done >"$out/roofline.txt" 2>&1
tail -12 "$out/roofline.txt"
