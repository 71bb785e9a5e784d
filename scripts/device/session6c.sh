#!/usr/bin/env bash
# Session 6 of 2026-12-02, third call (~7 min): gemv_route's fence-free hand-off with the bias
# prefetched (GPTOSS_ROUTE_FAST=1) and the router-by-gemv_route threshold at 8 tokens
# (GPTOSS_ROUTER_GEMV_MAX=8) against the defaults; the closing figures of the session's main
# (`gptoss bench latency` 120b and 20b with `gptoss roofline`); issue 13's per-kernel table at batch 1
# and 8 (ncu bytes and µs, scripts/device/kernel_table.sh) and the CUPTI bubble; ncu's warp-state view
# of the MoE small kernel, the router kernel and the route kernel. At most 8 files come back.
# Needs .devcarry (scripts/device/prepare.sh, with the CUPTI trace library).
set -uo pipefail
out=${OUT:-/tmp/s6c-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 6, call 3: gemv_route's hand-off, closing figures, per-kernel table"
timeout 60 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "- gpu_test_gemv: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/gemv.log" | tail -1) $(t)" | tee -a "$sum"
grep -E "FAIL|gemv_route" "$out/logs/gemv.log" | head -6 | sed 's/^/  /' | tee -a "$sum"
for v in "-" "GPTOSS_ROUTE_FAST=1" "GPTOSS_ROUTE_FAST=1 GPTOSS_ROUTER_GEMV_MAX=8"; do
  [ "$v" = - ] && v=""
  env $v timeout 120 $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward.log" 2>&1
  echo "- gpu_test_cuda_forward --skip-tp ${v:-(defaults)}: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward.log" | tail -1) $(t)" | tee -a "$sum"
  grep -E "FAILED|failed" "$out/logs/forward.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
done
echo "## bench latency 120b $(t)" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- fast=GPTOSS_ROUTE_FAST=1 fast8=GPTOSS_ROUTE_FAST=1+GPTOSS_ROUTER_GEMV_MAX=8" \
  BATCHES=1,2,4,8 ROUNDS=2 timeout 150 bash scripts/device/variants.sh 2>&1 | tail -14 | tee -a "$sum"
echo "## bench latency 20b $(t)" | tee -a "$sum"
OUT="$out/v20" MODEL=20b VARIANTS="base=- fast=GPTOSS_ROUTE_FAST=1 fast8=GPTOSS_ROUTE_FAST=1+GPTOSS_ROUTER_GEMV_MAX=8" \
  BATCHES=1,4,8 ROUNDS=1 timeout 60 bash scripts/device/variants.sh 2>&1 | tail -11 | tee -a "$sum"
echo "## closing figures (defaults) $(t)" | tee -a "$sum"
timeout 120 $bin/gptoss bench latency --model synthetic:120b --batches 1,8,64,256,1024 \
  --prefill 1024,8192 --output-json "$out/latency-120b.json" 2>&1 | grep -E "^\| " | tee -a "$sum"
timeout 45 $bin/gptoss bench latency --model synthetic:20b --batches 1,8,64 --prefill "" \
  --output-json "$out/latency-20b.json" 2>&1 | grep -E "^\| synthetic" | tee -a "$sum"
for b in 1 8 64; do
  $bin/gptoss roofline --model 120b --batch $b --context 1024
  $bin/gptoss roofline --model 20b --batch $b --context 1024
done >"$out/logs/roofline.txt" 2>&1
grep -E "^model|^bound" "$out/logs/roofline.txt" | tee -a "$sum"
echo "## kernel timeline (CUPTI) $(t)" | tee -a "$sum"
OUT="$out/bubble" timeout 100 bash scripts/device/bubble.sh >"$out/logs/bubble.log" 2>&1
for B in 1 8; do
  cp "$out/bubble/bubble-b$B.md" "$out/bubble-b$B.md" 2>/dev/null
  sed -n 3,5p "$out/bubble/bubble-b$B.md" 2>/dev/null | tee -a "$sum"
done
echo "## per-kernel table (ncu) $(t)" | tee -a "$sum"
OUT="$out/kt" timeout 200 bash scripts/device/kernel_table.sh >"$out/logs/kt.log" 2>&1
cp "$out/kt/kernels-decode.md" "$out/kernels-decode.md" 2>/dev/null
grep -E "Sum of kernel|Graph-replayed" "$out/kernels-decode.md" 2>/dev/null | tee -a "$sum"
left=$((580 - ($(date +%s) - start)))
echo "## ncu detail, batch 1 ($left s left) $(t)" | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ $left -gt 40 ]; then
  timeout $left "$ncu" --clock-control none -k "regex:moe_small|gemv_kernel|moe_route" \
    --launch-skip 3 --launch-count 6 \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
    --section LaunchStats --section MemoryWorkloadAnalysis \
    $bin bench latency --model synthetic:120b:layers=2 --batches 1 --prefill "" \
    --enforce-eager --decode-steps 3 --warmup 1 >"$out/ncu-detail-b1.txt" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
  grep -E "^  [a-z_]+.*\(|Duration|DRAM Throughput|Eligible Warps|Warp Cycles Per Issued|Achieved Active" \
    "$out/ncu-detail-b1.txt" | head -48 | tee -a "$sum"
fi
t | tee -a "$sum"
mv "$out/v" "$out/v20" "$out/bubble" "$out/kt" "$out/logs/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
