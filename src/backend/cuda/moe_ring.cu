/* The MoE small path for decode steps of at most MOE_RING_MAX_T tokens, as a ring (moe.h:
 * moe_plan.ring): one block an SM streams its share of the touched experts' 16-row tiles through a
 * ring of shared-memory stages filled by the bulk copy engine (tma_ring.cuh), and eight consumer
 * warps multiply each tile with the expert's tokens exactly as moe_small.cuh does.
 *
 * Why (bench/NOTES.md, session 6 of 2026-12-02): the block-per-item small kernel keeps at most two
 * register batches of codes in flight per warp (12 k steps, ~6 KB), so a 23 KB tile is ~4 memory
 * round trips one after another and the expert stream at one token ran at ~2.2 TB/s (gate_up 15.6 µs
 * for 35 MB). The GEMV's ring form showed that one block an SM with ~100+ KB of bulk copies in flight
 * streams at the DRAM's rate once its share is large (lm_head 4.34 TB/s): here every SM has
 * 5–8 whole tiles (24 KB each: a tile's codes and scales are contiguous in moe_repack.cu's layout,
 * two bulk copies) requested at once as soon as the routing is known.
 *
 * Work split. The tiles (touched expert i, row tile rt), numbered i·RT + rt, are cut into gridDim.x
 * contiguous ranges; block b streams its range in order, stage j % NS for its j-th tile, and
 * consumer warp c takes its tiles c, c + 8, …. A range is shorter than an expert's RT tiles when
 * the grid is at least the number of touched experts (the launch makes sure), so it spans at most
 * two experts: their tokens (≤ T rows each, one pair per token and expert) are staged once in
 * shared memory (bf16, row stride ≡ 64 B mod 128 as in moe_small.cuh) before the tiles are
 * multiplied. No K split (S = 1): the down projection writes y_slots with one row per pair.
 *
 * Bits: a tile's k steps are multiplied in the same order and with the same dequantisation and MMAs
 * as moe_small.cuh's items at NTP = 1 and S = 1, so the output is byte-identical to that plan
 * (tests/gpu/test_moe.cu asserts it). */
#include "backend/cuda/moe.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_small.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/tma_ring.cuh"

enum {
    MR_CONSUMERS = 8,
    MR_THREADS = (MR_CONSUMERS + 1) * 32,
    MR_XSLOTS = 2,        /* experts a block's range can span */
    MR_BAR_BYTES = 1024,  /* the mbarriers, in front of everything */
    MR_MAX_STAGES = 8,    /* ~195 KB: about what fits beside one token's rows */
    MR_SMEM = 227 * 1024, /* the H200's opt-in limit per block */
    MR_U = 4              /* k steps whose stage words a consumer lane loads at once */
};

/* Bytes of one stage: a tile's codes (KK k steps × 32 lanes × 16 B) and scale words (KK × 8 × 4 B). */
static __host__ __device__ inline uint32_t ring_stage_bytes(int KK) {
    return (uint32_t)KK * (512 + 32);
}

/* Row stride of the staged tokens, in bf16 elements (≡ 64 bytes mod 128, as moe_small.cuh). */
static __host__ __device__ inline int ring_x_stride(int K) {
    return K + 32;
}

struct ring_args {
    moe_args a;
    int T;      /* tokens of the step: an expert has at most T pairs */
    int stages; /* NS */
};

