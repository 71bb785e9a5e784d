/* Dense bf16 GEMV for decode (gemv.h): y = (x + x_lo) · Wᵀ + bias at M ≤ 8 tokens.
 *
 * Work split. A block of 8 warps stages the M token rows in shared memory as fp32 (x + x_lo added
 * once); each warp then owns rows n = (block · 8 + warp) + i · (grid · 8), i < rows_per_warp, chosen
 * so that every warp has the same number of rows and the grid fits on the GPU at once (one wave, no
 * tail of late blocks).
 *
 * One row: lane L reads 16 bytes (8 bf16 weights) at k = 8 (L + 32 j), j < ceil(K / 256): each load
 * instruction of the warp covers 512 contiguous bytes of the row, and a lane's NJ loads are all issued
 * before the first is used. The multiply of row i consumes its loads one by one and refills each
 * register with the same j of row i + 1 as soon as it is used, so the next row's bytes are in flight
 * while this row is multiplied (a rolling pipeline in NJ registers, not a second buffer). The lane's
 * partial sums (one per token) are then added across the warp with shuffles.
 *
 * Arithmetic per 16-byte load at M tokens: 8 bf16→fp32 unpacks, then per token two 16-byte shared
 * loads of x and 8 FMAs: ~28 instructions at M = 2; at the router's 0.74 MB even M = 8 is a few
 * hundred cycles per SM, so CUDA cores suffice. */
#include "backend/cuda/gemv.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/gemv_row.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/norm_row.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/tma_ring.cuh"

#include <stdlib.h>
#include <string.h>

enum { GV_WARPS = 8, GV_THREADS = GV_WARPS * 32, GV_NJ = GEMV_MAX_K / 256 };
enum { GV_DEVICES = 8 }; /* per-device caches of launch attributes (per_device.h) */

/* gemv_route's routing: where it goes (its r.T is M, its r.E is N) and the arrival counter. */
struct gemv_route_args {
    const uint16_t *bias; /* router bias [E] */
    moe_routing r;
    int *counter;
};

/* gemv_norm_route's input: the residual add and RMSNorm that gives x (norm.h's norm_add). */
struct gemv_norm_args {
    float *h;              /* residual [M][K], h += delta written back by the last block */
    const uint16_t *delta; /* bf16 [M][K] (may be NULL) */
    const uint16_t *gain;  /* RMSNorm weight [K] */
    float eps;
    uint16_t *y; /* the normalised rows as bf16 [M][K] (their high halves), written by block 0 */
};

struct gemv_args {
    const uint16_t *x, *x_lo, *W, *bias;
    void *y;
    int M, K, N;
    int rows_per_warp;
    int stages;  /* ring form: stages in the ring */
    int l2_rest; /* ring form: rows past the first `stages` prefetched toward L2 before the wait */
    gemv_route_args rt;
    gemv_norm_args nm;
};

/* The M token rows as fp32 in shared memory, x (+ x_lo), by threads t, t + n, … of the block. */
static __device__ __forceinline__ void gemv_stage_tokens(const gemv_args &a, float *xs, int t,
                                                         int n) {
    const int K8 = a.K >> 3;
    for (int i = t; i < a.M * K8; i += n) {
        const int m = i / K8, c = i - m * K8;
        float f[8];
        gemv_x8(a.x, a.x_lo, (size_t)m * a.K + (size_t)c * 8, f);
        float4 *dst = (float4 *)(xs + (size_t)m * a.K + (size_t)c * 8);
        dst[0] = make_float4(f[0], f[1], f[2], f[3]);
        dst[1] = make_float4(f[4], f[5], f[6], f[7]);
    }
}

/* Row `row`'s outputs, every lane holding the warp's totals: lane m < M writes token m's (+ bias). */
template <int M, bool OUT_F32>
static __device__ __forceinline__ void gemv_store(const gemv_args &a, const float acc[M], int row,
                                                  int lane) {
    if (lane >= M) return;
    float v = acc[0];
#pragma unroll
    for (int m = 1; m < M; m++)
        if (lane == m) v = acc[m];
    if (a.bias) v += bf16_bits_to_f32(a.bias[row]);
    const size_t o = (size_t)lane * a.N + row;
    if (OUT_F32)
        ((float *)a.y)[o] = v;
    else
        ((uint16_t *)a.y)[o] = f32_to_bf16_bits(v);
}

