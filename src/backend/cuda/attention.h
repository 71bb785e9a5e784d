/* Attention of gpt-oss on the GPU: paged KV cache, GQA, sinks, sliding window (spec §2.3–2.4, §2.8).
 *
 * The math, for query token t at position p of a sequence and query head h (KV head j = h / 8):
 *   z_u  = scale * <q_rot(t,h), k_rot(u,j)>             for the visible keys u
 *   out  = sum_u exp(z_u - m) v(u,j) / (exp(sink_h - m) + sum_u exp(z_u - m)),  m = max(sink_h, max z)
 * Visible keys: k_lo(p) <= u <= p, with k_lo(p) = 0 on full layers and max(0, p - window + 1) on sliding
 * layers (window = 128, the current key included). scale = 0.125 on the scores, never on the sink; the
 * sink is a logit with no value. Softmax and accumulators are fp32; Q, K, V, P and the output are bf16.
 *
 * ---- KV cache layout (one layer, one pool) ----
 * K and V are two arrays of the same shape, bf16, head-major inside a block:
 *     k_cache[num_blocks][n_kv_heads][block_size][head_dim]     (and v_cache likewise)
 * so one (block, KV head) is block_size * head_dim * 2 bytes contiguous (4 KiB at block_size 32): a CTA
 * that owns one KV head streams whole contiguous runs, and a 16-byte load never straddles two heads.
 * Position pos of a sequence lives at physical block b = table[pos / block_size - first] (see
 * step/batch.h: first = 0 in the full pool, swa_first[i] in the sliding pool), row pos % block_size.
 * A "slot" is b * block_size + row. block_size is 16, 32 or 64 (any power of two from 8 to 256 works;
 * 32 is the suggested default: 4 KiB runs, and a 128-key window spans at most 5 blocks).
 * Every layer of a pool uses the same block ids in its own k/v arrays.
 *
 * ---- FP8 KV cache (attn_dims.kv_fp8 = 1, --kv-cache-dtype fp8) ----
 * The same layout with 1-byte elements: e4m3 codes (base/numfmt.h), so a key row is 64 bytes and a
 * (block, KV head) 2 KiB at block_size 32. The stored code of a value x of KV head j is
 *     code = e4m3_rne_satfinite(x * inv_scale[j]),   read back as  e4m3(code) * scale[j],
 * with one scale per (layer, K or V, KV head): the table kv_scales below. The kernels never multiply
 * element by element: the K scale folds into the score scale (a CTA owns one KV head) and the V
 * scale into the final normalisation. See kv_fp8.cuh for the conversions.
 *
 * ---- The scale table (per layer, device memory, fp32) ----
 *     kv_scales[0 * n_kv_heads + j] = K scale of KV head j      kv_scales[2 * n_kv_heads + j] = 1 / it
 *     kv_scales[1 * n_kv_heads + j] = V scale of KV head j      kv_scales[3 * n_kv_heads + j] = 1 / it
 * (the reciprocals are computed once on the host in fp32, so the CPU reference and the GPU quantise
 * with the same multiplier). bf16 caches ignore it (may be NULL).
 *
 * ---- Other buffers ----
 *   q    [n_tokens][n_heads][head_dim] bf16, RoPE applied (written by rope_kv_launch_f32)
 *   out  [n_tokens][n_heads][head_dim] bf16, the concatenated heads (input of the O projection)
 *   sinks[n_heads] fp32 (the checkpoint's bf16 sinks widened once at load)
 * All pointers in the launch functions are device pointers unless marked "host".
 *
 * ---- Which kernel ----
 * attn_decode  sequences with exactly one new token (the others are skipped): one CTA per
 *              (sequence, KV head, split) reads each KV byte once for the 8 query heads of the group;
 *              long contexts at small batch are split over several CTAs (flash-decoding) and merged.
 * attn_prefill sequences with several new tokens (chunked prefill: start_pos > 0 reads the earlier KV
 *              from the pages): flash-attention tiles of 16 tokens x 8 heads, tensor cores.
 * A mixed step calls both: attn_prefill_plan(min_new = 2) leaves the one-token sequences to attn_decode.
 * Shapes: head_dim must be 64 and n_heads / n_kv_heads must be 8 (gpt-oss); other shapes are refused
 * with cudaErrorInvalidValue.
 *
 * The header needs only the CUDA runtime API's types (cudaStream_t, cudaError_t); engine code never
 * includes it. */
#ifndef GPTOSS_BACKEND_CUDA_ATTENTION_H
#define GPTOSS_BACKEND_CUDA_ATTENTION_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n_heads;    /* query heads (64) */
    int n_kv_heads; /* KV heads (8) */
    int head_dim;   /* 64 */
    int block_size; /* tokens per KV block, a power of two */
    int kv_fp8;     /* 0: K and V are bf16; 1: e4m3 codes with a scale table (above) */
} attn_dims;

/* Bytes of one cached element: 2 (bf16) or 1 (e4m3). */
static inline size_t attn_kv_elem_bytes(const attn_dims *d) {
    return d->kv_fp8 ? 1 : 2;
}

