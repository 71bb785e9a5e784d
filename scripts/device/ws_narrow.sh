#!/usr/bin/env bash
# Session 11's closing call, ~7 min: every GPU test binary (scripts/device/gpu_tests.sh test mode),
# the forward test with the ws kernel's narrow form on (GPTOSS_MOE_WS_NARROW=1), the experts alone
# (the bench's "ws narrow n128" row beside "ws n128"), then bench latency of the default against
# ws narrow, interleaved, at decode 1, 64 and 1024 and prefill 1k and 8k (128-token tiles run at
# prefill 8k). Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/wsn-out "all GPU tests; moe_wgmma_ws.cu's narrow form (GPTOSS_MOE_WS_NARROW=1)"
OUT=$out/tests TEST_LIMIT=200 bash scripts/device/gpu_tests.sh test >"$out/logs/gpu_tests.log" 2>&1
echo -e "\n## GPU tests $(t)" | tee -a "$sum"
sed -n '/^== tests/,$p' "$out/logs/gpu_tests.log" | tee -a "$sum"
tar czf "$out/tests.tgz" -C "$out" tests 2>/dev/null && rm -rf "$out/tests"
test_table
run_logged forward_ws_narrow 200 env GPTOSS_MOE_WS_NARROW=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real
ok=$?
grep -q "FAIL" "$sum" && ok=1
echo -e "\n## experts alone $(t)" | tee -a "$sum"
timeout 150 $bin/gpu_test_moe --bench --bench-t 1024,4096,16384 >"$out/logs/bench.log" 2>&1
grep -E "experts" "$out/logs/bench.log" | grep -E "tma|ws" | tee -a "$sum"
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=1,64,1024 PREFILL=1024,8192 ROUNDS=${ROUNDS:-2} \
    VARIANTS="default=- wsnarrow=GPTOSS_MOE_WS_NARROW=1" bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
