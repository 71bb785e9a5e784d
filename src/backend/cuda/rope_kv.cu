/* YaRN RoPE on q and k + the paged KV-cache write (see rope_kv.h for the math and the layout).
 *
 * One CTA per token, or 5 at small launches (below). A CTA's threads first compute the token's
 * half = 32 (cos, sin) pairs into shared memory (accurate sincosf, once per CTA instead of once per
 * head), then every thread takes groups of 4 rotation pairs: it loads x[i0..i0+3] and
 * x[i0+half..i0+half+3] (16-byte loads of each fp32 row, summed with the bias), rotates them in
 * fp32, rounds to bf16 and stores them to q_out (query heads) or to the cache at the token's slot
 * (KV heads). V is summed and rounded the same way, 8 values per thread. The kernel moves ~50 KiB
 * per token and does ~3k flops: it is a bandwidth kernel, and at decode batch sizes a latency one
 * (fusing it into the QKV GEMM's epilogue is the later step).
 *
 * FP8 cache (attn_dims.kv_fp8): the same items, and the same fp32 values, but K and V are stored as
 * e4m3 codes of x * inv_scale (the layer's scale table, attention.h): cvt.rn.satfinite (kv_fp8.cuh),
 * 4-byte stores for a rotation's 4 pairs, one 8-byte store per V chunk. The q rows stay bf16. */
#include "backend/cuda/rope_kv.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/rope_kv_row.cuh"

#include <cuda_runtime.h>
#include <stdint.h>

enum {
    ROPE_KV_THREADS = 128,
    ROPE_KV_SPREAD_BELOW = 256 /* launches of fewer tokens give a token several CTAs (see below) */
};

typedef struct {
    const float *qkv, *qkv_lo; /* fp32 input rows and (may be NULL) rows to add to them */
    const uint16_t *bias;      /* bf16 [qkv width] added to them (may be NULL) */
    const int32_t *positions, *slots;
    uint16_t *q_out, *k_cache, *v_cache;
    const float *kv_scales; /* FP8: the layer's scale table */
    int qkv_stride, n_heads, n_kv_heads, head_dim, bs_shift;
} rope_kv_args;

/* Four consecutive inputs x[i..i+3] of token t's row: hi (+ lo) (+ bias), summed in fp32 in that
 * order. */
static __device__ __forceinline__ void load4(const rope_kv_args &a, int t, int i, float x[4]) {
    const float4 h =
        *reinterpret_cast<const float4 *>(a.qkv + (size_t)t * (size_t)a.qkv_stride + i);
    x[0] = h.x, x[1] = h.y, x[2] = h.z, x[3] = h.w;
    if (a.qkv_lo) {
        const float4 l =
            *reinterpret_cast<const float4 *>(a.qkv_lo + (size_t)t * (size_t)a.qkv_stride + i);
        x[0] += l.x, x[1] += l.y, x[2] += l.z, x[3] += l.w;
    }
    if (a.bias) {
        const uint2 b = *reinterpret_cast<const uint2 *>(a.bias + i);
        x[0] += bf16x2_lo(b.x), x[1] += bf16x2_hi(b.x), x[2] += bf16x2_lo(b.y),
            x[3] += bf16x2_hi(b.y);
    }
}

/* Grid (n_tokens, ctas_per_token). A token's work is a list of items: (n_heads + n_kv_heads) *
 * half / 4 rotations of 4 pairs (query heads, then KV heads), then n_kv_heads * head_dim / 8 V
 * chunks: 640 items for gpt-oss. CTA y of a token takes items y * 128 + tid, then every
 * gridDim.y * 128th. An item is a few independent loads and two stores, and a thread's items run
 * one after another (the compiler cannot move the next item's loads above this one's stores), so
 * one CTA per token means 5 dependent rounds of loads: at one token that latency is the kernel's
 * whole time, not its bytes. Launches below ROPE_KV_SPREAD_BELOW tokens therefore give a token 5
 * CTAs, one item per thread; larger ones keep one CTA per token (CTAs enough to fill the GPU).
 * Each item does the same arithmetic either way: no sum spans two items, so the outputs are
 * bit-identical. */