template <int MODE, bool FOLDED>
__global__ void __launch_bounds__(MR_THREADS, 1) moe_ring_kernel(const ring_args ra) {
    const moe_args &a = ra.a;
    extern __shared__ __align__(128) unsigned char mr_smem[];
    const int NS = ra.stages;
    uint64_t *full = (uint64_t *)mr_smem, *empty = full + NS;
    const uint32_t stage_bytes = ring_stage_bytes(a.KK), code_bytes = (uint32_t)a.KK * 512;
    unsigned char *ring = mr_smem + MR_BAR_BYTES;
    const int lds = ring_x_stride(a.K);
    uint16_t *xs = (uint16_t *)(ring + (size_t)NS * stage_bytes); /* [XSLOTS][T][lds] */
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    if (threadIdx.x == 0) {
        for (int st = 0; st < NS; st++) mbar_init(&full[st], 1), mbar_init(&empty[st], 1);
        mbar_init_fence();
    }
    __syncthreads();
    pdl_prologue(); /* the routing (which tiles) comes from the previous kernel */

    /* This block's tiles [lo, lo + n) of the n_touched · RT. */
    const int total = *a.n_touched * a.RT;
    const int lo = (int)((long)total * blockIdx.x / gridDim.x);
    const int n = (int)((long)total * (blockIdx.x + 1) / gridDim.x) - lo;
    if (n <= 0) return;            /* uniform: before any barrier use */
    const int i_first = lo / a.RT; /* the range's first touched expert (slot 0) */

    if (w == MR_CONSUMERS) { /* the producer warp: one lane issues every copy */
        if (lane == 0) {
            for (int j = 0; j < n; j++) {
                const int st = j % NS;
                if (j >= NS) mbar_wait(&empty[st], (uint32_t)((j / NS - 1) & 1));
                const int tile = lo + j, i = tile / a.RT, rt = tile - i * a.RT;
                const size_t t0 = (size_t)a.touched[i] * a.RT + rt; /* tile in the weights */
                unsigned char *dst = ring + (size_t)st * stage_bytes;
                mbar_arrive_expect_tx(&full[st], stage_bytes);
                bulk_copy_g2s(dst, (const char *)a.wq + t0 * code_bytes, code_bytes, &full[st]);
                bulk_copy_g2s(dst + code_bytes, (const char *)a.wsc + t0 * (size_t)a.KK * 32,
                              (uint32_t)a.KK * 32, &full[st]);
            }
        }
        return;
    }

    /* The consumers: stage the tokens of the (at most two) experts of the range. */
    const int i_last = (lo + n - 1) / a.RT;
    const int K8 = a.K >> 3;
    for (int q = 0; q <= i_last - i_first; q++) {
        const int e = a.touched[i_first + q], cnt = a.count[e], off = a.offset[e];
        for (int idx = threadIdx.x; idx < cnt * K8; idx += MR_CONSUMERS * 32) {
            const int r = idx / K8, v = idx - r * K8;
            const size_t row = MODE == MODE_GATE_UP ? (size_t)(a.pair_sorted[off + r] / a.topk)
                                                    : (size_t)(off + r);
            *(uint4 *)(xs + ((size_t)q * ra.T + r) * lds + v * 8) =
                *(const uint4 *)(a.x + row * a.K + (size_t)v * 8);
        }
    }
    asm volatile("bar.sync 1, %0;" ::"r"(MR_CONSUMERS * 32) : "memory"); /* consumers only */

    const int g = lane >> 2, t = lane & 3;
    for (int j = w; j < n; j += MR_CONSUMERS) {
        const int st = j % NS;
        const int tile = lo + j, i = tile / a.RT, rt = tile - i * a.RT;
        const int e = a.touched[i], cnt = a.count[e], off = a.offset[e];
        /* Token g's row of this expert's slot; lanes of absent tokens (g ≥ cnt) read the last
         * real row into a column of the product nobody stores (moe_small.cuh). */
        const int gr = g < cnt ? g : cnt - 1;
        const uint32_t xaddr = smem_u32(xs + ((size_t)(i - i_first) * ra.T + gr) * lds + 8 * t);
        const unsigned char *stage = ring + (size_t)st * stage_bytes;
        const uint32_t qaddr = smem_u32(stage) + (uint32_t)lane * 16;
        const uint32_t saddr = smem_u32(stage + code_bytes) + (uint32_t)g * 4;
        mbar_wait(&full[st], (uint32_t)((j / NS) & 1));

        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int kb = 0; kb < a.KK; kb += MR_U) {
            uint4 qv[MR_U];
            uint32_t sv[MR_U];
#pragma unroll
            for (int u = 0; u < MR_U; u++) {
                qv[u] = make_uint4(0, 0, 0, 0), sv[u] = 0;
                if (kb + u < a.KK) {
                    qv[u] = lds128(qaddr + (uint32_t)(kb + u) * 512);
                    asm volatile("ld.shared.u32 %0, [%1];"
                                 : "=r"(sv[u])
                                 : "r"(saddr + (uint32_t)(kb + u) * 32));
                }
            }
#pragma unroll
            for (int u = 0; u < MR_U; u++) {
                if (kb + u >= a.KK) break;
                const int ks = kb + u;
#pragma unroll
                for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
                    uint32_t ag[4], a8[4];
                    dequant_word_t<FOLDED>(h ? qv[u].z : qv[u].x, sv[u], 2 * h, ag);
                    dequant_word_t<FOLDED>(h ? qv[u].w : qv[u].y, sv[u], 2 * h + 1, a8);
                    const uint4 xv = lds128(xaddr + (uint32_t)(ks * 128 + h * 64));
                    mma_chunk(acc, ag, a8, xv);
                }
            }
        }
        __syncwarp();
        if (lane == 0) mbar_arrive(&empty[st]); /* the stage is read: the producer may refill it */
        tile_epilogue<MODE>(a, e, off, rt, 0, cnt, 0, acc);
    }
}

