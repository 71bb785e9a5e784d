/* MoE routing on the GPU (moe.h): per token the top-k experts of the router logits and the softmax
 * of their logits, then the grouping of the (token, slot) pairs by expert that the expert kernels
 * walk: counts, offsets, the stable sort of the pairs, the touched list and the large path's tile
 * list. CPU reference: cpu_topk_softmax (backend/cpu/ops.c); tests/gpu/test_moe.cu holds the two
 * side by side.
 *
 * Deterministic: every position depends only on the routing (integer counts, fixed scans), never on
 * the order threads run in. Expert parallelism (moe.h): only the pairs of experts [e0, e0 + n_e) are
 * grouped, as experts 0 .. n_e - 1; with e0 = 0 and n_e = E (one GPU, TP) that is every pair. Decode-sized steps (T <= 32, T*k <= 64) take one launch
 * (moe_route_small_kernel); larger ones a top-k kernel (one warp per token) and a grouping kernel. */
#include "backend/cuda/moe.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe_route_small.cuh"
#include "backend/cuda/moe_topk.cuh"
#include "backend/cuda/pdl.cuh"

#include <stddef.h>

/* One warp per token. */
__global__ void moe_topk_kernel(const float *logits, const float *logits_lo, const uint16_t *bias,
                                int T, int E, int k, int *idx_out, float *w_out) {
    pdl_prologue(); /* first: see pdl.cuh */
    const int lane = threadIdx.x & 31;
    const int tok = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (tok >= T) return;
    topk_warp(logits + (size_t)tok * E, logits_lo ? logits_lo + (size_t)tok * E : NULL, bias, E, k,
              lane, idx_out + (size_t)tok * k, w_out + (size_t)tok * k);
}

/* Decode-sized routing in one launch: one block (moe_route_small.cuh). */
__global__ void moe_route_small_kernel(const float *logits, const float *logits_lo,
                                       const uint16_t *bias, int BN, const moe_routing r) {
    pdl_prologue(); /* first: see pdl.cuh */
    route_small_block(logits, logits_lo, bias, BN, r);
}

/* Pair p's expert among the grouped ones [e0, e0 + E), as 0 .. E - 1, or -1 (another rank's). */
static __device__ __forceinline__ int grouped_expert(const int *idx, int p, int e0, int E) {
    const int e = idx[p] - e0;
    return e >= 0 && e < E ? e : -1;
}

/* One block of 1024 threads: counts per expert, prefix sums, the touched list, the large-path tile
 * list, and a stable counting sort of the pairs by expert (pairs taken 1024 at a time in order; inside
 * a chunk, positions come from per-warp counts prefixed in warp order and the lane rank among equal
 * experts). Deterministic: positions depend only on the routing. E here is the number of experts
 * grouped, from e0 (moe.h: n_e). */
__global__ void __launch_bounds__(1024)
    moe_group_kernel(const int *idx, int P, int e0, int E, int BN, int *count, int *offset,
                     int *pair_sorted, int *touched, int *n_touched, int *tiles, int *n_tiles) {
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ int gsm[];
    int *cnt = gsm;     /* [E] */
    int *run = cnt + E; /* [E] next free position of each expert */
    int *wc = run + E;  /* [32][E] per-warp counts → positions, per chunk */
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    for (int e = tid; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) {
        const int e = grouped_expert(idx, p, e0, E);
        if (e >= 0) atomicAdd(&cnt[e], 1); /* integer: order-free */
    }
    __syncthreads();
    expert_offsets(tid < E ? cnt[tid] : 0, E, BN, count, offset, touched, n_touched, tiles, n_tiles,
                   run);
    for (int base = 0; base < P; base += blockDim.x) {
        for (int i = tid; i < 32 * E; i += blockDim.x) wc[i] = 0;
        __syncthreads();
        const int p = base + tid;
        const int e = p < P ? grouped_expert(idx, p, e0, E) : -1;
        const unsigned peers = __match_any_sync(0xffffffffu, e);
        const int rank = __popc(peers & ((1u << lane) - 1u));
        if (e >= 0 && rank == 0) wc[w * E + e] = __popc(peers);
        __syncthreads();
        for (int ee = tid; ee < E; ee += blockDim.x) {
            int acc = run[ee];
            for (int ww = 0; ww < 32; ww++) {
                const int c = wc[ww * E + ee];
                wc[ww * E + ee] = acc;
                acc += c;
            }
            run[ee] = acc;
        }
        __syncthreads();
        if (e >= 0) pair_sorted[wc[w * E + e] + rank] = p;
        __syncthreads();
    }
}

