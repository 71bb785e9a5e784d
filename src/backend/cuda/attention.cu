/* Attention kernels for gpt-oss on Hopper: decode (GQA, split-K) and prefill (flash-attention tiles).
 * The math and the KV layout are in attention.h; the CPU reference is cpu_sink_attention
 * (backend/cpu/ops.c), and tests/gpu/test_attention.cu holds the two side by side.
 *
 * ---- Tensor-core building block: mma.sync m16n8k16 (bf16 in, fp32 accumulate) ----
 * D[16x8] += A[16x16] B[16x8]. Each lane of the warp holds pieces of the tiles, with g = lane / 4 and
 * t = lane % 4 (the "group" and the "thread in group"):
 *   A: a0 = A[g][2t,2t+1]  a1 = A[g+8][2t,2t+1]  a2 = A[g][2t+8,2t+9]  a3 = A[g+8][2t+8,2t+9]
 *   B: b0 = B[2t,2t+1][g]  b1 = B[2t+8,2t+9][g]
 *   C: c0,c1 = C[g][2t,2t+1]  c2,c3 = C[g+8][2t,2t+1]
 * (each a/b register holds two bf16, the lower column/row in the low half). Tiles come from shared
 * memory through ldmatrix, which hands each lane exactly these pairs for up to four 8x8 matrices (the
 * .trans form hands out the transpose, which turns a row-major V into the column pairs an MMA needs).
 *
 * ---- Shared-memory tiles ----
 * A tile row is one key (or query row): head_dim = 64 bf16 = 128 bytes = 8 chunks of 16 bytes. Eight
 * rows that ldmatrix reads together would all hit the same 4 banks, so chunk c of row r is stored at
 * chunk position c ^ (r % 8) (an XOR swizzle): conflict-free for the 16-byte cp.async writes and for
 * ldmatrix. Global -> shared copies are cp.async (16 bytes, L2 only), several tiles in flight.
 *
 * ---- Softmax ----
 * Online (running max m, running sum l, rescaled accumulator) in base 2: scores are multiplied by
 * scale * log2(e) and exp2 is used; the sink becomes sink * log2(e). Every running max starts at the
 * sink, so it is never -inf (masked keys are -inf, exp2(-inf) = 0, and a fully masked tile changes
 * nothing), and exp2(sink - m) <= 1 when the sink finally joins the denominator, once. The FP8
 * decode kernel starts SINK_ROOM under the sink instead (its P is fp16; see there): finite still,
 * and exp2(sink - m) <= 2^SINK_ROOM. */
#include "backend/cuda/attention.h"
#include "base/env_switch.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/kv_fp8.cuh"
#include "backend/cuda/pdl.cuh"

#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#define HD        64  /* head_dim this file is specialised for */
#define GQA       8   /* query heads per KV head */
#define ROW_BYTES 128 /* one key's head_dim values in bf16 */
#define ROW8      64  /* ... and in e4m3 (the FP8 cache) */
#define LOG2E     1.4426950408889634f
#define SINK_ROOM 64.f /* FP8 decode: the running max starts this far (log2) under the sink */

/* Decode: 4 warps, each taking 16 keys of every 64-key chunk; 4 chunks (64 KiB) in the pipeline. */
enum {
    DEC_WARPS = 4,
    DEC_THREADS = DEC_WARPS * 32,
    DEC_CHUNK = 64,
    DEC_STAGES = 4,
    DEC_STAGE_BYTES = 2 * DEC_CHUNK * ROW_BYTES, /* K and V */
    DEC_SMEM = DEC_STAGES * DEC_STAGE_BYTES,
    DEC_OPAD = HD + 4, /* padded row of the end-of-CTA merge buffer */
    /* FP8 cache: chunks of half the bytes, 6 stages (48 KiB). Each FP8 byte costs the warps twice
     * the work of a bf16 byte (conversions, the same MMAs and softmax per key), so the kernel needs
     * more warps to hide the latency, not more bytes per CTA: with 8 stages (64 KiB, 3 CTAs an SM)
     * ncu found 71 % of DRAM, 0.76 eligible warps per scheduler, 18 % occupancy. Measured at 8k x
     * 64 on the H200 (bf16 253 µs): 8 stages 155 µs (1.63x), 6 stages 134 µs (1.89x, 4.0 TB/s),
     * 4 stages 138 µs (1.83x; 1.91x at batch 256 against 6's 1.82x). At batch 1 (8 CTAs) the
     * shallower pipe costs ~1.4 µs of 14 (bench/results/session3-2026-12-02-h200.md). */
    DEC_STAGES8 = 6,
    DEC_STAGE_BYTES8 = 2 * DEC_CHUNK * ROW8,
    MERGE_BATCH = 8 /* splits whose partial outputs the merge kernel loads at once */
};

/* Prefill: 8 warps x 16 rows = 128 query rows (16 tokens x 8 heads), 32-key tiles, 4 stages. (64-key
 * tiles need ~180 registers; at the 128 that two CTAs per SM allow they spilled, 32-key tiles do not.) */
enum {
    PF_WARPS = 8,
    PF_THREADS = PF_WARPS * 32,
    PF_ROWS = PF_WARPS * 16,
    PF_TOKENS = PF_ROWS / GQA,
    PF_KTILE = 32,
    PF_STAGES = 4,
    PF_Q_BYTES = PF_ROWS * ROW_BYTES,
    PF_STAGE_BYTES = 2 * PF_KTILE * ROW_BYTES,
    PF_SMEM = PF_Q_BYTES + PF_STAGES * PF_STAGE_BYTES,
    /* FP8 cache: the stages hold e4m3 tiles; one bf16 tile pair (the converted current tile) */
    PF_STAGE_BYTES8 = 2 * PF_KTILE * ROW8,
    PF_CVT_BYTES = 2 * PF_KTILE * ROW_BYTES,
    PF_SMEM8 = PF_Q_BYTES + PF_STAGES * PF_STAGE_BYTES8 + PF_CVT_BYTES
};
static constexpr int DEC_SMEM8 = DEC_STAGES8 * DEC_STAGE_BYTES8;
/* The pipeline's shared memory is reused at the end of the CTA: the warps' (m, l, O) merge, then
 * (fused merge) the splits' (m, l) pairs of the group's heads. */
static_assert(DEC_SMEM8 >= (2 + DEC_OPAD) * DEC_WARPS * GQA * 4 &&
                  DEC_SMEM8 >= GQA * ATTN_DECODE_MAX_SPLITS * 8,
              "the FP8 decode kernel's stages hold the end-of-CTA merge buffers");
static_assert((int)PF_TOKENS == (int)ATTN_PREFILL_TOKENS,
              "attention.h's tile size must match the kernel");

typedef struct {
    const int32_t *query_start, *start_pos, *tables, *table_first, *work;
    const uint16_t *q, *k_cache, *v_cache;
    const uint8_t *k8, *v8; /* the same caches as e4m3 bytes (FP8) */
    const float *kv_scales; /* FP8: the layer's scale table (attention.h) */
    const float *sinks;
    uint16_t *out;
    float *ws; /* decode partials: [n_seqs][n_heads][splits][HD] outputs, then [..][2] (max, sum) */
    unsigned int *counters; /* fused merge: [n_seqs][n_kv_heads] splits done; NULL: merge kernel */
    float scale_log2;
    int n_seqs, stride, window, n_heads, n_kv_heads, bs_shift, num_splits;
} attn_args;

/* ------------------------------------------------------------------------------------------------ */
/* PTX wrappers                                                                                       */

static __device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
static __device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
/* Transposes an 8x8 bf16 matrix held in the standard fragment layout (lane: row g, cols 2t, 2t+1). */
static __device__ __forceinline__ uint32_t movmatrix_trans(uint32_t x) {
    uint32_t y;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
    return y;
}
/* 2^x by the SFU (ex2.approx: ~2 ulp; inputs are <= 0 here, tiny results flush to 0, -inf gives 0). */
static __device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
static __device__ __forceinline__ float shfl_xor(float x, int m) {
    return __shfl_xor_sync(0xffffffffu, x, m);
}

/* Byte offset of 16-byte chunk c of row r in a swizzled [rows][128 B] tile. */
static __device__ __forceinline__ uint32_t swz(int r, int c) {
    return (uint32_t)(r * ROW_BYTES + ((c ^ (r & 7)) << 4));
}

/* ------------------------------------------------------------------------------------------------ */
/* Paged KV -> shared memory                                                                          */