/* gemv_norm_route's prologue, by every block: the M rows of x = RMSNorm(h + delta) into xs as fp32,
 * and h + delta into hv (for the last block to write back: every block reads h first, so no block may
 * write it before all have read it). Bit for bit what norm_add_kernel writes (y, y_lo) followed by
 * gemv_stage_tokens' y + y_lo: the same per-thread order over 8 features, and the same reduction
 * tree — the norm kernel's threads c = 0 … K/8 − 1 in warps of 32 are played by this block's
 * threads t and t + GV_THREADS, each of whose warps covers exactly one of those warps. */
template <int M>
static __device__ __forceinline__ void gemv_norm_tokens(const gemv_args &a, const uint4 (&g8)[2],
                                                        float *xs, float *hv) {
    __shared__ float red[32];
    const gemv_norm_args &nm = a.nm;
    const int K = a.K, C = K >> 3;
    for (int m = 0; m < M; m++) {
        float v[2][8]; /* groups c = t and t + GV_THREADS: K ≤ GEMV_MAX_K = 4096 */
        const float ss = norm_replay_row<2>(nm.h + (size_t)m * K, NULL, 0,
                                            nm.delta ? nm.delta + (size_t)m * K : NULL, K, v, red);
        const float inv = rms_inv(ss, K, nm.eps);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int c = threadIdx.x + r * GV_THREADS;
            if (c >= C) continue;
            uint4 hi, lo;
            norm_split8(v[r], inv, g8[r], hi, lo);
            if (blockIdx.x == 0) *(uint4 *)(nm.y + (size_t)m * K + 8 * c) = hi;
            store_split8_f32(hi, lo, xs + (size_t)m * K + 8 * c); /* gemv_x8's hi + lo */
            store8_f32(v[r], hv + (size_t)m * K + 8 * c);
        }
    }
}

/* gemv_route's tail, by every thread of every block of the rows form: the last block to finish its
 * rows routes the M tokens' logits, and leaves the counter at zero for the next launch
 * (last_block_arrive: the hand-off without fences). The router bias (model memory, most likely
 * evicted from L2 since the last step) is loaded by every block at kernel start (bias_reg: this
 * thread's element, threads < N), so the last block's top-k reads it from shared memory instead of
 * waiting for DRAM. Measured on the H200 against the CUDA samples' form (a fence before each
 * arrival and another in the last block, the bias read in the top-k): 120b decode +1.9 % at batch
 * 1, +1.4 % at 2, +1.1 % at 4 (bench/results/session6c-2026-12-02-h200.md). */
template <bool NORM>
static __device__ __forceinline__ void gemv_route_tail(const gemv_args &a, uint16_t bias_reg,
                                                       const float *hv) {
    __shared__ uint16_t s_bias[256];
    const gemv_route_args &r = a.rt;
    if ((int)threadIdx.x < a.N) s_bias[threadIdx.x] = bias_reg;
    if (!last_block_arrive(r.counter)) return;
    if (NORM) /* every block has read h: the residual written back (gemv_norm_tokens) */
        for (int i = threadIdx.x; i < a.M * (a.K >> 2); i += blockDim.x)
            ((float4 *)a.nm.h)[i] = ((const float4 *)hv)[i];
    route_small_block((const float *)a.y, NULL, r.bias ? s_bias : NULL, MOE_TILE_TOKENS, r.r);
    if (threadIdx.x == 0) *r.counter = 0;
}

