#!/usr/bin/env bash
# What limits the MoE small kernel and FP8 decode attention, for the next kernel step (~4 min):
#   1. the SASS of the MoE small kernels and of attn_decode_kernel (cuobjdump), for an opcode count
#      of their inner loops here (scripts/device/sass_hist.py);
#   2. ncu's raw metrics (pipe utilisation, instruction mix, stall reasons) of the MoE small kernels
#      in a 2-layer 120b decode step at batch 1 and 64 (eager);
# Needs .devcarry (scripts/device/prepare.sh). Files: $OUT/sass-*.txt.gz, $OUT/ncu-*.txt.
set -uo pipefail
out=${OUT:-/tmp/inspect-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
cuobjdump=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump /usr/local/cuda-*/bin/cuobjdump 2>/dev/null | head -1)
echo "ncu: $ncu; cuobjdump: $cuobjdump"
if [ -n "$cuobjdump" ]; then
  "$cuobjdump" -sass "$bin/gptoss" 2>/dev/null | awk '/Function : .*moe_small_kernel/{p=1} /Function : /&&!/moe_small_kernel/{p=0} p' | gzip >"$out/sass-moe-small.txt.gz"
  "$cuobjdump" -sass "$bin/gptoss" 2>/dev/null | awk '/Function : .*attn_decode_kernel/{p=1} /Function : /&&!/attn_decode_kernel/{p=0} p' | gzip >"$out/sass-attn-decode.txt.gz"
  ls -la "$out"/sass-*
fi
metrics=sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fmaheavy.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fp16.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_uniform.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_wait.ratio,smsp__average_warp_latency_issue_stalled_math_pipe_throttle.ratio,smsp__average_warp_latency_issue_stalled_short_scoreboard.ratio,smsp__average_warp_latency_issue_stalled_not_selected.ratio,smsp__average_warp_latency_issue_stalled_barrier.ratio,smsp__average_warp_latency_issue_stalled_mio_throttle.ratio,smsp__average_warp_latency_issue_stalled_lg_throttle.ratio,smsp__average_warp_latency_issue_stalled_dispatch_stall.ratio,smsp__average_warp_latency_issue_stalled_selected.ratio,smsp__warps_active.avg.per_cycle_active
for B in 1 64; do
  timeout 150 "$ncu" --clock-control none -k "regex:moe_small" --launch-skip 8 --launch-count 2 \
    --metrics "$metrics" --section InstructionStats --page raw --print-metric-instances values \
    $bin/gptoss bench latency --model synthetic:120b:layers=2 --batches "$B" --prefill "" \
    --enforce-eager --decode-steps 3 --warmup 1 >"$out/ncu-moe-b$B.txt" 2>&1 || echo "ncu moe B=$B failed ($?)"
done
for f in "$out"/ncu-*.txt; do
  echo "== $f"
  grep -E "moe_small_kernel|attn_decode_kernel|pipe_(alu|fma|fmaheavy|fp16|lsu|tensor|xu)|issue_active|inst_executed.sum|dram__throughput|gpu__time_duration|stalled_(long|wait|math|short|not_sel|barrier|mio|lg)|warps_active" "$f" | head -60
done
