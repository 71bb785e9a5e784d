/* The attention block's device code for attn_stream.cu's kernel, phase by phase, in a header so
 * that another kernel (issue 13's step kernel) can run the same phases with the same bits.
 *
 * The attention block of a decode step of 1-4 tokens as one persistent kernel (attn_stream.h):
 * one block an SM, eight consumer warps and one producer warp.
 *
 * The producer (one lane) walks the block's share of the weights in the order they are needed and
 * keeps a ring of stages (16 up to two tokens, 8 at three and four) requested in shared memory
 * (tma_ring.cuh's protocol): first the block's QKV row pairs, then its O rows. It waits for a free
 * stage and, before its first O row, for phase 1's grid barrier: O's rows then stream in while the
 * grid computes attention, and never take DRAM from another block's QKV rows.
 *
 * At the kernel's start, before the producer's first copy, the consumers issue at once every load
 * they need before phase 2 (the token rows, the QKV and O biases, the positions, the tokens' slots,
 * phase 2's item fields: as_early), so that they share one latency and no model-memory or
 * step-data load sits on a phase's chain of dependent steps.
 *
 * Phase 1, QKV + RoPE + KV write. The QKV rows are dealt as rotation pairs: pair p is rows
 * 64 h + i and 64 h + i + 32 of head h (q heads, then k heads, then v heads; i < 32), the two
 * values RoPE rotates together (rope_kv.h: "half-split" pairing), so the warp that makes them also
 * rotates and stores them, and no other phase reads the fp32 products. Block b owns pairs
 * [b P / G, (b + 1) P / G). Stage q of the block goes to warp q % 8. A warp multiplies a pair's two
 * rows with the T staged token rows (x + x_lo summed in fp32, in shared memory): lane L owns the
 * 16-byte words L, L + 32, … of a row (gemv_row.cuh's dot8 order), then a shuffle tree. Lane t < T
 * adds the biases and stores token t's values: q rotated (bf16), k rotated and v plain into the
 * cache at the token's slot, with rope_kv_row.cuh's arithmetic.
 *
 * Phase 2, attention (after a grid barrier: every block's k and v are in the cache). The work is
 * (sequence, KV head, split) items, at most one a block: each (sequence, KV head) gets
 * SL = G / (T · n_kv_heads) split slots (16 at T = 1 on 132 SMs), and its visible keys are dealt in
 * 64-key chunks over min(SL, chunks) of them. Consumer warp w is query head 8 kvh + w of the group:
 * lane j scores keys j and j + 32 of a chunk (fp32 dot products of the bf16 q and k), an online
 * softmax in base 2 whose running max starts at the sink (attention.h), and lane j accumulates
 * output dims 2j, 2j + 1 over the chunk's keys (P in fp32). The chunks come into shared memory by
 * cp.async, two buffers (the next chunk's copies in flight while this one is used), rows XOR-
 * swizzled by 16-byte chunk so that the lanes' rows and a row's words read without bank conflicts.
 * The item's first chunk is asked for at the end of phase 1 (every key but the new one, whose row
 * follows after the barrier), so its table reads and DRAM latency overlap the barrier's wait.
 * One split: the output is final. Several: the (max, sum, output) partials go to global memory and
 * the last block of the (sequence, KV head) to finish merges them (a counter per group, reset by
 * that block), as attn_decode's fused merge does.
 *
 * Phase 3, O (after a grid barrier: the attention output is whole). The T rows of it are staged in
 * fp32 and block b's O rows [b H / G, (b + 1) H / G) are multiplied a warp a row as in phase 1,
 * plus the bias, rounded to bf16. */
#pragma once

#include "backend/cuda/attn_stream.h"
#include "backend/cuda/attn_stream_plan.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv_row.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/rope_kv_row.cuh"
#include "backend/cuda/tma_ring.cuh"

#include <math.h>

enum {
    AS_CWARPS = 8, /* consumer warps: one a query head of a KV group in phase 2 */
    AS_THREADS = (AS_CWARPS + 1) * 32,
    AS_MAX_STAGES = 16,
    AS_HD = 64,                             /* head_dim */
    AS_HALF = 32,                           /* RoPE's rotation partner distance */
    AS_GQA = 8,                             /* query heads a KV head */
    AS_KEYS = ASP_KEYS,                     /* keys a chunk */
    AS_ROW_BYTES = 128,                     /* one key's 64 bf16 values */
    AS_KV_BUF = 2 * AS_KEYS * AS_ROW_BYTES, /* K and V of one chunk */
    AS_MAX_SMEM = 224 * 1024
};
static_assert(AS_CWARPS == AS_GQA, "phase 2 gives each consumer warp one query head of the group");
static_assert(AS_MAX_STAGES % AS_CWARPS == 0, "a stage's uses are one warp's (as_layout.stages)");