/* Element offset of key `key` of KV head kvh, through the sequence's block table. */
static __device__ __forceinline__ size_t kv_offset(const attn_args &a, const int32_t *table,
                                                   int first, int kvh, int key) {
    const size_t block = (size_t)table[(key >> a.bs_shift) - first];
    const size_t row = (size_t)(key & ((1 << a.bs_shift) - 1));
    return (((block * (size_t)a.n_kv_heads + (size_t)kvh) << a.bs_shift) + row) * HD;
}

/* Copies keys [key0, key0 + NKEYS) of K and V into swizzled tiles at s_k / s_v; keys >= key_end are
 * not read (their rows become zeros, so a masked key can never bring a NaN into P.V). Every thread
 * issues NKEYS * 8 / NTHREADS copies of each. */
template <int NTHREADS, int NKEYS>
static __device__ __forceinline__ void load_kv_tile(const attn_args &a, const int32_t *table,
                                                    int first, int kvh, int key0, int key_end,
                                                    uint32_t s_k, uint32_t s_v) {
    static_assert((NKEYS * 8) % NTHREADS == 0, "tile copies must divide evenly");
#pragma unroll
    for (int i = 0; i < NKEYS * 8 / NTHREADS; i++) {
        const int idx = (int)threadIdx.x + i * NTHREADS;
        const int r = idx >> 3, c = idx & 7;
        const int key = key0 + r;
        const bool valid = key < key_end;
        const uint16_t *ks = a.k_cache, *vs = a.v_cache;
        if (valid) {
            const size_t off = kv_offset(a, table, first, kvh, key) + (size_t)c * 8;
            ks += off, vs += off;
        }
        cp_async16(s_k + swz(r, c), ks, valid ? 16 : 0);
        cp_async16(s_v + swz(r, c), vs, valid ? 16 : 0);
    }
}

/* ---- FP8 tiles ----
 * An e4m3 key row is 64 bytes, 4 chunks of 16. Tiles of such rows live in shared memory with a
 * swizzle chosen for the decode kernel's fragment reads (below): rows 2L and 2L+1 share the 128-byte
 * line L, the two 64-byte halves swapped when L is odd, and the chunks of a row XORed with 2 when
 * bit 1 of L is set. Then (1) 8 lanes reading 16 bytes each of rows 2L, 2L+1 (the K reads, and the
 * cp.async writes) touch one whole line; (2) 16 lanes reading 8 bytes of rows 2t (t = 0..3) at byte
 * offset 8g (g = 0..3, the V reads) hit 16 distinct 8-byte bank pairs. Both conflict-free. */
static __device__ __forceinline__ uint32_t swz8(int r, int c) {
    const int line = r >> 1, half = (r ^ line) & 1;
    return (uint32_t)(line * 128 + half * 64 + ((c ^ (((line >> 1) & 1) << 1)) << 4));
}

static __device__ __forceinline__ uint2 lds64(uint32_t addr) {
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr));
    return v;
}

/* load_kv_tile for an e4m3 cache: keys [key0, key0 + NKEYS) into swz8 tiles at s_k / s_v; keys
 * >= key_end become zeros. */
