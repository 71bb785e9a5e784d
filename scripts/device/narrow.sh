#!/usr/bin/env bash
# The TMA-fed MoE kernel's narrow form (GPTOSS_MOE_TMA_NARROW=1: at 64-token tiles, MMAs as wide as
# the tile's tokens rounded up to 16), ~5 min: gpu_test_moe (asserts its bits equal ws's) and the
# forward test with it on, the experts alone (the bench's "tma narrow" row beside "tma n64"), then
# bench latency interleaved at decode 256 and 1024 and prefill 1k, where 64-token tiles run. Needs
# .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/narrow-out "moe_wgmma_tma.cu's narrow form (GPTOSS_MOE_TMA_NARROW=1)"
test_table
run_logged moe 150 $bin/gpu_test_moe
ok=$?
run_logged forward_narrow 200 env GPTOSS_MOE_TMA_NARROW=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 256,1024,4096 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "tma" | tee -a "$sum"
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=256,1024 PREFILL=1024 ROUNDS=${ROUNDS:-2} \
    VARIANTS="default=- narrow=GPTOSS_MOE_TMA_NARROW=1" bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