#define AS_LOG2E 1.4426950408889634f

struct as_layout {
    int stage_bytes; /* max(a QKV pair: 2 H · 2, an O row: Q · 2), a multiple of 128 */
    int xs_off;      /* the staged token rows (fp32) or, in phase 2, the K/V chunk buffers */
    int bar_off;     /* full[stages], empty[stages] */
    int pre_off;     /* as_pre: the epilogues' preloaded values */
    int kv_a_off;    /* phase 2's chunk buffer A, past the staged token rows (B: at xs_off) */
    int max_pairs;   /* the most QKV pairs a block owns (the rows: at most H / G + 1) */
    int stages;      /* the ring's: as many as fit beside the staged rows, ≤ AS_MAX_STAGES */
    int slots;       /* split slots of a (sequence, KV head) */
};

/* Host (attn_stream.cu): the layout for T tokens of hidden size H on sms SMs, stages of at least
 * min_stage bytes, and the bytes it takes (0: it does not fit); xs_bytes: the staged rows' room at
 * xs_off. */
size_t as_plan_layout(const attn_dims *d, int T, int H, int sms, int min_stage, as_layout *L,
                      size_t *xs_bytes);

struct as_params {
    attn_stream_args a;
    rope_kv_freq f;
    int n_heads, n_kv_heads, bs_shift;
    int stop_after; /* measurement (attn_stream_set_probe): 1 after QKV, 2 after attention, 3 at
                       once (the launch alone), 4 after one grid barrier, 5 the ring alone */
};

static __device__ __forceinline__ void consumers_sync(void) {
    asm volatile("bar.sync 1, %0;" ::"n"(AS_CWARPS * 32) : "memory");
}

static __device__ __forceinline__ float ex2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* Rows [0, T) of K bf16 values into xs as fp32 [T][K], by the consumers: phase 3's attention
 * output, written by other blocks of this kernel, so read through L2. */
static __device__ __forceinline__ void as_stage_rows(const uint16_t *x, int T, int K, float *xs) {
    const int words = T * K / 8;
    for (int v = threadIdx.x; v < words; v += AS_CWARPS * 32) {
        float f[8];
        unpack_bf16x8(__ldcg((const uint4 *)x + v), f);
        float4 *dst = (float4 *)(xs + (size_t)v * 8);
        dst[0] = make_float4(f[0], f[1], f[2], f[3]);
        dst[1] = make_float4(f[4], f[5], f[6], f[7]);
    }
}

/* Phase 0 with the attention norm inside: token rows m < T of x = RMSNorm(h + Σ slots) · gain into
 * xs as fp32 (hi + lo of norm_split8: what as_early_rows makes of norm_add_rmsnorm_split's
 * output), by the consumers replaying norm_add_kernel's row (norm_row.cuh: the same bits); block 0
 * keeps h's new rows in nscratch for after the first grid barrier. CG: h and the slots through L2
 * (norm_row.cuh's residual8: written by blocks of the same kernel, step_kernel.cu). */
template <int T, bool CG = false>
static __device__ void as_norm_rows(const attn_stream_args &a, float *xs) {
    __shared__ float s_red[32];
    const int H = a.H, C = H / 8;
    for (int m = 0; m < T; m++) {
        float v[2][8];
        const float ss = norm_replay_row_with<2, CG>(
            AS_CWARPS * 32, [] { consumers_sync(); }, a.nh + (size_t)m * H,
            a.nslots ? a.nslots + (size_t)m * a.n_slots * H : NULL, a.n_slots, NULL, H, v, s_red);
        const float inv = rms_inv(ss, H, a.neps);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int c = threadIdx.x + r * AS_CWARPS * 32;
            if (c >= C) continue;
            uint4 hi, lo;
            norm_split8(v[r], inv, gain_at(a.ngain, c, true), hi, lo);
            store_split8_f32(hi, lo, xs + (size_t)m * H + 8 * c);
            if (blockIdx.x == 0) store8_f32(v[r], a.nscratch + (size_t)m * H + 8 * c);
        }
    }
}

