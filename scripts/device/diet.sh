#!/usr/bin/env bash
# The MoE small kernel's "ALU diet" changes one by one (GPTOSS_MOE_DIET: 0 base, 3 the pipe moves,
# 4 no zeroing of absent tokens, 8 alternating register sets, 12 = 4+8, 15 all), ~5 min: the experts
# alone (gpu_test_moe --bench, small rows) and bench latency 120b decode at batch 1, 8, 64 for each;
# gpu_test_moe's checks with all four on. Needs .devcarry (scripts/device/prepare.sh).
set -uo pipefail
out=${OUT:-/tmp/diet-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/diet-summary.md"
summary_header "$sum" "MoE small kernel, the ALU diet's parts (GPTOSS_MOE_DIET)"
GPTOSS_MOE_DIET=15 timeout 120 "$bin/gpu_test_moe" >"$out/logs/moe-15.log" 2>&1
echo "- gpu_test_moe, GPTOSS_MOE_DIET=15: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe-15.log" | tail -1)" | tee -a "$sum"
echo "## experts alone, µs (T=1 / 8 / 64 / 256)" | tee -a "$sum"
for d in 0 3 4 8 12 15; do
  GPTOSS_MOE_DIET=$d timeout 100 "$bin/gpu_test_moe" --bench >"$out/logs/bench-$d.log" 2>&1
  echo "| diet $d | $(grep -E 'moe experts 120b T=(1|8|64|256) small' "$out/logs/bench-$d.log" | awk -F'|' '{printf "%s / ", $3}') |" | tee -a "$sum"
done
echo "## bench latency, synthetic:120b decode" | tee -a "$sum"
OUT="$out/v" VARIANTS="d0=- d3=GPTOSS_MOE_DIET=3 d4=GPTOSS_MOE_DIET=4 d8=GPTOSS_MOE_DIET=8 d12=GPTOSS_MOE_DIET=12 d15=GPTOSS_MOE_DIET=15" \
  BATCHES=${BATCHES:-1,8,64} ROUNDS=${ROUNDS:-1} bash scripts/device/variants.sh 2>&1 | tail -22 | tee -a "$sum"
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out/res/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs res 2>/dev/null && rm -rf "$out/logs" "$out/v" "$out/res"