template <bool FP8>
__global__ void __launch_bounds__(ROPE_KV_THREADS) rope_kv_kernel(rope_kv_args a, rope_kv_freq f) {
    pdl_prologue(); /* first: see pdl.cuh */
    __shared__ float s_cos[ROPE_KV_MAX_HALF], s_sin[ROPE_KV_MAX_HALF];
    const int t = blockIdx.x;
    const int pos = a.positions[t];
    const int half = f.half, hd = a.head_dim;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float c, sn;
        rope_cos_sin_at(pos, f.inv_freq[i], f.concentration, &c, &sn);
        s_cos[i] = c;
        s_sin[i] = sn;
    }
    __syncthreads();

    const int slot = a.slots[t];
    const int quads = half >> 2;
    const int n_rot = (a.n_heads + a.n_kv_heads) * quads;
    const int chunks = hd >> 3;
    const int n_items = n_rot + a.n_kv_heads * chunks;
    for (int it = blockIdx.y * blockDim.x + threadIdx.x; it < n_items;
         it += gridDim.y * blockDim.x) {
        if (it < n_rot) {
            /* Rotation of pairs (i0 + j, i0 + j + half), j < 4, of head h. The k heads follow the
             * q heads in the row, so head h's values start at h * head_dim for both. */
            const int h = it / quads, i0 = (it - h * quads) * 4;
            uint16_t *dst;
            if (h < a.n_heads)
                dst = a.q_out + ((size_t)t * (size_t)a.n_heads + (size_t)h) * (size_t)hd;
            else if (slot < 0)
                continue;
            else if (FP8) {
                /* K head j as e4m3 codes of x / scale_k[j]: two 4-byte stores */
                const int j = h - a.n_heads;
                uint8_t *d8 = reinterpret_cast<uint8_t *>(a.k_cache) +
                              kv_cache_offset(slot, j, a.n_kv_heads, hd, a.bs_shift);
                const float inv = a.kv_scales[2 * a.n_kv_heads + j];
                float x1[4], x2[4];
                load4(a, t, h * hd + i0, x1);
                load4(a, t, h * hd + i0 + half, x2);
                float o1[4], o2[4];
#pragma unroll
                for (int jj = 0; jj < 4; jj++)
                    rope_rotate(x1[jj], x2[jj], s_cos[i0 + jj], s_sin[i0 + jj], &o1[jj], &o2[jj]);
                *reinterpret_cast<uint32_t *>(d8 + i0) =
                    pack_e4m3x4(o1[0] * inv, o1[1] * inv, o1[2] * inv, o1[3] * inv);
                *reinterpret_cast<uint32_t *>(d8 + i0 + half) =
                    pack_e4m3x4(o2[0] * inv, o2[1] * inv, o2[2] * inv, o2[3] * inv);
                continue;
            } else
                dst =
                    a.k_cache + kv_cache_offset(slot, h - a.n_heads, a.n_kv_heads, hd, a.bs_shift);
            float x1[4], x2[4];
            load4(a, t, h * hd + i0, x1);
            load4(a, t, h * hd + i0 + half, x2);
            float o1[4], o2[4];
#pragma unroll
            for (int j = 0; j < 4; j++)
                rope_rotate(x1[j], x2[j], s_cos[i0 + j], s_sin[i0 + j], &o1[j], &o2[j]);
            *reinterpret_cast<uint2 *>(dst + i0) =
                make_uint2(pack_bf16x2(o1[0], o1[1]), pack_bf16x2(o1[2], o1[3]));
            *reinterpret_cast<uint2 *>(dst + i0 + half) =
                make_uint2(pack_bf16x2(o2[0], o2[1]), pack_bf16x2(o2[2], o2[3]));
        } else if (slot >= 0) {
            /* V chunk c of KV head j: as projected, 8 values, rounded to bf16. */
            const int v_item = it - n_rot, j = v_item / chunks, c = v_item - j * chunks;
            const int v0 = (a.n_heads + a.n_kv_heads) * hd;
            float x[8];
            load4(a, t, v0 + j * hd + c * 8, x);
            load4(a, t, v0 + j * hd + c * 8 + 4, x + 4);
            if (FP8) {
                const float inv = a.kv_scales[3 * a.n_kv_heads + j];
                *reinterpret_cast<uint2 *>(reinterpret_cast<uint8_t *>(a.v_cache) +
                                           kv_cache_offset(slot, j, a.n_kv_heads, hd, a.bs_shift) +
                                           c * 8) =
                    make_uint2(pack_e4m3x4(x[0] * inv, x[1] * inv, x[2] * inv, x[3] * inv),
                               pack_e4m3x4(x[4] * inv, x[5] * inv, x[6] * inv, x[7] * inv));
                continue;
            }
            const uint4 val = make_uint4(pack_bf16x2(x[0], x[1]), pack_bf16x2(x[2], x[3]),
                                         pack_bf16x2(x[4], x[5]), pack_bf16x2(x[6], x[7]));
            *reinterpret_cast<uint4 *>(
                a.v_cache + kv_cache_offset(slot, j, a.n_kv_heads, hd, a.bs_shift) + c * 8) = val;
        }
    }
}