static size_t align_up(size_t x, size_t a) {
    return (x + a - 1) / a * a;
}

size_t moe_routing_bytes(int T, int E, int k) {
    const size_t P = (size_t)T * k;
    size_t n = 0;
    n += align_up(P * 4, 256);                      /* topk_idx */
    n += align_up(P * 4, 256);                      /* topk_w */
    n += align_up((size_t)E * 4, 256);              /* count */
    n += align_up((size_t)(E + 1) * 4, 256);        /* offset */
    n += align_up(P * 4, 256);                      /* pair_sorted */
    n += align_up((size_t)E * 4, 256);              /* touched */
    n += 256;                                       /* n_touched */
    n += align_up(moe_max_tiles(T, E, k) * 4, 256); /* tiles */
    n += 256;                                       /* n_tiles */
    return n;
}

void moe_routing_carve(moe_routing *r, void *buf, int T, int E, int k) {
    const size_t P = (size_t)T * k;
    char *p = (char *)buf;
    r->T = T, r->E = E, r->k = k;
    r->e0 = 0, r->n_e = E; /* every expert: the caller narrows it under expert parallelism */
    r->topk_idx = (int *)p, p += align_up(P * 4, 256);
    r->topk_w = (float *)p, p += align_up(P * 4, 256);
    r->count = (int *)p, p += align_up((size_t)E * 4, 256);
    r->offset = (int *)p, p += align_up((size_t)(E + 1) * 4, 256);
    r->pair_sorted = (int *)p, p += align_up(P * 4, 256);
    r->touched = (int *)p, p += align_up((size_t)E * 4, 256);
    r->n_touched = (int *)p, p += 256;
    r->tiles = (int *)p, p += align_up(moe_max_tiles(T, E, k) * 4, 256);
    r->n_tiles = (int *)p;
}

cudaError_t moe_route_split(const float *logits, const float *logits_lo, const uint16_t *bias,
                            const moe_routing *r, cudaStream_t stream) {
    if (!logits || !r || r->T < 0 || r->E < 1 || r->E > 256 || r->k < 1 || r->k > 8 ||
        r->k > r->E || r->e0 < 0 || r->n_e < 1 || r->e0 + r->n_e > r->E)
        return cudaErrorInvalidValue;
    if (r->T == 0) return cudaSuccess;
    if (r->T <= ROUTE_SMALL_MAX_T && r->T * r->k <= ROUTE_SMALL_MAX_PAIRS) {
        const int threads =
            32 * r->T > ROUTE_SMALL_MIN_THREADS ? 32 * r->T : ROUTE_SMALL_MIN_THREADS;
        pdl_launch(moe_route_small_kernel, dim3(1), dim3(threads), 0, stream, logits, logits_lo,
                   bias, (int)MOE_TILE_TOKENS, *r);
        return cudaGetLastError();
    }
    const int warps = 8;
    pdl_launch(moe_topk_kernel, dim3((r->T + warps - 1) / warps), dim3(warps * 32), 0, stream,
               logits, logits_lo, bias, r->T, r->E, r->k, r->topk_idx, r->topk_w);
    CUDA_TRY(cudaGetLastError());
    const size_t smem = (size_t)(2 + 32) * r->n_e * sizeof(int);
    pdl_launch(moe_group_kernel, dim3(1), dim3(1024), smem, stream, r->topk_idx, r->T * r->k, r->e0,
               r->n_e, MOE_TILE_TOKENS, r->count, r->offset, r->pair_sorted, r->touched,
               r->n_touched, r->tiles, r->n_tiles);
    return cudaGetLastError();
}
