/* gpt-oss MoE on the GPU: routing, the MXFP4 repack, and the two expert kernels. See moe.h.
 *
 * ── Dequantisation (MXFP4 → bf16 in registers) ─────────────────────────────────────────────────
 * An e2m1 code is s e1 e0 m (sign, 2 exponent bits, 1 mantissa bit); its value is
 * (−1)^s · 2^(e−1) · (1 + m/2) for e > 0 and (−1)^s · m/2 for e = 0. Put the three bits e1 e0 m into a
 * bf16 at bits 8,7,6 (the two lowest exponent bits and the top mantissa bit) and s at bit 15: that
 * bf16 reads as (−1)^s · 2^(e−127) · (1 + m/2), or for e = 0 the subnormal (−1)^s · m/2 · 2^−126 —
 * in both cases exactly value·2^−126. One bf16 multiply by 2^126 restores the value (exact: a power
 * of two, and the result is a normal number), a second by the block scale 2^(S−127) (bf16 bits S<<7,
 * exact) finishes the job. So the work is moving bits, and the repack chooses where the bits sit
 * so that moving them is cheap. Per 16-bit half of a 32-bit word (a bf16 pair: low half = even k):
 *
 *     pair 0 (k 0,1): m@6  e0@7  e1@8  s@15      → q        & 0x81C081C0
 *     pair 1 (k 2,3): m@3  e0@4  e1@5  s@12      → (q << 3) & 0x81C081C0
 *     pair 2 (k 4,5): m@0  e0@1  e1@2  s@9       → (q << 6) & 0x81C081C0
 *     pair 3 (k 6,7): e0@10 e1@11 m@13 s@14      → (q>>3 & 0x01800180) | (q>>7 & 0x00400040) | (q<<1 & 0x80008000)
 *
 * 11 integer operations for 8 weights (a search over all layouts finds no cheaper one in this
 * style); a byte-permute lookup table would cost ~17. The integer pipe (64 ops/clk/SM) is the scarce
 * one: at 4.2 TB/s an SM must digest ~4 words per clock.
 *
 * ── Tensor-core fragments without shuffles ─────────────────────────────────────────────────────
 * mma.sync m16n8k16 (bf16 → fp32): A = 16 weight rows × 16 k, B = 16 k × 8 tokens. A sum over k does
 * not care about the order of k, so we let thread (g, t) own physical k = 8t … 8t+7 of a 32-wide chunk
 * and call them the fragment's logical k {2t, 2t+1, 2t+8, 2t+9} (first MMA) and the same for the
 * second MMA: one word of codes per row per chunk feeds two MMAs, and 16 bytes of activations
 * (token g, k 8t…8t+7) loaded from shared memory give both MMAs' B operands.
 *
 * ── Two schedules ─────────────────────────────────────────────────────────────────────────────
 * Small batch (decode): the work list is (touched expert, row block, K split); a block stages the
 * expert's tokens (≤ 8·NTP per pass) in shared memory and each warp streams one 16-row tile's codes
 * over its K range. Bandwidth-bound: only the touched experts' bytes are read, once (a second pass for
 * an expert with more tokens re-reads them from L2).
 * Large batch (prefill): a grouped GEMM over (expert, 128-token tile, 128-row block); the tile's
 * tokens (gathered by expert), the codes and the scales go through a 4-stage cp.async ring in shared
 * memory; each warp reads its A fragments (16 B / lane / k-step, already in fragment order) and
 * dequantises them in registers, then runs mma.sync against 64 tokens. */
#include "backend/cuda/moe.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_util.cuh"
#include "backend/cuda/pdl.cuh"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Repack (shared by the CPU and GPU versions)                                                     */

/* Where the 4 bits of the code for element i (0…7, k order) of a word go: bit positions of m, e0, e1, s. */
static __host__ __device__ __forceinline__ uint32_t pack_code(uint32_t c, int i) {
    const int base = 16 * (i & 1), pair = i >> 1;
    int pm, pe0, pe1, ps;
    switch (pair) {
    case 0: pm = 6, pe0 = 7, pe1 = 8, ps = 15; break;
    case 1: pm = 3, pe0 = 4, pe1 = 5, ps = 12; break;
    case 2: pm = 0, pe0 = 1, pe1 = 2, ps = 9; break;
    default: pm = 13, pe0 = 10, pe1 = 11, ps = 14; break;
    }
    return ((c & 1u) << (base + pm)) | (((c >> 1) & 1u) << (base + pe0)) | (((c >> 2) & 1u) << (base + pe1)) |
           (((c >> 3) & 1u) << (base + ps));
}

/* src: 4 checkpoint bytes read little-endian, so element i (k = 8t+i) is the nibble at bits 4i…4i+3
 * (byte i/2, low nibble for even i). */
static __host__ __device__ __forceinline__ uint32_t pack_word(uint32_t src) {
    uint32_t w = 0;
    for (int i = 0; i < 8; i++) w |= pack_code((src >> (4 * i)) & 15u, i);
    return w;
}

/* Checkpoint row of tile row i (0…15) of row tile rt. */
static __host__ __device__ __forceinline__ int tile_row(int rt, int i, int gate_up) {
    if (!gate_up) return 16 * rt + i;
    const int o = 8 * rt + (i & 7); /* SwiGLU output index */
    return 2 * o + (i >> 3);       /* rows 0…7 gate (even), 8…15 up (odd) */
}

/* One output word: index w over [E][RT][KK][32][4]. */
static __host__ __device__ __forceinline__ void repack_one(const uint8_t *blocks, const uint8_t *scales, int R, int K,
                                                           int gate_up, size_t w, uint32_t *q_out, uint8_t *s_out,
                                                           int *write_scale, size_t *s_index) {
    const int KK = K / 64, RT = R / 16, nb = K / 32;
    const int j = (int)(w & 3);
    const int lane = (int)((w >> 2) & 31);
    size_t rest = w >> 7;
    const int kk = (int)(rest % KK);
    rest /= KK;
    const int rt = (int)(rest % RT);
    const size_t e = rest / RT;
    const int g = lane >> 2, t = lane & 3;
    const int row = tile_row(rt, g + 8 * (j & 1), gate_up);
    const int chunk = 2 * kk + (j >> 1);
    const uint8_t *src = blocks + ((e * R + row) * nb + chunk) * 16 + 4 * t;
    const uint32_t v = (uint32_t)src[0] | ((uint32_t)src[1] << 8) | ((uint32_t)src[2] << 16) | ((uint32_t)src[3] << 24);
    *q_out = pack_word(v);
    /* Scale words: [E][RT][KK][8 g][4 j]; lane t == 0 of each g writes them. */
    *write_scale = t == 0;
    *s_index = (((e * RT + rt) * KK + kk) * 8 + g) * 4 + j;
    *s_out = scales[(e * R + row) * nb + chunk];
}