extern "C" int rope_kv_freq_init(rope_kv_freq *f, const float *inv_freq, int half,
                                 float concentration) {
    if (half <= 0 || half > ROPE_KV_MAX_HALF) return -1;
    f->half = half;
    for (int i = 0; i < ROPE_KV_MAX_HALF; i++) f->inv_freq[i] = i < half ? inv_freq[i] : 0.0f;
    f->concentration = concentration;
    return 0;
}

extern "C" int rope_kv_slots(int n_seqs, const int32_t *query_start, const int32_t *start_pos,
                             const int32_t *tables, int stride, const int32_t *table_first,
                             int block_size, int32_t *slots) {
    int rc = 0;
    for (int i = 0; i < n_seqs; i++) {
        const int first = table_first ? table_first[i] : 0;
        for (int tok = query_start[i]; tok < query_start[i + 1]; tok++) {
            const int64_t p = (int64_t)start_pos[i] + (tok - query_start[i]);
            const int64_t lb = p / block_size - first;
            const int32_t b =
                lb >= 0 && lb < stride ? tables[(size_t)i * (size_t)stride + (size_t)lb] : -1;
            if (b < 0) rc = -1;
            slots[tok] = b < 0 ? -1 : (int32_t)(b * block_size + (int32_t)(p % block_size));
        }
    }
    return rc;
}

extern "C" cudaError_t rope_kv_launch_f32(const attn_dims *d, const rope_kv_freq *f,
                                          const float *qkv, const float *qkv_lo,
                                          const uint16_t *bias, int qkv_stride, int n_tokens,
                                          const int32_t *positions, const int32_t *slots,
                                          uint16_t *q_out, void *k_cache, void *v_cache,
                                          const float *kv_scales, cudaStream_t stream) {
    const int bs_shift = attn_block_shift(d);
    if (!qkv || n_tokens < 0 || bs_shift < 0 || d->head_dim != 2 * f->half || f->half % 4 != 0 ||
        f->half > ROPE_KV_MAX_HALF || qkv_stride % 8 != 0 ||
        qkv_stride < (d->n_heads + 2 * d->n_kv_heads) * d->head_dim || ((uintptr_t)qkv & 15) ||
        ((uintptr_t)qkv_lo & 15) || ((uintptr_t)bias & 7) || ((uintptr_t)q_out & 15) ||
        ((uintptr_t)k_cache & 15) || ((uintptr_t)v_cache & 15) ||
        (d->kv_fp8 != 0 && d->kv_fp8 != 1) || (d->kv_fp8 && !kv_scales))
        return cudaErrorInvalidValue;
    if (n_tokens == 0) return cudaSuccess;
    rope_kv_args a = {};
    a.qkv = qkv, a.qkv_lo = qkv_lo, a.bias = bias, a.positions = positions, a.slots = slots;
    a.q_out = q_out, a.k_cache = (uint16_t *)k_cache, a.v_cache = (uint16_t *)v_cache;
    a.kv_scales = kv_scales;
    a.qkv_stride = qkv_stride, a.n_heads = d->n_heads, a.n_kv_heads = d->n_kv_heads,
    a.head_dim = d->head_dim;
    a.bs_shift = bs_shift;
    /* Below ROPE_KV_SPREAD_BELOW tokens, enough CTAs per token for one item per thread. */
    const int items =
        (d->n_heads + d->n_kv_heads) * (f->half / 4) + d->n_kv_heads * (d->head_dim / 8);
    const int per_token =
        n_tokens < ROPE_KV_SPREAD_BELOW ? (items + ROPE_KV_THREADS - 1) / ROPE_KV_THREADS : 1;
    if (d->kv_fp8)
        return pdl_launch(rope_kv_kernel<true>, dim3(n_tokens, per_token), dim3(ROPE_KV_THREADS), 0,
                          stream, a, *f);
    return pdl_launch(rope_kv_kernel<false>, dim3(n_tokens, per_token), dim3(ROPE_KV_THREADS), 0,
                      stream, a, *f);
}