typedef void (*ring_fn)(ring_args);

static ring_fn ring_kernel_for(int mode, int folded) {
    if (mode == MODE_GATE_UP)
        return folded ? moe_ring_kernel<MODE_GATE_UP, true> : moe_ring_kernel<MODE_GATE_UP, false>;
    return folded ? moe_ring_kernel<MODE_DOWN, true> : moe_ring_kernel<MODE_DOWN, false>;
}

static unsigned long long g_ring_attrs; /* per device: per_device.h */

cudaError_t moe_ring_launch(const moe_args &a, int mode, int folded, int T, int max_touched,
                            cudaStream_t stream) {
    if (T < 1 || T > MOE_RING_MAX_T || a.S != 1 || a.K % 64 || max_touched < 1)
        return cudaErrorInvalidValue;
    const size_t x_bytes = (size_t)MR_XSLOTS * T * ring_x_stride(a.K) * 2;
    const size_t stage = ring_stage_bytes(a.KK);
    long ns = (long)((MR_SMEM - MR_BAR_BYTES - x_bytes) / stage);
    if (ns > MR_MAX_STAGES) ns = MR_MAX_STAGES;
    if (ns < 2) return cudaErrorInvalidValue; /* a K this long does not fit two stages */
    const size_t smem = MR_BAR_BYTES + (size_t)ns * stage + x_bytes;
    if (!per_device_done(&g_ring_attrs)) {
        for (int m = 0; m < 2; m++)
            for (int f = 0; f < 2; f++)
                CUDA_TRY(cudaFuncSetAttribute((const void *)ring_kernel_for(m, f),
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              MR_SMEM));
        per_device_mark(&g_ring_attrs);
    }
    int dev = 0, sms = 0;
    CUDA_TRY(cudaGetDevice(&dev));
    CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* At least one block per touched expert, so that no range is longer than an expert's tiles
     * (a range then spans at most MR_XSLOTS experts). */
    const int blocks = sms > max_touched ? sms : max_touched;
    ring_args ra;
    ra.a = a, ra.T = T, ra.stages = (int)ns;
    CUDA_TRY(pdl_launch(ring_kernel_for(mode, folded), dim3((unsigned)blocks), dim3(MR_THREADS),
                        smem, stream, ra));
    return cudaGetLastError();
}
