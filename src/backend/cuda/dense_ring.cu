/* dense_ring (dense_mma.h): the few-token projection with the weights streamed as whole rows.
 *
 * Why a second form: dense_mma's warps read 64-byte pieces of 16 rows 8 KB apart, and stream O at
 * ~1.7 TB/s on an H100 where whole-row streams reach ~3.0 (session 24: lm_head's ring, the ring
 * alone at ≥ 16 KB copies, the plain loads). Here the geometry is the GEMV ring's (gemv.cu): one
 * block an SM owns a contiguous range of rows and a producer lane streams them through a ring of
 * shared-memory stages with the bulk copy engine, a stage being 8 whole rows (one copy of 8·K·2
 * bytes: 64 KB for O, 46 KB for QKV). The tokens sit on the MMA's rows instead of the weights:
 *
 *     C[token][row] = Σ_k A[token][k] · B[k][row],   A = x (16 rows: the M ≤ 8 tokens, then
 *     zeros), B = the stage's 8 weight rows (mma.sync m16n8k16's N = 8)
 *
 * so that 8 rows are a whole MMA. The 8 consumer warps split K: warp w takes the 32-wide chunks
 * [w·nc/8, (w+1)·nc/8) of every stage; for chunk c lane (g, t) loads 16 bytes of token g's row and
 * of weight row g at k = 32c + 8t … 8t+7, two MMAs with the same k permutation as dense_mma (a
 * lane's 8 values fill its k slots 2t, 2t+1, 2t+8, 2t+9 of two MMAs; A's rows 8-15 are zero). The
 * warps' 8 × 8 sums meet in shared memory in warp order (the bits do not depend on timing), the
 * first 64 consumer threads add the bias and store, and the stage goes back to the producer once
 * all 8 warps have read it. The tokens (and the split input's lo half) are staged once a block, as
 * bf16 rows padded by 64 bytes (rows g and g+1 of a quarter-warp's loads in different banks). The
 * first stages are asked for before the PDL wait (model memory, pdl.cuh). */
#include "backend/cuda/dense_mma.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/tma_ring.cuh"

#include <string.h>

enum {
    DR_CONSUMERS = 8,
    DR_THREADS = (DR_CONSUMERS + 1) * 32,
    DR_ROWS = 8,             /* weight rows a stage: the MMA's N */
    DR_STAGES = 2,           /* 2 × 64 KB in flight an SM for O: ~3 µs of an SM's share of DRAM */
    DR_PAD = 32,             /* bf16 values of padding a staged token row */
    DR_MAX_SMEM = 220 * 1024 /* dynamic: the kernel's own 4 KB (red) beside it */
};

struct dr_args {
    const uint16_t *x, *x_lo, *W, *bias;
    void *y;
    int M, K, N;
};

/* Shared memory: the barriers (1 KB), the ring, the token rows (hi, then lo). */
static size_t dr_smem_bytes(int K, bool lo) {
    const size_t xrow = (size_t)(K + DR_PAD) * 2;
    return 1024 + (size_t)DR_STAGES * DR_ROWS * K * 2 + (lo ? 2 : 1) * (size_t)DR_ROWS * xrow;
}