/* log2 of the block size (the kernels address a slot's row with a shift and a mask), or -1 when it
 * is not a power of two in 1 … 2^30. */
static inline int attn_block_shift(const attn_dims *d) {
    int s = 0;
    while (s < 30 && (1 << s) < d->block_size) s++;
    return (1 << s) == d->block_size ? s : -1;
}

/* The step's sequences as one layer sees them (the arrays of step/batch.h, uploaded). */
typedef struct {
    int n_seqs;
    const int32_t *
        query_start; /* [n_seqs + 1]: sequence i owns token rows [query_start[i], query_start[i+1]) */
    const int32_t
        *start_pos; /* [n_seqs]: position of the first new token; its KV is already written */
    const int32_t *tables; /* [n_seqs][stride]: physical block of each logical block of this pool */
    int stride;
    const int32_t
        *table_first; /* [n_seqs]: logical block of tables[i][0] (swa_first), or NULL for 0 */
    int window;       /* 0 on full layers; keys visible, the current one included, on sliding */
} attn_seqs;

/* ---- decode ---- */

/* Most splits of one decode launch: the merge kernel holds every split's (max, sum) of a KV head's
 * 8 query heads in shared memory (16 KiB at 256). attn_decode_num_splits never returns more;
 * attn_decode refuses more with cudaErrorInvalidValue. */
enum { ATTN_DECODE_MAX_SPLITS = 256 };

/* Splits of the keys per sequence that keep the GPU busy for n_seqs decoding sequences whose longest
 * visible key range is max_keys (min(context, window) on sliding layers). 1 means no merge pass. The
 * result depends only on its arguments and the device, so a CUDA graph captured for a batch size can
 * use the value for its largest context. */
int attn_decode_num_splits(const attn_dims *d, int n_seqs, int max_keys);

/* fp32 workspace for num_splits > 1: partial (max, sum, output) of every (sequence, head, split). */
size_t attn_decode_workspace_bytes(const attn_dims *d, int n_seqs, int num_splits);

/* One query token per sequence (sequences with another count are left alone). 1 <= num_splits <=
 * ATTN_DECODE_MAX_SPLITS; with num_splits > 1 a merge kernel follows on the same stream and
 * `workspace` (attn_decode_workspace_bytes) must be given. Returns the launch's error (cudaSuccess
 * when both launches were queued). */
/* The fused merge: attn_decode then merges the splits inside the decode kernel (the last CTA of
 * each (sequence, KV head) to finish), one launch instead of two, the same output bits. It needs a
 * counter per (sequence, KV head), zero between launches: attn_decode_fused_init allocates them for
 * steps of up to max_seqs sequences on the current device (call it outside any graph capture; a
 * larger step uses the merge kernel), attn_decode_fused_free gives them back (the merge kernel
 * again). The runner turns it on with GPTOSS_ATTN_FUSED_MERGE=1 (off until measured). One device
 * per process. */
cudaError_t attn_decode_fused_init(int max_seqs, int n_kv_heads);
void attn_decode_fused_free(void);

cudaError_t attn_decode(const attn_dims *d, const attn_seqs *s, const uint16_t *q,
                        const void *k_cache, const void *v_cache, const float *kv_scales,
                        const float *sinks, float scale, uint16_t *out, int num_splits,
                        float *workspace, cudaStream_t stream);

/* ---- prefill / chunked prefill ---- */

enum { ATTN_PREFILL_TOKENS = 16 }; /* query tokens per tile (x 8 heads = 128 rows) */

/* Upper bound on the tiles of a step: n_tokens / ATTN_PREFILL_TOKENS + n_seqs. */
int attn_prefill_max_tiles(int n_tokens, int n_seqs);

/* Host: the work list of attn_prefill, pairs (sequence, first new-token offset of the tile), for the
 * sequences with at least min_new new tokens, longest key range first (so the big tiles start early and
 * the short ones fill the tail). query_start and start_pos are host copies of the step's arrays.
 * Writes 2 * count ints to work (capacity cap tiles) and returns count, or -1 when cap is too small. */
int attn_prefill_plan(int n_seqs, const int32_t *query_start, const int32_t *start_pos, int window,
                      int min_new, int32_t *work, int cap);

/* Which kernel runs the prefill of full layers: 1 (the default) the warpgroup-MMA (FA3-style)
 * kernel for a bf16 cache and the mma.sync one for FP8; 2 the warpgroup-MMA kernel for both; 0 the
 * mma.sync one for both (sliding layers always take it). attn_prefill_wgmma reads
 * GPTOSS_ATTN_WGMMA once; attn_prefill_set_wgmma (tests) sets it, or with on < 0 makes the next
 * call read the environment again. */
int attn_prefill_wgmma(void);
void attn_prefill_set_wgmma(int on);
/* Causal attention for the tiles of `work` (device copy of attn_prefill_plan's list, n_work tiles). */
cudaError_t attn_prefill(const attn_dims *d, const attn_seqs *s, const int32_t *work, int n_work,
                         const uint16_t *q, const void *k_cache, const void *v_cache,
                         const float *kv_scales, const float *sinks, float scale, uint16_t *out,
                         cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