template <int M, bool OUT_F32, bool ROUTE = false, bool NORM = false>
__global__ void __launch_bounds__(GV_THREADS) gemv_kernel(const gemv_args a) {
    extern __shared__ float4 gv_smem[];
    float *xs = (float *)gv_smem;     /* [M][K] */
    float *hv = xs + (size_t)M * a.K; /* NORM: [M][K], h + delta */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int K8 = a.K >> 3;                 /* 16-byte words per row */
    const int nj = (K8 + 31) >> 5;           /* loads per lane per row */
    const int stride = gridDim.x * GV_WARPS; /* rows between a warp's consecutive rows */
    int row = blockIdx.x * GV_WARPS + w;
    int left = row < a.N ? a.rows_per_warp : 0;
    if (row + (left - 1) * stride >= a.N) /* the last rows of the last warps: only those < N */
        left = left > 0 ? (a.N - 1 - row) / stride + 1 : 0;

    /* The first row's weights: model memory, so before the wait (pdl.cuh). */
    uint4 wv[GV_NJ];
#pragma unroll
    for (int j = 0; j < GV_NJ; j++) {
        const int c = lane + 32 * j;
        wv[j] = make_uint4(0, 0, 0, 0);
        if (j < nj && c < K8 && left > 0)
            wv[j] = ldg_stream16(a.W + (size_t)row * a.K + (size_t)c * 8);
    }
    /* gemv_route's bias and gemv_norm_route's gains (groups t and t + GV_THREADS): model memory
     * too, so also before the wait (norm_row.cuh's gain_at says why). */
    uint16_t bias_reg = 0;
    if (ROUTE && a.rt.bias && (int)threadIdx.x < a.N) bias_reg = __ldg(a.rt.bias + threadIdx.x);
    uint4 g8[2] = {make_uint4(0, 0, 0, 0), make_uint4(0, 0, 0, 0)};
    if (NORM)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int c = threadIdx.x + r * GV_THREADS;
            g8[r] = gain_at(a.nm.gain, c, c < K8);
        }
    pdl_prologue();

    /* Stage the tokens as fp32: x (+ x_lo), or the normalised rows (gemv_norm_route). */
    if (NORM)
        gemv_norm_tokens<M>(a, g8, xs, hv);
    else
        gemv_stage_tokens(a, xs, threadIdx.x, GV_THREADS);
    __syncthreads();

    for (; left > 0; left--, row += stride) {
        const bool more = left > 1;
        const size_t next = (size_t)(row + stride) * a.K;
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; m++) acc[m] = 0.0f;
#pragma unroll
        for (int j = 0; j < GV_NJ; j++) {
            const int c = lane + 32 * j;
            if (j < nj && c < K8) {
                const uint4 cur = wv[j];
                if (more) wv[j] = ldg_stream16(a.W + next + (size_t)c * 8); /* the next row's j */
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const float4 *xp = (const float4 *)(xs + (size_t)m * a.K + (size_t)c * 8);
                    acc[m] = dot8(cur, xp[0], xp[1], acc[m]);
                }
            }
        }
        gemv_warp_sum<M>(acc);
        gemv_store<M, OUT_F32>(a, acc, row, lane);
    }
    if (ROUTE) gemv_route_tail<NORM>(a, bias_reg, hv);
}

/* The ring form (gemv.h): one block an SM, each block a contiguous range of rows, streamed row by
 * row through a ring of shared-memory stages by the bulk copy engine (tma_ring.cuh; as many rows as
 * fit in GR_RING_BYTES: ~96 KB in flight an SM, what ~30 GB/s an SM times a few µs of loaded DRAM
 * latency needs). Warp GR_CONSUMERS's lane 0 is the producer, the other GR_CONSUMERS warps each take every
 * GR_CONSUMERS-th row of the range. The first stages are requested before the PDL wait (weights),
 * so the stream starts while the predecessor finishes; the tokens are staged as fp32 in shared memory
 * as in the rows form. A row's products and sums are the rows form's, in the same order
 * (gemv_row.cuh: lane L owns words L + 32 j, then the shuffle tree), so the bits are the same. */
enum {
    GR_CONSUMERS = 8,
    GR_THREADS = (GR_CONSUMERS + 1) * 32,
    GR_MAX_M = 4,
    GR_RING_BYTES = 96 * 1024,
    /* The early form's ring: O's 22 rows of 8 KB an SM do not fit beside the attention kernel's
     * 64 KB block (a block an SM of each must be resident at once for the early start to happen),
     * so 16 stages and the rest toward L2; QKV gets 24 of its 39 rows of 5,760 B. */
    GR_EARLY_RING_BYTES = 144 * 1024,
    /* ... and at most this much of the rest of a block's rows toward L2 (12.7 MB over 132 SMs,
     * a quarter of L2): lm_head's 8.7 MB a block of them made it 1.4× slower. */
    GR_EARLY_L2_BYTES = 96 * 1024,
    GR_MAX_STAGES = 32 /* the barriers' 512 bytes fit the 1 KB in front of the ring */
};

