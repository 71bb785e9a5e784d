#!/usr/bin/env bash
# The warp-specialised MoE's prepared forms (off until measured), ~5 min: the folded dequantisation
# (GPTOSS_MOE_WS_FOLDED=1) and the consumers' suspend hint (GPTOSS_MOE_WS_WAIT_NS). gpu_test_moe
# with both (the ws runs folded; the test asserts the two-multiply bits), the forward test with
# both, the experts alone (ws rows) under each, then bench latency interleaved: the default (ws at
# 128-token tiles), folded, hint, and ws at 64-token tiles too (=2) folded, at decode 1024 and
# prefill 1k / 8k. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
set -uo pipefail
out=${OUT:-/tmp/wsn-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/summary.md"
start=$(date +%s)
t() { echo "($(($(date +%s) - start)) s)"; }
summary_header "$sum" "The ws MoE's prepared forms: folded dequantisation, consumer wait hint"
echo -e "\n| test | result | checks | at |\n| --- | --- | --- | --- |" | tee -a "$sum"
hint=${HINT_NS:-2000}
run_logged moe_both 90 env GPTOSS_MOE_WS_FOLDED=1 GPTOSS_MOE_WS_WAIT_NS=$hint $bin/gpu_test_moe
ok=$?
run_logged forward_both 150 env GPTOSS_MOE_WS_FOLDED=1 GPTOSS_MOE_WS_WAIT_NS=$hint $bin/gpu_test_cuda_forward --skip-tp --skip-real || ok=1
for v in "0 0" "1 0" "0 $hint"; do
  set -- $v
  echo -e "\n## experts alone, GPTOSS_MOE_WS_FOLDED=$1 GPTOSS_MOE_WS_WAIT_NS=$2 $(t)" | tee -a "$sum"
  GPTOSS_MOE_WS_FOLDED=$1 GPTOSS_MOE_WS_WAIT_NS=$2 timeout 120 $bin/gpu_test_moe --bench >"$out/logs/bench-$1-$2.log" 2>&1
  grep -E "experts" "$out/logs/bench-$1-$2.log" | grep -E "T=(1024|4096|16384)" | grep -E "wgmma" | tee -a "$sum"
done
if [ $ok -eq 0 ]; then
  echo -e "\n## bench latency $(t)" | tee -a "$sum"
  OUT=$out MODEL=120b BATCHES=${WS_BATCHES:-1024} PREFILL=${WS_PREFILL:-1024,8192} ROUNDS=${ROUNDS:-1} \
    VARIANTS="default=- folded=GPTOSS_MOE_WS_FOLDED=1 hint=GPTOSS_MOE_WS_WAIT_NS=$hint ws64folded=GPTOSS_MOE_WGMMA=2+GPTOSS_MOE_WS_FOLDED=1" \
    bash scripts/device/variants.sh | tee -a "$sum"
fi
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs vlogs 2>/dev/null && rm -rf "$out/logs" "$out/vlogs"