template <int NTHREADS, int NKEYS>
static __device__ __forceinline__ void load_kv_tile8(const attn_args &a, const int32_t *table,
                                                     int first, int kvh, int key0, int key_end,
                                                     uint32_t s_k, uint32_t s_v) {
    constexpr int PER = NKEYS * 4; /* 16-byte chunks of one tile */
    if constexpr (PER % NTHREADS == 0) {
        /* decode: a thread copies the same chunk of K and of V (one address computation) */
#pragma unroll
        for (int i = 0; i < PER / NTHREADS; i++) {
            const int idx = (int)threadIdx.x + i * NTHREADS;
            const int r = idx >> 2, c = idx & 3;
            const int key = key0 + r;
            const bool valid = key < key_end;
            const uint8_t *ks = a.k8, *vs = a.v8;
            if (valid) {
                const size_t off = kv_offset(a, table, first, kvh, key) + (size_t)c * 16; /* B */
                ks += off, vs += off;
            }
            cp_async16(s_k + swz8(r, c), ks, valid ? 16 : 0);
            cp_async16(s_v + swz8(r, c), vs, valid ? 16 : 0);
        }
    } else {
        /* prefill (fewer chunks than threads): the first PER threads copy K, the next PER V */
        static_assert((2 * PER) % NTHREADS == 0, "tile copies must divide evenly");
#pragma unroll
        for (int i = 0; i < 2 * PER / NTHREADS; i++) {
            const int idx = (int)threadIdx.x + i * NTHREADS;
            const bool is_v = idx >= PER;
            const int r = (idx - (is_v ? PER : 0)) >> 2, c = idx & 3;
            const int key = key0 + r;
            const bool valid = key < key_end;
            const uint8_t *src = is_v ? a.v8 : a.k8;
            if (valid) src += kv_offset(a, table, first, kvh, key) + (size_t)c * 16; /* bytes */
            cp_async16((is_v ? s_v : s_k) + swz8(r, c), src, valid ? 16 : 0);
        }
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Decode                                                                                             */
/*
 * Grid (n_kv_heads, n_seqs, num_splits), 128 threads. The CTA owns KV head j of one sequence and a
 * contiguous share of its 64-key chunks. The 8 query heads of the group are the N = 8 side of the MMA,
 * keys the M = 16 side, so nothing is padded:
 *   S^T[16 keys x 8 heads] = K[16 keys x 64] . Q^T[64 x 8 heads]      (4 MMAs, K from ldmatrix, Q^T
 *                                                                      fragments loaded once from global)
 *   O^T[64 x 8 heads]     += V^T[64 x 16 keys] . P^T[16 keys x 8 heads] (4 MMAs, V^T via ldmatrix.trans)
 * S^T's accumulator holds P^T transposed relative to the B operand the second product needs (lane has
 * keys g, g+8 of heads 2t, 2t+1; B wants keys 2t, 2t+1 of head g): one movmatrix.trans per 8x8 half
 * fixes that in registers. A lane's accumulator columns are heads 2t, 2t+1, the same as its score
 * columns, so the online-softmax rescale is lane-local; the per-head max over 16 keys is 3 shuffles.
 *
 * Warp w takes keys [16w, 16w+16) of every chunk and keeps its own (m, l, O^T); at the end the 4 warps
 * merge through shared memory. With one split the CTA adds the sink and writes bf16; otherwise it
 * writes its (m, l, O) and attn_decode_merge_kernel combines the splits (the sink joins there, once).
 * A split with no chunks writes (sink, 0, 0), which merges as nothing.
 *
 * FP8 (the template's FP8 = true): the same CTA, warps and softmax, with the MMAs in fp16 and the
 * e4m3 bytes turned into fp16 fragments in registers by cvt.rn.f16x2.e4m3x2 (kv_fp8.cuh: two codes
 * -> their exact fp16 values, one instruction), read straight from the shared tile with no
 * ldmatrix. The fragments need a different assignment of dimensions to lanes, which the sums allow:
 *   - S^T = K Q^T sums over the 64 dimensions, so any permutation applied to both K and Q gives the
 *     same scores. Lane (g, t) loads 16 bytes of key rows g and g+8: dimensions [16t, 16t+16); word
 *     kc of them (dims 16t + 4kc .. +3) supplies k-step kc's columns 2t, 2t+1 (dims +0, +1: the
 *     word's low half) and 2t+8, 2t+9 (dims +2, +3: its high half), one cvt each, no byte-permute.
 *     Q^T's B fragments are loaded with the same assignment (the words 8t + 2kc and 8t + 2kc + 1 of
 *     the head's row), times 2^-4 in fp16 (fp16 tops out at 65504; 2^-4 keeps any q below 10^6
 *     finite and loses nothing: bf16 -> fp16 is exact in range).
 *   - O^T = V^T P^T: the A rows are output dimensions, which we may also permute as long as the
 *     write-back undoes it: rows g and g+8 of m-tile mt are dimensions 8g + 2mt and 8g + 2mt + 1,
 *     so lane (g, t) needs 8 consecutive bytes (dims 8g .. 8g+7) of keys 2t, 2t+1, 2t+8, 2t+9: four
 *     8-byte shared loads; per A register one byte-permute pairs two keys' codes as the MMA wants,
 *     one cvt makes them fp16.
 * Scales, all moved by powers of two (exact): scores are (2^-4 q) . (k/scale_k), so the score scale
 * gets x 2^4 scale_k; P goes in as 2^14 p (see the loop) against fragments v/scale_v, so the output
 * sum is multiplied by 2^-14 scale_v before it leaves the CTA. */
static __device__ __forceinline__ float merge_sink(const attn_args &a, int kvh);
static __device__ __forceinline__ void decode_merge_group(const attn_args &a, int kvh, int seq,
                                                          int q_row, float2 *s_ml, float sink_raw);

template <bool FP8> __global__ void __launch_bounds__(DEC_THREADS) attn_decode_kernel(attn_args a) {
    constexpr int STAGES = FP8 ? DEC_STAGES8 : DEC_STAGES;
    constexpr int STAGE_BYTES = FP8 ? DEC_STAGE_BYTES8 : DEC_STAGE_BYTES;
    constexpr int V_OFF = FP8 ? DEC_CHUNK * ROW8 : DEC_CHUNK * ROW_BYTES; /* V tile in a stage */
    pdl_prologue();                                                       /* first: see pdl.cuh */
    extern __shared__ __align__(128) unsigned char smem[];
    const int kvh = blockIdx.x, seq = blockIdx.y, split = blockIdx.z;
    const int q_row = a.query_start[seq];
    if (a.query_start[seq + 1] - q_row != 1) return; /* not a decode sequence: uniform exit */
    const int pos = a.start_pos[seq];
    const int k_lo = a.window > 0 ? max(0, pos - a.window + 1) : 0;
    const int key_end = pos + 1;
    const int n_chunks = (key_end - k_lo + DEC_CHUNK - 1) / DEC_CHUNK;
    const int per_split = (n_chunks + a.num_splits - 1) / a.num_splits;
    const int c_begin = min(n_chunks, split * per_split);
    const int n_my = min(n_chunks, c_begin + per_split) - c_begin;
    const int32_t *table = a.tables + (size_t)seq * (size_t)a.stride;
    const int first = a.table_first ? a.table_first[seq] : 0;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t s_base = smem_u32(smem);

    /* Start the first chunks' copies before anything else. */
#pragma unroll
    for (int i = 0; i < STAGES - 1; i++) {
        if (i < n_my) {
            const uint32_t sk = s_base + i * STAGE_BYTES;
            if constexpr (FP8)
                load_kv_tile8<DEC_THREADS, DEC_CHUNK>(a, table, first, kvh,
                                                      k_lo + (c_begin + i) * DEC_CHUNK, key_end, sk,
                                                      sk + V_OFF);
            else
                load_kv_tile<DEC_THREADS, DEC_CHUNK>(a, table, first, kvh,
                                                     k_lo + (c_begin + i) * DEC_CHUNK, key_end, sk,
                                                     sk + DEC_CHUNK * ROW_BYTES);
        }
        cp_async_commit();
    }

    /* Q^T as B fragments: b0 = Q[head g][16kc + 2t, +1], b1 = Q[head g][16kc + 8 + 2t, +1]. */
    const uint32_t *qg = reinterpret_cast<const uint32_t *>(
        a.q + ((size_t)q_row * (size_t)a.n_heads + (size_t)kvh * GQA + (size_t)g) * HD);
    uint32_t qb[4][2];
    if constexpr (FP8) {
        /* fp16 x 2^-4, dims 16t + 4kc + {0,1} and {2,3} (the permutation above) */
#pragma unroll
        for (int kc = 0; kc < 4; kc++) {
            const uint32_t w0 = qg[8 * t + 2 * kc], w1 = qg[8 * t + 2 * kc + 1];
            qb[kc][0] = pack_f16x2(bf16x2_lo(w0) * 0.0625f, bf16x2_hi(w0) * 0.0625f);
            qb[kc][1] = pack_f16x2(bf16x2_lo(w1) * 0.0625f, bf16x2_hi(w1) * 0.0625f);
        }
    } else {
#pragma unroll
        for (int kc = 0; kc < 4; kc++) qb[kc][0] = qg[kc * 8 + t], qb[kc][1] = qg[kc * 8 + 4 + t];
    }

    /* FP8: the MMAs give 2^-4 q . k/scale_k */
    const float sl2 = FP8 ? a.scale_log2 * a.kv_scales[kvh] * 16.f : a.scale_log2;
    /* The running max starts at the sink (heads 2t, 2t+1); with an FP8 cache SINK_ROOM under it, so
     * that P, in fp16, stays in range for a head whose keys all sit far under a dominant sink. */
    const float room = FP8 ? SINK_ROOM : 0.f;
    float m0 = a.sinks[kvh * GQA + 2 * t] * LOG2E - room,
          m1 = a.sinks[kvh * GQA + 2 * t + 1] * LOG2E - room;
    float l0 = 0.f, l1 = 0.f;
    float acc[4][4];
#pragma unroll
    for (int mt = 0; mt < 4; mt++) acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;

    for (int i = 0; i < n_my; i++) {
        cp_async_wait<STAGES - 2>(); /* this thread's copies of chunk i are done ... */
        __syncthreads();             /* ... and everyone's; stage (i-1) % STAGES is free again */
        {
            const int nx = i + STAGES - 1;
            if (nx < n_my) {
                const uint32_t sk = s_base + (nx % STAGES) * STAGE_BYTES;
                if constexpr (FP8)
                    load_kv_tile8<DEC_THREADS, DEC_CHUNK>(a, table, first, kvh,
                                                          k_lo + (c_begin + nx) * DEC_CHUNK,
                                                          key_end, sk, sk + V_OFF);
                else
                    load_kv_tile<DEC_THREADS, DEC_CHUNK>(a, table, first, kvh,
                                                         k_lo + (c_begin + nx) * DEC_CHUNK, key_end,
                                                         sk, sk + DEC_CHUNK * ROW_BYTES);
            }
            cp_async_commit();
        }
        const uint32_t sk = s_base + (i % STAGES) * STAGE_BYTES, sv = sk + V_OFF;
        const int key_w = k_lo + (c_begin + i) * DEC_CHUNK + warp * 16; /* this warp's first key */

        /* S^T = K Q^T: lane gets s0,s1 = (key g; heads 2t, 2t+1), s2,s3 = (key g+8; same heads). */
        float s[4] = {0.f, 0.f, 0.f, 0.f};
        if constexpr (FP8) {
            const uint4 x = lds128(sk + swz8(warp * 16 + g, t)),
                        y = lds128(sk + swz8(warp * 16 + g + 8, t));
            const uint32_t xw[4] = {x.x, x.y, x.z, x.w}, yw[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
            for (int kc = 0; kc < 4; kc++) {
                const uint32_t ka[4] = {
                    e4m3_pick_f16x2<0, 1>(xw[kc], xw[kc]), e4m3_pick_f16x2<0, 1>(yw[kc], yw[kc]),
                    e4m3_pick_f16x2<2, 3>(xw[kc], xw[kc]), e4m3_pick_f16x2<2, 3>(yw[kc], yw[kc])};
                mma_f16_16816(s, ka, qb[kc][0], qb[kc][1]);
            }
        } else {
#pragma unroll
            for (int kc = 0; kc < 4; kc++) {
                uint32_t ka[4];
                ldmatrix_x4(ka, sk + swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                         kc * 2 + (lane >> 4)));
                mma_bf16_16816(s, ka, qb[kc][0], qb[kc][1]);
            }
        }
        if (key_w + g >= key_end) s[0] = s[1] = -INFINITY;
        if (key_w + g + 8 >= key_end) s[2] = s[3] = -INFINITY;

        /* Online softmax per head: max over the warp's 16 keys (lanes with the same t). */
        float mx0 = fmaxf(s[0], s[2]) * sl2, mx1 = fmaxf(s[1], s[3]) * sl2;
#pragma unroll
        for (int o = 4; o < 32; o <<= 1)
            mx0 = fmaxf(mx0, shfl_xor(mx0, o)), mx1 = fmaxf(mx1, shfl_xor(mx1, o));
        const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
        const float corr0 = fast_exp2(m0 - mn0), corr1 = fast_exp2(m1 - mn1);
        m0 = mn0, m1 = mn1;
        const float p0 = fast_exp2(fmaf(s[0], sl2, -mn0)), p1 = fast_exp2(fmaf(s[1], sl2, -mn1));
        const float p2 = fast_exp2(fmaf(s[2], sl2, -mn0)), p3 = fast_exp2(fmaf(s[3], sl2, -mn1));
        l0 = l0 * corr0 + p0 + p2;
        l1 = l1 * corr1 + p1 + p3;
#pragma unroll
        for (int mt = 0; mt < 4; mt++)
            acc[mt][0] *= corr0, acc[mt][1] *= corr1, acc[mt][2] *= corr0, acc[mt][3] *= corr1;

        if constexpr (FP8) {
            /* P^T in fp16 (p <= 1: fp16 keeps 11 bits where bf16 keeps 8), times 2^14 (taken back
             * with the V scale at the end). p is relative to a running max that starts SINK_ROOM
             * (log2 units) under the sink. Started at the sink, a head whose keys sit far under a
             * dominant sink had its p below fp16's normal range (6.1e-5): 14 nats under came out
             * as 0, and ~24 under lost 3 % to fp16's subnormal spacing (gpu_test_attention, ctx 1,
             * a random seed). Now p keeps fp16's 11 bits unless every key of the head is more
             * than 2^(SINK_ROOM + 28) under its sink, a head whose output is nothing. */
            const float P16 = 16384.f;
            const uint32_t pb0 = movmatrix_trans(pack_f16x2(p0 * P16, p1 * P16)),
                           pb1 = movmatrix_trans(pack_f16x2(p2 * P16, p3 * P16));
            /* V bytes: dims 8g .. 8g+7 of keys 2t, 2t+1, 2t+8, 2t+9 of the warp's 16. */
            const int r0 = warp * 16 + 2 * t;
            const uint32_t vo = (uint32_t)(g & 1) * 8; /* byte 8g: chunk g/2, half g%2 */
            const uint2 v0 = lds64(sv + swz8(r0, g >> 1) + vo),
                        v1 = lds64(sv + swz8(r0 + 1, g >> 1) + vo),
                        v2 = lds64(sv + swz8(r0 + 8, g >> 1) + vo),
                        v3 = lds64(sv + swz8(r0 + 9, g >> 1) + vo);
            /* m-tile mt: rows g, g+8 = dims 8g + 2mt, 8g + 2mt + 1 = bytes 2mt, 2mt+1 of the 8. */
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                const uint32_t x0 = mt < 2 ? v0.x : v0.y, x1 = mt < 2 ? v1.x : v1.y;
                const uint32_t x2 = mt < 2 ? v2.x : v2.y, x3 = mt < 2 ? v3.x : v3.y;
                uint32_t va[4];
                if ((mt & 1) == 0) {
                    va[0] = e4m3_pick_f16x2<0, 4>(x0, x1), va[1] = e4m3_pick_f16x2<1, 5>(x0, x1);
                    va[2] = e4m3_pick_f16x2<0, 4>(x2, x3), va[3] = e4m3_pick_f16x2<1, 5>(x2, x3);
                } else {
                    va[0] = e4m3_pick_f16x2<2, 6>(x0, x1), va[1] = e4m3_pick_f16x2<3, 7>(x0, x1);
                    va[2] = e4m3_pick_f16x2<2, 6>(x2, x3), va[3] = e4m3_pick_f16x2<3, 7>(x2, x3);
                }
                mma_f16_16816(acc[mt], va, pb0, pb1);
            }
        } else {
            /* P^T as the B operand: transpose the two 8x8 halves (keys 0-7 and 8-15) in registers. */
            const uint32_t pb0 = movmatrix_trans(pack_bf16x2(p0, p1)),
                           pb1 = movmatrix_trans(pack_bf16x2(p2, p3));

            /* O^T += V^T P^T: m-tile mt covers dims [16mt, 16mt+16). ldmatrix.trans matrices: (keys
             * 0-7, dims +0), (keys 0-7, dims +8), (keys 8-15, dims +0), (keys 8-15, dims +8). */
#pragma unroll
            for (int mt = 0; mt < 4; mt++) {
                uint32_t va[4];
                const int j = lane >> 3;
                ldmatrix_x4_trans(
                    va, sv + swz(warp * 16 + (lane & 7) + (j >> 1) * 8, mt * 2 + (j & 1)));
                mma_bf16_16816(acc[mt], va, pb0, pb1);
            }
        }
    }
    cp_async_wait<0>();
    __syncthreads(); /* the pipeline buffers become the merge buffer */

    /* Merge the 4 warps: per head, M = max m_w, L = sum l_w 2^(m_w - M), O = sum O_w 2^(m_w - M). */
#pragma unroll
    for (int o = 4; o < 32; o <<= 1) l0 += shfl_xor(l0, o), l1 += shfl_xor(l1, o);
    float *s_m = reinterpret_cast<float *>(smem); /* [DEC_WARPS][GQA] */
    float *s_l = s_m + DEC_WARPS * GQA;           /* [DEC_WARPS][GQA] */
    float *s_o = s_l + DEC_WARPS * GQA;           /* [DEC_WARPS][GQA][DEC_OPAD] */
    if (g == 0) {
        s_m[warp * GQA + 2 * t] = m0, s_m[warp * GQA + 2 * t + 1] = m1;
        s_l[warp * GQA + 2 * t] = l0, s_l[warp * GQA + 2 * t + 1] = l1;
    }
    float *ow = s_o + warp * GQA * DEC_OPAD;
#pragma unroll
    for (int mt = 0; mt < 4; mt++) {
        /* accumulator rows g and g+8: dims 16mt + g, +8 (bf16) or 8g + 2mt, +1 (FP8) */
        const int d_a = FP8 ? 8 * g + 2 * mt : mt * 16 + g, d_b = FP8 ? d_a + 1 : d_a + 8;
        ow[(2 * t) * DEC_OPAD + d_a] = acc[mt][0];
        ow[(2 * t + 1) * DEC_OPAD + d_a] = acc[mt][1];
        ow[(2 * t) * DEC_OPAD + d_b] = acc[mt][2];
        ow[(2 * t + 1) * DEC_OPAD + d_b] = acc[mt][3];
    }
    __syncthreads();

    const int h = threadIdx.x >> 4, d0 = (threadIdx.x & 15) * 4; /* 8 heads x 16 threads x 4 dims */
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, s_m[w * GQA + h]);
    float L = 0.f, o4[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int w = 0; w < DEC_WARPS; w++) {
        const float f = fast_exp2(s_m[w * GQA + h] - M);
        L += f * s_l[w * GQA + h];
#pragma unroll
        for (int j = 0; j < 4; j++) o4[j] += f * s_o[(w * GQA + h) * DEC_OPAD + d0 + j];
    }
    if constexpr (FP8) {
        /* scale_v (V's fp16 fragments are v/scale_v), 2^-14 (P's factor) */
        const float vmul = a.kv_scales[a.n_kv_heads + kvh] * (1.f / 16384.f);
#pragma unroll
        for (int j = 0; j < 4; j++) o4[j] *= vmul;
    }
    const int head = kvh * GQA + h;
    if (a.num_splits == 1) {
        /* M >= the sink - room: every warp's max started there; 2^(sink - M) <= 2^SINK_ROOM */
        L += fast_exp2(a.sinks[head] * LOG2E - M);
        const float inv = 1.f / L;
        *reinterpret_cast<uint2 *>(a.out + ((size_t)q_row * (size_t)a.n_heads + (size_t)head) * HD +
                                   d0) = make_uint2(pack_bf16x2(o4[0] * inv, o4[1] * inv),
                                                    pack_bf16x2(o4[2] * inv, o4[3] * inv));
    } else {
        const size_t part =
            ((size_t)seq * (size_t)a.n_heads + (size_t)head) * (size_t)a.num_splits + (size_t)split;
        *reinterpret_cast<float4 *>(a.ws + part * HD + d0) =
            make_float4(o4[0], o4[1], o4[2], o4[3]);
        if (d0 == 0) {
            float *ml =
                a.ws + (size_t)a.n_seqs * (size_t)a.n_heads * (size_t)a.num_splits * HD + part * 2;
            ml[0] = M, ml[1] = L;
        }
        if (a.counters) {
            /* The fused merge: the last of the (sequence, KV head)'s splits to finish merges them
             * all, as attn_decode_merge_kernel would (the same function, the same bits), and puts
             * the counter back to 0 for the next launch. Every thread's partial is fenced before the
             * count, and the count before the last CTA reads the others' partials (from L2). */
            __shared__ int s_last;
            __threadfence();
            __syncthreads();
            unsigned int *count = a.counters + (size_t)seq * (size_t)a.n_kv_heads + (size_t)kvh;
            if (threadIdx.x == 0) s_last = atomicAdd(count, 1u) == (unsigned int)(a.num_splits - 1);
            __syncthreads();
            if (!s_last) return;
            __threadfence();
            decode_merge_group(a, kvh, seq, q_row, reinterpret_cast<float2 *>(smem),
                               merge_sink(a, kvh));
            if (threadIdx.x == 0) *count = 0u;
        }
    }
}

