/* gemv_mma.h's fused QKV forms: RoPE and the KV write in the epilogue (gemv_mma_rope), and the
 * attention norm in front of it (gemv_mma_norm_rope). The kernel is gemv_mma_kernel.cuh's. */
#include "backend/cuda/gemv_mma.h"
#include "backend/cuda/gemv_mma_kernel.cuh"

/* The row count the fused forms' W has: q, k and v heads of 64. */
static int gm_qkv_rows(const attn_dims *d) {
    return d ? (d->n_heads + 2 * d->n_kv_heads) * 64 : 0;
}

/* The fused forms' arguments: the product of W's (n_heads + 2 n_kv_heads) · 64 rows, and where
 * RoPE and the KV write put its results. */
static void gm_qkv_args(int M, int K, const uint16_t *W, const uint16_t *bias, const attn_dims *d,
                        const rope_kv_freq *f, const int32_t *positions, const int32_t *slots,
                        uint16_t *q_out, void *k_cache, void *v_cache, const float *kv_scales,
                        gm_args *a, gm_rope *r) {
    memset(a, 0, sizeof *a);
    a->W = W, a->bias = bias;
    a->M = M, a->K = K, a->N = gm_qkv_rows(d);
    memset(r, 0, sizeof *r);
    r->positions = positions, r->slots = slots, r->q_out = q_out;
    r->k_cache = (uint8_t *)k_cache, r->v_cache = (uint8_t *)v_cache, r->kv_scales = kv_scales;
    r->n_heads = d->n_heads, r->n_kv_heads = d->n_kv_heads;
    r->bs_shift = attn_block_shift(d);
    r->f = *f;
}

extern "C" int gemv_mma_rope_supported(int M, int K, int N, const attn_dims *d,
                                       const rope_kv_freq *f) {
    return d && f && d->head_dim == 64 && f->half == 32 && d->n_heads > 0 && d->n_kv_heads > 0 &&
           N == (d->n_heads + 2 * d->n_kv_heads) * 64 && attn_block_shift(d) >= 0 &&
           (d->kv_fp8 == 0 || d->kv_fp8 == 1) && gemv_mma_supported(M, K, N);
}

extern "C" cudaError_t gemv_mma_rope(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                     const uint16_t *W, const uint16_t *bias, const attn_dims *d,
                                     const rope_kv_freq *f, const int32_t *positions,
                                     const int32_t *slots, uint16_t *q_out, void *k_cache,
                                     void *v_cache, const float *kv_scales, cudaStream_t stream) {
    if (!x || !W || !positions || !slots || !q_out || !k_cache || !v_cache ||
        !gemv_mma_rope_supported(M, K, gm_qkv_rows(d), d, f) || (d->kv_fp8 && !kv_scales))
        return cudaErrorInvalidValue;
    gm_args a;
    gm_rope r;
    gm_qkv_args(M, K, W, bias, d, f, positions, slots, q_out, k_cache, v_cache, kv_scales, &a, &r);
    a.x = x, a.x_lo = x_lo;
    return d->kv_fp8 ? gm_launch<GM_ROPE_FP8>(a, r, stream) : gm_launch<GM_ROPE_BF16>(a, r, stream);
}

extern "C" int gemv_mma_norm_supported(int M, int K, int N, const attn_dims *d,
                                       const rope_kv_freq *f) {
    return M >= 1 && M <= GEMV_MMA_NORM_MAX_M && K % 8 == 0 && K / 8 <= 2 * 32 * GM_WARPS &&
           (size_t)M * K * 4 <= 48 * 1024 && gemv_mma_rope_supported(M, K, N, d, f);
}

extern "C" cudaError_t gemv_mma_norm_rope(const gemv_mma_norm_in *in, int M, int K,
                                          const uint16_t *W, const uint16_t *bias,
                                          const attn_dims *d, const rope_kv_freq *f,
                                          const int32_t *positions, const int32_t *slots,
                                          uint16_t *q_out, void *k_cache, void *v_cache,
                                          const float *kv_scales, cudaStream_t stream) {
    if (!in || !in->h || !in->slots || in->n_slots < 1 || !in->gain || !in->counter || !W ||
        !positions || !slots || !q_out || !k_cache || !v_cache ||
        !gemv_mma_norm_supported(M, K, gm_qkv_rows(d), d, f) || (d->kv_fp8 && !kv_scales))
        return cudaErrorInvalidValue;
    gm_args a;
    gm_rope r;
    gm_qkv_args(M, K, W, bias, d, f, positions, slots, q_out, k_cache, v_cache, kv_scales, &a, &r);
    gm_norm nm;
    nm.h = in->h, nm.slots = in->slots, nm.n_slots = in->n_slots, nm.gain = in->gain;
    nm.eps = in->eps, nm.counter = in->counter;
    const dim3 grid((unsigned)(a.N / 16)), block(GM_WARPS * 32);
    const size_t smem = (size_t)M * K * 4; /* hi and lo rows */
    return d->kv_fp8
               ? pdl_launch(gemv_mma_kernel<1, true, GM_ROPE_FP8, GM_U, GM_WARPS, GM_IN_NORM>, grid,
                            block, smem, stream, a, r, nm)
               : pdl_launch(gemv_mma_kernel<1, true, GM_ROPE_BF16, GM_U, GM_WARPS, GM_IN_NORM>,
                            grid, block, smem, stream, a, r, nm);
}
