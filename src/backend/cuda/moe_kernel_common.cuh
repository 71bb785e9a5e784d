/* What the MoE expert kernels share (moe_experts.cu: the mma.sync kernels; moe_wgmma.cu: the wgmma
 * large-batch kernel): their arguments and the epilogue that turns one 16-row x 8-token accumulator
 * fragment into SwiGLU activations (gate_up) or weighted output rows (down). Device code. */
#pragma once

#include "backend/cuda/device_util.cuh"
#include "backend/cuda/moe.h"

#include <cuda_runtime.h>

#include <stdint.h>

static __device__ __forceinline__ float swiglu(float gate, float up, float alpha, float limit) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

/* Arguments of both expert kernels (one matrix: gate_up or down). */
struct moe_args {
    const uint4 *wq;      /* repacked codes */
    const uint32_t *wsc;  /* repacked scale words */
    const uint16_t *bias; /* [E][R] */
    const uint16_t *x; /* gate_up: x [T][K] gathered by token; down: act [T·k][K] in sorted order */
    uint16_t *act;     /* gate_up output [T·k][R/2] */
    float *y;          /* down output [T][k·S][R] */
    const int *count, *offset, *pair_sorted, *touched, *n_touched, *tiles, *n_tiles;
    const float *topk_w;
    int K, R, RT, KK; /* reduction length, rows, row tiles (R/16), k steps (K/64) */
    int topk;         /* k experts per token */
    int S;            /* K splits (down, small path) */
    int n_rb;         /* row blocks per expert */
    float alpha, limit;
    int slots; /* down, small path, plan.tail_split: resident blocks of the launch (0: off) */
};

enum { MODE_GATE_UP = 0, MODE_DOWN = 1 };

/* The row of a.x that sorted pair i (of the expert-grouped list) multiplies: gate_up reads the
 * pair's token (x is by token), down its own row (act is in sorted order). */
template <int MODE> static __device__ __forceinline__ size_t pair_row(const moe_args &a, int i) {
    return MODE == MODE_GATE_UP ? (size_t)(a.pair_sorted[i] / a.topk) : (size_t)i;
}

/* Where element k of an activation row sits in "fragment order", the order in which the register-A
 * form of moe_wgmma_tma.cu needs its B operand in shared memory. That form lets thread (g, t) of a
 * warp own physical k = 32h + 8t … 32h + 8t + 7 of each 32-wide chunk h (one code word: no shuffles)
 * and feeds them to the chunk's two k16 MMAs as the fragment's logical pairs t and 4 + t (pairs 0-1
 * of the word to the first MMA, 2-3 to the second), as moe_small.cuh does with mma.sync. So within a
 * chunk, physical pair p = 4t + 2m + c (k 2p, 2p+1) must sit at logical pair 8m + 4c + t: the pair
 * index's two 2-bit halves swapped. The map is its own inverse. */
static __device__ __forceinline__ int frag_order_k(int k) {
    const int p = (k & 31) >> 1;
    return (k & ~31) | ((((p & 3) << 2) | (p >> 2)) << 1) | (k & 1);
}

/* Epilogue for one 16-row tile rt and 8-token group: acc[2·hh + q] = (tile row g + 8·hh, token
 * n0 + 2t + q), n local to the expert's sorted list, valid when < n_end. FRAG_ORDER: gate_up writes
 * each act row in fragment order (frag_order_k), for a down projection on the register-A form. */