/* Grid (n_kv_heads, n_seqs), 128 threads; thread tid has head tid / 16 of the group, 4 of its dims.
 *   out = sum_s O_s 2^(m_s - M) / (2^(sink - M) + sum_s l_s 2^(m_s - M)),  M = max(sink, max_s m_s)
 * At batch 1 this kernel is pure latency (8 CTAs, a few KiB), so what counts is how many dependent
 * round trips to memory a thread makes. Reading split after split costs S of them (~9.5 us at
 * S = 16). Instead:
 *   1. the (m, l) pairs of the group's 8 heads x S splits, contiguous in the workspace, go to
 *      shared memory in one parallel read (one or a few independent 8-byte loads per thread);
 *   2. the partial outputs are read MERGE_BATCH splits at a time, all loads of a batch issued
 *      before the first is used: ceil(S / MERGE_BATCH) round trips instead of S.
 * The arithmetic is the one-split-at-a-time loop's, in the same order: M = fmaxf over sink, m_0,
 * ..., m_S-1 (a max: exact in any order, and here even the order is kept), then L and o4
 * accumulate split 0, 1, ..., S-1 with the same expressions: the output is bit-identical to the
 * old loop's. */
/* The merge of KV head kvh's 8 heads of sequence seq (q_row its query row), by all DEC_THREADS
 * threads of a CTA; s_ml: room for GQA * ATTN_DECODE_MAX_SPLITS pairs in shared memory. The loads of
 * the partials bypass L1 (__ldcg): in the fused merge other CTAs wrote them an instant ago.
 * sink_raw: a.sinks[kvh * GQA + threadIdx.x / 16], read by the caller first (merge_sink): model
 * memory, which leaves L2 between steps, so read here, after the (m, l) pairs and the barrier, it
 * was one more DRAM round trip in a kernel that is nothing but round trips at batch 1. */
