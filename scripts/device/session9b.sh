#!/usr/bin/env bash
# Session 9 (2026-12-03), call 2 (~4 min): the warp-specialised wgmma MoE end to end.
# gpu_test_moe; the forward test with GPTOSS_MOE_WGMMA=3 (the warp-specialised kernel at 128-token
# tiles, moe_wgmma.cu at 64) and =2 (warp-specialised everywhere); then bench latency with kind 1
# (moe_wgmma.cu, the default) against kind 3, interleaved: decode 1024 and prefill 1k (64-token
# tiles: the same kernels, a check of the noise) and prefill 8k (128-token tiles). Needs .devcarry
# (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
out=${OUT:-/tmp/s9b-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "Session 9, call 2: the warp-specialised wgmma MoE end to end"
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
run_logged moe 90 $bin/gpu_test_moe
ok=$?
for k in 3 2; do
  run_logged forward_wgmma$k 150 env GPTOSS_MOE_WGMMA=$k $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
  grep -E "^summary:" "$out/logs/forward_wgmma$k.log" | head -3 | sed 's/^/    /' | tee -a "$sum"
done
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency, kind 1 (default) vs kind 3 $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=${WS_BATCHES:-1024} PREFILL=${WS_PREFILL:-1024,8192} ROUNDS=${ROUNDS:-1} \
    VARIANTS="wgmma=- ws128=GPTOSS_MOE_WGMMA=3" bash scripts/device/variants.sh | tee -a "$sum"
  .devcarry/bin/gptoss roofline --model 120b --batch 1024 --context 1024 >"$out/roofline.txt" 2>&1
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