size_t moe_repack_q_bytes(int E, int R, int K) { return (size_t)E * R * K / 2; }
size_t moe_repack_s_bytes(int E, int R, int K) { return (size_t)E * R * K / 32; }

static int repack_shape_ok(int E, int R, int K, int gate_up) {
    return E > 0 && R > 0 && K > 0 && R % 16 == 0 && K % 64 == 0 && E < 65536 && (!gate_up || R % 2 == 0);
}

int moe_repack_host(const uint8_t *blocks, const uint8_t *scales, int E, int R, int K, int gate_up, uint8_t *q,
                    uint8_t *s) {
    if (!repack_shape_ok(E, R, K, gate_up)) return -1;
    const size_t n_words = moe_repack_q_bytes(E, R, K) / 4;
    for (size_t w = 0; w < n_words; w++) {
        uint32_t word;
        uint8_t sc;
        int ws;
        size_t si;
        repack_one(blocks, scales, R, K, gate_up, w, &word, &sc, &ws, &si);
        memcpy(q + 4 * w, &word, 4);
        if (ws) s[si] = sc;
    }
    return 0;
}

__global__ void moe_repack_kernel(const uint8_t *blocks, const uint8_t *scales, int R, int K, int gate_up, size_t n_words,
                                  uint32_t *q, uint8_t *s) {
    for (size_t w = blockIdx.x * (size_t)blockDim.x + threadIdx.x; w < n_words; w += (size_t)gridDim.x * blockDim.x) {
        uint32_t word;
        uint8_t sc;
        int ws;
        size_t si;
        repack_one(blocks, scales, R, K, gate_up, w, &word, &sc, &ws, &si);
        q[w] = word;
        if (ws) s[si] = sc;
    }
}

cudaError_t moe_repack_device(const uint8_t *blocks, const uint8_t *scales, int E, int R, int K, int gate_up,
                              uint8_t *q, uint8_t *s, cudaStream_t stream) {
    if (!repack_shape_ok(E, R, K, gate_up)) return cudaErrorInvalidValue;
    const size_t n_words = moe_repack_q_bytes(E, R, K) / 4;
    const size_t blocks_n = (n_words + 255) / 256;
    moe_repack_kernel<<<(unsigned)(blocks_n < 65536 ? blocks_n : 65536), 256, 0, stream>>>(blocks, scales, R, K, gate_up,
                                                                                          n_words, (uint32_t *)q, s);
    return cudaGetLastError();
}