template <bool LO, bool F32>
__global__ void __launch_bounds__(DR_THREADS, 1) dense_ring_kernel(const dr_args a) {
    extern __shared__ __align__(128) unsigned char dr_smem[];
    __shared__ float red[2][DR_CONSUMERS][32][2]; /* a stage's warps' sums, by stage parity */
    uint64_t *full = (uint64_t *)dr_smem, *empty = full + DR_STAGES;
    unsigned char *ring = dr_smem + 1024;
    const int K = a.K, xrow = K + DR_PAD;
    uint16_t *xs = (uint16_t *)(ring + (size_t)DR_STAGES * DR_ROWS * K * 2); /* [8][xrow] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint32_t row_bytes = (uint32_t)K * 2;
    /* This block's rows [r0, r0 + n), N split as evenly as the grid allows; its stages. */
    const int base = a.N / gridDim.x, extra = a.N % gridDim.x;
    const int n = base + ((int)blockIdx.x < extra);
    const int r0 = blockIdx.x * base + ((int)blockIdx.x < extra ? (int)blockIdx.x : extra);
    const int ns = (n + DR_ROWS - 1) / DR_ROWS;
    if (threadIdx.x == 0) {
        for (int s = 0; s < DR_STAGES; s++)
            mbar_init(&full[s], 1), mbar_init(&empty[s], DR_CONSUMERS);
        mbar_init_fence();
    }
    __syncthreads();

    if (w == DR_CONSUMERS) { /* the producer warp */
        if (lane == 0) {
            auto copy = [&](int i) {
                const int s = i % DR_STAGES, rows = min(DR_ROWS, n - i * DR_ROWS);
                mbar_arrive_expect_tx(&full[s], (uint32_t)rows * row_bytes);
                bulk_copy_g2s(ring + (size_t)s * DR_ROWS * row_bytes,
                              a.W + (size_t)(r0 + i * DR_ROWS) * K, (uint32_t)rows * row_bytes,
                              &full[s]);
            };
            for (int i = 0; i < ns && i < DR_STAGES; i++) copy(i); /* weights: before the wait */
            pdl_prologue();
            for (int i = DR_STAGES; i < ns; i++) {
                mbar_wait_or_trap(&empty[i % DR_STAGES], (uint32_t)((i / DR_STAGES - 1) & 1));
                copy(i);
            }
        } else {
            pdl_prologue();
        }
        return;
    }

    pdl_prologue();
    /* The tokens' rows (and lo's) into xs: rows ≥ M stay as they are (their C rows are never
     * stored). */
    const int words = K / 8; /* 16-byte words a row */
    for (int idx = threadIdx.x; idx < (LO ? 2 : 1) * a.M * words; idx += DR_CONSUMERS * 32) {
        const int half = idx / (a.M * words), r = idx % (a.M * words) / words, v = idx % words;
        const uint16_t *src = (half ? a.x_lo : a.x) + (size_t)r * K + (size_t)v * 8;
        cp_async16(smem_u32(xs + ((size_t)half * DR_ROWS + r) * xrow + (size_t)v * 8), src, 16);
    }
    cp_async_commit();
    cp_async_wait<0>();
    asm volatile("bar.sync 1, %0;" ::"n"(DR_CONSUMERS * 32) : "memory"); /* consumers only */

    const int nc = K >> 5, c0 = w * nc / DR_CONSUMERS, c1 = (w + 1) * nc / DR_CONSUMERS;
    const uint32_t xa = smem_u32(xs + (size_t)g * xrow + 8 * t);
    const uint32_t la = smem_u32(xs + ((size_t)DR_ROWS + g) * xrow + 8 * t);
    for (int i = 0; i < ns; i++) {
        const int s = i % DR_STAGES;
        mbar_wait_or_trap(&full[s], (uint32_t)((i / DR_STAGES) & 1));
        const uint32_t wa = smem_u32(ring + (size_t)s * DR_ROWS * row_bytes +
                                     (size_t)g * row_bytes + (size_t)t * 16);
        float acc[4] = {0.f, 0.f, 0.f, 0.f};
        for (int c = c0; c < c1; c++) {
            const uint4 wv = lds128(wa + (uint32_t)c * 64), xv = lds128(xa + (uint32_t)c * 64);
            mma_bf16_16816(acc, xv.x, 0u, xv.y, 0u, wv.x, wv.y);
            mma_bf16_16816(acc, xv.z, 0u, xv.w, 0u, wv.z, wv.w);
            if (LO) {
                const uint4 lv = lds128(la + (uint32_t)c * 64);
                mma_bf16_16816(acc, lv.x, 0u, lv.y, 0u, wv.x, wv.y);
                mma_bf16_16816(acc, lv.z, 0u, lv.w, 0u, wv.z, wv.w);
            }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[s]); /* this warp is done with the stage */
        /* C rows g (tokens) × columns 2t, 2t+1 (weight rows) in acc[0], acc[1]; rows g+8: zero */
        red[i & 1][w][lane][0] = acc[0], red[i & 1][w][lane][1] = acc[1];
        asm volatile("bar.sync 1, %0;" ::"n"(DR_CONSUMERS * 32) : "memory");
        if (threadIdx.x < 64) {
            const int m = threadIdx.x >> 3, col = threadIdx.x & 7; /* token, weight row */
            const int row = r0 + i * DR_ROWS + col;
            if (m < a.M && i * DR_ROWS + col < n) {
                const int ln = m * 4 + (col >> 1), j = col & 1;
                float v = 0.f;
#pragma unroll
                for (int u = 0; u < DR_CONSUMERS; u++) v += red[i & 1][u][ln][j];
                if (a.bias) v += bf16_bits_to_f32(__ldg(a.bias + row));
                if (F32)
                    ((float *)a.y)[(size_t)m * a.N + row] = v;
                else
                    ((uint16_t *)a.y)[(size_t)m * a.N + row] = f32_to_bf16_bits(v);
            }
        }
        /* red[i & 1] is written again at stage i + 2, after the barrier of stage i + 1 */
    }
}

extern "C" int dense_ring_supported(int M, int K, int N, int lo) {
    return M >= 1 && M <= DENSE_MMA_MAX_M && K >= 32 * DR_CONSUMERS && K % 32 == 0 && N >= 1 &&
           dr_smem_bytes(K, lo != 0) <= DR_MAX_SMEM;
}

template <bool LO, bool F32> static cudaError_t dr_launch(const dr_args &a, cudaStream_t stream) {
    static unsigned long long done;
    void (*k)(dr_args) = dense_ring_kernel<LO, F32>;
    if (!per_device_done(&done)) {
        const cudaError_t e =
            cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, DR_MAX_SMEM);
        if (e != cudaSuccess) return e;
        per_device_mark(&done);
    }
    const int sms = per_device_sm_count();
    if (sms < 1) return cudaErrorInvalidConfiguration;
    const int blocks = a.N < sms ? a.N : sms;
    return pdl_launch(k, dim3((unsigned)blocks), dim3(DR_THREADS), dr_smem_bytes(a.K, LO), stream,
                      a);
}

extern "C" cudaError_t dense_ring(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                  const uint16_t *W, int N, const uint16_t *bias, void *y,
                                  int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !dense_ring_supported(M, K, N, x_lo != NULL) || ((uintptr_t)x & 15) ||
        ((uintptr_t)x_lo & 15) || ((uintptr_t)W & 15))
        return cudaErrorInvalidValue;
    dr_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.y = y, a.M = M, a.K = K, a.N = N;
    if (x_lo) return out_f32 ? dr_launch<true, true>(a, stream) : dr_launch<true, false>(a, stream);
    return out_f32 ? dr_launch<false, true>(a, stream) : dr_launch<false, false>(a, stream);
}
