#!/usr/bin/env bash
# The TMA-fed MoE kernel's prepared variant (GPTOSS_MOE_TMA_STAGES=4: a fourth A stage at 64-token
# tiles, one B stage and one raw slot fewer), ~4 min: gpu_test_moe and the forward test with it on
# (the test asserts the tma kernel's bits equal ws's), the experts alone under each, then bench
# latency interleaved at decode 1024 and prefill 1k (where 64-token tiles run). Needs .devcarry
# (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/stages-out "moe_wgmma_tma.cu with four A stages at 64-token tiles (GPTOSS_MOE_TMA_STAGES=4)"
test_table
run_logged moe_stages4 150 env GPTOSS_MOE_TMA_STAGES=4 $bin/gpu_test_moe
ok=$?
run_logged forward_stages4 200 env GPTOSS_MOE_TMA_STAGES=4 $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
for v in 3 4; do
  echo -e "\n## experts alone, GPTOSS_MOE_TMA_STAGES=$v $(t)" | tee -a "$sum"
  GPTOSS_MOE_TMA_STAGES=$v timeout 120 $bin/gpu_test_moe --bench --bench-t 256,1024,4096 >"$out/logs/bench-$v.log" 2>&1
  grep -E "experts" "$out/logs/bench-$v.log" | grep -E "tma n64|auto" | tee -a "$sum"
done
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=1024 PREFILL=1024 ROUNDS=${ROUNDS:-2} \
    VARIANTS="default=- stages4=GPTOSS_MOE_TMA_STAGES=4" bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