/* Stages in the ring: a multiple of GR_CONSUMERS, so that every use of stage s is read by the same
 * warp (s mod GR_CONSUMERS). That is what makes the parity waits sound: a warp waits for use n of a
 * stage only after it has itself read use n − 1, so that phase has completed, and the parity names
 * the phase in progress. With another count (17 stages for lm_head's 5,760-byte rows) a warp could
 * wait for use 1 of a stage whose use 0 had not landed yet; the parity of use 1 then names the
 * phase before use 0, which counts as complete, so the warp read a stage still being filled and
 * released it early: lm_head in the decode step failed with "unspecified launch failure" on the
 * H200 (the isolated benchmark had passed by timing). */
static int ring_stages(int K) {
    int st = GR_RING_BYTES / (K * 2) / GR_CONSUMERS * GR_CONSUMERS;
    return st < GR_CONSUMERS ? GR_CONSUMERS : st > GR_MAX_STAGES ? GR_MAX_STAGES : st;
}

/* The early form's stages (gemv.h): enough for every row of a block if GR_EARLY_RING_BYTES holds
 * them, else as many as it holds; a multiple of GR_CONSUMERS (above) and at most GR_MAX_STAGES. */
static int ring_stages_early(int K, int N, int blocks) {
    const int rows = (N + blocks - 1) / blocks;
    int st = (rows + GR_CONSUMERS - 1) / GR_CONSUMERS * GR_CONSUMERS;
    if (st > GR_MAX_STAGES) st = GR_MAX_STAGES;
    while (st > GR_CONSUMERS && (size_t)st * K * 2 > GR_EARLY_RING_BYTES) st -= GR_CONSUMERS;
    return st;
}

static size_t ring_smem_bytes(int M, int K, int stages) {
    return 1024 + (size_t)stages * K * 2 + (size_t)M * K * sizeof(float);
}

