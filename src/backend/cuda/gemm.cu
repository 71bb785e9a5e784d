/* Dense bf16 GEMM with bias: y[M][N] = x[M][K] · W[N][K]ᵀ + b. See gemm.h for the contract.
 *
 * Why a kernel of our own for small M. At decode the product is a matrix–vector product in disguise:
 * every weight byte is used M times, M ≤ 64, so the time is bytes / bandwidth (QKV: 29.5 MB → 7 µs at
 * 4.2 TB/s). cuBLAS reaches ~1.2 TB/s on these shapes because it tiles for reuse, not for streaming.
 * To stream at full bandwidth every SM must keep ~32 KB of loads in flight, so:
 *   - the weight matrix is cut into work items of (16-row tile, K split, token chunk); a block of 8
 *     warps takes 8 (or 8·tpw) consecutive row tiles of one K split, each warp one tile at a time;
 *   - each thread issues 8–16 independent 16-byte loads (ld.global.nc, no L1 allocation) before it
 *     uses the first;
 *   - the block's slice of the activations (≤ 64 tokens × its K range) sits in shared memory;
 *   - tensor cores do the multiply-adds: mma.sync m16n8k16 with the 16 weight rows as the "M" side
 *     and 8 tokens as the "N" side (padded with zero rows when M < 8: the wasted MMA work is free in
 *     a bandwidth-bound kernel).
 *
 * The k-permutation trick (no shuffles, no ldmatrix). An m16n8k16 MMA sums over 16 k values, and any
 * permutation of k applied to both operands gives the same sum. Thread (g = lane/4, t = lane%4) loads
 * 16 bytes = 8 consecutive k of weight row g and 8 of row g+8, at k = 32c + 8t … 8t+7, and 16 bytes
 * of token g's activations at the same k. The PTX fragment layout wants, per thread, A elements
 * (row g, k 2t..2t+1), (row g+8, k 2t..2t+1), (row g, k 2t+8..2t+9), (row g+8, k 2t+8..2t+9) and B
 * elements (k 2t..2t+1, n g), (k 2t+8..2t+9, n g). Calling "logical k" 2t,2t+1,2t+8,2t+9 our physical
 * k 8t+0..8t+3 makes the first MMA consume words .x,.y of each load and a second MMA words .z,.w:
 * two MMAs eat one 32-wide k chunk, exactly, straight from the registers the loads filled.
 *
 * K splits: when the matrix has few row tiles (O, router) one K range per work item would leave SMs
 * idle, so K is split S ways. Each split writes fp32 partial sums to a workspace; the last block of a
 * row block to finish (an atomic counter) adds the S partials in the fixed order s = 0 … S−1 (loading
 * 8 at a time), adds the bias and writes y. Same inputs, same bits, every run.
 *
 * Large M goes to cuBLASLt (compute-bound; cuBLAS is good there). */
#include "backend/cuda/gemm.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"

#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* The skinny kernel                                                                               */

enum { SK_WARPS = 8, SK_THREADS = SK_WARPS * 32, SK_MAX_TOKENS = 64 };
/* Shared memory per block we allow ourselves: two blocks (16 warps) per SM at the largest slice. */
enum { SK_SMEM_LIMIT = 110 * 1024 };
enum { SK_MAX_COUNTERS = 16384 };
enum { FIXUP_BATCH = 8 }; /* split-K partials the fix-up loads at once (see the kernel's end) */

struct skinny_args {
    const uint16_t *x;    /* [M][K] */
    const uint16_t *W;    /* [N][K] */
    const uint16_t *bias; /* [N] or NULL */
    void *y;              /* [M][N] */
    float *ws;            /* [S][M][N] partial sums when S > 1 */
    int *counters;        /* [n_rb * Z], zero between launches */
    int M, K, N;
    int S;   /* K splits */
    int Z;   /* token chunks of NT*8 tokens */
    int tpw; /* row tiles per warp */
    int lds; /* shared-memory row stride, in bf16 elements */
};

