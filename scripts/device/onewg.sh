#!/usr/bin/env bash
# Two things for the session after 11, ~5 min: (1) the forward test on the seed that failed once in
# session 11 (17146451299536958338: the FP8-KV engine check, on the ws_consume_tile refactor 942e0a2,
# since reverted), on main as carried; (2) the tma kernel's prepared one-consumer-warpgroup variant
# (GPTOSS_MOE_TMA_ONEWG=1): gpu_test_moe (asserts its bits equal ws's) and the forward test with it
# on, the experts alone (the bench's "tma onewg n64" row beside "tma n64"), then bench latency
# interleaved at decode 1024 and prefill 1k. Needs .devcarry (scripts/device/prepare.sh). Prints
# $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/onewg-out "the session-11 seed replay; the tma kernel with one consumer warpgroup"
test_table
run_logged forward_seed 200 $bin/gpu_test_cuda_forward --skip-tp --skip-real --seed 17146451299536958338
run_logged moe 150 $bin/gpu_test_moe
ok=$?
run_logged forward_onewg 200 env GPTOSS_MOE_TMA_ONEWG=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 256,1024,4096 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "tma" | tee -a "$sum"
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=1024 PREFILL=1024 ROUNDS=${ROUNDS:-2} \
    VARIANTS="default=- onewg=GPTOSS_MOE_TMA_ONEWG=1" bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