template <int M, bool OUT_F32>
__global__ void __launch_bounds__(GR_THREADS, 1) gemv_ring_kernel(const gemv_args a) {
    extern __shared__ __align__(128) unsigned char gr_smem[];
    const int S = a.stages;
    uint64_t *full = (uint64_t *)gr_smem, *empty = full + S;
    unsigned char *ring = gr_smem + 1024;              /* [S][K] bf16 */
    float *xs = (float *)(ring + (size_t)S * a.K * 2); /* [M][K] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const uint32_t row_bytes = (uint32_t)a.K * 2;
    /* This block's rows [r0, r0 + n): N split as evenly as the grid allows. */
    const int base = a.N / gridDim.x, extra = a.N % gridDim.x;
    const int n = base + ((int)blockIdx.x < extra);
    const int r0 = blockIdx.x * base + ((int)blockIdx.x < extra ? (int)blockIdx.x : extra);
    if (threadIdx.x == 0) {
        for (int st = 0; st < S; st++) mbar_init(&full[st], 1), mbar_init(&empty[st], 1);
        mbar_init_fence();
    }
    __syncthreads();

    if (w == GR_CONSUMERS) { /* the producer warp */
        if (lane == 0) {
            const int first = n < S ? n : S;
            for (int i = 0; i < first; i++) { /* weights: before the wait (pdl.cuh) */
                mbar_arrive_expect_tx(&full[i], row_bytes);
                bulk_copy_g2s(ring + (size_t)i * row_bytes, a.W + (size_t)(r0 + i) * a.K, row_bytes,
                              &full[i]);
            }
            /* Rows the ring cannot hold yet: toward L2, also before the wait. */
            for (int i = S; i < n && i < S + a.l2_rest; i++)
                bulk_prefetch_l2(a.W + (size_t)(r0 + i) * a.K, row_bytes);
            /* The block's biases, read by gemv_store after each row: model memory, into L1 now
             * rather than a DRAM round trip at the end of the block's last row. */
            if (a.bias && n > 0) {
                for (int i = 0; i < n; i += 64) prefetch_l1(a.bias + r0 + i);
                prefetch_l1(a.bias + r0 + n - 1); /* the range may end in one more line */
            }
            pdl_prologue();
            for (int i = S; i < n; i++) {
                const int st = i % S;
                mbar_wait(&empty[st], (uint32_t)((i / S - 1) & 1));
                mbar_arrive_expect_tx(&full[st], row_bytes);
                bulk_copy_g2s(ring + (size_t)st * row_bytes, a.W + (size_t)(r0 + i) * a.K,
                              row_bytes, &full[st]);
            }
        } else {
            pdl_prologue();
        }
        return;
    }

    pdl_prologue();
    const int K8 = a.K >> 3;
    gemv_stage_tokens(a, xs, threadIdx.x, GR_CONSUMERS * 32);
    asm volatile("bar.sync 1, %0;" ::"r"(GR_CONSUMERS * 32) : "memory"); /* consumers only */

    for (int i = w; i < n; i += GR_CONSUMERS) {
        const int st = i % S;
        mbar_wait(&full[st], (uint32_t)((i / S) & 1));
        const uint4 *wrow = (const uint4 *)(ring + (size_t)st * row_bytes);
        float acc[M];
#pragma unroll
        for (int m = 0; m < M; m++) acc[m] = 0.0f;
#pragma unroll
        for (int j = 0; j < GV_NJ; j++) {
            const int c = lane + 32 * j;
            if (c < K8) {
                const uint4 wv = wrow[c];
#pragma unroll
                for (int m = 0; m < M; m++) {
                    const float4 *xp = (const float4 *)(xs + (size_t)m * a.K + (size_t)c * 8);
                    acc[m] = dot8(wv, xp[0], xp[1], acc[m]);
                }
            }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[st]); /* the stage is read: the producer may refill it */
        gemv_warp_sum<M>(acc);
        gemv_store<M, OUT_F32>(a, acc, r0 + i, lane);
    }
}

typedef void (*gemv_fn)(const gemv_args);

static gemv_fn gemv_ring_for(int M, int out_f32) {
#define GR_CASE(m)                                                                                 \
    case m:                                                                                        \
        return out_f32 ? gemv_ring_kernel<m, true> : gemv_ring_kernel<m, false>;
    switch (M) { GR_CASE(1) GR_CASE(2) GR_CASE(3) GR_CASE(4) }
#undef GR_CASE
    return NULL;
}

static int g_form = -1; /* -1: not decided yet (gemv.h) */

extern "C" void gemv_set_form(int form) {
    g_form = form == GEMV_FORM_ROWS || form == GEMV_FORM_RING ? form : GEMV_FORM_AUTO;
}

static int gemv_form(void) {
    if (g_form < 0) {
        const char *v = getenv("GPTOSS_GEMV_FORM");
        g_form = v && atoi(v) == 1 ? GEMV_FORM_ROWS : v && atoi(v) == 2 ? GEMV_FORM_RING : 0;
    }
    return g_form;
}

/* The ring form for this shape: forced, or AUTO from GEMV_RING_MIN_N rows; never past its limits. */
static bool use_ring(int M, int K, int N) {
    const int f = gemv_form();
    if (f == GEMV_FORM_ROWS || M > GR_MAX_M || ring_smem_bytes(M, K, ring_stages(K)) > 227 * 1024)
        return false;
    return f == GEMV_FORM_RING || N >= GEMV_RING_MIN_N;
}

/* early: the stages of ring_stages_early, the rest of the rows toward L2, and the launch always with
 * the PDL attribute (gemv.h); else ring_stages and pdl_launch's default. */