/* Writes one output element. */
template <bool OUT_F32>
static __device__ __forceinline__ void store_out(void *y, size_t i, float v) {
    if (OUT_F32)
        ((float *)y)[i] = v;
    else
        ((uint16_t *)y)[i] = f32_to_bf16_bits(v);
}

/* NT = token tiles of 8 per chunk (1…8); U = 32-wide k chunks loaded per batch (loads in flight:
 * 2·U 16-byte loads per thread). */
template <int NT, bool OUT_F32>
__global__ void __launch_bounds__(SK_THREADS, 2) skinny_gemm_kernel(const skinny_args a) {
    pdl_prologue(); /* first: see pdl.cuh */
    constexpr int U = NT <= 2 ? 8 : 4;
    constexpr int MC = NT * 8; /* tokens per chunk */
    extern __shared__ uint4 smem_raw[];
    uint16_t *xs = (uint16_t *)smem_raw; /* [MC][lds] */
    __shared__ int s_is_last;

    const int bid = blockIdx.x;
    const int z = bid % a.Z, s = (bid / a.Z) % a.S, rb = bid / (a.Z * a.S);
    const int C = a.K / 32; /* 32-wide chunks along K */
    const int c0 = (int)((long)s * C / a.S), c1 = (int)((long)(s + 1) * C / a.S), nch = c1 - c0;
    const int k0 = c0 * 32;
    const int m0 = z * MC, mc = min(MC, a.M - m0);

    /* Stage this block's activation slice (tokens m0…m0+MC−1, k0…k0+32·nch−1) in shared memory;
     * rows past M are zeros so padded tokens contribute nothing. */
    const int vpr = nch * 4; /* 16-byte vectors per row */
    for (int i = threadIdx.x; i < MC * vpr; i += SK_THREADS) {
        int r = i / vpr, v = i - r * vpr;
        uint4 val = make_uint4(0, 0, 0, 0);
        if (r < mc) val = *(const uint4 *)(a.x + (size_t)(m0 + r) * a.K + k0 + v * 8);
        *(uint4 *)(xs + r * a.lds + v * 8) = val;
    }
    __syncthreads();

    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int n_tiles = (a.N + 15) / 16;
    for (int tp = 0; tp < a.tpw; tp++) {
        const int tile = (rb * a.tpw + tp) * SK_WARPS + w;
        if (tile >= n_tiles) break; /* no barrier inside this loop, so leaving early is fine */
        const int n0 = tile * 16;
        /* Rows past N (only in a last partial tile) read a valid row; their results are dropped. */
        const int ra = min(n0 + g, a.N - 1), rb8 = min(n0 + g + 8, a.N - 1);
        const uint16_t *wa = a.W + (size_t)ra * a.K + k0 + 8 * t;
        const uint16_t *wb = a.W + (size_t)rb8 * a.K + k0 + 8 * t;
        const uint16_t *xb = xs + g * a.lds + 8 * t;

        float acc[NT][4];
#pragma unroll
        for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

        for (int c = 0; c < nch; c += U) {
            uint4 av[U], bv[U];
#pragma unroll
            for (int u = 0; u < U; u++) { /* all loads first: 2·U requests in flight */
                if (c + u < nch) {
                    av[u] = ldg_stream16(wa + (c + u) * 32);
                    bv[u] = ldg_stream16(wb + (c + u) * 32);
                } else {
                    av[u] = bv[u] = make_uint4(0, 0, 0, 0);
                }
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                if (c + u < nch) {
#pragma unroll
                    for (int nt = 0; nt < NT; nt++) {
                        const uint4 xv = *(const uint4 *)(xb + nt * 8 * a.lds + (c + u) * 32);
                        mma_bf16_16816(acc[nt], av[u].x, bv[u].x, av[u].y, bv[u].y, xv.x, xv.y);
                        mma_bf16_16816(acc[nt], av[u].z, bv[u].z, av[u].w, bv[u].w, xv.z, xv.w);
                    }
                }
            }
        }

        /* Accumulator fragment: acc[nt][2·hh + q] is (row n0 + g + 8·hh, token m0 + 8·nt + 2t + q). */
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int n = n0 + g + 8 * hh;
            if (n >= a.N) continue;
            const float bias = (a.S == 1 && a.bias) ? bf16_bits_to_f32(a.bias[n]) : 0.0f;
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    const int ml = nt * 8 + 2 * t + q;
                    if (ml >= mc) continue;
                    const size_t m = (size_t)(m0 + ml);
                    if (a.S == 1)
                        store_out<OUT_F32>(a.y, m * a.N + n, acc[nt][2 * hh + q] + bias);
                    else
                        a.ws[((size_t)s * a.M + m) * a.N + n] = acc[nt][2 * hh + q];
                }
            }
        }
    }
    if (a.S == 1) return;

    /* Split-K fix-up: the last of the S blocks of (row block rb, token chunk z) sums the partials.
     * For the router at decode (S = 45, one output per thread) this loop is the kernel's tail and
     * pure latency: one load after another would be S round trips to L2. So the partials are read
     * FIXUP_BATCH at a time into registers, all loads of a batch issued before the first add, and
     * then added one by one in the order s = 0, 1, ..., S - 1 into a sum that starts at 0 — the same
     * additions in the same order as a one-load-at-a-time loop, so the same bits. Past S the last
     * batch reloads partial S - 1 (branch-free loads) and adds nothing. */
    __threadfence(); /* our partials are visible device-wide before we are counted */
    __syncthreads();
    const int grp = rb * a.Z + z;
    if (threadIdx.x == 0) s_is_last = atomicAdd(&a.counters[grp], 1) == a.S - 1;
    __syncthreads();
    if (!s_is_last) return;
    __threadfence();
    const int row0 = rb * a.tpw * SK_WARPS * 16, row1 = min(a.N, row0 + a.tpw * SK_WARPS * 16);
    const int nrows = row1 - row0;
    for (int i = threadIdx.x; i < mc * nrows; i += SK_THREADS) {
        const int ml = i / nrows, n = row0 + (i - ml * nrows);
        const size_t m = (size_t)(m0 + ml);
        const float *part = a.ws + m * a.N + n; /* partial s2 at part[s2 * M * N] */
        const size_t split_stride = (size_t)a.M * a.N;
        float sum = 0.0f;
        for (int s2 = 0; s2 < a.S; s2 += FIXUP_BATCH) {
            float v[FIXUP_BATCH]; /* past S: partial S - 1 again (not added), so no branch */
#pragma unroll
            for (int u = 0; u < FIXUP_BATCH; u++)
                v[u] = __ldcg(part + (size_t)min(s2 + u, a.S - 1) * split_stride);
#pragma unroll
            for (int u = 0; u < FIXUP_BATCH; u++)
                if (s2 + u < a.S) sum += v[u];
        }
        if (a.bias) sum += bf16_bits_to_f32(a.bias[n]);
        store_out<OUT_F32>(a.y, m * a.N + n, sum);
    }
    if (threadIdx.x == 0) a.counters[grp] = 0; /* ready for the next launch */
}

