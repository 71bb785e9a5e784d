#!/usr/bin/env bash
# Session 12's second call, ~7 min: the register-A MoE form as the default at 64-token plans.
# gpu_test_moe and the forward test on the default and with GPTOSS_MOE_TMA_RS=2 (the form at
# 128-token plans too), the experts alone at T = 512 … 16384 (the "tma rs n64" rows against ws n128
# and the small path), then bench latency interleaved: default, rs0 (the shared-memory form),
# rs2, and large16 (GPTOSS_MOE_LARGE_AVG=16: the large path from 16 pairs an expert) at decode
# 512 and 1024 and prefill 1k and 8k. Needs .devcarry (scripts/device/prepare.sh). Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/rs2-out "the register-A MoE form as the default; at 128-token plans; the crossover"
test_table
run_logged moe 150 $bin/gpu_test_moe
run_logged forward 200 $bin/gpu_test_cuda_forward --skip-tp --skip-real
run_logged forward_rs2 200 env GPTOSS_MOE_TMA_RS=2 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 512,768,1024,4096,8192,16384 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | tee -a "$sum"
echo -e "\n## bench latency $(t)" | tee -a "$sum"
OUT=$out MODEL=120b BATCHES=512,1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-2} \
  VARIANTS="default=- rs0=GPTOSS_MOE_TMA_RS=0 rs2=GPTOSS_MOE_TMA_RS=2 large16=GPTOSS_MOE_LARGE_AVG=16" \
  bash scripts/device/variants.sh | tee -a "$sum"
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