static cudaError_t ring_launch(gemv_args &a, int out_f32, int early, cudaStream_t stream) {
    const gemv_fn f = gemv_ring_for(a.M, out_f32);
    int dev = 0, sms = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
    if (e != cudaSuccess) return e;
    if (dev < 0 || dev >= GV_DEVICES || sms < 1) return cudaErrorInvalidDevice;
    const int blocks = a.N < sms ? a.N : sms;
    a.stages = early ? ring_stages_early(a.K, a.N, blocks) : ring_stages(a.K);
    a.l2_rest = early ? GR_EARLY_L2_BYTES / (a.K * 2) : 0;
    const size_t smem = ring_smem_bytes(a.M, a.K, a.stages);
    if (smem > 227 * 1024) return cudaErrorInvalidValue;
    /* The shared-memory opt-in, raised once per kernel and device to the largest size asked. */
    static size_t opted[GV_DEVICES][GR_MAX_M + 1][2];
    size_t *o = &opted[dev][a.M][out_f32 != 0];
    if (smem > *o) {
        e = cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)smem);
        if (e != cudaSuccess) return e;
        *o = smem;
    }
    return pdl_launch_attr(early || pdl_enabled(), f, dim3((unsigned)blocks), dim3(GR_THREADS),
                           smem, stream, a);
}

static gemv_fn gemv_kernel_for(int M, int out_f32) {
#define GV_CASE(m)                                                                                 \
    case m:                                                                                        \
        return out_f32 ? gemv_kernel<m, true> : gemv_kernel<m, false>;
    switch (M) {
        GV_CASE(1) GV_CASE(2) GV_CASE(3) GV_CASE(4) GV_CASE(5) GV_CASE(6) GV_CASE(7) GV_CASE(8)
    }
#undef GV_CASE
    return NULL;
}

extern "C" int gemv_supported(int M, int K, int N) {
    return M >= 1 && M <= GEMV_MAX_M && K >= 8 && K <= GEMV_MAX_K && K % 8 == 0 && N >= 1;
}

/* Blocks of one kernel that fit on the GPU at once (queried once per kernel and device: the
 * attribute is the device's, per_device.h). */
static int resident_blocks(int M, int out_f32, size_t smem) {
    static int cache[GV_DEVICES][GEMV_MAX_M + 1][2][2]; /* [device][M][out][smem > 48 KB] */
    int dev = 0, sms = 0, per = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= GV_DEVICES ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 0;
    int *c = &cache[dev][M][out_f32][smem > 48 * 1024];
    if (*c) return *c;
    const gemv_fn f = gemv_kernel_for(M, out_f32);
    if (cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             GEMV_MAX_M * GEMV_MAX_K * 4) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, f, GV_THREADS, smem) != cudaSuccess)
        return 0;
    *c = per * sms;
    return *c;
}

/* The rows form's launch: equal rows per warp, and a grid that is resident at once (a.M, a.K, a.N
 * and the pointers set; rows_per_warp here). */
static cudaError_t rows_launch(gemv_args &a, gemv_fn f, int out_f32, int early,
                               cudaStream_t stream) {
    /* the tokens, and for gemv_norm_route the residual rows too */
    const size_t smem = (size_t)a.M * a.K * sizeof(float) * (a.nm.h ? 2 : 1);
    const int resident = resident_blocks(a.M, out_f32, (size_t)a.M * a.K * sizeof(float));
    if (resident < 1) return cudaErrorInvalidConfiguration;
    const long warps = (long)resident * GV_WARPS;
    const int rpw = (int)((a.N + warps - 1) / warps);
    const int blocks = (int)(((long)a.N + (long)rpw * GV_WARPS - 1) / ((long)rpw * GV_WARPS));
    a.rows_per_warp = rpw, a.stages = 0;
    if (f != gemv_kernel_for(a.M, out_f32)) { /* the routed kernel (one per M): its own opt-in */
        static size_t opted[GV_DEVICES][GEMV_MAX_M + 1][2]; /* [...][NORM] */
        int dev = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e != cudaSuccess) return e;
        if (dev < 0 || dev >= GV_DEVICES) return cudaErrorInvalidDevice;
        /* Always, not only past 48 KB: the routing's static shared memory counts against the same
         * default limit (at 4 tokens 46,080 dynamic + its static bytes crossed it). */
        size_t *o = &opted[dev][a.M][a.nm.h != NULL];
        if (smem > *o) {
            e = cudaFuncSetAttribute((const void *)f, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem);
            if (e != cudaSuccess) return e;
            *o = smem;
        }
    }
    return pdl_launch_attr(early || pdl_enabled(), f, dim3((unsigned)blocks), dim3(GV_THREADS),
                           smem, stream, a);
}