/* acc[r][m] += row r (of R rows at w, each K8 16-byte words, stride row_bytes) · token row m of xs
 * ([T][K] fp32), this lane's words c = lane + 32 j in dot8's order; then the warp's shuffle tree
 * (every lane ends with the totals). */
template <int T, int R>
static __device__ __forceinline__ void as_rows_dot(const unsigned char *w, int row_bytes, int K8,
                                                   const float *xs, float acc[R][T]) {
    const int lane = threadIdx.x & 31, K = K8 * 8;
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int m = 0; m < T; m++) acc[r][m] = 0.f;
    const uint32_t wa = smem_u32(w), xa = smem_u32(xs);
#pragma unroll 2
    for (int c = lane; c < K8; c += 32) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; r++) wv[r] = lds128(wa + (uint32_t)(r * row_bytes + c * 16));
#pragma unroll
        for (int m = 0; m < T; m++) {
            const uint32_t at = xa + (uint32_t)((m * K + c * 8) * 4);
            const uint4 u0 = lds128(at), u1 = lds128(at + 16);
            const float4 a = make_float4(__uint_as_float(u0.x), __uint_as_float(u0.y),
                                         __uint_as_float(u0.z), __uint_as_float(u0.w));
            const float4 b = make_float4(__uint_as_float(u1.x), __uint_as_float(u1.y),
                                         __uint_as_float(u1.z), __uint_as_float(u1.w));
#pragma unroll
            for (int r = 0; r < R; r++) acc[r][m] = dot8(wv[r], a, b, acc[r][m]);
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) gemv_warp_sum<T>(acc[r]);
}

/* acc[m] for m = lane (< T), without a dynamically indexed register array. */
template <int T> static __device__ __forceinline__ float as_pick(const float acc[T], int lane) {
    float v = acc[0];
#pragma unroll
    for (int m = 1; m < T; m++)
        if (lane == m) v = acc[m];
    return v;
}

/* The step's loads a block needs before (or early in) phase 1, issued by the consumers at the
 * kernel's very start, before the producer's first copy, all at once: the staged token rows x and
 * x_lo, the epilogues' biases and positions, the token slots, phase 2's item fields. Session 23's
 * ncu of the first form: with them issued one after another behind the producer's flood of weight
 * copies (24 MB requested at once over the grid), each waited ~1 µs or more, and the consumers
 * began phase 1 ~7 µs into a 38 µs kernel. Loaded here, they share one latency. Thread i holds
 * element i of each list (the rare i ≥ 256 is loaded later, by as_preload's remainder loops). */
template <int T> struct as_early {
    enum { XW = (T * ATTN_STREAM_MAX_H / 8 + AS_CWARPS * 32 - 1) / (AS_CWARPS * 32) };
    uint4 x[XW], x_lo[XW];
    uint16_t b1, b2, ob; /* pair i's two QKV biases, O row i's bias (bf16 bits) */
    int pos;             /* positions[t] of cos/sin item i = (pair i / T, token i % T) */
    int slot;            /* this lane's token slot (lane < T) */
    int qs0, qs1, sp, tf;
    float sink;
};

template <int T>
static __device__ __forceinline__ void as_early_load(const as_params &P, const as_layout &L, int p0,
                                                     int n_pairs, int r0, int n_rows,
                                                     as_early<T> &e) {
    const attn_stream_args &a = P.a;
    const int i = threadIdx.x, lane = i & 31;
    if (!a.nh) {
        const int words = T * a.H / 8;
#pragma unroll
        for (int k = 0; k < as_early<T>::XW; k++) {
            const int v = i + k * AS_CWARPS * 32;
            e.x[k] = v < words ? ((const uint4 *)a.x)[v] : make_uint4(0, 0, 0, 0);
            e.x_lo[k] = v < words && a.x_lo ? ((const uint4 *)a.x_lo)[v] : make_uint4(0, 0, 0, 0);
        }
    }
    e.b1 = e.b2 = e.ob = 0;
    if (i < n_pairs && a.qkv_b) {
        const int p = p0 + i, r1 = p / AS_HALF * AS_HD + p % AS_HALF;
        e.b1 = a.qkv_b[r1], e.b2 = a.qkv_b[r1 + AS_HALF];
    }
    e.pos = i < n_pairs * T ? a.positions[i % T] : 0;
    if (i < n_rows && a.o_b) e.ob = a.o_b[r0 + i];
    e.slot = lane < T ? a.slots[lane] : -1;
    const int SL = L.slots, nkv = P.n_kv_heads, item = blockIdx.x;
    e.qs0 = e.qs1 = e.sp = e.tf = 0;
    e.sink = 0.f;
    if (item < T * nkv * SL) {
        const int seq = item / (nkv * SL), kvh = item / SL % nkv;
        e.qs0 = a.seqs.query_start[seq], e.qs1 = a.seqs.query_start[seq + 1];
        e.sp = a.seqs.start_pos[seq];
        e.tf = a.seqs.table_first ? a.seqs.table_first[seq] : 0;
        e.sink = a.sinks[kvh * AS_GQA + (i >> 5)];
    }
}