/* The largest scale byte of a (repacked or checkpoint) scale array: decides the folded dequantisation. */
__global__ void scales_max_kernel(const uint8_t *s, size_t n, int *out) {
    int m = 0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        m = max(m, (int)s[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if ((threadIdx.x & 31) == 0) atomicMax(out, m); /* max is order-free: deterministic */
}

cudaError_t moe_scales_max(const uint8_t *s, size_t n, int *max_out, cudaStream_t stream) {
    if (!s || !max_out) return cudaErrorInvalidValue;
    int *d = NULL;
    CUDA_TRY(cudaMallocAsync((void **)&d, sizeof(int), stream));
    cudaError_t e = cudaMemsetAsync(d, 0, sizeof(int), stream);
    if (e == cudaSuccess && n > 0) {
        const size_t blocks = (n + 255) / 256;
        scales_max_kernel<<<(unsigned)(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(s, n, d);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(max_out, d, sizeof(int), cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    cudaError_t f = cudaFreeAsync(d, stream);
    return e != cudaSuccess ? e : f;
}

/* ---------------------------------------------------------------------------------------------- */
/* Dequantisation and the MMA of one k chunk                                                       */

static __device__ __forceinline__ uint32_t bf16x2_mul(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

/* bf16x2 {2^(S−127), 2^(S−127)} for scale byte j of a scale word: bytes (0, S, 0, S) shifted right by 1
 * give S<<7 in each half. S = 0 (2^−127, a subnormal) becomes 0: such weights are below 6·2^−127. */
static __device__ __forceinline__ uint32_t scale_pair(uint32_t sw, int j) {
    return __byte_perm(sw, 0u, 0x0404u | ((uint32_t)j << 4) | ((uint32_t)j << 12)) >> 1;
}

/* One repacked word (8 codes of one row) → 4 bf16 pairs (k 0,1 | 2,3 | 4,5 | 6,7), scaled. */
static __device__ __forceinline__ void dequant_word(uint32_t q, uint32_t scale2, uint32_t r[4]) {
    const uint32_t M = 0x81C081C0u, TWO_126 = 0x7E807E80u; /* bf16 2^126 = exponent 253 */
    r[0] = q & M;
    r[1] = (q << 3) & M;
    r[2] = (q << 6) & M;
    r[3] = ((q >> 3) & 0x01800180u) | ((q >> 7) & 0x00400040u) | ((q << 1) & 0x80008000u);
#pragma unroll
    for (int i = 0; i < 4; i++) r[i] = bf16x2_mul(bf16x2_mul(r[i], TWO_126), scale2);
}

/* When every scale byte S of a matrix is ≤ 128, the two multiplies (by 2^126, then by 2^(S−127)) fold
 * into one by 2^(S−1): the bf16 pair with exponent field S + 126, i.e. scale_pair + (126 << 7) in
 * each half (S + 126 ≤ 254 stays finite). The product is the same exact value rounded once, so the
 * bits equal the two-multiply result (and S = 0 now gives the true tiny value instead of 0). That
 * removes 4 of the ~21 instructions per word from the integer/FMA pipes, which at batch ≥ 64 are
 * as busy as the memory system (moe_scales_max decides at load). */
static __device__ __forceinline__ uint32_t scale_pair_folded(uint32_t sw, int j) {
    return scale_pair(sw, j) + 0x3F003F00u;
}

template <bool FOLDED>
static __device__ __forceinline__ void dequant_word_t(uint32_t q, uint32_t sw, int j, uint32_t r[4]) {
    if (!FOLDED) {
        dequant_word(q, scale_pair(sw, j), r);
        return;
    }
    const uint32_t M = 0x81C081C0u, f = scale_pair_folded(sw, j);
    r[0] = q & M;
    r[1] = (q << 3) & M;
    r[2] = (q << 6) & M;
    r[3] = ((q >> 3) & 0x01800180u) | ((q >> 7) & 0x00400040u) | ((q << 1) & 0x80008000u);
#pragma unroll
    for (int i = 0; i < 4; i++) r[i] = bf16x2_mul(r[i], f);
}

/* The two MMAs of one 32-wide k chunk for one 16-row tile: rows g (ag) and g+8 (a8), B = 16 bytes of
 * token g's activations at k 8t…8t+7. */
static __device__ __forceinline__ void mma_chunk(float acc[4], const uint32_t ag[4], const uint32_t a8[4], uint4 xv) {
    mma_bf16_16816(acc, ag[0], a8[0], ag[1], a8[1], xv.x, xv.y);
    mma_bf16_16816(acc, ag[2], a8[2], ag[3], a8[3], xv.z, xv.w);
}

static __device__ __forceinline__ float swiglu(float gate, float up, float alpha, float limit) {
    const float g = fminf(gate, limit);
    const float u = fminf(fmaxf(up, -limit), limit);
    return g / (1.0f + expf(-alpha * g)) * (u + 1.0f);
}

/* Arguments of both expert kernels (one matrix: gate_up or down). */
struct moe_args {
    const uint4 *wq;       /* repacked codes */
    const uint32_t *wsc;   /* repacked scale words */
    const uint16_t *bias;  /* [E][R] */
    const uint16_t *x;     /* gate_up: x [T][K] gathered by token; down: act [T·k][K] in sorted order */
    uint16_t *act;         /* gate_up output [T·k][R/2] */
    float *y;              /* down output [T][k·S][R] */
    const int *count, *offset, *pair_sorted, *touched, *n_touched, *tiles, *n_tiles;
    const float *topk_w;
    int K, R, RT, KK; /* reduction length, rows, row tiles (R/16), k steps (K/64) */
    int topk;         /* k experts per token */
    int S;            /* K splits (down, small path) */
    int n_rb;         /* row blocks per expert */
    float alpha, limit;
};

enum { MODE_GATE_UP = 0, MODE_DOWN = 1 };

/* Epilogue for one 16-row tile rt and 8-token group: acc[2·hh + q] = (tile row g + 8·hh, token
 * n0 + 2t + q), n local to the expert's sorted list, valid when < n_end. */
template <int MODE>
static __device__ __forceinline__ void tile_epilogue(const moe_args &a, int e, int off, int rt, int n0, int n_end,
                                                     int s, const float acc[4]) {
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
            a.act[(size_t)(off + n) * I + o] = f32_to_bf16_bits(v);
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

/* ---------------------------------------------------------------------------------------------- */
/* Small batch: one block per (touched expert, row block of WARPS tiles, K split)                  */

/* Codes and scale words of k steps kb … kb+U−1 of one warp's tile (zeros past nk). */
template <int U>
static __device__ __forceinline__ void load_batch(const uint4 *qp, const uint32_t *sp, int kb, int nk, uint4 qv[U],
                                                  uint32_t sv[U]) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (kb + u < nk) {
            qv[u] = ldg_stream16(qp + (size_t)(kb + u) * 32);
            sv[u] = __ldg(sp + (size_t)(kb + u) * 8);
        } else {
            qv[u] = make_uint4(0, 0, 0, 0);
            sv[u] = 0;
        }
    }
}

template <int NTP>
struct small_cfg {
    static constexpr int CAP = 8 * NTP;              /* tokens staged per pass */
    static constexpr int WARPS = NTP == 1 ? 4 : 8;   /* 16-row tiles per block */
    static constexpr int THREADS = WARPS * 32;
    static constexpr int U = 6; /* k steps per batch: 6–12 × 16 B in flight (two batches; U = 7 spills) */
};

template <int NTP, int MODE, bool FOLDED>
__global__ void __launch_bounds__(small_cfg<NTP>::THREADS, NTP == 1 ? 4 : 2) moe_small_kernel(const moe_args a) {
    pdl_prologue(); /* first: see pdl.cuh */
    typedef small_cfg<NTP> C;
    extern __shared__ uint4 smem_raw[];
    uint16_t *xs = (uint16_t *)smem_raw; /* [CAP][lds] */

    int b = blockIdx.x;
    const int s = b % a.S;
    b /= a.S;
    const int rb = b % a.n_rb, i = b / a.n_rb;
    if (i >= *a.n_touched) return; /* whole block: a work item past the touched experts */
    const int e = a.touched[i], cnt = a.count[e], off = a.offset[e];
    const int kk0 = (int)((long)s * a.KK / a.S), kk1 = (int)((long)(s + 1) * a.KK / a.S), nk = kk1 - kk0;
    const int lds = nk * 64 + 32; /* row stride ≡ 64 bytes mod 128: rows g, g+1 on different banks */

    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int rt = rb * C::WARPS + w;
    const bool active = rt < a.RT;
    const size_t tile_kk = ((size_t)e * a.RT + (active ? rt : 0)) * a.KK + kk0;
    const uint4 *qp = a.wq + tile_kk * 32 + lane;
    const uint32_t *sp = a.wsc + tile_kk * 8 + g;
    const uint16_t *xb = xs + g * lds + 8 * t;

    /* The first batch of codes depends only on the work item: its loads fly while the tokens are
     * staged. */
    uint4 qv[C::U];
    uint32_t sv[C::U];
    load_batch<C::U>(qp, sp, 0, active ? nk : 0, qv, sv);

    for (int p0 = 0; p0 < cnt; p0 += C::CAP) {
        const int pc = min(C::CAP, cnt - p0);
        /* 8-token groups this pass really has: at batch 256 an expert averages 8 tokens, so with
         * 16-token passes about half the blocks would multiply a group of zeros (and stage it). */
        const int ngroups = (pc + 7) >> 3;
        /* Stage the pass's tokens (zeros past pc, up to the last group) for k in [64·kk0, 64·kk1). */
        const int vpr = nk * 8;
        for (int idx = threadIdx.x; idx < ngroups * 8 * vpr; idx += C::THREADS) {
            const int r = idx / vpr, v = idx - r * vpr;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (r < pc) {
                const size_t row = MODE == MODE_GATE_UP ? (size_t)(a.pair_sorted[off + p0 + r] / a.topk) : (size_t)(off + p0 + r);
                val = *(const uint4 *)(a.x + row * a.K + (size_t)kk0 * 64 + v * 8);
            }
            *(uint4 *)(xs + r * lds + v * 8) = val;
        }
        __syncthreads();

        if (active) {
            float acc[NTP][4];
#pragma unroll
            for (int nt = 0; nt < NTP; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
            /* Two register batches: the loads of batch kb + U are issued before batch kb is
             * dequantised and multiplied, so a warp always has up to 2U 16-byte loads in flight
             * instead of draining to zero once per batch (a K range of 45 steps was ~6 full memory
             * round trips in a row). */
            if (p0 > 0) load_batch<C::U>(qp, sp, 0, nk, qv, sv); /* another pass: again, from L2 */
            for (int kb = 0; kb < nk; kb += C::U) {
                uint4 qn[C::U];
                uint32_t sn[C::U];
                load_batch<C::U>(qp, sp, kb + C::U, nk, qn, sn);
#pragma unroll
                for (int u = 0; u < C::U; u++) {
                    if (kb + u >= nk) break;
#pragma unroll
                    for (int h = 0; h < 2; h++) { /* the two 32-wide chunks of this k step */
                        uint32_t ag[4], a8[4];
                        dequant_word_t<FOLDED>(h ? qv[u].z : qv[u].x, sv[u], 2 * h, ag);
                        dequant_word_t<FOLDED>(h ? qv[u].w : qv[u].y, sv[u], 2 * h + 1, a8);
#pragma unroll
                        for (int nt = 0; nt < NTP; nt++) {
                            if (nt > 0 && nt >= ngroups) break; /* block-uniform */
                            const uint4 xv = *(const uint4 *)(xb + nt * 8 * lds + (kb + u) * 64 + h * 32);
                            mma_chunk(acc[nt], ag, a8, xv);
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < C::U; u++) qv[u] = qn[u], sv[u] = sn[u];
            }
#pragma unroll
            for (int nt = 0; nt < NTP; nt++)
                if (nt < ngroups) tile_epilogue<MODE>(a, e, off, rt, p0 + nt * 8, p0 + pc, s, acc[nt]);
        }
        __syncthreads(); /* the next pass overwrites xs */
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Large batch: grouped GEMM, block = 128 rows × 128 tokens, 8 warps as 4 (rows) × 2 (tokens).      */
/* Each warp owns 32 rows × 64 tokens (64 fp32 accumulators per thread); 140 registers, so one block */
/* per SM (capping at 128 for two blocks spilled in the inner loop). A 4-stage cp.async ring brings  */
/* the gathered tokens, the block's 8 row tiles of codes and their scales into shared memory.        */

enum { LG_THREADS = 256, LG_BM = 128, LG_BN = MOE_TILE_TOKENS, LG_STAGES = 4 };
/* One pipeline stage: B = 128 tokens × 64 k bf16 (16 KB), A = 8 row tiles × 512 B of codes (4 KB),
 * scales = 8 row tiles × 32 B. */
enum { LG_B_BYTES = LG_BN * 64 * 2, LG_A_BYTES = 8 * 512, LG_S_BYTES = 8 * 32 };
enum { LG_STAGE_BYTES = LG_B_BYTES + LG_A_BYTES + LG_S_BYTES, LG_SMEM = LG_STAGES * LG_STAGE_BYTES };

template <int MODE>
__global__ void __launch_bounds__(LG_THREADS, 1) moe_large_kernel(const moe_args a) {
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ uint4 smem_raw[];
    char *smem = (char *)smem_raw; /* LG_STAGES × { B [128][64] bf16 swizzled | A [8][512 B] | S [8][32 B] } */

    const int slot = blockIdx.y;
    if (slot >= *a.n_tiles) return;
    const int td = a.tiles[slot], e = td >> 16, tl = td & 0xffff;
    const int cnt = a.count[e], off = a.offset[e];
    const int n_base = tl * LG_BN, n_valid = min(LG_BN, cnt - n_base);
    const int rb = blockIdx.x;

    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, t = lane & 3;
    const int wm = w & 3, wn = w >> 2;

    /* cp.async jobs of this thread, per stage:
     *  B: 16-byte chunk cc of token rows r = tid/8 + 32·i (i < 4). Chunk c of row r is stored at chunk
     *     c ^ 4·(r&1): a quarter-warp reading rows 2m, 2m+1 then touches all 32 banks once.
     *  A: 16 bytes of row tile tid/32 (its 512-byte k-step block: lane tid%32).
     *  S: threads < 16: 16 bytes of the 8 tiles' scale words (tile tid/2, half tid%2). */
    /* Row table: element offset of each of the tile's token rows in a.x (< 2^32: at most 64K rows of
     * 2880), or ~0u past the expert's tokens (those rows are zero-filled). */
    __shared__ uint32_t row_off[LG_BN];
    for (int r = tid; r < LG_BN; r += LG_THREADS) {
        uint32_t o = ~0u;
        if (r < n_valid) {
            const size_t row = MODE == MODE_GATE_UP ? (size_t)(a.pair_sorted[off + n_base + r] / a.topk) : (size_t)(off + n_base + r);
            o = (uint32_t)(row * a.K);
        }
        row_off[r] = o;
    }
    __syncthreads();
    const int cc = tid & 7;
    /* Rows r and r + 32i have the same parity, so one swizzled offset serves all four. */
    const int dst0 = ((tid >> 3) * 64 + ((cc ^ (((tid >> 3) & 1) << 2)) * 8)) * 2;
    const int a_rt = rb * 8 + (tid >> 5);
    const int a_bytes = a_rt < a.RT ? 16 : 0;
    const char *a_src = (const char *)a.wq + (((size_t)e * a.RT + (a_rt < a.RT ? a_rt : 0)) * a.KK * 512) + lane * 16;
    const int s_rt = rb * 8 + (tid >> 1);
    const int s_bytes = (tid < 16 && s_rt < a.RT) ? 16 : 0;
    const char *s_src = (const char *)a.wsc + (((size_t)e * a.RT + (s_rt < a.RT ? s_rt : 0)) * a.KK * 32) + (tid & 1) * 16;

    auto load_stage = [&](int kk, int stage) {
        char *base = smem + stage * LG_STAGE_BYTES;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t o = row_off[(tid >> 3) + 32 * i];
            const uint16_t *src = a.x + (o == ~0u ? 0u : o) + cc * 8 + (size_t)kk * 64; /* valid even when zero-filling */
            cp_async16(smem_u32(base + dst0 + i * 32 * 128), src, o == ~0u ? 0 : 16);
        }
        cp_async16(smem_u32(base + LG_B_BYTES + tid * 16), a_src + (size_t)kk * 512, a_bytes);
        if (tid < 16) cp_async16(smem_u32(base + LG_B_BYTES + LG_A_BYTES + tid * 16), s_src + (size_t)kk * 32, s_bytes);
    };

    int rts[2];
    bool rt_ok[2];
#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        rts[mi] = rb * 8 + wm * 2 + mi;
        rt_ok[mi] = rts[mi] < a.RT;
    }

    float acc[2][8][4];
#pragma unroll
    for (int mi = 0; mi < 2; mi++)
#pragma unroll
        for (int nt = 0; nt < 8; nt++) acc[mi][nt][0] = acc[mi][nt][1] = acc[mi][nt][2] = acc[mi][nt][3] = 0.0f;

#pragma unroll
    for (int st = 0; st < LG_STAGES - 1; st++) {
        if (st < a.KK) load_stage(st, st);
        cp_async_commit();
    }

    for (int kk = 0; kk < a.KK; kk++) {
        cp_async_wait<LG_STAGES - 2>();
        __syncthreads(); /* stage kk landed for everyone; the stage read in step kk−1 is free again */
        if (kk + LG_STAGES - 1 < a.KK) load_stage(kk + LG_STAGES - 1, (kk + LG_STAGES - 1) % LG_STAGES);
        cp_async_commit();

        const char *base = smem + (kk % LG_STAGES) * LG_STAGE_BYTES;
        const uint16_t *bstage = (const uint16_t *)base;
        uint4 qc[2];
        uint32_t sc[2];
#pragma unroll
        for (int mi = 0; mi < 2; mi++) {
            qc[mi] = *(const uint4 *)(base + LG_B_BYTES + (wm * 2 + mi) * 512 + lane * 16);
            sc[mi] = *(const uint32_t *)(base + LG_B_BYTES + LG_A_BYTES + (wm * 2 + mi) * 32 + g * 4);
        }
#pragma unroll
        for (int h = 0; h < 2; h++) {
            uint32_t ag[2][4], a8[2][4];
#pragma unroll
            for (int mi = 0; mi < 2; mi++) {
                dequant_word(h ? qc[mi].z : qc[mi].x, scale_pair(sc[mi], 2 * h), ag[mi]);
                dequant_word(h ? qc[mi].w : qc[mi].y, scale_pair(sc[mi], 2 * h + 1), a8[mi]);
            }
            const int pc = (h * 4 + t) ^ ((g & 1) << 2);
#pragma unroll
            for (int nt = 0; nt < 8; nt++) {
                const int r = wn * 64 + nt * 8 + g;
                const uint4 xv = *(const uint4 *)(bstage + r * 64 + pc * 8);
#pragma unroll
                for (int mi = 0; mi < 2; mi++) mma_chunk(acc[mi][nt], ag[mi], a8[mi], xv);
            }
        }
    }
    cp_async_wait<0>();

#pragma unroll
    for (int mi = 0; mi < 2; mi++) {
        if (!rt_ok[mi]) continue;
#pragma unroll
        for (int nt = 0; nt < 8; nt++)
            tile_epilogue<MODE>(a, e, off, rts[mi], n_base + wn * 64 + nt * 8, n_base + n_valid, 0, acc[mi][nt]);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Routing                                                                                         */

/* One warp per token: k rounds of a warp arg-max over the E logits (value descending, index
 * ascending), then softmax over the k winners in order, as cpu_topk_softmax does. */
/* The top-k of one token's E logits by one warp: k rounds of a warp arg-max (value descending, index
 * ascending), then softmax over the k winners in order, as cpu_topk_softmax does. Lane 0 returns the
 * k (index, weight) pairs. */
__device__ __forceinline__ void topk_warp(const float *l, const float *l_lo, const uint16_t *bias, int E, int k,
                                          int lane, int *idx, float *wts) {
    float v[8];
    unsigned taken = 0;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int ex = lane + 32 * i;
        /* logit = hi (+ lo) (+ bias), in this order (the split-bf16 router GEMM, norm.h) */
        v[i] = ex < E ? l[ex] : 0.0f;
        if (ex < E && l_lo) v[i] += l_lo[ex];
        if (ex < E && bias) v[i] += bf16_bits_to_f32(bias[ex]);
        if (ex >= E) taken |= 1u << i;
    }
    float sel_v[8];
    int sel_i[8];
    const int NONE = 0x7fffffff;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        if (j >= k) break;
        float bv = 0.0f;
        int bi = NONE;
#pragma unroll
        for (int i = 0; i < 8; i++) /* indices ascend with i: strict > keeps the lowest on ties */
            if (!((taken >> i) & 1u) && (bi == NONE || v[i] > bv)) bv = v[i], bi = lane + 32 * i;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (oi != NONE && (bi == NONE || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
        }
        /* Every lane holds the same winner unless NaNs broke the order: take lane 0's. */
        bv = __shfl_sync(0xffffffffu, bv, 0);
        bi = __shfl_sync(0xffffffffu, bi, 0);
        if (bi == NONE || bi < 0 || bi >= E) bi = 0; /* unreachable for k ≤ E */
        sel_v[j] = bv, sel_i[j] = bi;
        if ((bi & 31) == lane) taken |= 1u << (bi >> 5);
    }
    if (lane == 0) {
        float ex[8], sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
            if (j < k) sum += (ex[j] = expf(sel_v[j] - sel_v[0]));
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (j >= k) break;
            idx[j] = sel_i[j];
            wts[j] = ex[j] / sum;
        }
    }
}

/* One warp per token. */
__global__ void moe_topk_kernel(const float *logits, const float *logits_lo, const uint16_t *bias, int T, int E, int k,
                                int *idx_out, float *w_out) {
    pdl_prologue(); /* first: see pdl.cuh */
    const int lane = threadIdx.x & 31;
    const int tok = blockIdx.x * (blockDim.x / 32) + (threadIdx.x >> 5);
    if (tok >= T) return;
    topk_warp(logits + (size_t)tok * E, logits_lo ? logits_lo + (size_t)tok * E : NULL, bias, E, k, lane,
              idx_out + (size_t)tok * k, w_out + (size_t)tok * k);
}

/* Decode-sized routing in one launch (T <= 32 tokens, T*k <= 64 pairs), with the same outputs as
 * moe_topk_kernel + moe_group_kernel: counts, offsets, the touched list, the tile list and the
 * stable counting sort (pairs in order within an expert). Warp w < T picks token w's experts into
 * shared memory; then thread e < E counts expert e's pairs (a ≤ 64-entry shared scan), three
 * block-wide exclusive scans give its offset, its place in the touched list and its first tile, and
 * thread p < P places pair p after the earlier pairs of its expert. No thread loops over E, and no
 * value makes a round trip through global memory: an earlier version grouped the pairs in one
 * thread, reading back its own global writes, and took ~14 µs per layer at batch 1 (ncu, H200). */
enum { ROUTE_SMALL_MIN_THREADS = 256 }; /* one thread per expert (E <= 256) */

/* The grouping's per-expert outputs from expert tid's pair count c (threads tid < E; every thread of
 * the block calls this, blockDim ≥ 256): count, offset (exclusive prefix sum, also into s_off), the
 * touched list and the large-path tile list, in ascending expert order, and the three totals. Three
 * block-wide exclusive scans (warp shuffles, then the 8 warp totals): no thread walks the E
 * experts. */
static __device__ __forceinline__ void expert_offsets(int c, int E, int BN, int *count, int *offset, int *touched,
                                                      int *n_touched, int *tiles, int *n_tiles, int *s_off) {
    __shared__ int s_warp[3][ROUTE_SMALL_MIN_THREADS / 32];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    if (tid >= E) c = 0;
    const int tc = c > 0, tl = (c + BN - 1) / BN;
    int ic = c, it = tc, il = tl;
    if (tid < ROUTE_SMALL_MIN_THREADS) {
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int a = __shfl_up_sync(0xffffffffu, ic, o), b = __shfl_up_sync(0xffffffffu, it, o),
                      d = __shfl_up_sync(0xffffffffu, il, o);
            if (lane >= o) ic += a, it += b, il += d;
        }
        if (lane == 31) s_warp[0][w] = ic, s_warp[1][w] = it, s_warp[2][w] = il;
    }
    __syncthreads();
    if (tid < ROUTE_SMALL_MIN_THREADS) {
        int pc = 0, pt = 0, pl = 0, tot_c = 0, tot_t = 0, tot_l = 0;
        for (int ww = 0; ww < ROUTE_SMALL_MIN_THREADS / 32; ww++) {
            if (ww < w) pc += s_warp[0][ww], pt += s_warp[1][ww], pl += s_warp[2][ww];
            tot_c += s_warp[0][ww], tot_t += s_warp[1][ww], tot_l += s_warp[2][ww];
        }
        const int oc = pc + ic - c, ot = pt + it - tc, ol = pl + il - tl; /* exclusive */
        if (tid < E) {
            offset[tid] = oc, count[tid] = c, s_off[tid] = oc;
            if (c) touched[ot] = tid;
            for (int b = 0; b < tl; b++) tiles[ol + b] = (tid << 16) | b;
        }
        if (tid == 0) offset[E] = tot_c, *n_touched = tot_t, *n_tiles = tot_l;
    }
    __syncthreads();
}


__global__ void moe_route_small_kernel(const float *logits, const float *logits_lo, const uint16_t *bias, int T, int E,
                                       int k, int BN, int *idx_out, float *w_out,
                                       int *count, int *offset, int *pair_sorted, int *touched, int *n_touched,
                                       int *tiles, int *n_tiles) {
    pdl_prologue(); /* first: see pdl.cuh */
    __shared__ int s_idx[64];
    __shared__ float s_w[64];
    __shared__ int s_off[256];
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, P = T * k;
    if (w < T)
        topk_warp(logits + (size_t)w * E, logits_lo ? logits_lo + (size_t)w * E : NULL, bias, E, k, lane, s_idx + w * k,
                  s_w + w * k);
    __syncthreads();
    if (tid < P) idx_out[tid] = s_idx[tid], w_out[tid] = s_w[tid];

    int c = 0;
    if (tid < E)
        for (int p = 0; p < P; p++) c += s_idx[p] == tid;
    expert_offsets(c, E, BN, count, offset, touched, n_touched, tiles, n_tiles, s_off);
    if (tid < P) {
        const int e = s_idx[tid];
        int r = 0;
        for (int q = 0; q < tid; q++) r += s_idx[q] == e;
        pair_sorted[s_off[e] + r] = tid;
    }
}

/* One block of 1024 threads: counts per expert, prefix sums, the touched list, the large-path tile
 * list, and a stable counting sort of the pairs by expert (pairs taken 1024 at a time in order; inside
 * a chunk, positions come from per-warp counts prefixed in warp order and the lane rank among equal
 * experts). Deterministic: positions depend only on the routing. */
__global__ void __launch_bounds__(1024) moe_group_kernel(const int *idx, int P, int E, int BN, int *count, int *offset,
                                                         int *pair_sorted, int *touched, int *n_touched, int *tiles,
                                                         int *n_tiles) {
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ int gsm[];
    int *cnt = gsm;      /* [E] */
    int *run = cnt + E;  /* [E] next free position of each expert */
    int *wc = run + E;   /* [32][E] per-warp counts → positions, per chunk */
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;
    for (int e = tid; e < E; e += blockDim.x) cnt[e] = 0;
    __syncthreads();
    for (int p = tid; p < P; p += blockDim.x) atomicAdd(&cnt[idx[p]], 1); /* integer: order-free */
    __syncthreads();
    expert_offsets(tid < E ? cnt[tid] : 0, E, BN, count, offset, touched, n_touched, tiles, n_tiles, run);
    for (int base = 0; base < P; base += blockDim.x) {
        for (int i = tid; i < 32 * E; i += blockDim.x) wc[i] = 0;
        __syncthreads();
        const int p = base + tid;
        const int e = p < P ? idx[p] : -1;
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

static size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static size_t max_tiles(int T, int E, int k) { return (size_t)T * k / MOE_TILE_TOKENS + E; }

size_t moe_routing_bytes(int T, int E, int k) {
    const size_t P = (size_t)T * k;
    size_t n = 0;
    n += align_up(P * 4, 256);                /* topk_idx */
    n += align_up(P * 4, 256);                /* topk_w */
    n += align_up((size_t)E * 4, 256);        /* count */
    n += align_up((size_t)(E + 1) * 4, 256);  /* offset */
    n += align_up(P * 4, 256);                /* pair_sorted */
    n += align_up((size_t)E * 4, 256);        /* touched */
    n += 256;                                 /* n_touched */
    n += align_up(max_tiles(T, E, k) * 4, 256); /* tiles */
    n += 256;                                 /* n_tiles */
    return n;
}

void moe_routing_carve(moe_routing *r, void *buf, int T, int E, int k) {
    const size_t P = (size_t)T * k;
    char *p = (char *)buf;
    r->T = T, r->E = E, r->k = k;
    r->topk_idx = (int *)p, p += align_up(P * 4, 256);
    r->topk_w = (float *)p, p += align_up(P * 4, 256);
    r->count = (int *)p, p += align_up((size_t)E * 4, 256);
    r->offset = (int *)p, p += align_up((size_t)(E + 1) * 4, 256);
    r->pair_sorted = (int *)p, p += align_up(P * 4, 256);
    r->touched = (int *)p, p += align_up((size_t)E * 4, 256);
    r->n_touched = (int *)p, p += 256;
    r->tiles = (int *)p, p += align_up(max_tiles(T, E, k) * 4, 256);
    r->n_tiles = (int *)p;
}

cudaError_t moe_route(const float *logits, const moe_routing *r, cudaStream_t stream) {
    return moe_route_split(logits, NULL, NULL, r, stream);
}

cudaError_t moe_route_split(const float *logits, const float *logits_lo, const uint16_t *bias, const moe_routing *r,
                            cudaStream_t stream) {
    if (!logits || !r || r->T < 0 || r->E < 1 || r->E > 256 || r->k < 1 || r->k > 8 || r->k > r->E)
        return cudaErrorInvalidValue;
    if (r->T == 0) return cudaSuccess;
    if (r->T <= 32 && r->T * r->k <= 64) {
        const int threads = 32 * r->T > ROUTE_SMALL_MIN_THREADS ? 32 * r->T : ROUTE_SMALL_MIN_THREADS;
        pdl_launch(moe_route_small_kernel, dim3(1), dim3(threads), 0, stream, logits, logits_lo, bias, r->T, r->E, r->k, MOE_TILE_TOKENS, r->topk_idx,
                                                            r->topk_w, r->count, r->offset, r->pair_sorted,
                                                            r->touched, r->n_touched, r->tiles, r->n_tiles);
        return cudaGetLastError();
    }
    const int warps = 8;
    pdl_launch(moe_topk_kernel, dim3((r->T + warps - 1) / warps), dim3(warps * 32), 0, stream, logits, logits_lo, bias, r->T, r->E, r->k, r->topk_idx, r->topk_w);
    CUDA_TRY(cudaGetLastError());
    const size_t smem = (size_t)(2 + 32) * r->E * sizeof(int);
    pdl_launch(moe_group_kernel, dim3(1), dim3(1024), smem, stream, r->topk_idx, r->T * r->k, r->E, MOE_TILE_TOKENS, r->count, r->offset,
                                                r->pair_sorted, r->touched, r->n_touched, r->tiles, r->n_tiles);
    return cudaGetLastError();
}

/* ---------------------------------------------------------------------------------------------- */
/* Plans and launches                                                                              */

moe_plan moe_plan_for(int T, int E, int k, int sm_count) {
    moe_plan p;
    const double avg = (double)T * k / E; /* pairs per expert */
    /* Measured on the H200 (bench/results/kernels-2026-11-30-h200.md, E = 128): the small path beats
     * the large one at T = 256 (0.76 vs 3.18 ms) and T = 1024 (1.92 vs 3.27 ms, 32 pairs per expert);
     * the large path's mma.sync pipeline only pays at prefill sizes. Until it has wgmma, take it from
     * 96 pairs per expert (T = 3072 for 120b). */
    p.large = avg >= 96.0;
    p.ntp = avg <= 3.0 ? 1 : 2;
    p.down_splits = 1;
    if (!p.large) {
        /* Expected touched experts E·(1 − (1 − k/E)^T); the down projection has H/16 row tiles per
         * expert in blocks of 4 or 8 warps, and 4 (resp. 2) such blocks fit on an SM at once. Split K
         * as far as one wave of resident blocks allows (a second, nearly empty wave would cost a
         * whole block time). */
        const double touched = E * (1.0 - pow(1.0 - (double)k / E, (double)T));
        const double blocks = touched * (p.ntp == 1 ? 45.0 : 23.0);
        const double resident = (p.ntp == 1 ? 4.0 : 2.0) * (sm_count > 0 ? sm_count : 132);
        int S = (int)floor(resident / (blocks > 1 ? blocks : 1));
        p.down_splits = S < 1 ? 1 : (S > 5 ? 5 : S);
    }
    return p;
}

size_t moe_act_bytes(int T, int k, int I) { return (size_t)T * k * I * 2; }

size_t moe_y_slots_bytes(int T, int k, int H, const moe_plan *plan) {
    return (size_t)T * k * (plan->large ? 1 : plan->down_splits) * H * sizeof(float);
}

static int g_attrs_set = 0;

typedef void (*small_fn)(moe_args);
static small_fn small_kernel_for(int ntp, int mode, int folded) {
#define SMALL_CASE(n, m)                                                                           \
    if (ntp == n && mode == m) return folded ? moe_small_kernel<n, m, true> : moe_small_kernel<n, m, false>;
    SMALL_CASE(1, MODE_GATE_UP) SMALL_CASE(1, MODE_DOWN) SMALL_CASE(2, MODE_GATE_UP) SMALL_CASE(2, MODE_DOWN)
#undef SMALL_CASE
    return NULL;
}

static cudaError_t set_attrs(void) {
    if (g_attrs_set) return cudaSuccess;
    for (int ntp = 1; ntp <= 2; ntp++)
        for (int mode = 0; mode < 2; mode++)
            for (int folded = 0; folded < 2; folded++)
                CUDA_TRY(cudaFuncSetAttribute((const void *)small_kernel_for(ntp, mode, folded),
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
    CUDA_TRY(cudaFuncSetAttribute((const void *)moe_large_kernel<MODE_GATE_UP>, cudaFuncAttributeMaxDynamicSharedMemorySize, LG_SMEM));
    CUDA_TRY(cudaFuncSetAttribute((const void *)moe_large_kernel<MODE_DOWN>, cudaFuncAttributeMaxDynamicSharedMemorySize, LG_SMEM));
    g_attrs_set = 1;
    return cudaSuccess;
}

static moe_args base_args(const moe_weights *w, const moe_routing *r) {
    moe_args a;
    memset(&a, 0, sizeof a);
    a.count = r->count, a.offset = r->offset, a.pair_sorted = r->pair_sorted, a.touched = r->touched;
    a.n_touched = r->n_touched, a.tiles = r->tiles, a.n_tiles = r->n_tiles, a.topk_w = r->topk_w;
    a.topk = r->k;
    a.alpha = w->swiglu_alpha, a.limit = w->swiglu_limit;
    return a;
}

static cudaError_t launch(const moe_args &a0, int mode, int folded, const moe_plan *plan, const moe_routing *r,
                          cudaStream_t stream) {
    moe_args a = a0;
    const int max_touched = r->E < r->T * r->k ? r->E : r->T * r->k;
    if (plan->large) {
        /* The large kernel keeps row offsets into its input as 32-bit element offsets. */
        if ((size_t)r->T * r->k * a.K >= 0xffffffffull) return cudaErrorInvalidValue;
        a.S = 1;
        a.n_rb = (a.RT + 7) / 8;
        const dim3 grid((unsigned)a.n_rb, (unsigned)max_tiles(r->T, r->E, r->k));
        if (mode == MODE_GATE_UP)
            pdl_launch(moe_large_kernel<MODE_GATE_UP>, dim3(grid), dim3(LG_THREADS), LG_SMEM, stream, a);
        else
            pdl_launch(moe_large_kernel<MODE_DOWN>, dim3(grid), dim3(LG_THREADS), LG_SMEM, stream, a);
        return cudaGetLastError();
    }
    const int ntp = plan->ntp == 1 ? 1 : 2;
    const int warps = ntp == 1 ? small_cfg<1>::WARPS : small_cfg<2>::WARPS;
    a.n_rb = (a.RT + warps - 1) / warps;
    const int nk_max = (a.KK + a.S - 1) / a.S;
    const size_t smem = (size_t)8 * ntp * (nk_max * 64 + 32) * 2;
    if (smem > 227 * 1024) return cudaErrorInvalidValue;
    const long blocks = (long)max_touched * a.n_rb * a.S;
    if (blocks < 1) return cudaSuccess;
    const int threads = ntp == 1 ? small_cfg<1>::THREADS : small_cfg<2>::THREADS;
    CUDA_TRY(pdl_launch(small_kernel_for(ntp, mode, folded), dim3((unsigned)blocks), dim3(threads), smem, stream, a));
    return cudaGetLastError();
}

static int weights_ok(const moe_weights *w) {
    return w && w->E >= 1 && w->H % 64 == 0 && w->I % 64 == 0 && w->H > 0 && w->I > 0 && w->w1_q && w->w1_s &&
           w->b1 && w->w2_q && w->w2_s && w->b2;
}

cudaError_t moe_gate_up(const moe_weights *w, const uint16_t *x, const moe_routing *r, const moe_plan *plan,
                        uint16_t *act, cudaStream_t stream) {
    if (!weights_ok(w) || !x || !r || !plan || !act || r->E != w->E) return cudaErrorInvalidValue;
    if (r->T == 0) return cudaSuccess;
    CUDA_TRY(set_attrs());
    moe_args a = base_args(w, r);
    a.wq = (const uint4 *)w->w1_q, a.wsc = (const uint32_t *)w->w1_s, a.bias = w->b1;
    a.x = x, a.act = act;
    a.K = w->H, a.R = 2 * w->I, a.RT = a.R / 16, a.KK = a.K / 64, a.S = 1;
    return launch(a, MODE_GATE_UP, w->w1_folded, plan, r, stream);
}

cudaError_t moe_down(const moe_weights *w, const moe_routing *r, const moe_plan *plan, const uint16_t *act,
                     float *y_slots, cudaStream_t stream) {
    if (!weights_ok(w) || !r || !plan || !act || !y_slots || r->E != w->E) return cudaErrorInvalidValue;
    if (r->T == 0) return cudaSuccess;
    CUDA_TRY(set_attrs());
    moe_args a = base_args(w, r);
    a.wq = (const uint4 *)w->w2_q, a.wsc = (const uint32_t *)w->w2_s, a.bias = w->b2;
    a.x = act, a.y = y_slots;
    a.K = w->I, a.R = w->H, a.RT = a.R / 16, a.KK = a.K / 64;
    a.S = plan->large ? 1 : plan->down_splits;
    if (a.S < 1 || a.S > a.KK) return cudaErrorInvalidValue; /* y_slots is laid out for this S */
    return launch(a, MODE_DOWN, w->w2_folded, plan, r, stream);
}

cudaError_t moe_experts(const moe_weights *w, const uint16_t *x, const moe_routing *r, const moe_plan *plan,
                        uint16_t *act, float *y_slots, cudaStream_t stream) {
    CUDA_TRY(moe_gate_up(w, x, r, plan, act, stream));
    return moe_down(w, r, plan, act, y_slots, stream);
}
