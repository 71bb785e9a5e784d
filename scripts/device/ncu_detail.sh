#!/usr/bin/env bash
# Detailed ncu sections (speed of light, scheduler and warp-state statistics, memory workload,
# occupancy, launch) of chosen decode kernels of a 2-layer synthetic 120b at batch B, eager:
# KERNELS is an ncu kernel-name regex (default: the MoE small path and the router GEMM).
# Needs .devcarry (scripts/device/prepare.sh). Writes $OUT/ncu-detail-bB.txt.
set -uo pipefail
out=${OUT:-/tmp/ncud-out}
mkdir -p "$out"
source "$(dirname "$0")/env.sh"
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for B in ${BATCHES:-1 8}; do
  timeout 240 "$ncu" --clock-control none -k "regex:${KERNELS:-moe_small|skinny_gemm|moe_route}" \
    --launch-skip "${SKIP:-40}" --launch-count "${COUNT:-4}" \
    --section SpeedOfLight --section SchedulerStats --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section ComputeWorkloadAnalysis \
    .devcarry/bin/gptoss bench latency --model synthetic:120b:layers=2 --batches "$B" --prefill "" \
    --enforce-eager --decode-steps 3 --warmup 1 >"$out/ncu-detail-b$B.txt" 2>&1 || echo "ncu B=$B failed ($?)"
done