/* fp32 output + bf16 bias on the cuBLASLt path (cuBLASLt wants the bias in the output type). */
__global__ void add_bias_f32_kernel(float *y, const uint16_t *bias, long total, int N) {
    pdl_prologue(); /* first: see pdl.cuh */
    for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < total;
         i += (long)gridDim.x * blockDim.x)
        y[i] += bf16_bits_to_f32(bias[i % N]);
}

typedef void (*skinny_fn)(const skinny_args);

static skinny_fn skinny_kernel_for(int nt, int out_f32) {
#define SK_CASE(n)                                                                                 \
    case n:                                                                                        \
        return out_f32 ? skinny_gemm_kernel<n, true> : skinny_gemm_kernel<n, false>;
    switch (nt) {
        SK_CASE(1) SK_CASE(2) SK_CASE(3) SK_CASE(4) SK_CASE(5) SK_CASE(6) SK_CASE(7) SK_CASE(8)
    }
#undef SK_CASE
    return NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Context, planning, cuBLASLt                                                                     */

enum { LT_CACHE = 16 };
typedef struct {
    int used, M, N, K, out, bias_epi;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
} lt_entry;

struct gemm_ctx {
    int sm_count;
    size_t l2_bytes;
    float *ws; /* split-K partials */
    size_t ws_bytes;
    int *counters; /* SK_MAX_COUNTERS ints, zero */
    cublasLtHandle_t lt;
    void *lt_ws;
    size_t lt_ws_bytes;
    lt_entry cache[LT_CACHE];
    int cache_next;
};

typedef struct {
    int ok, nt, S, Z, tpw, lds, n_rb;
    size_t smem;
} skinny_plan;

/* Chooses how to cut the matrix. Targets: about one resident wave of work items (every SM has loads
 * in flight, no second nearly-empty wave), ≤ SK_SMEM_LIMIT bytes of activations per block, partial
 * sums within the workspace. */
static skinny_plan plan_skinny(const gemm_ctx *ctx, int M, int K, int N) {
    skinny_plan p;
    memset(&p, 0, sizeof p);
    if (M < 1 || K < 32 || K % 32 || N < 1) return p;
    const int mchunk = M < SK_MAX_TOKENS ? M : SK_MAX_TOKENS;
    p.nt = (mchunk + 7) / 8;
    p.Z = (M + p.nt * 8 - 1) / (p.nt * 8);
    /* Several token chunks re-read the weights. The chunk index varies fastest in the block order, so
     * the Z blocks of one (row block, split) run together and the re-reads hit L2; cap Z at 4. */
    if (p.Z > 4) return p;
    const int C = K / 32, tiles = (N + 15) / 16;
    /* Smallest split whose activation slice fits in shared memory. */
    int S_smem = 1, lds_bytes = 0;
    for (;; S_smem++) {
        if (S_smem > C) return p;
        const int maxch = (C + S_smem - 1) / S_smem;
        lds_bytes = maxch * 64;
        if (lds_bytes % 128 == 0) lds_bytes += 64; /* rows g and g+1 land on different banks */
        if ((size_t)p.nt * 8 * lds_bytes <= SK_SMEM_LIMIT) break;
    }
    /* Split wanted for parallelism: as many warp work items as one resident wave holds (2 blocks of
     * 8 warps per SM), each split ≥ 2 chunks (64 k). Each warp keeps 8–16 loads of 16 B in flight,
     * far more than the ~32 KB per SM that hides the memory latency. */
    const long target = (long)ctx->sm_count * 2 * SK_WARPS;
    long S_want = target / ((long)tiles * p.Z);
    if (S_want > C / 2) S_want = C / 2;
    if (S_want < 1) S_want = 1;
    /* Largest split whose partial sums fit in the workspace. */
    const long S_ws = (long)(ctx->ws_bytes / ((size_t)M * N * sizeof(float)));
    long S = S_want > S_smem ? S_want : S_smem;
    if (S > 1 && S > S_ws) S = S_ws > S_smem ? S_ws : S_smem;
    if (S > 1 && S > S_ws) return p; /* needs a split the workspace cannot hold */
    p.S = (int)S;
    {
        const int maxch = (C + p.S - 1) / p.S;
        lds_bytes = maxch * 64;
        if (lds_bytes % 128 == 0) lds_bytes += 64;
        p.lds = lds_bytes / 2;
        p.smem = (size_t)p.nt * 8 * lds_bytes;
    }
    /* With no K split and many tiles, give each warp several tiles so a block re-stages its
     * activations less often (blocks still ≥ ~4 per SM). */
    p.tpw = 1;
    if (p.S == 1) {
        long per = (long)tiles / ((long)SK_WARPS * ctx->sm_count * 4);
        p.tpw = per < 1 ? 1 : (per > 8 ? 8 : (int)per);
    }
    p.n_rb = (tiles + SK_WARPS * p.tpw - 1) / (SK_WARPS * p.tpw);
    if (p.S > 1 && (long)p.n_rb * p.Z > SK_MAX_COUNTERS) return p;
    if ((long)p.n_rb * p.S * p.Z > 0x7fffffffL) return p;
    p.ok = 1;
    return p;
}

cudaError_t gemm_ctx_create(gemm_ctx **out) {
    *out = NULL;
    gemm_ctx *c = (gemm_ctx *)calloc(1, sizeof *c);
    if (!c) return cudaErrorMemoryAllocation;
    int dev = 0, l2 = 0;
    cudaError_t e;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) goto fail;
    if ((e = cudaDeviceGetAttribute(&c->sm_count, cudaDevAttrMultiProcessorCount, dev)) !=
        cudaSuccess)
        goto fail;
    if ((e = cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev)) != cudaSuccess) goto fail;
    c->l2_bytes = (size_t)l2;
    c->ws_bytes = (size_t)32 << 20;
    if ((e = cudaMalloc(&c->ws, c->ws_bytes)) != cudaSuccess) goto fail;
    if ((e = cudaMalloc(&c->counters, SK_MAX_COUNTERS * sizeof(int))) != cudaSuccess) goto fail;
    if ((e = cudaMemset(c->counters, 0, SK_MAX_COUNTERS * sizeof(int))) != cudaSuccess) goto fail;
    c->lt_ws_bytes = (size_t)32 << 20;
    if ((e = cudaMalloc(&c->lt_ws, c->lt_ws_bytes)) != cudaSuccess) goto fail;
    if (cublasLtCreate(&c->lt) != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "gemm: cublasLtCreate failed\n");
        e = cudaErrorUnknown;
        goto fail;
    }
    for (int nt = 1; nt <= 8; nt++)
        for (int f = 0; f < 2; f++)
            if ((e = cudaFuncSetAttribute((const void *)skinny_kernel_for(nt, f),
                                          cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          SK_SMEM_LIMIT)) != cudaSuccess)
                goto fail;
    *out = c;
    return cudaSuccess;
