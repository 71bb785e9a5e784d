#!/usr/bin/env bash
# Session 6 of 2026-12-02, second call (~5 min): gemv_route's grouping by one warp
# (GPTOSS_ROUTE_TINY=1) against the block-wide grouping (test, forward pass, bench latency at 1–4
# tokens), the 120b step's CUPTI kernel timeline at batch 1 and 8 with today's defaults (issue 13's
# per-kernel table and bubble), and ncu's warp-state view of the MoE small kernel at batch 1 (why a
# 23 KB tile takes its time: the question the ring's failure left). At most 8 files come back.
# Needs .devcarry (scripts/device/prepare.sh, with the CUPTI trace library).
set -uo pipefail
out=${OUT:-/tmp/s6b-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 6, call 2: route_tiny_block, kernel timeline, MoE small kernel under ncu"
timeout 60 $bin/gpu_test_gemv >"$out/logs/gemv.log" 2>&1
echo "- gpu_test_gemv: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/gemv.log" | tail -1) $(t)" | tee -a "$sum"
grep -E "FAIL|gemv_route" "$out/logs/gemv.log" | head -6 | sed 's/^/  /' | tee -a "$sum"
GPTOSS_ROUTE_TINY=1 timeout 120 $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward-tiny.log" 2>&1
echo "- gpu_test_cuda_forward --skip-tp, GPTOSS_ROUTE_TINY=1: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward-tiny.log" | tail -1) $(t)" | tee -a "$sum"
grep -E "FAILED|failed" "$out/logs/forward-tiny.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
echo "## bench latency 120b $(t)" | tee -a "$sum"
OUT="$out/v" VARIANTS="base=- tiny=GPTOSS_ROUTE_TINY=1" BATCHES=1,2,4 ROUNDS=3 \
  timeout 150 bash scripts/device/variants.sh 2>&1 | tail -8 | tee -a "$sum"
echo "## bench latency 20b $(t)" | tee -a "$sum"
OUT="$out/v20" MODEL=20b VARIANTS="base=- tiny=GPTOSS_ROUTE_TINY=1" BATCHES=1,4 ROUNDS=2 \
  timeout 60 bash scripts/device/variants.sh 2>&1 | tail -6 | tee -a "$sum"
echo "## kernel timeline, defaults $(t)" | tee -a "$sum"
OUT="$out/bubble" timeout 150 bash scripts/device/bubble.sh >"$out/logs/bubble.log" 2>&1
for B in 1 8; do
  cp "$out/bubble/bubble-b$B.md" "$out/bubble-b$B.md" 2>/dev/null
  head -6 "$out/bubble/bubble-b$B.md" 2>/dev/null | tee -a "$sum"
done
echo "## ncu: moe_small_kernel at batch 1 $(t)" | tee -a "$sum"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 150 "$ncu" --clock-control none -k "regex:moe_small" --launch-skip 20 --launch-count 2 \
  --section SpeedOfLight --section SchedulerStats --section WarpStateStats --section Occupancy \
  --section LaunchStats --section MemoryWorkloadAnalysis --section SourceCounters \
  --metrics smsp__pcsamp_warps_issue_stalled_long_scoreboard,smsp__pcsamp_warps_issue_stalled_math_pipe_throttle,smsp__pcsamp_warps_issue_stalled_wait,smsp__pcsamp_warps_issue_stalled_short_scoreboard,smsp__pcsamp_warps_issue_stalled_barrier,smsp__pcsamp_warps_issue_stalled_mio_throttle,smsp__pcsamp_warps_issue_stalled_selected,smsp__pcsamp_warps_issue_stalled_not_selected,smsp__pcsamp_warps_issue_stalled_dispatch_stall,smsp__pcsamp_warps_issue_stalled_lg_throttle,smsp__pcsamp_warps_issue_stalled_tex_throttle,smsp__pcsamp_warps_issue_stalled_no_instructions \
  $bin/gptoss bench latency --model synthetic:120b:layers=2 --batches 1 --prefill "" \
  --enforce-eager --decode-steps 3 --warmup 1 >"$out/ncu-moe-small-b1.txt" 2>&1 || echo "ncu failed ($?)" | tee -a "$sum"
grep -E "Duration|DRAM Throughput|Eligible Warps|Issued Warp|Achieved Active Warps|Warp Cycles Per Issued|stalled" "$out/ncu-moe-small-b1.txt" | head -40 | tee -a "$sum"
t | tee -a "$sum"
mv "$out/v" "$out/v20" "$out/bubble" "$out/logs/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs && rm -rf "$out/logs"