/* x + x_lo of as_early into xs as fp32 [T][H], summed in fp32. */
template <int T>
static __device__ __forceinline__ void as_early_rows(const as_early<T> &e, int H, float *xs) {
    const int words = T * H / 8;
#pragma unroll
    for (int k = 0; k < as_early<T>::XW; k++) {
        const int v = threadIdx.x + k * AS_CWARPS * 32;
        if (v >= words) break;
        store_split8_f32(e.x[k], e.x_lo[k], xs + (size_t)v * 8);
    }
}

/* What phase 1's and phase 3's epilogues read besides their sums, loaded at the kernel's start so
 * that no dependent global load sits between a stage's products and its stores (the biases are
 * model memory, which leaves L2 between steps; session 17 measured such loads on the chains):
 * per pair of the block its two QKV biases and, per token, RoPE's cos and sin; per O row its bias.
 * In shared memory past the barriers (as_layout.pre_off). */
struct as_pre {
    float *qkv_bias; /* [pairs][2] */
    float *cs;       /* [pairs][T][2]: cos, sin (rotated heads only) */
    float *o_bias;   /* [rows] */
};

static __device__ __forceinline__ float bias_at(const uint16_t *b, int i) {
    return b ? bf16_bits_to_f32(b[i]) : 0.f;
}

template <int T>
static __device__ void as_preload(const as_params &P, const as_pre &pre, const as_early<T> &e,
                                  int p0, int n_pairs, int r0, int n_rows) {
    const attn_stream_args &a = P.a;
    const int n = AS_CWARPS * 32;
    for (int i = threadIdx.x; i < n_pairs; i += n) {
        const int p = p0 + i, r1 = p / AS_HALF * AS_HD + p % AS_HALF;
        pre.qkv_bias[2 * i] = i < n ? bf16_bits_to_f32(e.b1) : bias_at(a.qkv_b, r1);
        pre.qkv_bias[2 * i + 1] = i < n ? bf16_bits_to_f32(e.b2) : bias_at(a.qkv_b, r1 + AS_HALF);
    }
    for (int i = threadIdx.x; i < n_pairs * T; i += n) {
        const int pi = i / T, t = i - pi * T, p = p0 + pi;
        if (p / AS_HALF >= P.n_heads + P.n_kv_heads) continue; /* a v head: no rotation */
        float c, sn;
        rope_cos_sin_at(i < n ? e.pos : a.positions[t], P.f.inv_freq[p % AS_HALF],
                        P.f.concentration, &c, &sn);
        pre.cs[2 * i] = c, pre.cs[2 * i + 1] = sn;
    }
    for (int i = threadIdx.x; i < n_rows; i += n)
        pre.o_bias[i] = i < n ? bf16_bits_to_f32(e.ob) : bias_at(a.o_b, r0 + i);
}

/* Phase 1's epilogue for the block's pair pi (head hh, dim i) and token t = lane < T (slot: its
 * cache slot): the biases, then RoPE and the stores (q heads to q, k heads rotated and v heads plain
 * to the cache at the token's slot), with rope_kv_row.cuh's arithmetic. */
