#!/usr/bin/env bash
# The tensor-core QKV and O products for 1-16 tokens (gemv_mma.h; GPTOSS_GEMV_MMA, off by default),
# prepared in session 18 without device time (~5 min): its test and its bench against cuBLASLt; the
# forward test with it on up to 16 tokens; 120b decode at batch 1, 2, 4, 8, 16 and 20b at 1, 4, 16
# with it off and on (=16), interleaved, two rounds; the batch-8 step by kernel with it on.
# Prediction (session 18, before any run): alone, QKV at 8 tokens 10.4 -> ~6 us and O 11.5 (with
# cuBLASLt's split-K reduce) -> ~7 us (4 and 3 batches of 4 chunks a warp, ~1.2 us each, plus ~2 us
# of start and end); 120b decode +4-6 % at batch 2-8, +2-3 % at 16, +1-2 % at 1 (QKV only: O keeps
# its early ring form there). Make it the default (no switch) for the batches where it gains beyond
# the spread; else remove it.
# Session 19 added the fused QKV form (GPTOSS_GEMV_MMA_ROPE=1 with it: RoPE and the KV write in the
# product's epilogue, no rope_kv launch; its test holds it to the two launches byte for byte) as a
# third variant, with the forward test under it. Prediction (session 19, before any run): rope_kv
# is ~2.9 us a layer at batch 1 and ~3 us at 8 (session 16's step by kernel); the epilogue adds
# ~0.3-0.5 us (an L2 round trip for the positions is hidden behind the k loop, sincosf after it),
# so "rope" against "on": +2.5-3.5 % at batch 1-16. Keep it with gemv_mma if it gains beyond the
# spread. Also the attention norm inside that kernel (GPTOSS_GEMV_MMA_NORM=4, session 19: every
# block makes the normalised rows from h and the MoE slots while its first weights fly; the last
# block writes h back; the test holds it to norm_add + the fused form byte for byte). Prediction:
# norm_add is ~3.4 us a layer at batch 1 (session 16), the rows cost each block ~1 us of L2 reads
# that overlap its first weights: "norm" against "rope" +2-3 % at batch 1, +1-2 % at 2, ~0 at 4
# (each block reads ~58 KB a token). Its bench now times six block shapes (chunks a batch x warps a block: gemv_mma_tune);
# prediction: the default 4x8 within 10 % of the best at every T; a shape >= 5 % faster at most T
# becomes the default (then the tuning entry goes). Needs .devcarry (scripts/device/prepare.sh).
# Prints $OUT/summary.md.
set -uo pipefail
source "$(dirname "$0")/env.sh"
device_script /tmp/gm-out "the tensor-core QKV and O (GPTOSS_GEMV_MMA)"
test_table
run_logged test_gemv_mma 200 $bin/gpu_test_gemv_mma
timeout 120 $bin/gpu_test_gemv_mma --bench 2>&1 | grep -E '^\||^[A-Z]' | tee -a "$sum"
GPTOSS_GEMV_MMA=16 run_logged forward_gemv_mma 300 $bin/gpu_test_cuda_forward --skip-tp
grep -E "seed" "$out/logs/forward_gemv_mma.log" | head -2 | tee -a "$sum"
GPTOSS_GEMV_MMA=16 GPTOSS_GEMV_MMA_ROPE=1 run_logged forward_gemv_mma_rope 300 $bin/gpu_test_cuda_forward --skip-tp
grep -E "seed" "$out/logs/forward_gemv_mma_rope.log" | head -2 | tee -a "$sum"
GPTOSS_GEMV_MMA=16 GPTOSS_GEMV_MMA_ROPE=1 GPTOSS_GEMV_MMA_NORM=4 run_logged forward_gemv_mma_norm 300 \
  $bin/gpu_test_cuda_forward --skip-tp
grep -E "seed" "$out/logs/forward_gemv_mma_norm.log" | head -2 | tee -a "$sum"
decode_variants "off=- on=GPTOSS_GEMV_MMA=16 rope=GPTOSS_GEMV_MMA=16+GPTOSS_GEMV_MMA_ROPE=1" \
  120b:1,2,4,8,16 20b:1,4,16
# The attention norm inside the QKV kernel too (GPTOSS_GEMV_MMA_NORM=N: steps of up to N tokens),
# against "rope", at the small batches it is for.
VTAG=-norm decode_variants "rope=GPTOSS_GEMV_MMA=16+GPTOSS_GEMV_MMA_ROPE=1 \
norm=GPTOSS_GEMV_MMA=16+GPTOSS_GEMV_MMA_ROPE=1+GPTOSS_GEMV_MMA_NORM=4" 120b:1,2,4 20b:1
# At one token O keeps its early ring form (GPTOSS_EARLY_WEIGHTS, default 1 = O): this form in its
# place (early off), against "rope" with the early O.
VTAG=-o decode_variants "rope=GPTOSS_GEMV_MMA=16+GPTOSS_GEMV_MMA_ROPE=1 \
rope_o=GPTOSS_GEMV_MMA=16+GPTOSS_GEMV_MMA_ROPE=1+GPTOSS_EARLY_WEIGHTS=0" 120b:1 20b:1
GPTOSS_GEMV_MMA=16 GPTOSS_GEMV_MMA_ROPE=1 GPTOSS_GEMV_MMA_NORM=4 decode_by_kernel 1 8
t | tee -a "$sum"
(cd "$out" && tar czf logs.tgz logs v-* 2>/dev/null) && rm -rf "$out/logs" "$out"/v-*
