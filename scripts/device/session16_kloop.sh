#!/usr/bin/env bash
# Session 16, call 1 (~6 min): the MoE small path's k-loop forms (moe_small.cuh's KL_*; SASS here:
# 85.5 → ~79 instructions a k step at NTP 1, 95 → ~87 at NTP 2, the register copies and zeroings
# gone): gpu_test_moe (every form gives form 0's bits, each against the CPU reference),
# gpu_test_moe_fused, the forward test under ring8; the experts alone at T = 1, 8, 64, 256 (every
# form's row); bench latency 120b decode 1, 8, 64, 256 interleaved (ROUNDS, 2); then the batch-1
# and batch-8 step by kernel (CUPTI), for the next step of issue 13. Needs .devcarry with CUPTI.
# Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/kloop-out "MoE small path: k-loop forms (batch, pingpong, ring8, ring12)"
test_table
run_logged test_moe 300 $bin/gpu_test_moe
run_logged test_moe_fused 200 $bin/gpu_test_moe_fused
GPTOSS_MOE_KLOOP=2 run_logged forward_ring8 300 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 200 $bin/gpu_test_moe --bench --bench-t 1,8,64,256 2>&1 | grep -E "^\| moe experts.*small|^\| case|^\| ---" | tee -a "$sum"
echo -e "\n## bench latency 120b decode $(t)" | tee -a "$sum"
OUT=$out/v MODEL=120b BATCHES=1,8,64,256 ROUNDS=${ROUNDS:-2} \
  VARIANTS="batch=- pingpong=GPTOSS_MOE_KLOOP=1 ring8=GPTOSS_MOE_KLOOP=2 ring12=GPTOSS_MOE_KLOOP=3 ring8pred=GPTOSS_MOE_KLOOP=4" \
  bash scripts/device/variants.sh | tee -a "$sum"
lib=$PWD/.devcarry/lib/libgptoss_trace.so
for B in ${TRACE_BATCHES:-1 8}; do
  echo -e "\n## decode batch $B, the median graph step by kernel $(t)" | tee -a "$sum"
  CUDA_INJECTION64_PATH=$lib GPTOSS_TRACE_OUT="$out/logs/trace-b$B.csv" timeout 200 \
    $bin/gptoss bench latency --model synthetic:120b --batches "$B" --prefill "" \
    --decode-steps 8 --warmup 2 >"$out/logs/bench-b$B.log" 2>&1 || echo "bench B=$B failed ($?)" | tee -a "$sum"
  grep -E "^\| synthetic" "$out/logs/bench-b$B.log" | tee -a "$sum"
  python3 scripts/device/bubble.py "$out/logs/trace-b$B.csv" --title "batch $B, context 1024" \
    >"$out/logs/bubble-b$B.md" 2>&1
  cp "$out/logs/bubble-b$B.md" "$out/"
  head -5 "$out/logs/bubble-b$B.md" | tee -a "$sum"
  sed -n '/| kernel | per step/,$p' "$out/logs/bubble-b$B.md" | head -30 | tee -a "$sum"
  gzip -f "$out/logs/trace-b$B.csv"
done
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs v/vlogs 2>/dev/null && rm -rf "$out/logs" "$out/v/vlogs"
