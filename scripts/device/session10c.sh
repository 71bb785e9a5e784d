#!/usr/bin/env bash
# Session 10's closing call, ~4 min: gpu_test_moe and the forward test on the build's defaults (the
# large MoE: ws at 128-token tiles, moe_wgmma_tma.cu at 64), then bench latency interleaved against
# the previous default (GPTOSS_MOE_WGMMA=5: moe_wgmma.cu at 64) at decode 256 and 1024, prefill 1k
# and 8k. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/s10c-out "Session 10, closing: the new default large MoE against the previous one"
test_table
run_logged moe 150 $bin/gpu_test_moe
ok=$?
run_logged forward 200 $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=${S_BATCHES:-256,1024} PREFILL=${S_PREFILL:-1024,8192} ROUNDS=${ROUNDS:-1} \
    VARIANTS="default=- previous=GPTOSS_MOE_WGMMA=5" bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
