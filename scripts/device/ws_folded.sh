#!/usr/bin/env bash
# The warp-specialised MoE's folded dequantisation (GPTOSS_MOE_WS_FOLDED=1, off until measured), ~4
# min: gpu_test_moe with it (the ws runs folded; the test asserts the two-multiply bits), the experts
# alone with and without it (ws rows), the forward test with it, then bench latency interleaved:
# the default (ws at 128-token tiles), folded, and ws at 64-token tiles too (=2) folded, at decode
# 1024 and prefill 1k / 8k. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
out=${OUT:-/tmp/wsf-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "The ws MoE's folded dequantisation"
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
run_logged moe_folded 90 env GPTOSS_MOE_WS_FOLDED=1 $bin/gpu_test_moe
ok=$?
run_logged forward_folded 150 env GPTOSS_MOE_WS_FOLDED=1 $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
for f in 0 1; do
  echo -e "\n## experts alone, GPTOSS_MOE_WS_FOLDED=$f $(t)" | tee -a "$sum"
  GPTOSS_MOE_WS_FOLDED=$f timeout 120 $bin/gpu_test_moe --bench >"$out/logs/bench-$f.log" 2>&1
  grep -E "experts" "$out/logs/bench-$f.log" | grep -E "T=(1024|4096|16384)" | grep -E "wgmma" | tee -a "$sum"
done
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=${WS_BATCHES:-1024} PREFILL=${WS_PREFILL:-1024,8192} ROUNDS=${ROUNDS:-1} \
    VARIANTS="default=- folded=GPTOSS_MOE_WS_FOLDED=1 ws64folded=GPTOSS_MOE_WGMMA=2+GPTOSS_MOE_WS_FOLDED=1" \
    bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