fail:
    gemm_ctx_destroy(c);
    return e;
}

void gemm_ctx_destroy(gemm_ctx *c) {
    if (!c) return;
    for (int i = 0; i < LT_CACHE; i++) {
        lt_entry *en = &c->cache[i];
        if (!en->used) continue;
        cublasLtMatmulDescDestroy(en->desc);
        cublasLtMatrixLayoutDestroy(en->la);
        cublasLtMatrixLayoutDestroy(en->lb);
        cublasLtMatrixLayoutDestroy(en->lc);
    }
    if (c->lt) cublasLtDestroy(c->lt);
    cudaFree(c->lt_ws);
    cudaFree(c->counters);
    cudaFree(c->ws);
    free(c);
}

static void lt_entry_free(lt_entry *en) {
    if (!en->used) return;
    cublasLtMatmulDescDestroy(en->desc);
    cublasLtMatrixLayoutDestroy(en->la);
    cublasLtMatrixLayoutDestroy(en->lb);
    cublasLtMatrixLayoutDestroy(en->lc);
    memset(en, 0, sizeof *en);
}

#define LT_TRY(x)                                                                                  \
    do {                                                                                           \
        cublasStatus_t lt_st_ = (x);                                                               \
        if (lt_st_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            fprintf(stderr, "gemm: %s failed (status %d) for M=%d N=%d K=%d\n", #x, (int)lt_st_,   \
                    M, N, K);                                                                      \
            lt_entry_free(en);                                                                     \
            return NULL;                                                                           \
        }                                                                                          \
    } while (0)