template <int MODE, bool FRAG_ORDER = false>
static __device__ __forceinline__ void tile_epilogue(const moe_args &a, int e, int off, int rt,
                                                     int n0, int n_end, int s, const float acc[4]) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (MODE == MODE_GATE_UP) {
        const int o = rt * 8 + g; /* output feature; tile row g = its gate, g+8 = its up */
        const int I = a.R / 2;
        const float bg = bf16_bits_to_f32(a.bias[(size_t)e * a.R + 2 * o]);
        const float bu = bf16_bits_to_f32(a.bias[(size_t)e * a.R + 2 * o + 1]);
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const int n = n0 + 2 * t + q;
            if (n >= n_end) continue;
            const float v = swiglu(acc[q] + bg, acc[2 + q] + bu, a.alpha, a.limit);
            a.act[(size_t)(off + n) * I + (FRAG_ORDER ? frag_order_k(o) : o)] = f32_to_bf16_bits(v);
        }
    } else {
#pragma unroll
        for (int q = 0; q < 2; q++) {
            const int n = n0 + 2 * t + q;
            if (n >= n_end) continue;
            const int pair = a.pair_sorted[off + n];
            const int tok = pair / a.topk, j = pair - tok * a.topk;
            const float wgt = a.topk_w[pair];
            float *yrow = a.y + ((size_t)tok * a.topk * a.S + (size_t)j * a.S + s) * a.R;
#pragma unroll
            for (int hh = 0; hh < 2; hh++) {
                const int row = rt * 16 + g + 8 * hh;
                const float b = s == 0 ? bf16_bits_to_f32(a.bias[(size_t)e * a.R + row]) : 0.0f;
                yrow[row] = wgt * (acc[2 * hh + q] + b);
            }
        }
    }
}

/* The work of one large-batch block: expert e's token tile, tokens [n_base, n_base + n_valid) of the
 * expert's off.. pairs (grid y: a slot of the routing's tile list; x: the row block). False for a
 * slot past n_tiles: the whole block has nothing to do (a uniform exit, before any barrier). */
struct tile_pos {
    int e, off, n_base, n_valid;
};
static __device__ __forceinline__ bool tile_of_block(const moe_args &a, int n_tile, tile_pos *p) {
    const int slot = blockIdx.y;
    if (slot >= *a.n_tiles) return false;
    const int td = a.tiles[slot];
    p->e = td >> 16;
    p->off = a.offset[p->e];
    p->n_base = (td & 0xffff) * n_tile;
    p->n_valid = min(n_tile, a.count[p->e] - p->n_base);
    return true;
}

/* The block's tile at BN tokens: routing tiles are MOE_TILE_TOKENS wide, so with BN = 64 two blocks
 * (grid y = 2·slot + part) share one, each taking its half; a half past the expert's tokens has
 * nothing to do (false, a uniform exit). */
template <int BN>
static __device__ __forceinline__ bool tile_of_block_bn(const moe_args &a, tile_pos *p) {
    constexpr int PER = MOE_TILE_TOKENS / BN;
    const int slot = (int)blockIdx.y / PER, part = (int)blockIdx.y % PER;
    if (slot >= *a.n_tiles) return false;
    const int td = a.tiles[slot];
    p->e = td >> 16;
    p->off = a.offset[p->e];
    p->n_base = (td & 0xffff) * MOE_TILE_TOKENS + part * BN;
    p->n_valid = min(BN, a.count[p->e] - p->n_base);
    return p->n_valid > 0;
}

/* The large-batch tile's row table, by all threads of the block (ends with a barrier): the element
 * offset in a.x of each of the tile's n_rows token rows (< 2^32: at most 64K rows of 2880), ~0u past
 * the expert's n_valid tokens (those rows are zero-filled). off: the expert's first pair in sorted
 * order; n_base: the tile's first. */
template <int MODE>
static __device__ __forceinline__ void tile_row_table(const moe_args &a, int off, int n_base,
                                                      int n_valid, uint32_t *row_off, int n_rows) {
    for (int r = threadIdx.x; r < n_rows; r += blockDim.x) {
        uint32_t o = ~0u;
        if (r < n_valid) {
            const size_t row = pair_row<MODE>(a, off + n_base + r);
            o = (uint32_t)(row * a.K);
        }
        row_off[r] = o;
    }
    __syncthreads();
}

/* What each thread of a large-batch block copies of the weights per 64-wide k step: 16 bytes of codes
 * of row tile rb·8 + tid/32 (lane tid%32 of its 512-byte block), and for threads < 16, 16 bytes of
 * the 8 tiles' scale words (tile tid/2, half tid%2); bytes 0 past the matrix's row tiles (zeros). */
struct tile_weight_src {
    const char *codes, *scales;
    int code_bytes, scale_bytes;
};