template <int T>
static __device__ __forceinline__ void as_qkv_store(const as_params &P, const as_pre &pre, int pi,
                                                    int hh, int i, int t, int slot, float x1,
                                                    float x2) {
    const attn_stream_args &a = P.a;
    x1 += pre.qkv_bias[2 * pi], x2 += pre.qkv_bias[2 * pi + 1];
    if (hh >= P.n_heads + P.n_kv_heads) { /* a v head: no rotation */
        if (slot < 0) return;
        uint16_t *v = (uint16_t *)a.v_cache + kv_cache_offset(slot, hh - P.n_heads - P.n_kv_heads,
                                                              P.n_kv_heads, AS_HD, P.bs_shift);
        v[i] = f32_to_bf16_bits(x1), v[i + AS_HALF] = f32_to_bf16_bits(x2);
        return;
    }
    float o1, o2;
    rope_rotate(x1, x2, pre.cs[2 * (pi * T + t)], pre.cs[2 * (pi * T + t) + 1], &o1, &o2);
    uint16_t *dst;
    if (hh < P.n_heads) {
        dst = a.q + ((size_t)t * P.n_heads + hh) * AS_HD;
    } else {
        if (slot < 0) return;
        dst = (uint16_t *)a.k_cache +
              kv_cache_offset(slot, hh - P.n_heads, P.n_kv_heads, AS_HD, P.bs_shift);
    }
    dst[i] = f32_to_bf16_bits(o1), dst[i + AS_HALF] = f32_to_bf16_bits(o2);
}

/* The byte offset of 16-byte chunk ch of key row r in a chunk buffer (XOR swizzle, as attention.cu's
 * tiles: the 8 rows a quarter-warp reads land in 8 different bank groups). */
static __device__ __forceinline__ uint32_t as_swz(int r, int ch) {
    return (uint32_t)(r * AS_ROW_BYTES + ((ch ^ (r & 7)) << 4));
}

/* The copies of chunk keys [u0, u0 + AS_KEYS) ∩ [.., key_end) of KV head kvh into buffer kv (K then
 * V); rows past key_end are zero-filled (no read); the row of key `skip` is left alone (the new
 * key, not yet written when the chunk is asked for before phase 1: as_load_key brings it later). */
static __device__ __forceinline__ void as_load_chunk(const as_params &P, const int32_t *table,
                                                     int first, int kvh, int u0, int key_end,
                                                     uint32_t kv, int skip) {
    const attn_stream_args &a = P.a;
    const int mask = (1 << P.bs_shift) - 1;
    for (int idx = threadIdx.x; idx < 2 * AS_KEYS * 8; idx += AS_CWARPS * 32) {
        const int which = idx / (AS_KEYS * 8), r = (idx >> 3) & (AS_KEYS - 1), ch = idx & 7;
        const int u = u0 + r;
        if (u == skip) continue;
        const uint16_t *base = which ? (const uint16_t *)a.v_cache : (const uint16_t *)a.k_cache;
        const uint16_t *src = base;
        if (u < key_end) {
            const int blk = table[(u >> P.bs_shift) - first];
            const int slot = (blk << P.bs_shift) | (u & mask);
            src = base + kv_cache_offset(slot, kvh, P.n_kv_heads, AS_HD, P.bs_shift) + ch * 8;
        }
        cp_async16(kv + (uint32_t)(which * AS_KEYS * AS_ROW_BYTES) + as_swz(r, ch), src,
                   u < key_end ? 16 : 0);
    }
}

/* Key u's K and V rows (row u - u0 of the chunk buffer kv), by the first 16 threads. */
static __device__ __forceinline__ void as_load_key(const as_params &P, const int32_t *table,
                                                   int first, int kvh, int u0, int u, uint32_t kv) {
    const attn_stream_args &a = P.a;
    if (threadIdx.x >= 16) return;
    const int which = threadIdx.x >> 3, ch = threadIdx.x & 7, r = u - u0;
    const uint16_t *base = which ? (const uint16_t *)a.v_cache : (const uint16_t *)a.k_cache;
    const int blk = table[(u >> P.bs_shift) - first];
    const int slot = (blk << P.bs_shift) | (u & ((1 << P.bs_shift) - 1));
    cp_async16(kv + (uint32_t)(which * AS_KEYS * AS_ROW_BYTES) + as_swz(r, ch),
               base + kv_cache_offset(slot, kvh, P.n_kv_heads, AS_HD, P.bs_shift) + ch * 8, 16);
}

/* This block's phase-2 item, worked out at the kernel's start from the step's arrays (written
 * before the kernel; as_early loaded the fields) and the sinks (model memory). */
struct as_item {
    int active; /* 0: no item (past the grid's items, not a one-token sequence, a split with no keys) */
    int seq, kvh, split, S, q_row, key_end, k_lo, c0, c1, first;
    const int32_t *table;
    float sink2; /* this warp's head's sink, in log2 units */
};

