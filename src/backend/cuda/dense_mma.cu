/* A dense projection of a few tokens on the tensor cores (dense_mma.h says what and why).
 *
 * Block b: rows 16b … 16b+15 of W, WARPS warps; warp w takes the 32-wide k chunks
 * [w·nc/WARPS, (w+1)·nc/WARPS) of the nc = K/32. For chunk c, lane (g, t) (g = lane / 4, t = lane
 * % 4) needs 16 bytes of W rows g and g+8 and of token g's x (and x_lo), all at k = 32c + 8t …
 * 8t+7: two MMAs, the first over that lane's k 8t … 8t+3 (A's registers .x, .y; B's .x, .y), the
 * second over 8t+4 … 8t+7. Tokens g ≥ M copy nothing (zero-filled) and their columns are never
 * stored.
 *
 * The pieces reach shared memory by cp.async, DM_R chunks ahead in a ring of the warp's own (each
 * lane reads back only what it copied, so no barrier is needed; one copy group a chunk). Why not
 * registers: a few warps a tile (O has 180 tiles of 16 rows) hold too few loads in flight; the ring
 * keeps DM_R KB of W a warp in flight without the registers. W's first DM_R chunks are copied
 * before the PDL wait (model memory, pdl.cuh), the tokens' after it. A ring of 8 chunks measured
 * the same (H100, session 24: O alone 14.0 against 13.9 µs, the step within 0.3 %): the ring's
 * depth is not what holds the kernel at ~1.7 TB/s. */
#include "backend/cuda/dense_mma.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/per_device.h"
#include "base/env_switch.h"

#include <string.h>

enum {
    DM_R = 6,              /* chunks a warp's ring holds */
    DM_SLOT_PART = 32 * 16 /* one 16-byte piece a lane */
};

struct dm_args {
    const uint16_t *x, *x_lo, *W, *bias;
    void *y;
    int M, K, N;
};

/* A slot's parts: W row g, W row g+8, x, x_lo (LO). */
template <bool LO> struct dm_slot {
    static constexpr int parts = LO ? 4 : 3, bytes = parts * DM_SLOT_PART;
};

template <int WARPS, bool LO> static constexpr size_t dm_smem_bytes() {
    return (size_t)WARPS * DM_R * dm_slot<LO>::bytes;
}

static __device__ __forceinline__ void dm_mma(float acc[4], uint4 ag, uint4 a8, uint4 xv) {
    mma_bf16_16816(acc, ag.x, a8.x, ag.y, a8.y, xv.x, xv.y);
    mma_bf16_16816(acc, ag.z, a8.z, ag.w, a8.w, xv.z, xv.w);
}

template <int WARPS, bool LO, bool F32>
__global__ void __launch_bounds__(WARPS * 32) dense_mma_kernel(const dm_args a) {
    extern __shared__ __align__(16) unsigned char dm_smem[];
    __shared__ float red[WARPS][32][4];
    constexpr int SB = dm_slot<LO>::bytes;
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int row0 = blockIdx.x * 16, nc = a.K >> 5;
    const int c0 = w * nc / WARPS, n = (w + 1) * nc / WARPS - c0; /* this warp's chunks */
    /* chunk c of row r: elements 32c + 8t …, the uint4 at index 4c + t of the row */
    const uint4 *wg = (const uint4 *)(a.W + (size_t)(row0 + g) * a.K) + t;
    const uint4 *w8 = (const uint4 *)(a.W + (size_t)(row0 + g + 8) * a.K) + t;
    const uint32_t ring = smem_u32(dm_smem) + (uint32_t)(w * DM_R * SB + lane * 16);
    /* W's pieces of the warp's chunk i into slot i % DM_R (nothing past the warp's range) */
    auto copy_w = [&](int i) {
        if (i >= n) return;
        const uint32_t d = ring + (uint32_t)((i % DM_R) * SB);
        cp_async16(d, wg + (size_t)(c0 + i) * 4, 16);
        cp_async16(d + DM_SLOT_PART, w8 + (size_t)(c0 + i) * 4, 16);
    };
    const bool tok = g < a.M;
    const uint4 *xg = (const uint4 *)(a.x + (size_t)(tok ? g : 0) * a.K) + t;
    const uint4 *xl = LO ? (const uint4 *)(a.x_lo + (size_t)(tok ? g : 0) * a.K) + t : NULL;
    auto copy_x = [&](int i) {
        if (i >= n) return;
        const uint32_t d = ring + (uint32_t)((i % DM_R) * SB + 2 * DM_SLOT_PART);
        cp_async16(d, xg + (size_t)(c0 + i) * 4, tok ? 16 : 0);
        if (LO) cp_async16(d + DM_SLOT_PART, xl + (size_t)(c0 + i) * 4, tok ? 16 : 0);
    };
#pragma unroll
    for (int i = 0; i < DM_R; i++) copy_w(i);
    cp_async_commit();
    pdl_prologue();
#pragma unroll
    for (int i = 0; i < DM_R; i++) copy_x(i);
    cp_async_commit();
    cp_async_wait<0>();
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int i = 0; i < n; i++) {
        /* chunk i's group is older than the DM_R − 1 issued after it */
        cp_async_wait<DM_R - 1>();
        const uint32_t d = ring + (uint32_t)((i % DM_R) * SB);
        const uint4 ag = lds128(d), a8 = lds128(d + DM_SLOT_PART),
                    xv = lds128(d + 2 * DM_SLOT_PART);
        dm_mma(acc, ag, a8, xv);
        if (LO) dm_mma(acc, ag, a8, lds128(d + 3 * DM_SLOT_PART));
        /* the slot is this lane's again: chunk i + DM_R into it (an empty group past the end) */
        copy_w(i + DM_R);
        copy_x(i + DM_R);
        cp_async_commit();
    }
    /* The tile's 16 × 8 sums, warp 0's + warp 1's + …: thread (row, token) reads that C element. */
