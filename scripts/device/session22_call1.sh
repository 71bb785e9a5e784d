#!/usr/bin/env bash
# Session 22, first device call (~9 min): the two stream kernels, checked, then measured alone and
# in the step. (1) gpu_test_attn_stream (the attention block's stream kernel, attn_stream.cu,
# GPTOSS_ATTN_STREAM=1: its checks against the launches, then --bench); (2) gpu_test_moe_fused (the
# MoE stream form's checks, GPTOSS_MOE_FUSED=3/4, never run yet); (3) 120b decode at batch 1, 2, 4,
# two interleaved rounds, and 20b at 1: base / moe (=3) / attn (=1) / both (attention =2, its norm
# inside, + MoE =4, its norm inside: two kernels a layer) / pf (both + the L2 hints). Needs .devcarry
# (scripts/device/prepare.sh). Prints $OUT/summary.md.
#
# Predictions (session 22, before any run):
#  - the attention block alone at T = 1, 1k context: the launches ~30-37 us (in session 16's
#    batch-1 timeline a layer's QKV 10.1, rope_kv 2.9, attn_decode 8.8 on full layers or 4.3 +
#    merge 8.0 on sliding ones, O's ring GEMV 14 of which ~7 overlap the attention under PDL: ~29
#    full, ~32 sliding, as spans) -> the stream kernel 16-22 us (QKV's 29.5 MB at ~4 TB/s 7.4 us,
#    two grid barriers ~2.5, attention ~4-5, the O rows mostly in the ring by then ~2):
#    stream / launches 0.5-0.7; T = 2 the same within 10 %.
#  - the step: 120b decode batch 1 +10-20 % (8-14 us of a ~78 us layer span, 36 layers), batch 2
#    +8-18 %, batch 4 (both forms now take 4 tokens; the MoE form with 4 ring stages there)
#    attention +5-12 %, MoE +5-12 %; 20b batch 1
#    +8-18 % (the same layer shapes, 24 layers: the lm_head is more of its step); "both" adds the
#    MoE form's own gain (session 21's prediction: +8-15 % at batch 1) if that holds.
#  - "pf" (both, plus GPTOSS_STREAM_PREFETCH=1: the MoE kernel asks L2 for the next layer's QKV
#    rows at its start, evict_last, while its norm -> router -> barrier -> top-k chain (~6-8 us)
#    leaves DRAM idle; the attention kernel asks for the router rows; both kernels' streamed
#    copies are evict_first): the QKV phase from L2 instead of DRAM, ~3-4 us a layer: +4-8 % over
#    "both" at batch 1.
#  - the MoE stream form (session 21's prediction, written before any run): the MoE block alone at
#    T = 1 (router, routing, gate_up, down: ~36 us as four launches) ~22-26 us (router phase and
#    barrier ~6, routing ~2, the four experts' 53 MB at 3.5-4 TB/s ~14, the barrier between gate_up
#    and down hidden by the stream), stream / unfused 0.60-0.75; in the step 120b batch 1 +8-15 %,
#    batch 2 +5-12 %, 20b batch 1 +8-15 %; mode 4 (the MLP norm inside) +3-5 % over mode 3.
# Decision: the attention kernel becomes the default at each batch (1-4) where it gains beyond the
# rounds' spread, the MoE form at 1-4 likewise, the L2 hints where "pf" gains over "both"; a form
# that gains nowhere is removed. If the attention kernel loses, the bench's probe columns (the
# kernel ended after QKV, after attention) say which phase; the first suspect is phase 2's latency
# chain (table read -> KV copies -> scores -> partials -> counter -> merge), then the barriers.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script "${OUT:-/tmp/s22c1}" "session 22 call 1: the attention and MoE stream kernels"
test_table
run_logged test_attn_stream 150 $bin/gpu_test_attn_stream
run_logged test_moe_fused 150 $bin/gpu_test_moe_fused
grep -E "stream: act" "$out/logs/test_moe_fused.log" | head -6 | tee -a "$sum"
echo -e "\n## gpu_test_attn_stream --bench $(t)" | tee -a "$sum"
timeout 120 $bin/gpu_test_attn_stream --bench 2>&1 | grep -E '^\||checks' | tee -a "$sum"
both=GPTOSS_ATTN_STREAM=2+GPTOSS_MOE_FUSED=4
V="base=- moe=GPTOSS_MOE_FUSED=3 attn=GPTOSS_ATTN_STREAM=1 both=$both pf=$both+GPTOSS_STREAM_PREFETCH=1"
ROUNDS=2 decode_variants "$V" 120b:1,2,4
ROUNDS=1 decode_variants "base=- both=$both pf=$both+GPTOSS_STREAM_PREFETCH=1" 20b:1
t | tee -a "$sum"
tar czf "$out/logs.tgz" -C "$out" logs 2>/dev/null
