#!/usr/bin/env bash
# Issue 13's MoE small path, its variants side by side in one call (~6 min): moe_experts.cu's
# small_cfg variants (GPTOSS_MOE_SMALL_VARIANT 0-4: 1 shared memory for the tokens there are, 2 and 3
# fewer registers for more resident warps, 4 a block's warps splitting one tile's k steps).
#   1. gpu_test_moe: every variant against the CPU reference (0-3 the same bits);
#   2. gpu_test_moe --bench: the experts alone at T = 1 .. 256 for each variant;
#   3. bench latency synthetic:120b, decode batch 1, 8, 64, each variant (scripts/device/variants.sh).
# Prints $OUT/moe-small-summary.md. Needs .devcarry (scripts/device/prepare.sh); carry
# [".devcarry"], command `bash scripts/device/moe_small.sh`.
set -uo pipefail
out=${OUT:-/tmp/moe-small-out}
mkdir -p "$out/logs"
source "$(dirname "$0")/env.sh"
bin=.devcarry/bin
sum="$out/moe-small-summary.md"
summary_header "$sum" "MoE small path variants (issue 13)"
timeout 200 "$bin/gpu_test_moe" >"$out/logs/moe.log" 2>&1
echo "- gpu_test_moe: $(res $?) — $(grep -E 'checks passed|FAILED' "$out/logs/moe.log" | tail -1)" | tee -a "$sum"
grep -E "variant.*differ|FAILED|failed" "$out/logs/moe.log" | head -5 | sed 's/^/  /' | tee -a "$sum"
timeout 200 "$bin/gpu_test_moe" --bench >"$out/logs/moe-bench.log" 2>&1
echo "## experts alone" | tee -a "$sum"
grep -E "^\| (case|---)|moe experts 120b T=(1|8|64|256) small" "$out/logs/moe-bench.log" | tee -a "$sum"
echo "## bench latency, synthetic:120b decode" | tee -a "$sum"
OUT="$out/v" VARIANTS="v0=- v1=GPTOSS_MOE_SMALL_VARIANT=1 v2=GPTOSS_MOE_SMALL_VARIANT=2 v3=GPTOSS_MOE_SMALL_VARIANT=3 v4=GPTOSS_MOE_SMALL_VARIANT=4" \
  BATCHES=1,8,64 ROUNDS=${ROUNDS:-1} bash scripts/device/variants.sh 2>&1 | tail -20 | tee -a "$sum"
mkdir -p "$out/res" && cp "$out"/v/var-*.json "$out/res/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$out" logs res 2>/dev/null && rm -rf "$out/logs" "$out/v" "$out/res"