static __device__ __forceinline__ float merge_sink(const attn_args &a, int kvh) {
    return __ldg(a.sinks + kvh * GQA + (threadIdx.x >> 4));
}
static __device__ __forceinline__ void decode_merge_group(const attn_args &a, int kvh, int seq,
                                                          int q_row, float2 *s_ml, float sink_raw) {
    const int h = threadIdx.x >> 4, d0 = (threadIdx.x & 15) * 4;
    const int head = kvh * GQA + h, S = a.num_splits;
    const size_t part0 = ((size_t)seq * (size_t)a.n_heads + (size_t)head) * (size_t)S;

    /* 1. (m, l) of splits 0..S-1 of heads kvh*8 .. kvh*8+7: GQA * S consecutive pairs. */
    const float2 *ml_group = reinterpret_cast<const float2 *>(
        a.ws + (size_t)a.n_seqs * (size_t)a.n_heads * (size_t)S * HD +
        ((size_t)seq * (size_t)a.n_heads + (size_t)kvh * GQA) * (size_t)S * 2);
#pragma unroll 4
    for (int i = threadIdx.x; i < GQA * S; i += DEC_THREADS) s_ml[i] = __ldcg(ml_group + i);
    __syncthreads();
    const float2 *ml = s_ml + h * S; /* this thread's head */

    const float sink = sink_raw * LOG2E;
    float M = sink;
    for (int s = 0; s < S; s++) M = fmaxf(M, ml[s].x);

    /* 2. Batches of MERGE_BATCH splits: loads first (independent, all in flight), then the same
     * per-split update as a one-by-one loop, split order kept. S >= 2 here (one split has no merge). */
    float L = fast_exp2(sink - M), o4[4] = {0.f, 0.f, 0.f, 0.f};
    const float *o_part = a.ws + part0 * HD + d0;
    for (int s0 = 0; s0 < S; s0 += MERGE_BATCH) {
        float4 v[MERGE_BATCH];
#pragma unroll
        for (int u = 0; u < MERGE_BATCH; u++) /* past S: split S - 1 again, not used; no branch */
            v[u] =
                __ldcg(reinterpret_cast<const float4 *>(o_part + (size_t)min(s0 + u, S - 1) * HD));
#pragma unroll
        for (int u = 0; u < MERGE_BATCH; u++) {
            if (s0 + u < S) {
                const float f = fast_exp2(ml[s0 + u].x - M);
                L += f * ml[s0 + u].y;
                o4[0] += f * v[u].x, o4[1] += f * v[u].y, o4[2] += f * v[u].z, o4[3] += f * v[u].w;
            }
        }
    }
    const float inv = 1.f / L;
    *reinterpret_cast<uint2 *>(a.out + ((size_t)q_row * (size_t)a.n_heads + (size_t)head) * HD +
                               d0) =
        make_uint2(pack_bf16x2(o4[0] * inv, o4[1] * inv), pack_bf16x2(o4[2] * inv, o4[3] * inv));
}

__global__ void __launch_bounds__(DEC_THREADS) attn_decode_merge_kernel(attn_args a) {
    const int kvh = blockIdx.x, seq = blockIdx.y;
    const float sink = merge_sink(a, kvh); /* model memory: before the wait (pdl.cuh) */
    pdl_prologue();                        /* first, but for the sink: see pdl.cuh */
    __shared__ float2 s_ml[GQA * ATTN_DECODE_MAX_SPLITS]; /* [head of the group][split]: (m, l) */
    const int q_row = a.query_start[seq];
    if (a.query_start[seq + 1] - q_row != 1) return; /* uniform per CTA: before any barrier */
    decode_merge_group(a, kvh, seq, q_row, s_ml, sink);
}

/* 16 e4m3 codes (chunk c of a 64-byte key row r: dims 16c .. 16c + 15) stored as their exact bf16
 * values into the swizzled bf16 tile at dst: bytes 0-7 -> bf16 chunk 2c, bytes 8-15 -> 2c + 1. */
static __device__ __forceinline__ void store_e4m3_chunk_bf16(uint4 x, uint32_t dst, int r, int c) {
    const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
    for (int hh = 0; hh < 2; hh++) {
        const uint32_t o0 = e4m3x2_to_bf16x2_exact(w[2 * hh] & 0xffffu),
                       o1 = e4m3x2_to_bf16x2_exact(w[2 * hh] >> 16),
                       o2 = e4m3x2_to_bf16x2_exact(w[2 * hh + 1] & 0xffffu),
                       o3 = e4m3x2_to_bf16x2_exact(w[2 * hh + 1] >> 16);
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(dst + swz(r, 2 * c + hh)),
                     "r"(o0), "r"(o1), "r"(o2), "r"(o3)
                     : "memory");
    }
}

/* Chunk c of query row r of a prefill tile (token r / 8 of the tile, whose first token is row
 * q_tok0 of q; head 8 kvh + r % 8) copied into the swizzled Q tile at s_q; rows of tokens past
 * n_valid become zeros. */
static __device__ __forceinline__ void load_q_chunk(const attn_args &a, int q_tok0, int kvh,
                                                    int n_valid, uint32_t s_q, int r, int c) {
    const int tt = r >> 3;
    const bool valid = tt < n_valid;
    const uint16_t *src = a.q;
    if (valid)
        src +=
            ((size_t)(q_tok0 + tt) * (size_t)a.n_heads + (size_t)kvh * GQA + (size_t)(r & 7)) * HD +
            (size_t)c * 8;
    cp_async16(s_q + swz(r, c), src, valid ? 16 : 0);
}

/* The end of a prefill tile for lane (g, t) of warp w: the row sums were per lane, so the quad adds
 * them; the sink joins once; the rows are normalised (times vmul, the FP8 cache's V scale) and
 * stored as bf16 pairs: row a = (token 2w, head g), row b = (token 2w + 1, head g). o holds the
 * lane's accumulators of both rows in the m16n8 layout: o[4 nt + 0, 1] row a, o[4 nt + 2, 3] row
 * b, dims 8 nt + 2t, + 1. */