static __device__ __forceinline__ tile_weight_src tile_weight_sources(const moe_args &a, int e,
                                                                      int rb, int tid) {
    tile_weight_src w;
    const int a_rt = rb * 8 + (tid >> 5), s_rt = rb * 8 + (tid >> 1);
    w.code_bytes = a_rt < a.RT ? 16 : 0;
    w.codes = (const char *)a.wq + (((size_t)e * a.RT + (a_rt < a.RT ? a_rt : 0)) * a.KK * 512) +
              (tid & 31) * 16;
    w.scale_bytes = (tid < 16 && s_rt < a.RT) ? 16 : 0;
    w.scales = (const char *)a.wsc + (((size_t)e * a.RT + (s_rt < a.RT ? s_rt : 0)) * a.KK * 32) +
               (tid & 1) * 16;
    return w;
}

/* This thread's share of k step kk's weights (tile_weight_sources): 16 bytes of codes into
 * codes_dst (the 8 tiles' 512-byte blocks) and, for threads < 16, 16 bytes into scales_dst (their
 * 32-byte scale words). */
static __device__ __forceinline__ void copy_tile_weights(const tile_weight_src &ws, int kk, int tid,
                                                         char *codes_dst, char *scales_dst) {
    cp_async16(smem_u32(codes_dst + tid * 16), ws.codes + (size_t)kk * 512, ws.code_bytes);
    if (tid < 16)
        cp_async16(smem_u32(scales_dst + tid * 16), ws.scales + (size_t)kk * 32, ws.scale_bytes);
}

/* The wgmma kernel's epilogue: row tile rt's accumulators, JN fragments of 8 tokens (16: a 128-token
 * tile, 8: a 64-token one). */
template <int MODE, int JN = 16, bool FRAG_ORDER = false>
static __device__ __forceinline__ void store_tile_n(const moe_args &a, const tile_pos &p, int rt,
                                                    const float acc[4 * JN]) {
    if (rt >= a.RT) return;
#pragma unroll
    for (int jn = 0; jn < JN; jn++)
        tile_epilogue<MODE, FRAG_ORDER>(a, p.e, p.off, rt, p.n_base + 8 * jn, p.n_base + p.n_valid,
                                        0, acc + 4 * jn);
}

/* The wgmma large-batch kernel (moe_wgmma.cu) on moe_large_kernel's grid: (row blocks, tile slots),
 * with bn-token tiles (moe_plan.bn: 64 or 128, anything else cudaErrorInvalidValue). */
cudaError_t moe_wgmma_launch(const moe_args &a, int mode, int bn, dim3 grid, cudaStream_t stream);
/* The same on the warp-specialised wgmma kernel (moe_wgmma_ws.cu; moe.h's moe_set_wgmma says
 * where it runs). folded: every scale byte of the matrix allows the one-multiply dequantisation
 * (moe_weights.w1_folded / w2_folded). */
cudaError_t moe_wgmma_ws_launch(const moe_args &a, int mode, int bn, int folded, dim3 grid,
                                cudaStream_t stream);
/* The same with every operand brought by the copy engine (moe_wgmma_tma.cu), when
 * moe_wgmma_tma_available() (the driver's tensor-map encoder was found). n_experts: the weights'
 * experts; rows: the routing's pairs (T·k), the rows of B. Gate_up gathers its B rows in sorted
 * order into scratch (rows x a.K bf16, unused by anything else until the kernel has run). */
int moe_wgmma_tma_available(void);
/* rs: the register-A form at 64-token tiles (moe_wgmma_tma.cu; prepared, GPTOSS_MOE_TMA_RS=1 says
 * moe_wgmma_tma_rs). Its act is in fragment order (frag_order_k), so gate_up and down must both run
 * on it: moe_experts decides once for the pair. */
cudaError_t moe_wgmma_tma_launch(const moe_args &a, int mode, int bn, int folded, int rs,
                                 int n_experts, int rows, uint16_t *scratch, dim3 grid,
                                 cudaStream_t stream);
int moe_wgmma_tma_rs(void);