/* Finds or builds the cuBLASLt descriptors and algorithm (the heuristic's first) for a shape.
 * Column-major view: y (row-major M×N) is yᵀ (col-major N×M, ld N) = W (as col-major K×N, ld K)ᵀ ·
 * x (as col-major K×M, ld K). So op(A) = T on W, op(B) = N on x. At M <= 8 the first algorithm may
 * split K (the batch-1 O projection: a GEMM plus cuBLASLt's splitKreduce kernel); the best-ranked
 * unsplit one instead was measured slower on the H200 (120b decode batch 1 351 → 345 tok/s, batch 8
 * equal: bench/results/session4-2026-12-02-h200.md). */
static lt_entry *lt_lookup(gemm_ctx *c, int M, int N, int K, int out, int bias_epi,
                           const void *bias) {
    for (int i = 0; i < LT_CACHE; i++) {
        lt_entry *en = &c->cache[i];
        if (en->used && en->M == M && en->N == N && en->K == K && en->out == out &&
            en->bias_epi == bias_epi)
            return en;
    }
    lt_entry *en = &c->cache[c->cache_next];
    c->cache_next = (c->cache_next + 1) % LT_CACHE;
    lt_entry_free(en);
    en->used = 1; /* so that LT_TRY's cleanup destroys what was created */
    en->M = M, en->N = N, en->K = K, en->out = out, en->bias_epi = bias_epi;
    const cudaDataType_t dt = out ? CUDA_R_32F : CUDA_R_16BF;
    LT_TRY(cublasLtMatmulDescCreate(&en->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    LT_TRY(cublasLtMatmulDescSetAttribute(en->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
    LT_TRY(cublasLtMatmulDescSetAttribute(en->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
    if (bias_epi) {
        cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
        LT_TRY(cublasLtMatmulDescSetAttribute(en->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep,
                                              sizeof ep));
        LT_TRY(cublasLtMatmulDescSetAttribute(en->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                              sizeof bias));
    }
    LT_TRY(cublasLtMatrixLayoutCreate(&en->la, CUDA_R_16BF, K, N, K));
    LT_TRY(cublasLtMatrixLayoutCreate(&en->lb, CUDA_R_16BF, K, M, K));
    LT_TRY(cublasLtMatrixLayoutCreate(&en->lc, dt, N, M, N));
    cublasLtMatmulPreference_t pref;
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &c->lt_ws_bytes, sizeof c->lt_ws_bytes);
    cublasLtMatmulHeuristicResult_t res;
    int n_res = 0;
    if (st == CUBLAS_STATUS_SUCCESS)
        st = cublasLtMatmulAlgoGetHeuristic(c->lt, en->desc, en->la, en->lb, en->lc, en->lc, pref,
                                            1, &res, &n_res);
    cublasLtMatmulPreferenceDestroy(pref);
    LT_TRY(st);
    if (n_res < 1) {
        fprintf(stderr, "gemm: cuBLASLt has no algorithm for M=%d N=%d K=%d\n", M, N, K);
        lt_entry_free(en);
        return NULL;
    }
    en->algo = res.algo;
    return en;
}

static cudaError_t gemm_cublas(gemm_ctx *c, const uint16_t *x, int M, int K, const uint16_t *W,
                               int N, const uint16_t *bias, void *y, enum gemm_out out,
                               cudaStream_t stream) {
    const int bias_epi = bias && out == GEMM_OUT_BF16;
    lt_entry *en = lt_lookup(c, M, N, K, (int)out, bias_epi, bias);
    if (!en) return cudaErrorUnknown;
    if (bias_epi) /* the pointer may differ from the cached one */
        if (cublasLtMatmulDescSetAttribute(en->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof bias) != CUBLAS_STATUS_SUCCESS)
            return cudaErrorUnknown;
    const float alpha = 1.0f, beta = 0.0f;
    cublasStatus_t st =
        cublasLtMatmul(c->lt, en->desc, &alpha, W, en->la, x, en->lb, &beta, y, en->lc, y, en->lc,
                       &en->algo, c->lt_ws, c->lt_ws_bytes, stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        fprintf(stderr, "gemm: cublasLtMatmul failed (status %d) for M=%d N=%d K=%d\n", (int)st, M,
                N, K);
        return cudaErrorUnknown;
    }
    if (bias && !bias_epi) {
        long total = (long)M * N;
        int blocks = (int)((total + 255) / 256 < 4096 ? (total + 255) / 256 : 4096);
        pdl_launch(add_bias_f32_kernel, dim3(blocks), dim3(256), 0, stream, (float *)y, bias, total,
                   N);
        CUDA_TRY(cudaGetLastError());
    }
    return cudaSuccess;
}

static cudaError_t gemm_skinny(gemm_ctx *c, const skinny_plan *p, const uint16_t *x, int M, int K,
                               const uint16_t *W, int N, const uint16_t *bias, void *y,
                               enum gemm_out out, cudaStream_t stream) {
    skinny_args a;
    a.x = x, a.W = W, a.bias = bias, a.y = y, a.ws = c->ws, a.counters = c->counters;
    a.M = M, a.K = K, a.N = N, a.S = p->S, a.Z = p->Z, a.tpw = p->tpw, a.lds = p->lds;
    const long blocks = (long)p->n_rb * p->S * p->Z;
    return pdl_launch(skinny_kernel_for(p->nt, out == GEMM_OUT_F32), dim3((unsigned)blocks),
                      dim3(SK_THREADS), p->smem, stream, a);
}

/* AUTO: the skinny kernel up to 128 tokens (two chunks of 64), cuBLASLt beyond. */
/* Measured on the H200 (bench/results/kernels-2026-11-30-h200.md): cuBLASLt streams the QKV, O and
 * lm_head weights faster than the skinny kernel at every M (2.3 vs 1.9 TB/s at M = 1, 2.4 vs 0.6 at
 * M = 64); the skinny kernel only wins for short-and-wide products like the router (N <= 256) at
 * M <= 8. Until the skinny kernel is fixed, dispatch by that measurement. */
static int auto_skinny(const skinny_plan *p, int M, int N) {
    return p->ok && M <= 8 && N <= 256;
}

cudaError_t gemm_bf16_path(gemm_ctx *c, const uint16_t *x, int M, int K, const uint16_t *W, int N,
                           const uint16_t *bias, void *y, enum gemm_out out, enum gemm_path path,
                           cudaStream_t stream) {
    if (!c || !x || !W || !y || M < 0 || N < 1 || K < 32 || K % 32) return cudaErrorInvalidValue;
    if (M == 0) return cudaSuccess;
    if (path != GEMM_PATH_CUBLAS) {
        skinny_plan p = plan_skinny(c, M, K, N);
        if (path == GEMM_PATH_SKINNY && !p.ok) return cudaErrorNotSupported;
        if (path == GEMM_PATH_SKINNY || auto_skinny(&p, M, N))
            return gemm_skinny(c, &p, x, M, K, W, N, bias, y, out, stream);
    }
    return gemm_cublas(c, x, M, K, W, N, bias, y, out, stream);
}

cudaError_t gemm_bf16(gemm_ctx *c, const uint16_t *x, int M, int K, const uint16_t *W, int N,
                      const uint16_t *bias, void *y, enum gemm_out out, cudaStream_t stream) {
    return gemm_bf16_path(c, x, M, K, W, N, bias, y, out, GEMM_PATH_AUTO, stream);
}

int gemm_plan_describe(gemm_ctx *c, int M, int K, int N, int *splits, int *chunks,
                       int *tiles_per_warp) {
    skinny_plan p = plan_skinny(c, M, K, N);
    if (splits) *splits = p.S;
    if (chunks) *chunks = p.Z;
    if (tiles_per_warp) *tiles_per_warp = p.tpw;
    return auto_skinny(&p, M, N) ? GEMM_PATH_SKINNY : GEMM_PATH_CUBLAS;
}