static __device__ __forceinline__ void store_prefill_rows(const attn_args &a, int q_tok0,
                                                          int n_valid, int kvh, int w, int g, int t,
                                                          float l_a, float l_b, float m_a,
                                                          float m_b, float sink, float vmul,
                                                          const float *o) {
    l_a += shfl_xor(l_a, 1), l_b += shfl_xor(l_b, 1);
    l_a += shfl_xor(l_a, 2), l_b += shfl_xor(l_b, 2);
    const float inv_a = vmul / (l_a + fast_exp2(sink - m_a)),
                inv_b = vmul / (l_b + fast_exp2(sink - m_b));
    const int head = kvh * GQA + g;
    if (2 * w < n_valid) {
        uint16_t *out =
            a.out + ((size_t)(q_tok0 + 2 * w) * (size_t)a.n_heads + (size_t)head) * HD + 2 * t;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            *reinterpret_cast<uint32_t *>(out + nt * 8) =
                pack_bf16x2(o[4 * nt] * inv_a, o[4 * nt + 1] * inv_a);
    }
    if (2 * w + 1 < n_valid) {
        uint16_t *out =
            a.out + ((size_t)(q_tok0 + 2 * w + 1) * (size_t)a.n_heads + (size_t)head) * HD + 2 * t;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            *reinterpret_cast<uint32_t *>(out + nt * 8) =
                pack_bf16x2(o[4 * nt + 2] * inv_b, o[4 * nt + 3] * inv_b);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* Prefill                                                                                            */
/*
 * Grid (n_work, n_kv_heads), 256 threads. A tile is 16 consecutive new tokens of one sequence times the
 * 8 query heads of KV head j: 128 query rows, row r = (token r / 8, head r % 8), so every K/V tile read
 * serves all 8 heads of the group and a decode-like sequence still fills 8 rows. Warp w owns rows
 * [16w, 16w+16): tokens 2w and 2w+1; lane (g, t) holds row g (token 2w, head g) and row g+8 (token
 * 2w+1, head g) — one head per lane, so one sink.
 *
 * The keys run from the first token's window start k_first (0 on full layers) to the last token's
 * position, in tiles of 32 keys (FA2 shape, mma.sync), per warp:
 *   S[16 rows x 32 keys] = Q[16 x 64] K^T       (Q fragments in registers, K^T via ldmatrix: 16 MMAs)
 *   online softmax per row (a row's 4 lanes share a max through 2 shuffles)
 *   O[16 x 64 dims]     += P[16 x 32 keys] V     (S's accumulators are P's A fragments as they stand;
 *                                                 V via ldmatrix.trans: 16 MMAs)
 * Because a query tile spans only 16 positions, only the last one or two key tiles meet the causal
 * diagonal, and on sliding layers only the first one or two meet the window's start: those "edge"
 * tiles are masked per element, the others not at all. Tiles entirely outside every row's window are
 * never loaded (the loop starts at k_first and ends at the last token's position).
 *
 * FP8 (FP8 = true): the pipeline stages hold e4m3 tiles (half the bytes); after a tile lands, the
 * CTA converts it once, exactly, into a bf16 tile pair in the layout above (one 16-byte chunk of
 * codes per thread -> two swizzled 16-byte bf16 chunks), and the MMAs run on it unchanged. The
 * values are the unscaled e4m3 values (exact in bf16): the K scale joins the score scale, the V
 * scale the final normalisation. The conversion is amortised over the tile's 128 query rows, so
 * FP8 MMA would buy little here: prefill is compute-bound and its Q and P would have to be e4m3. */
template <bool FP8>
__global__ void __launch_bounds__(PF_THREADS, 2) attn_prefill_kernel(attn_args a) {
    constexpr int STAGE_BYTES = FP8 ? PF_STAGE_BYTES8 : PF_STAGE_BYTES;
    constexpr int V_OFF = FP8 ? PF_KTILE * ROW8 : PF_KTILE * ROW_BYTES;
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ __align__(128) unsigned char smem[];
    const int kvh = blockIdx.y;
    const int seq = a.work[2 * blockIdx.x], tok0 = a.work[2 * blockIdx.x + 1];
    const int qs = a.query_start[seq], n_new = a.query_start[seq + 1] - qs;
    const int n_valid = min(PF_TOKENS, n_new - tok0);
    if (n_valid <= 0) return;
    const int W = a.window;
    const int pos0 = a.start_pos[seq] + tok0, pos_last = pos0 + n_valid - 1;
    const int k_first = W > 0 ? max(0, pos0 - W + 1) : 0;
    const int key_end = pos_last + 1;
    const int n_tiles = (key_end - k_first + PF_KTILE - 1) / PF_KTILE;
    const int32_t *table = a.tables + (size_t)seq * (size_t)a.stride;
    const int first = a.table_first ? a.table_first[seq] : 0;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint32_t s_q = smem_u32(smem), s_kv = s_q + PF_Q_BYTES;

    /* Q tile (rows of tokens past n_valid are zeros), then the first key tiles. */
#pragma unroll
    for (int i = 0; i < PF_ROWS * 8 / PF_THREADS; i++) {
        const int idx = (int)threadIdx.x + i * PF_THREADS;
        load_q_chunk(a, qs + tok0, kvh, n_valid, s_q, idx >> 3, idx & 7);
    }
    cp_async_commit();
#pragma unroll
    for (int i = 0; i < PF_STAGES - 1; i++) {
        if (i < n_tiles) {
            const uint32_t sk = s_kv + i * STAGE_BYTES;
            if constexpr (FP8)
                load_kv_tile8<PF_THREADS, PF_KTILE>(a, table, first, kvh, k_first + i * PF_KTILE,
                                                    key_end, sk, sk + V_OFF);
            else
                load_kv_tile<PF_THREADS, PF_KTILE>(a, table, first, kvh, k_first + i * PF_KTILE,
                                                   key_end, sk, sk + PF_KTILE * ROW_BYTES);
        }
        cp_async_commit();
    }
    cp_async_wait<PF_STAGES - 1>(); /* the Q group (the oldest) is done */
    __syncthreads();
    uint32_t qa[4][4]; /* A fragments of the warp's 16 rows, k-chunks of 16 dims */
#pragma unroll
    for (int kc = 0; kc < 4; kc++)
        ldmatrix_x4(qa[kc], s_q + swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8,
                                      kc * 2 + (lane >> 4)));

    const float sl2 = FP8 ? a.scale_log2 * a.kv_scales[kvh] : a.scale_log2;
    const float sink = a.sinks[kvh * GQA + g] * LOG2E;
    float m_a = sink, m_b = sink, l_a = 0.f, l_b = 0.f;
    float acc[8][4];
#pragma unroll
    for (int nt = 0; nt < 8; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.f;

    for (int it = 0; it < n_tiles; it++) {
        cp_async_wait<PF_STAGES - 2>();
        __syncthreads();
        {
            const int nx = it + PF_STAGES - 1;
            if (nx < n_tiles) {
                const uint32_t sk = s_kv + (nx % PF_STAGES) * STAGE_BYTES;
                if constexpr (FP8)
                    load_kv_tile8<PF_THREADS, PF_KTILE>(
                        a, table, first, kvh, k_first + nx * PF_KTILE, key_end, sk, sk + V_OFF);
                else
                    load_kv_tile<PF_THREADS, PF_KTILE>(a, table, first, kvh,
                                                       k_first + nx * PF_KTILE, key_end, sk,
                                                       sk + PF_KTILE * ROW_BYTES);
            }
            cp_async_commit();
        }
        uint32_t sk = s_kv + (it % PF_STAGES) * STAGE_BYTES, sv = sk + PF_KTILE * ROW_BYTES;
        if constexpr (FP8) {
            /* e4m3 tile -> the bf16 tile pair: thread = (K or V, row, 16-byte chunk of codes). The
             * barrier above also means every warp is done with the previous tile's pair. */
            const uint32_t s_cvt = s_kv + PF_STAGES * PF_STAGE_BYTES8;
            const int which = threadIdx.x >> 7, r = (threadIdx.x & 127) >> 2, c = threadIdx.x & 3;
            const uint4 x = lds128(sk + which * V_OFF + swz8(r, c));
            const uint32_t dst = s_cvt + which * (PF_KTILE * ROW_BYTES);
            store_e4m3_chunk_bf16(x, dst, r, c);
            __syncthreads();
            sk = s_cvt, sv = s_cvt + PF_KTILE * ROW_BYTES;
        }
        const int kt = k_first + it * PF_KTILE;

        /* S = Q K^T. n-tile nt = keys [8nt, 8nt+8); one ldmatrix.x4 gives b0,b1 of two k-chunks of
         * 16 dims (matrices: keys of the n-tile x dims 32kp + 0, 8, 16, 24). */
        float s[PF_KTILE / 8][4];
#pragma unroll
        for (int nt = 0; nt < PF_KTILE / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
            for (int kp = 0; kp < 2; kp++) {
                uint32_t kb[4];
                ldmatrix_x4(kb, sk + swz(nt * 8 + (lane & 7), kp * 4 + (lane >> 3)));
                mma_bf16_16816(s[nt], qa[2 * kp], kb[0], kb[1]);
                mma_bf16_16816(s[nt], qa[2 * kp + 1], kb[2], kb[3]);
            }
        }
        /* Edge tiles: causal diagonal (a key past some row's position) or window start. */
        if (kt + PF_KTILE - 1 > pos0 || (W > 0 && kt < pos_last - W + 1)) {
            const int p_a = pos0 + 2 * warp, p_b = p_a + 1; /* positions of the lane's two rows */
            const int lo_a = W > 0 ? p_a - W + 1 : 0, lo_b = W > 0 ? p_b - W + 1 : 0;
#pragma unroll
            for (int nt = 0; nt < PF_KTILE / 8; nt++) {
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int key = kt + nt * 8 + 2 * t + (j & 1);
                    const bool ok =
                        j < 2 ? (key <= p_a && key >= lo_a) : (key <= p_b && key >= lo_b);
                    if (!ok) s[nt][j] = -INFINITY;
                }
            }
        }

        float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < PF_KTILE / 8; nt++) {
            mx_a = fmaxf(mx_a, fmaxf(s[nt][0], s[nt][1]));
            mx_b = fmaxf(mx_b, fmaxf(s[nt][2], s[nt][3]));
        }
        mx_a = fmaxf(mx_a, shfl_xor(mx_a, 1)), mx_b = fmaxf(mx_b, shfl_xor(mx_b, 1));
        mx_a = fmaxf(mx_a, shfl_xor(mx_a, 2)), mx_b = fmaxf(mx_b, shfl_xor(mx_b, 2));
        const float mn_a = fmaxf(m_a, mx_a * sl2), mn_b = fmaxf(m_b, mx_b * sl2);
        const float corr_a = fast_exp2(m_a - mn_a), corr_b = fast_exp2(m_b - mn_b);
        m_a = mn_a, m_b = mn_b;
        float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
        for (int nt = 0; nt < PF_KTILE / 8; nt++) {
            s[nt][0] = fast_exp2(fmaf(s[nt][0], sl2, -mn_a));
            s[nt][1] = fast_exp2(fmaf(s[nt][1], sl2, -mn_a));
            s[nt][2] = fast_exp2(fmaf(s[nt][2], sl2, -mn_b));
            s[nt][3] = fast_exp2(fmaf(s[nt][3], sl2, -mn_b));
            sum_a += s[nt][0] + s[nt][1];
            sum_b += s[nt][2] + s[nt][3];
        }
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            acc[nt][0] *= corr_a, acc[nt][1] *= corr_a, acc[nt][2] *= corr_b, acc[nt][3] *= corr_b;
        l_a = l_a * corr_a + sum_a;
        l_b = l_b * corr_b + sum_b;

        /* O += P V. k-step kk = keys [16kk, 16kk+16): P's A fragment is S's accumulators of n-tiles
         * 2kk and 2kk+1. V's B fragments via ldmatrix.trans, two dim n-tiles per x4. */
#pragma unroll
        for (int kk = 0; kk < PF_KTILE / 16; kk++) {
            const uint32_t pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]),
                                    pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                                    pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int np = 0; np < 4; np++) {
                uint32_t vb[4];
                const int j = lane >> 3;
                ldmatrix_x4_trans(vb,
                                  sv + swz(kk * 16 + (lane & 7) + (j & 1) * 8, np * 2 + (j >> 1)));
                mma_bf16_16816(acc[2 * np], pa, vb[0], vb[1]);
                mma_bf16_16816(acc[2 * np + 1], pa, vb[2], vb[3]);
            }
        }
    }
    cp_async_wait<0>();

    const float vmul = FP8 ? a.kv_scales[a.n_kv_heads + kvh] : 1.f; /* the V scale */
    store_prefill_rows(a, qs + tok0, n_valid, kvh, warp, g, t, l_a, l_b, m_a, m_b, sink, vmul,
                       &acc[0][0]);
}