/* The arguments every launch shares; the rest zero. */
static gemv_args gemv_args_of(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                              const uint16_t *W, int N, const uint16_t *bias, void *y) {
    gemv_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.y = y, a.M = M, a.K = K, a.N = N;
    return a;
}

extern "C" cudaError_t gemv_bf16(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                 const uint16_t *W, int N, const uint16_t *bias, void *y,
                                 int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !gemv_supported(M, K, N)) return cudaErrorInvalidValue;
    gemv_args a = gemv_args_of(x, x_lo, M, K, W, N, bias, y);
    if (use_ring(M, K, N)) return ring_launch(a, out_f32 != 0, 0, stream);
    return rows_launch(a, gemv_kernel_for(M, out_f32 != 0), out_f32 != 0, 0, stream);
}

extern "C" int gemv_early_supported(int M, int K, int N) {
    return gemv_supported(M, K, N) && M <= GR_MAX_M &&
           ring_smem_bytes(M, K, GR_CONSUMERS) <= 227 * 1024;
}

extern "C" cudaError_t gemv_bf16_early(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                       const uint16_t *W, int N, const uint16_t *bias, void *y,
                                       int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !gemv_early_supported(M, K, N)) return cudaErrorInvalidValue;
    gemv_args a = gemv_args_of(x, x_lo, M, K, W, N, bias, y);
    return ring_launch(a, out_f32 != 0, 1, stream);
}

static gemv_fn gemv_route_kernel_for(int M, bool norm) {
#define GV_CASE(m)                                                                                 \
    case m:                                                                                        \
        return norm ? gemv_kernel<m, true, true, true> : gemv_kernel<m, true, true>;
    switch (M) {
        GV_CASE(1) GV_CASE(2) GV_CASE(3) GV_CASE(4) GV_CASE(5) GV_CASE(6) GV_CASE(7) GV_CASE(8)
    }
#undef GV_CASE
    return NULL;
}

/* gemv_route and gemv_norm_route: the arguments' checks and the launch (nm NULL: x given). */
static cudaError_t route_launch(const uint16_t *x, const uint16_t *x_lo, const gemv_norm_in *nm,
                                int M, int K, const uint16_t *W, int N, float *logits,
                                const uint16_t *bias, const moe_routing *r, int *counter, int early,
                                cudaStream_t stream) {
    if ((!x && !nm) || !W || !logits || !r || !counter || !gemv_supported(M, K, N) || r->T != M ||
        r->E != N || N > 256 || r->k < 1 || r->k > 8 || r->k > N || M * r->k > 64 || r->e0 < 0 ||
        r->n_e < 1 || r->e0 + r->n_e > N)
        return cudaErrorInvalidValue;
    if (nm && (!nm->h || !nm->gain || !nm->y)) return cudaErrorInvalidValue;
    gemv_args a = gemv_args_of(x, x_lo, M, K, W, N, NULL, logits);
    if (nm)
        a.nm.h = nm->h, a.nm.delta = nm->delta, a.nm.gain = nm->gain, a.nm.eps = nm->eps,
        a.nm.y = nm->y;
    a.rt.bias = bias, a.rt.r = *r, a.rt.counter = counter;
    return rows_launch(a, gemv_route_kernel_for(M, nm != NULL), 1, early, stream);
}

extern "C" cudaError_t gemv_route(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                  const uint16_t *W, int N, float *logits, const uint16_t *bias,
                                  const moe_routing *r, int *counter, int early,
                                  cudaStream_t stream) {
    return route_launch(x, x_lo, NULL, M, K, W, N, logits, bias, r, counter, early, stream);
}

extern "C" cudaError_t gemv_norm_route(const gemv_norm_in *nm, int M, int K, const uint16_t *W,
                                       int N, float *logits, const uint16_t *bias,
                                       const moe_routing *r, int *counter, int early,
                                       cudaStream_t stream) {
    if (!nm) return cudaErrorInvalidValue;
    return route_launch(NULL, NULL, nm, M, K, W, N, logits, bias, r, counter, early, stream);
}
