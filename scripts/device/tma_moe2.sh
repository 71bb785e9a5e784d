#!/usr/bin/env bash
# The TMA-fed MoE kernel's release protocol (early: a step's stages freed when its MMAs are done;
# GPTOSS_MOE_TMA_LATE=1: one step later, as ws) and where prefill 1k spends its time, ~8 min: every
# GPU test (gpu_tests.sh, the build's defaults), gpu_test_moe and the forward test with =4, the
# experts alone under each protocol, the CUPTI kernel shares of prefill 1k (default and =4), then
# bench latency interleaved. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
out=${OUT:-/tmp/tma2-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "The TMA-fed MoE kernel: release protocol, prefill 1k's kernels, every GPU test"
echo -e "\n## every GPU test (defaults) $(t)" | tee -a "$sum"
OUT=$out/logs TEST_LIMIT=200 bash scripts/device/gpu_tests.sh test 2>&1 | sed -n '/== tests/,$p' | tee -a "$sum"
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
run_logged forward_tma 200 env GPTOSS_MOE_WGMMA=4 $bin/gpu_test_cuda_forward --skip-tp --skip-real
ok=$?
run_logged moe_tma_late 150 env GPTOSS_MOE_TMA_LATE=1 $bin/gpu_test_moe || ok=1
for late in 0 1; do
  echo -e "\n## experts alone, GPTOSS_MOE_TMA_LATE=$late $(t)" | tee -a "$sum"
  GPTOSS_MOE_TMA_LATE=$late timeout 150 $bin/gpu_test_moe --bench --bench-t ${TS:-1024,4096,16384} \
    >"$out/logs/bench-$late.log" 2>&1
  grep -E "experts" "$out/logs/bench-$late.log" | grep -E "wgmma" | grep -E "tma|auto" | tee -a "$sum"
done
lib=$PWD/.devcarry/lib/libgptoss_trace.so
for v in 3 4; do
  echo -e "\n## kernel shares, prefill 1k, GPTOSS_MOE_WGMMA=$v $(t)" | tee -a "$sum"
  GPTOSS_MOE_WGMMA=$v CUDA_INJECTION64_PATH=$lib GPTOSS_TRACE_OUT="$out/logs/trace-$v.csv" timeout 150 \
    $bin/gptoss bench latency --model synthetic:120b --batches "" --prefill 1024 >"$out/logs/trace-$v.log" 2>&1 ||
    echo "trace $v failed ($?)" | tee -a "$sum"
  python3 scripts/device/kernel_share.py "$out/logs/trace-$v.csv" 14 | tee -a "$sum"
  gzip -f "$out/logs/trace-$v.csv"
done
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=${TMA_BATCHES:-256,1024} PREFILL=${TMA_PREFILL:-1024,8192} ROUNDS=${ROUNDS:-1} \
    VARIANTS="default=- tma=GPTOSS_MOE_WGMMA=4 tmalate=GPTOSS_MOE_WGMMA=4+GPTOSS_MOE_TMA_LATE=1" \
    bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