#include "backend/cuda/attn_prefill_wgmma.cuh"

/* ------------------------------------------------------------------------------------------------ */
/* Host side                                                                                          */

static bool aligned16(const void *p) {
    return ((uintptr_t)p & 15) == 0;
}

static cudaError_t fill_args(const attn_dims *d, const attn_seqs *s, const uint16_t *q,
                             const void *k_cache, const void *v_cache, const float *kv_scales,
                             const float *sinks, float scale, uint16_t *out, attn_args *a) {
    const int bs_shift = attn_block_shift(d);
    if (d->head_dim != HD || d->n_kv_heads <= 0 || d->n_heads != GQA * d->n_kv_heads ||
        bs_shift < 3 || s->n_seqs < 0 || s->window < 0 || !aligned16(q) || !aligned16(k_cache) ||
        !aligned16(v_cache) || !aligned16(out) || (d->kv_fp8 != 0 && d->kv_fp8 != 1) ||
        (d->kv_fp8 && !kv_scales))
        return cudaErrorInvalidValue;
    a->query_start = s->query_start, a->start_pos = s->start_pos, a->tables = s->tables;
    a->table_first = s->table_first, a->work = NULL;
    a->q = q, a->k_cache = (const uint16_t *)k_cache, a->v_cache = (const uint16_t *)v_cache,
    a->sinks = sinks, a->out = out, a->ws = NULL, a->counters = NULL;
    a->k8 = (const uint8_t *)k_cache, a->v8 = (const uint8_t *)v_cache, a->kv_scales = kv_scales;
    a->scale_log2 = scale * LOG2E;
    a->n_seqs = s->n_seqs, a->stride = s->stride, a->window = s->window;
    a->n_heads = d->n_heads, a->n_kv_heads = d->n_kv_heads, a->bs_shift = bs_shift,
    a->num_splits = 1;
    return cudaSuccess;
}

/* Opts a kernel into more than 48 KiB of dynamic shared memory, once per device (per_device.h). */
static cudaError_t allow_smem(const void *kernel, int bytes, unsigned long long *done) {
    if (per_device_done(done)) return cudaSuccess;
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    if (e == cudaSuccess) per_device_mark(done);
    return e;
}
static unsigned long long g_decode_smem_dev[2], g_prefill_smem_dev[2]; /* [kv_fp8] */

static const void *decode_kernel(int fp8) {
    return fp8 ? (const void *)attn_decode_kernel<true> : (const void *)attn_decode_kernel<false>;
}

extern "C" int attn_decode_num_splits(const attn_dims *d, int n_seqs, int max_keys) {
    if (n_seqs <= 0 || max_keys <= 0) return 1;
    int dev = 0, sms = 132, per_sm = 3, v = 0;
    bool failed = cudaGetDevice(&dev) != cudaSuccess;
    if (!failed && cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess &&
        v > 0)
        sms = v;
    else
        failed = true;
    const int f8 = d->kv_fp8 ? 1 : 0;
    const int smem = f8 ? DEC_SMEM8 : (int)DEC_SMEM;
    if (!failed && allow_smem(decode_kernel(f8), smem, &g_decode_smem_dev[f8]) == cudaSuccess &&
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&v, decode_kernel(f8), DEC_THREADS, smem) ==
            cudaSuccess &&
        v > 0)
        per_sm = v;
    else
        failed = true;
    if (failed)
        (void)cudaGetLastError(); /* our failed query must not be reported by the next launch */
    /* Cost in units of "one chunk streamed by one CTA": a CTA with `per` chunks costs per + 2 (the
     * pipeline's fill), the grid runs in waves of sms * per_sm CTAs, a merge pass costs about one unit.
     * Pick the cheapest split count; ties go to fewer splits. */
    const long ctas = (long)n_seqs * d->n_kv_heads, slots = (long)sms * per_sm;
    const int chunks = (max_keys + DEC_CHUNK - 1) / DEC_CHUNK;
    int best = 1;
    long best_cost = -1;
    for (int s = 1; s <= chunks && s <= ATTN_DECODE_MAX_SPLITS; s++) {
        const int per = (chunks + s - 1) / s;
        if ((chunks + per - 1) / per != s)
            continue; /* the same shares as a smaller s, with empty splits */
        const long waves = (ctas * s + slots - 1) / slots;
        const long cost = waves * (per + 2) + (s > 1 ? 1 : 0);
        if (best_cost < 0 || cost < best_cost) best_cost = cost, best = s;
    }
    return best;
}

/* The fused merge's counters (attention.h): one per (sequence, KV head), zero between launches. */
static unsigned int *g_merge_counters;
static size_t g_merge_counters_n;

extern "C" cudaError_t attn_decode_fused_init(int max_seqs, int n_kv_heads) {
    if (max_seqs < 1 || n_kv_heads < 1) return cudaErrorInvalidValue;
    const size_t n = (size_t)max_seqs * (size_t)n_kv_heads;
    if (g_merge_counters && g_merge_counters_n >= n) return cudaSuccess;
    attn_decode_fused_free();
    cudaError_t e = cudaMalloc((void **)&g_merge_counters, n * sizeof(unsigned int));
    if (e == cudaSuccess) e = cudaMemset(g_merge_counters, 0, n * sizeof(unsigned int));
    if (e != cudaSuccess) {
        cudaFree(g_merge_counters);
        g_merge_counters = NULL;
        return e;
    }
    g_merge_counters_n = n;
    return cudaSuccess;
}