template <int T>
static __device__ as_item as_item_plan(const as_params &P, const as_layout &L,
                                       const as_early<T> &e) {
    const attn_stream_args &a = P.a;
    const int SL = L.slots, nkv = P.n_kv_heads, item = blockIdx.x;
    as_item it;
    it.active = 0;
    if (item >= T * nkv * SL) return it;
    it.seq = item / (nkv * SL), it.kvh = item / SL % nkv, it.split = item % SL;
    it.q_row = e.qs0;
    if (e.qs1 - e.qs0 != 1) return it; /* not one new token */
    const int pos = e.sp;
    it.key_end = pos + 1;
    const int n_chunks = asp_chunks(pos, a.seqs.window, &it.k_lo);
    it.S = asp_split(n_chunks, SL, it.split, &it.c0, &it.c1); /* splits with keys */
    if (it.split >= it.S) return it;
    it.table = a.seqs.tables + (size_t)it.seq * a.seqs.stride;
    it.first = e.tf;
    it.sink2 = e.sink * AS_LOG2E;
    it.active = 1;
    return it;
}

/* The item's first chunk, asked for at the end of phase 1 into buffer A (past the staged token
 * rows): every key but the new one (written by phase 1 of some block), whose row as_attention
 * brings after the grid barrier. The table reads and the copies then overlap the barrier's wait
 * (before phase 1 they held the consumers back: a table read under the weight copies' flood). One
 * cp.async group. */
static __device__ void as_item_prefetch(const as_params &P, const as_layout &L, const as_item &it,
                                        unsigned char *smem) {
    if (!it.active) return;
    as_load_chunk(P, it.table, it.first, it.kvh, it.k_lo + it.c0 * AS_KEYS, it.key_end,
                  smem_u32(smem + L.kv_a_off), it.key_end - 1);
    cp_async_commit();
}

/* A probe's marks inside as_attention (the step kernel's blocks' probe): mark(i) is called by every
 * consumer thread right after a consumers barrier, at 0 the item's first chunk landed, 1 its chunks
 * done, 2 the merge counter answered (blocks with more than one split), 3 the merge done (the
 * merging block's thread 0, after its warp). None by default: attn_stream passes none. */
struct as_no_mark {
    __device__ void operator()(int) const {}
};

