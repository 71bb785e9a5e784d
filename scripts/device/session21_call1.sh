#!/usr/bin/env bash
# Session 21, first device call (~9 min): (1) the layer probe with its two stream forms
# (scripts/device/layer_probe.sh holds their prediction and the decision rule); (2) the MoE block's
# stream form (moe_stream.cu, GPTOSS_MOE_FUSED=3, T <= 2): gpu_test_moe_fused (its checks) and its
# bench; (3) 120b decode at batch 1 and 2 and 20b at 1, base against the stream form, two
# interleaved rounds. Needs .devcarry (scripts/device/prepare.sh). Prints $OUT/summary.md.
# Prediction for the stream form (session 21, before any run): the MoE block alone at T = 1 (router,
# routing, gate_up, down: ~36 us as four launches) ~22-26 us (router phase and barrier ~6, routing
# ~2, the four experts' 53 MB at 3.5-4 TB/s ~14, the barrier between gate_up and down hidden by the
# stream), i.e. stream / unfused 0.60-0.75; in the step it replaces gemv_norm_route + the two expert
# kernels (~35 us a layer) by norm_add + the stream kernel (~3.4 + ~24): 120b decode batch 1 +8-15 %,
# batch 2 +5-12 %, 20b batch 1 +8-15 %. Decision: default at T <= 2 if it gains beyond the rounds'
# spread, else the form is removed. Mode 4 (the MLP norm inside the same kernel, norm_add's launch
# gone): ~3 us a layer more, +3-5 % over mode 3 at batch 1-2.
set -uo pipefail
root=${OUT:-/tmp/s21c1}
mkdir -p "$root"
OUT=$root/probe bash scripts/device/layer_probe.sh
source "$(dirname "$0")/env.sh"
device_script "$root/stream" "the MoE block's stream form"
test_table
run_logged test_moe_fused 150 $bin/gpu_test_moe_fused
grep -E "stream: act" "$out/logs/test_moe_fused.log" | head -12 | tee -a "$sum"
ROUNDS=2 decode_variants "base=- stream=GPTOSS_MOE_FUSED=3 norm=GPTOSS_MOE_FUSED=4" 120b:1,2
ROUNDS=1 decode_variants "base=- stream=GPTOSS_MOE_FUSED=3 norm=GPTOSS_MOE_FUSED=4" 20b:1
echo -e "\n## gpu_test_moe_fused --bench $(t)" | tee -a "$sum"
timeout $((440 - ($(date +%s) - start))) $bin/gpu_test_moe_fused --bench 2>&1 | grep -E '^\|' | tee -a "$sum"
t | tee -a "$sum"
cat "$root/probe/summary.md" "$sum" >"$root/summary.md"
tar czf "$root/logs.tgz" -C "$root" probe/logs stream/logs 2>/dev/null