extern "C" void attn_decode_fused_free(void) {
    if (g_merge_counters) cudaFree(g_merge_counters);
    g_merge_counters = NULL, g_merge_counters_n = 0;
}

extern "C" size_t attn_decode_workspace_bytes(const attn_dims *d, int n_seqs, int num_splits) {
    if (num_splits <= 1) return 0;
    return (size_t)n_seqs * (size_t)d->n_heads * (size_t)num_splits * (HD + 2) * sizeof(float);
}

extern "C" cudaError_t attn_decode(const attn_dims *d, const attn_seqs *s, const uint16_t *q,
                                   const void *k_cache, const void *v_cache, const float *kv_scales,
                                   const float *sinks, float scale, uint16_t *out, int num_splits,
                                   float *workspace, cudaStream_t stream) {
    attn_args a;
    cudaError_t e = fill_args(d, s, q, k_cache, v_cache, kv_scales, sinks, scale, out, &a);
    if (e != cudaSuccess) return e;
    if (num_splits < 1 || num_splits > ATTN_DECODE_MAX_SPLITS || s->n_seqs > 65535 ||
        (num_splits > 1 && !workspace) || !aligned16(workspace))
        return cudaErrorInvalidValue;
    if (s->n_seqs == 0) return cudaSuccess;
    a.num_splits = num_splits, a.ws = workspace;
    a.counters = num_splits > 1 && g_merge_counters &&
                         (size_t)s->n_seqs * (size_t)d->n_kv_heads <= g_merge_counters_n
                     ? g_merge_counters
                     : NULL;
    const int f8 = d->kv_fp8 ? 1 : 0;
    e = allow_smem(decode_kernel(f8), f8 ? DEC_SMEM8 : (int)DEC_SMEM, &g_decode_smem_dev[f8]);
    if (e != cudaSuccess) return e;
    if (f8)
        pdl_launch(attn_decode_kernel<true>, dim3(d->n_kv_heads, s->n_seqs, num_splits),
                   dim3(DEC_THREADS), DEC_SMEM8, stream, a);
    else
        pdl_launch(attn_decode_kernel<false>, dim3(d->n_kv_heads, s->n_seqs, num_splits),
                   dim3(DEC_THREADS), DEC_SMEM, stream, a);
    e = cudaGetLastError();
    if (e != cudaSuccess || num_splits == 1 || a.counters) return e;
    pdl_launch(attn_decode_merge_kernel, dim3(d->n_kv_heads, s->n_seqs), dim3(DEC_THREADS), 0,
               stream, a);
    return cudaGetLastError();
}

/* GPTOSS_ATTN_WGMMA (read once; attn_prefill_set_wgmma for tests): which kernel runs the prefill of
 * full layers. 1 (the default): the warpgroup-MMA kernel (attn_prefill_wgmma.cuh), for a bf16 and
 * an FP8 cache (the FP8 form converts each tile to bf16 in its copiers); 0: the mma.sync kernel.
 * Sliding layers always take the mma.sync kernel. Measured on the H200 (bench/NOTES.md, sessions
 * 14 and 15): bf16, 8k full 2,163 -> 1,404 µs (254 -> 392 TFLOP/s), 1k 58 -> 39 µs, bench latency
 * prefill 8k +5.9 % (120b), +6.6 % (20b); FP8, 8k full 2,561 -> 1,439 µs (215 -> 382 TFLOP/s), 1k
 * 70 -> 43 µs. */
static int g_prefill_wgmma = -1;
static unsigned long long g_prefill_wg_smem_dev[2]; /* [kv_fp8] */

extern "C" void attn_prefill_set_wgmma(int on) {
    env_switch_set(&g_prefill_wgmma, on, 0, 1);
}

extern "C" int attn_prefill_wgmma(void) {
    return env_switch(&g_prefill_wgmma, "GPTOSS_ATTN_WGMMA", 1, 0, 1);
}

extern "C" int attn_prefill_max_tiles(int n_tokens, int n_seqs) {
    return n_tokens / PF_TOKENS + n_seqs;
}

typedef struct {
    int keys, seq, tok0;
} pf_tile;

static int pf_tile_cmp(const void *x, const void *y) {
    const pf_tile *a = (const pf_tile *)x, *b = (const pf_tile *)y;
    if (a->keys != b->keys) return a->keys > b->keys ? -1 : 1; /* longest first */
    if (a->seq != b->seq) return a->seq < b->seq ? -1 : 1;
    return a->tok0 < b->tok0 ? -1 : a->tok0 > b->tok0;
}

extern "C" int attn_prefill_plan(int n_seqs, const int32_t *query_start, const int32_t *start_pos,
                                 int window, int min_new, int32_t *work, int cap) {
    int n = 0;
    for (int i = 0; i < n_seqs; i++) {
        const int n_new = query_start[i + 1] - query_start[i];
        if (n_new >= min_new && n_new > 0) n += (n_new + PF_TOKENS - 1) / PF_TOKENS;
    }
    if (n > cap) return -1;
    if (n == 0) return 0;
    pf_tile *tiles = (pf_tile *)malloc((size_t)n * sizeof *tiles);
    if (!tiles) return -1;
    int k = 0;
    for (int i = 0; i < n_seqs; i++) {
        const int n_new = query_start[i + 1] - query_start[i];
        if (n_new < min_new || n_new <= 0) continue;
        for (int tok0 = 0; tok0 < n_new; tok0 += PF_TOKENS) {
            const int p0 = start_pos[i] + tok0,
                      p1 = p0 + (n_new - tok0 < PF_TOKENS ? n_new - tok0 : PF_TOKENS) - 1;
            const int k0 = window > 0 && p0 - window + 1 > 0 ? p0 - window + 1 : 0;
            tiles[k].keys = p1 - k0 + 1, tiles[k].seq = i, tiles[k].tok0 = tok0;
            k++;
        }
    }
    qsort(tiles, (size_t)n, sizeof *tiles, pf_tile_cmp);
    for (int j = 0; j < n; j++) work[2 * j] = tiles[j].seq, work[2 * j + 1] = tiles[j].tok0;
    free(tiles);
    return n;
}

extern "C" cudaError_t attn_prefill(const attn_dims *d, const attn_seqs *s, const int32_t *work,
                                    int n_work, const uint16_t *q, const void *k_cache,
                                    const void *v_cache, const float *kv_scales, const float *sinks,
                                    float scale, uint16_t *out, cudaStream_t stream) {
    attn_args a;
    cudaError_t e = fill_args(d, s, q, k_cache, v_cache, kv_scales, sinks, scale, out, &a);
    if (e != cudaSuccess) return e;
    if (n_work < 0 || d->n_kv_heads > 65535) return cudaErrorInvalidValue;
    if (n_work == 0) return cudaSuccess;
    a.work = work;
    /* sliding layers keep the mma.sync kernel: at 8k it takes 130 µs there against 201 for the
     * wgmma kernel, whose 128-key tiles cover a 143-key window in two (bench/NOTES.md, session 14) */
    const int wg = s->window == 0 ? attn_prefill_wgmma() : 0;
    if (wg && !d->kv_fp8) {
        e = allow_smem((const void *)attn_prefill_wg_kernel<false>, PW_SMEM,
                       &g_prefill_wg_smem_dev[0]);
        if (e != cudaSuccess) return e;
        pdl_launch(attn_prefill_wg_kernel<false>, dim3(n_work, d->n_kv_heads), dim3(PW_THREADS),
                   PW_SMEM, stream, a);
    } else if (wg) {
        e = allow_smem((const void *)attn_prefill_wg_kernel<true>, PW_SMEM8,
                       &g_prefill_wg_smem_dev[1]);
        if (e != cudaSuccess) return e;
        pdl_launch(attn_prefill_wg_kernel<true>, dim3(n_work, d->n_kv_heads), dim3(PW_THREADS),
                   PW_SMEM8, stream, a);
    } else if (d->kv_fp8) {
        e = allow_smem((const void *)attn_prefill_kernel<true>, PF_SMEM8, &g_prefill_smem_dev[1]);
        if (e != cudaSuccess) return e;
        pdl_launch(attn_prefill_kernel<true>, dim3(n_work, d->n_kv_heads), dim3(PF_THREADS),
                   PF_SMEM8, stream, a);
    } else {
        e = allow_smem((const void *)attn_prefill_kernel<false>, PF_SMEM, &g_prefill_smem_dev[0]);
        if (e != cudaSuccess) return e;
        pdl_launch(attn_prefill_kernel<false>, dim3(n_work, d->n_kv_heads), dim3(PF_THREADS),
                   PF_SMEM, stream, a);
    }
    return cudaGetLastError();
}