#pragma unroll
    for (int j = 0; j < 4; j++) red[w][lane][j] = acc[j];
    __syncthreads();
    if (threadIdx.x >= 128) return; /* 16 rows × 8 tokens */
    const int row = threadIdx.x >> 3, m = threadIdx.x & 7;
    if (m >= a.M) return;
    const int ln = mma_c_lane(row, m), j = mma_c_reg(row, m);
    float s = 0.f;
#pragma unroll
    for (int v = 0; v < WARPS; v++) s += red[v][ln][j];
    const int nrow = row0 + row;
    if (a.bias) s += bf16_bits_to_f32(__ldg(a.bias + nrow));
    if (F32)
        ((float *)a.y)[(size_t)m * a.N + nrow] = s;
    else
        ((uint16_t *)a.y)[(size_t)m * a.N + nrow] = f32_to_bf16_bits(s);
}

extern "C" int dense_mma_supported(int M, int K, int N) {
    return M >= 1 && M <= DENSE_MMA_MAX_M && K >= 32 * 8 && K <= DENSE_MMA_MAX_K && K % 32 == 0 &&
           N >= 16 && N % 16 == 0;
}

/* The warps a tile: 8 while the tiles fit two blocks an SM in one wave (O's 180 at 2,880 rows),
 * else 4 (QKV's 320 at 5,120: four blocks an SM); either way ~10 warps an SM, each with DM_R KB of W
 * in flight. */
template <int WARPS, bool LO, bool F32>
static cudaError_t dm_launch(const dm_args &a, cudaStream_t stream) {
    static unsigned long long done;
    void (*k)(dm_args) = dense_mma_kernel<WARPS, LO, F32>;
    const size_t smem = dm_smem_bytes<WARPS, LO>();
    if (!per_device_done(&done)) {
        const cudaError_t e =
            cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e != cudaSuccess) return e;
        per_device_mark(&done);
    }
    return pdl_launch(k, dim3((unsigned)(a.N / 16)), dim3(WARPS * 32), smem, stream, a);
}

extern "C" cudaError_t dense_mma(const uint16_t *x, const uint16_t *x_lo, int M, int K,
                                 const uint16_t *W, int N, const uint16_t *bias, void *y,
                                 int out_f32, cudaStream_t stream) {
    if (!x || !W || !y || !dense_mma_supported(M, K, N) || ((uintptr_t)x & 15) ||
        ((uintptr_t)x_lo & 15) || ((uintptr_t)W & 15))
        return cudaErrorInvalidValue;
    dm_args a;
    memset(&a, 0, sizeof a);
    a.x = x, a.x_lo = x_lo, a.W = W, a.bias = bias, a.y = y, a.M = M, a.K = K, a.N = N;
    const bool wide = N / 16 < 256;
    if (x_lo) {
        if (wide)
            return out_f32 ? dm_launch<8, true, true>(a, stream)
                           : dm_launch<8, true, false>(a, stream);
        return out_f32 ? dm_launch<4, true, true>(a, stream) : dm_launch<4, true, false>(a, stream);
    }
    if (wide)
        return out_f32 ? dm_launch<8, false, true>(a, stream)
                       : dm_launch<8, false, false>(a, stream);
    return out_f32 ? dm_launch<4, false, true>(a, stream) : dm_launch<4, false, false>(a, stream);
}

static int g_mode = -1;
extern "C" int dense_mma_mode(void) {
    return env_switch(&g_mode, "GPTOSS_DENSE_MMA", DENSE_MMA_O, DENSE_MMA_OFF, DENSE_MMA_O_QKV);
}
