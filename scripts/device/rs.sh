#!/usr/bin/env bash
# Session 12's first call, ~6 min: gpu_test_moe (the one-consumer-warpgroup variant's bits, the
# register-A form against ws), the forward test on session 11's failing seed (17146451299536958338)
# and with each prepared form on (GPTOSS_MOE_TMA_ONEWG=1, GPTOSS_MOE_TMA_RS=1), the experts alone
# (the bench's "tma n64", "tma onewg n64", "tma rs n64" rows), then bench latency interleaved at
# decode 1024 and prefill 1k: default, onewg, rs. SKIP_BENCH=1 stops after the tests. Needs
# .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/rs-out "the register-A MoE form, the one-warpgroup variant, session 11's seed"
test_table
run_logged moe 150 $bin/gpu_test_moe
run_logged forward_seed 200 $bin/gpu_test_cuda_forward --skip-tp --skip-real --seed 17146451299536958338
run_logged forward_rs 200 env GPTOSS_MOE_TMA_RS=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real
run_logged forward_onewg 200 env GPTOSS_MOE_TMA_ONEWG=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 256,1024,4096 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "tma" | tee -a "$sum"
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=1024 PREFILL=1024 ROUNDS=${ROUNDS:-2} \
    VARIANTS="default=- onewg=GPTOSS_MOE_TMA_ONEWG=1 rs=GPTOSS_MOE_TMA_RS=1" \
    bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
