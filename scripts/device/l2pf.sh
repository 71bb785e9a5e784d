#!/usr/bin/env bash
# Issue 13's L2 prefetch of the weights (prefetch.h, GPTOSS_L2_PREFETCH bit mask), in one device call
# (≤ 8 min: BUDGET_S=470):
#   1. the seeded generate with the prefetch off and with every bit on: identical JSON expected (a
#      prefetch is a hint, the kernels read the same bytes);
#   2. bench latency 120b decode at batch 1, 8, 64 for each bit alone and all together (variants.sh,
#      interleaved rounds), then 20b at batch 1 and 8 off vs all;
#   3. gpu_test_cuda_forward --skip-tp with every bit on, if time is left.
# Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/l2pf-summary.md.
set -uo pipefail
out=${OUT:-/tmp/l2pf-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/l2pf-summary.md"
start=$(date +%s)
left() { echo $((${BUDGET_S:-470} - ($(date +%s) - start))); }
lim() { local l; l=$(left); [ "$l" -lt "$1" ] && echo $((l > 5 ? l : 5)) || echo "$1"; }
summary_header "$sum" "L2 prefetch of the weights (issue 13)"
for m in 0 15; do
  GPTOSS_L2_PREFETCH=$m timeout 120 $bin/gptoss generate --backend cuda --model synthetic:20b:layers=4 \
    --prompts-file bench/prompts/seeded-ab.jsonl >"$out/gen-$m.json" 2>"$out/logs/gen-$m.log" || echo "generate mask $m failed ($?)" | tee -a "$sum"
done
if [ -s "$out/gen-15.json" ] && cmp -s "$out/gen-0.json" "$out/gen-15.json"; then
  echo "- seeded generate, prefetch off vs mask 15: identical ($(wc -l <"$out/gen-15.json") requests)" | tee -a "$sum"
else
  echo "- seeded generate, prefetch off vs mask 15: DIFFERENT" | tee -a "$sum"
fi
grep -h "L2 prefetch" "$out/logs/gen-15.log" | head -1 | sed 's/^/  /' | tee -a "$sum"
echo "## bench latency 120b decode, prefetch bits ($(left) s left)" | tee -a "$sum"
OUT="$out/v" VARIANTS="${VARIANTS:-base=- o=GPTOSS_L2_PREFETCH=1 down=GPTOSS_L2_PREFETCH=2 gu=GPTOSS_L2_PREFETCH=4 qkv=GPTOSS_L2_PREFETCH=8 all=GPTOSS_L2_PREFETCH=15}" \
  BATCHES=${BATCHES:-1,8,64} ROUNDS=${ROUNDS:-1} timeout $(lim 300) bash scripts/device/variants.sh 2>&1 | tail -20 | tee -a "$sum"
echo "## bench latency 20b decode, off vs all ($(left) s left)" | tee -a "$sum"
OUT="$out/v20" MODEL=20b VARIANTS="base=- all=GPTOSS_L2_PREFETCH=15" BATCHES=1,8 ROUNDS=1 \
  timeout $(lim 90) bash scripts/device/variants.sh 2>&1 | tail -6 | tee -a "$sum"
l=$(left)
if [ "$l" -gt 60 ]; then
  GPTOSS_L2_PREFETCH=15 timeout "$l" $bin/gpu_test_cuda_forward --skip-tp >"$out/logs/forward.log" 2>&1
  echo "- gpu_test_cuda_forward --skip-tp, GPTOSS_L2_PREFETCH=15 (${l} s allowed): $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/forward.log" | tail -1)" | tee -a "$sum"
  grep -E "FAILED|failed" "$out/logs/forward.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
fi
echo "($(($(date +%s) - start)) s)" | tee -a "$sum"