/* Phase 2 for this block's item, if it has one. */
template <typename Mark = as_no_mark>
static __device__ void as_attention(const as_params &P, const as_layout &L, const as_item &it,
                                    unsigned char *smem, Mark mark = Mark()) {
    const attn_stream_args &a = P.a;
    if (!it.active) return;
    const int T = a.T, SL = L.slots, nkv = P.n_kv_heads;
    const int seq = it.seq, kvh = it.kvh, split = it.split, S = it.S, q_row = it.q_row;
    const int key_end = it.key_end, k_lo = it.k_lo, c0 = it.c0, c1 = it.c1, first = it.first;
    const int32_t *table = it.table;

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int head = kvh * AS_GQA + warp;
    /* chunk c0 + r in buffer A (r even; the first one asked for before phase 1) or B (r odd: the
     * staged token rows' place, free since phase 1) */
    const uint32_t buf_a = smem_u32(smem + L.kv_a_off), buf_b = smem_u32(smem + L.xs_off);
    {
        const int u0 = k_lo + c0 * AS_KEYS, pos = key_end - 1;
        if (pos < u0 + AS_KEYS) as_load_key(P, table, first, kvh, u0, pos, buf_a); /* the new key */
        cp_async_commit();
    }

    /* q of this warp's head (written by phase 1 of another block: through L2), fp32 */
    float qf[AS_HD];
    const uint4 *qp = (const uint4 *)(a.q + ((size_t)q_row * P.n_heads + head) * AS_HD);
#pragma unroll
    for (int ch = 0; ch < 8; ch++) unpack_bf16x8(__ldcg(qp + ch), qf + 8 * ch);
    const float sl2 = a.scale * AS_LOG2E, sink2 = it.sink2;
    float m = sink2, l = 0.f, o0 = 0.f, o1 = 0.f;

    for (int c = c0; c < c1; c++) {
        const uint32_t kb = ((c - c0) & 1) ? buf_b : buf_a, vb = kb + AS_KEYS * 128;
        if (c + 1 < c1)
            as_load_chunk(P, table, first, kvh, k_lo + (c + 1) * AS_KEYS, key_end,
                          ((c + 1 - c0) & 1) ? buf_b : buf_a, -1);
        cp_async_commit();
        cp_async_wait<1>();
        consumers_sync(); /* every thread's copies of chunk c have landed */
        if (c == c0) mark(0);
        const int u0 = k_lo + c * AS_KEYS, n_valid = min(AS_KEYS, key_end - u0);
        float z[2];
#pragma unroll
        for (int hlf = 0; hlf < 2; hlf++) {
            const int r = lane + 32 * hlf;
            float s = 0.f;
#pragma unroll
            for (int ch = 0; ch < 8; ch++) {
                const uint4 k8 = lds128(kb + as_swz(r, ch));
                s = dot8(
                    k8, make_float4(qf[8 * ch], qf[8 * ch + 1], qf[8 * ch + 2], qf[8 * ch + 3]),
                    make_float4(qf[8 * ch + 4], qf[8 * ch + 5], qf[8 * ch + 6], qf[8 * ch + 7]), s);
            }
            z[hlf] = r < n_valid ? s * sl2 : -INFINITY;
        }
        float mx = fmaxf(z[0], z[1]);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float mn = fmaxf(m, mx), corr = ex2_approx(m - mn);
        m = mn;
        const float p0 = ex2_approx(z[0] - mn), p1 = ex2_approx(z[1] - mn);
        l = l * corr + p0 + p1;
        o0 *= corr, o1 *= corr;
        /* lane j: dims 2j, 2j + 1 = 32-bit word j of a row: chunk j / 4, word j % 4 */
        for (int r = 0; r < n_valid; r++) {
            const float p = __shfl_sync(0xffffffffu, r < 32 ? p0 : p1, r & 31);
            uint32_t vw;
            asm volatile("ld.shared.u32 %0, [%1];"
                         : "=r"(vw)
                         : "r"(vb + as_swz(r, lane >> 2) + (uint32_t)((lane & 3) * 4)));
            o0 = fmaf(p, bf16x2_lo(vw), o0), o1 = fmaf(p, bf16x2_hi(vw), o1);
        }
        consumers_sync(); /* the buffer is free for chunk c + 2 */
    }
    mark(1);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) l += __shfl_xor_sync(0xffffffffu, l, o);

    uint32_t *out = (uint32_t *)(a.attn + ((size_t)q_row * P.n_heads + head) * AS_HD) + lane;
    if (S == 1) {
        const float inv = 1.f / (l + ex2_approx(sink2 - m));
        *out = pack_bf16x2(o0 * inv, o1 * inv);
        return;
    }
    /* partials: outputs [T][n_heads][SL][64], then (max, sum) [T][n_heads][SL] */
    const size_t part = ((size_t)seq * P.n_heads + head) * SL + split;
    float2 *po = (float2 *)(a.part + part * AS_HD) + lane;
    float2 *ml = (float2 *)(a.part + (size_t)T * P.n_heads * SL * AS_HD);
    *po = make_float2(o0, o1);
    if (lane == 0) ml[part] = make_float2(m, l);
    __shared__ int s_last;
    __threadfence();
    consumers_sync();
    unsigned *count = a.counters + (size_t)seq * nkv + kvh;
    if (threadIdx.x == 0) s_last = atomicAdd(count, 1u) == (unsigned)(S - 1);
    consumers_sync();
    mark(2);
    if (!s_last) return;
    __threadfence();
    /* the merge: out = Σ_s O_s 2^(m_s − M) / (2^(sink − M) + Σ_s l_s 2^(m_s − M)) */
    const size_t pbase = ((size_t)seq * P.n_heads + head) * SL;
    float M = sink2;
    for (int s = 0; s < S; s++) M = fmaxf(M, __ldcg(ml + pbase + s).x);
    float L2 = ex2_approx(sink2 - M), r0 = 0.f, r1 = 0.f;
    for (int s = 0; s < S; s++) {
        const float2 ms = __ldcg(ml + pbase + s),
                     os = __ldcg((const float2 *)(a.part + (pbase + s) * AS_HD) + lane);
        const float f = ex2_approx(ms.x - M);
        L2 += f * ms.y, r0 += f * os.x, r1 += f * os.y;
    }
    const float inv = 1.f / L2;
    *out = pack_bf16x2(r0 * inv, r1 * inv);
    if (threadIdx.x == 0) *count = 0u; /* ready for the next launch */
    mark(3);
}
