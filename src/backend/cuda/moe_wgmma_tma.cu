/* The large-batch MoE grouped GEMM, warp-specialised with the copy engine (TMA) bringing every
 * operand (sm_90a): moe_wgmma_ws.cu's tiles, dequantisation, MMAs and epilogue, but no thread copies
 * anything. Two forms: A dequantised into shared memory by warps of their own (below), and A
 * dequantised by the consumers into their registers (moe_wgmma_rs.cuh: the default for every large
 * plan since session 12, decode 1024 +10.9 %, prefill 1k +13.9 %). The shared-memory form was the
 * default at 64-token tiles before it (moe.h: GPTOSS_MOE_WGMMA; on the H200 the experts alone at
 * T = 1024 −9 % against moe_wgmma.cu, the previous default there, and decode 1024 +2.1–2.4 %,
 * prefill 1k +2.3–3.6 %); at 128-token tiles it ties ws (bench/NOTES.md, session 10). At 64-token
 * tiles its MMAs are only as wide as a tile's tokens need (ws_with_width: decode 1024 +5.6 %,
 * prefill 1k +7.4 %, session 11).
 *
 * ── Why ───────────────────────────────────────────────────────────────────────────────────────
 * ncu of moe_wgmma_ws.cu at T = 1024 (64-token tiles, the regime of decode 1024 and prefill 1k):
 * the SM issues on 61 % of its cycles and a producer warp's k step is ~200 instructions, of which
 * ~85 dequantise. The rest is the copies: per thread per step 3–5 cp.async with their 64-bit
 * address arithmetic, ptxas's 13 predicated-off `LDS` before them, the group commit and wait, and a
 * wait for the consumers' release of the B stage that the copy refills — the most sampled producer
 * stall (7 % of all samples: the producers advance in lockstep with the consumers, one step of
 * slack). Here one lane of the first consumer warp issues three tensor copies a step (the 8 row
 * tiles' codes, their scale words, the B tile) into rings the hardware fills and signals by mbarrier
 * (transaction bytes), so the dequantising threads only wait for a raw slot, read it, release it,
 * dequantise into A and hand A over.
 *
 * ── The B operand by TMA ──────────────────────────────────────────────────────────────────────
 * A tensor copy brings a box of consecutive rows, 128-byte swizzled exactly as wgmma reads it. The
 * down projection's input (act) is already in the experts' sorted order. The gate_up input is x
 * gathered by token; moe_gather_rows first writes each tile's rows in sorted order into a scratch
 * (the caller's y_slots, which only the down projection writes, after gate_up). A box may run past
 * the tile's tokens into the next expert's rows (or past the matrix: zeros): those B rows only
 * reach accumulator columns that the epilogue never stores (an output column n depends on B row n
 * alone). The same holds for the codes box past the matrix's row tiles.
 *
 * ── Block ─────────────────────────────────────────────────────────────────────────────────────
 * warps 0–7 dequantise (thread (warp w, lane (g, t)) owns row tile w's 16 bytes, as in ws), warps
 * 8–15 are the two consumer warpgroups, and warp 8's lane 0 also issues the copies, a fixed number of
 * steps ahead (a warp of its own would take the kernel past 64 registers a thread at two blocks an
 * SM, too few for the consumers' wgmma: ptxas C7602). Rings and who releases:
 *   raw[R]: codes + scales of a k step; full by TMA bytes, empty by the 256 dequantising threads
 *           once their words are in registers;
 *   A[SA]:  full by the 256 dequantising threads, empty by the 8 consumer warps;
 *   B[SB]:  full by TMA bytes, empty by the 8 consumer warps.
 * A consumer warpgroup keeps one MMA group in flight and releases step kk − 1's A and B stages
 * after issuing step kk (as ws). No cycle: the copier, at its step kk, waits for the dequantisers'
 * release of raw step kk + DR − R ≤ kk − 2 (they reach it: they need only raws already issued and A
 * releases of steps ≤ kk − 2 − SA) and for the consumers' release of B step kk + DB − SB ≤ kk − 2
 * (its own warpgroup's is done; the other needs only B and A of steps ≤ kk − 1, both reachable);
 * the dequantisers wait for the copier and the consumers' release of A step kk − SA; the consumers
 * for both. */
#include "base/env_switch.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/moe.h"
#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_tma_copier.cuh"
#include "backend/cuda/moe_wgmma_rs.cuh"
#include "backend/cuda/moe_ws_parts.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/tma_ring.cuh" /* mbarriers */

#include <cuda.h> /* CUtensorMap */
#include <cudaTypedefs.h>

#include <stdlib.h>
#include <string.h>

/* Measured no faster on the H200 (bench/NOTES.md, session 11): a fourth A stage at 64-token tiles
 * paid for with a B stage and a raw slot (T = 1024 1,318 against 1,300 µs), though ncu had the
 * dequantisers waiting for the consumers' release of an A stage ~15 % of all samples. */
template <int BN> struct tm_cfg {
    static constexpr int DEQ = 256;           /* dequantising threads */
    static constexpr int THREADS = DEQ + 256; /* + two consumer warpgroups */
    static constexpr int SA = BN == 64 ? 3 : 4;
    static constexpr int SB = BN == 64 ? 4 : 6;
    static constexpr int R = BN == 64 ? 6 : 8;
    /* look-ahead of the copies in k steps: the copier at its step kk waits for the release of raw
     * step kk + DR − R and B step kk + DB − SB, which must be ≤ kk − 2 (header: no cycle) */
    static constexpr int DR = R - 2;
    static constexpr int DB = SB - 2;
    static constexpr int BLOCKS = BN == 64 ? 2 : 1;
    static constexpr int B_BYTES = BN * 128; /* a multiple of 1024 */
    /* full_a, empty_a [SA]; full_b, empty_b [SB]; full_r, empty_r [R] */
    static constexpr int BAR_BYTES = 8 * 2 * (SA + SB + R);
    static constexpr int SMEM =
        SA * WS_A_BYTES + SB * B_BYTES + R * WS_RAW_BYTES + BAR_BYTES + 1024;
};
static_assert(2 * (tm_cfg<64>::SMEM + 1024) <= 228 * 1024, "two 64-token blocks an SM");
static_assert(tm_cfg<128>::SMEM <= 227 * 1024, "one 128-token block an SM");

template <int MODE, int BN, bool FOLDED>
__global__ void __launch_bounds__(tm_cfg<BN>::THREADS, tm_cfg<BN>::BLOCKS)
    moe_wgmma_tma_kernel(const moe_args a, const __grid_constant__ moe_tma_maps maps) {
    using C = tm_cfg<BN>;
    constexpr int SA = C::SA, SB = C::SB, R = C::R;
    constexpr int DR = C::DR, DB = C::DB;
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ __align__(1024) uint8_t tm_smem_raw[];
    const uint32_t raw_base = smem_u32(tm_smem_raw);
    uint8_t *smem = tm_smem_raw + (((raw_base + 1023u) & ~1023u) - raw_base);
    uint8_t *a_st = smem;                   /* SA x A */
    uint8_t *b_st = a_st + SA * WS_A_BYTES; /* SB x B */
    uint8_t *raws = b_st + SB * C::B_BYTES; /* R x {codes, scales} */
    uint64_t *full_a = (uint64_t *)(raws + R * WS_RAW_BYTES);
    uint64_t *empty_a = full_a + SA;
    uint64_t *full_b = empty_a + SA;
    uint64_t *empty_b = full_b + SB;
    uint64_t *full_r = empty_b + SB;
    uint64_t *empty_r = full_r + R;

    tile_pos tp;
    if (!tile_of_block_bn<BN>(a, &tp)) return;
    const int rb = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5;

    if (tid == 0) {
        for (int s = 0; s < SA; s++) {
            mbar_init(&full_a[s], C::DEQ);
            mbar_init(&empty_a[s], 8); /* one arrival per consumer warp */
        }
        for (int s = 0; s < SB; s++) {
            mbar_init(&full_b[s], 1); /* the copier's arrival, plus the bytes */
            mbar_init(&empty_b[s], 8);
        }
        for (int s = 0; s < R; s++) {
            mbar_init(&full_r[s], 1);
            mbar_init(&empty_r[s], C::DEQ);
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (w < 8) {
        /* ── dequantisers: thread (warp w, lane (g, t)) owns row tile w (moe_wgmma_ws.cu) ── */
        const int tile = w, g = lane >> 2, t = lane & 3, odd = g & 1;
        const uint32_t code_at = tile * 512 + lane * 16;
        const int r0 = 16 * tile + g;
        const int c1 = odd ? 4 + t : t, c2 = odd ? t : 4 + t;
        const uint32_t st_off[4] = {sw128_offset(r0, c1), sw128_offset(r0 + 8, c1),
                                    sw128_offset(r0, c2), sw128_offset(r0 + 8, c2)};
        const uint32_t rd1 = code_at + (odd ? 8 : 0), rd2 = code_at + (odd ? 0 : 8);
        const uint32_t rd_scale = WS_CODE_BYTES + tile * 32 + g * 4;
        const uint32_t sc_perm = odd ? 0x1032u : 0x3210u;
        const uint32_t raw0 = smem_u32(raws), a0 = smem_u32(a_st);
        ring rr{0, 0}, ra{0, 0};
        for (int kk = 0; kk < a.KK; kk++) {
            mbar_wait(&full_r[rr.i], rr.par);
            const uint32_t rs = raw0 + rr.i * WS_RAW_BYTES;
            const uint2 q1 = ws_lds64(rs + rd1), q2 = ws_lds64(rs + rd2);
            const uint32_t sc = __byte_perm(ws_lds32(rs + rd_scale), 0u, sc_perm);
            mbar_arrive(&empty_r[rr.i]); /* release-ordered after the loads */
            rr.next(R);
            const uint32_t wd[4] = {q1.x, q1.y, q2.x, q2.y};
            if (kk >= SA) mbar_wait(&empty_a[ra.i], ra.par ^ 1);
            const uint32_t a_base = a0 + ra.i * WS_A_BYTES;
            ws_dequant_store<FOLDED>(wd, sc, a_base, st_off);
            mbar_arrive(&full_a[ra.i]);
            ra.next(SA);
        }
        return;
    }

    /* ── consumers (warps 8–15), the first of them also the copier ── */
    const int cw = (w >> 2) - 2, w4 = w & 3;
    const uint64_t da0 = smem_desc_sw128(smem_u32(a_st) + cw * 64 * 128);
    const uint64_t db0 = smem_desc_sw128(smem_u32(b_st));
    ring ca{0, 0}, cb{0, 0};
    int pa = 0, pb = 0; /* the stages of the step before */
    /* The copier: lane 0 of the first consumer warp issues raw step kk + DR and B step kk + DB at
     * the top of its step kk (the first DR and DB before the loop); its waits need nothing that
     * waits for this warp's step kk (header). */
    const bool copier = w == 8 && lane == 0;
    const int tile0 = tp.e * a.RT + rb * 8, row0 = tp.off + tp.n_base;
    const uint32_t r0 = smem_u32(raws), b0 = smem_u32(b_st);
    tma_copier<R, SB, C::B_BYTES> cp{&maps, full_r, empty_r, full_b, empty_b, r0, b0, tile0, row0};
    if (copier) cp.prime(a.KK, DR, DB);
    /* The tile with MMAs NN tokens wide, epilogue included: at 64-token tiles the narrowest
     * width that holds the tile's tokens (ws_with_width: decode 1024 +5.6 %, prefill 1k +7.4 % on
     * the H200, session 11), at 128 the tile's width. */
    auto k_loop = [&](auto nn) {
        constexpr int NN = decltype(nn)::value;
        float acc[NN / 2];
#pragma unroll
        for (int i = 0; i < NN / 2; i++) acc[i] = 0.0f;
        for (int kk = 0; kk < a.KK; kk++) {
            if (copier) {
                if (kk + DR < a.KK) cp.raw(kk + DR);
                if (kk + DB < a.KK) cp.b(kk + DB);
            }
            __syncwarp();
            mbar_wait(&full_a[ca.i], ca.par);
            mbar_wait(&full_b[cb.i], cb.par);
            const uint64_t da = da0 + (uint64_t)(ca.i * (WS_A_BYTES >> 4));
            const uint64_t db = db0 + (uint64_t)(cb.i * (C::B_BYTES >> 4));
            ws_mma_step<NN>(acc, da, db);
            /* Step kk − 1's MMAs are done: its stages may be refilled. (Releasing step kk's
             * stages right after its own MMAs instead, with wait 0, measured 28 % slower at
             * T = 1024: the tensor pipe then drains every step; bench/NOTES.md.) */
            wgmma_wait<1>();
            if (kk >= 1 && lane == 0) {
                mbar_arrive(&empty_a[pa]);
                mbar_arrive(&empty_b[pb]);
            }
            pa = ca.i, pb = cb.i;
            ca.next(SA);
            cb.next(SB);
        }
        wgmma_wait<0>();
        fence_acc(acc);
        store_tile_n<MODE, NN / 8>(a, tp, rb * 8 + 4 * cw + w4, acc);
    };
    if constexpr (BN == 64)
        ws_with_width<BN>(tp.n_valid, k_loop);
    else
        k_loop(std::integral_constant<int, BN>{});
}

/* Gate_up's B in sorted order: row off + n of xs = x's row of the expert's n-th pair, for every
 * routing tile (grid y: its slot; x: a quarter of its rows). FRAG_ORDER: each row in fragment order
 * (frag_order_k: in every 64-byte chunk the 4 x 4 words transposed), for the register-A form. */
template <bool FRAG_ORDER> __global__ void moe_gather_rows_kernel(const moe_args a, uint16_t *xs) {
    pdl_prologue();
    tile_pos tp;
    if (!tile_of_block(a, MOE_TILE_TOKENS, &tp)) return;
    const int chunks = a.K / (FRAG_ORDER ? 32 : 8); /* 64- or 16-byte chunks a row */
    for (int r = blockIdx.x; r < tp.n_valid; r += gridDim.x) {
        const int slot = tp.off + tp.n_base + r;
        const uint4 *src = (const uint4 *)(a.x + (size_t)(a.pair_sorted[slot] / a.topk) * a.K);
        uint4 *dst = (uint4 *)(xs + (size_t)slot * a.K);
        for (int c = threadIdx.x; c < chunks; c += blockDim.x) {
            if (!FRAG_ORDER) {
                dst[c] = src[c];
                continue;
            }
            /* word 4i + j (pair p) goes to word 4j + i: frag_order_k on pairs */
            const uint4 i0 = src[4 * c], i1 = src[4 * c + 1], i2 = src[4 * c + 2],
                        i3 = src[4 * c + 3];
            dst[4 * c] = make_uint4(i0.x, i1.x, i2.x, i3.x);
            dst[4 * c + 1] = make_uint4(i0.y, i1.y, i2.y, i3.y);
            dst[4 * c + 2] = make_uint4(i0.z, i1.z, i2.z, i3.z);
            dst[4 * c + 3] = make_uint4(i0.w, i1.w, i2.w, i3.w);
        }
    }
}

/* ── host ── */

static PFN_cuTensorMapEncodeTiled_v12000 encode_fn(void) {
    static PFN_cuTensorMapEncodeTiled_v12000 fn; /* the driver's; resolved once */
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault,
                                             &q) == cudaSuccess &&
            q == cudaDriverEntryPointSuccess)
            fn = (PFN_cuTensorMapEncodeTiled_v12000)p;
    }
    return fn;
}

/* A rank-3 u32 map of [outer][mid][inner] words with the given box. */
static int encode_u32_3d(CUtensorMap *m, const void *base, uint64_t inner, uint64_t mid,
                         uint64_t outer, uint32_t box_inner, uint32_t box_outer) {
    const cuuint64_t dims[3] = {inner, mid, outer};
    const cuuint64_t strides[2] = {inner * 4, inner * mid * 4};
    const cuuint32_t box[3] = {box_inner, 1, box_outer};
    const cuuint32_t es[3] = {1, 1, 1};
    return encode_fn()(m, CU_TENSOR_MAP_DATA_TYPE_UINT32, 3, (void *)base, dims, strides, box, es,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The weights' two maps (codes, scales) of a matrix, encoded once: a step encodes them for every
 * layer's two launches otherwise. Keyed by the codes' address and shape; per host thread (the
 * backends drive one device from one thread), a small ring that a model's 2·L matrices fit. A map
 * holds only addresses and shapes, so a stale entry is wrong only if both buffers were freed and
 * others of the same shapes took both addresses: still the right memory to read. */
struct weight_maps {
    const void *wq, *wsc;
    uint64_t n_row_tiles;
    int KK, box; /* box: row tiles a copy brings */
    CUtensorMap codes, scales;
};

static int weight_maps_of(const moe_args &a, uint64_t n_row_tiles, int box, CUtensorMap *codes,
                          CUtensorMap *scales) {
    enum { N = 256 };
    static thread_local weight_maps cache[N];
    static thread_local int next;
    for (int i = 0; i < N; i++) {
        const weight_maps &c = cache[i];
        if (c.wq == (const void *)a.wq && c.wsc == (const void *)a.wsc &&
            c.n_row_tiles == n_row_tiles && c.KK == a.KK && c.box == box) {
            *codes = c.codes, *scales = c.scales;
            return 1;
        }
    }
    weight_maps &c = cache[next];
    if (!encode_u32_3d(&c.codes, a.wq, 128, (uint64_t)a.KK, n_row_tiles, 128, (uint32_t)box) ||
        !encode_u32_3d(&c.scales, a.wsc, 8, (uint64_t)a.KK, n_row_tiles, 8, (uint32_t)box)) {
        c.wq = NULL;
        return 0;
    }
    c.wq = a.wq, c.wsc = a.wsc, c.n_row_tiles = n_row_tiles, c.KK = a.KK, c.box = box;
    next = (next + 1) % N;
    *codes = c.codes, *scales = c.scales;
    return 1;
}

/* A bf16 B map of rows x K with boxes of 64 k x box_rows, 128-byte swizzle. */
static int encode_b(CUtensorMap *m, const uint16_t *b, uint64_t K, uint64_t rows,
                    uint32_t box_rows) {
    const cuuint64_t bdims[2] = {(cuuint64_t)K, rows};
    const cuuint64_t bstrides[1] = {(cuuint64_t)K * 2};
    const cuuint32_t bbox[2] = {64, box_rows};
    const cuuint32_t es[2] = {1, 1};
    return encode_fn()(m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)b, bdims, bstrides, bbox, es,
                       CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                       CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                       CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/* The maps of one launch: codes and scales of the matrix's n_row_tiles row tiles (every expert's,
 * one dimension) in boxes of box row tiles, B = rows x a.K bf16 at b in boxes of bn rows. */
static int encode_maps(moe_tma_maps *m, const moe_args &a, uint64_t n_row_tiles, int box,
                       const uint16_t *b, uint64_t rows, int bn) {
    if (!encode_fn()) return 0;
    memset(m, 0, sizeof *m);
    return weight_maps_of(a, n_row_tiles, box, &m->codes, &m->scales) &&
           encode_b(&m->b, b, (uint64_t)a.K, rows, (uint32_t)bn);
}

int moe_wgmma_tma_available(void) {
    return encode_fn() != NULL;
}

template <int MODE, int BN, bool FOLDED>
static cudaError_t tma_launch_t(const moe_args &a, const moe_tma_maps &m, dim3 grid,
                                cudaStream_t stream) {
    constexpr int SMEM = tm_cfg<BN>::SMEM;
    static unsigned long long attrs_set; /* per device: per_device.h */
    if (!per_device_done(&attrs_set)) {
        CUDA_TRY(cudaFuncSetAttribute((const void *)moe_wgmma_tma_kernel<MODE, BN, FOLDED>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        per_device_mark(&attrs_set);
    }
    grid.y *= MOE_TILE_TOKENS / BN; /* BN = 64: two blocks a routing tile */
    CUDA_TRY(pdl_launch(moe_wgmma_tma_kernel<MODE, BN, FOLDED>, grid, dim3(tm_cfg<BN>::THREADS),
                        SMEM, stream, a, m));
    return cudaGetLastError();
}

template <int MODE, bool FOLDED, class C>
static cudaError_t rs_launch_t(const moe_args &a, const moe_tma_maps &m, dim3 grid,
                               cudaStream_t stream) {
    constexpr int SMEM = C::SMEM;
    static unsigned long long attrs_set; /* per device: per_device.h */
    if (!per_device_done(&attrs_set)) {
        CUDA_TRY(cudaFuncSetAttribute((const void *)moe_wgmma_rs_kernel<MODE, FOLDED, C>,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM));
        per_device_mark(&attrs_set);
    }
    grid.x = (unsigned)((a.RT + C::WARPS - 1) / C::WARPS); /* row blocks of C::WARPS row tiles */
    grid.y *= MOE_TILE_TOKENS / C::BN;                     /* BN = 64: two blocks a routing tile */
    CUDA_TRY(pdl_launch(moe_wgmma_rs_kernel<MODE, FOLDED, C>, grid, dim3(C::THREADS), SMEM, stream,
                        a, m));
    return cudaGetLastError();
}

/* The register-A form's block shapes (moe_wgmma_rs.cuh's rs_shape: tokens, consumer warpgroups,
 * ring slots, blocks an SM): 0 the default, 1 the wide one for plans whose experts average at least
 * RS_WIDE_MIN_AVG pairs. Measured on the H200 (bench/NOTES.md, session 20; 120b experts alone, µs):
 * 128 tokens x 192 rows against 64 x 128 at T = 8192 (256 pairs an expert) 3,944 against 4,677,
 * 16384 7,433 against 8,438, but 4096 (128) 2,220 against 2,089 and 1024 (32) 1,221 against 806;
 * prefill 8k +5.9 % (120b) and +8.7 % (20b). 128 x 128 and 64 x 256 gained less or lost (removed).
 * GPTOSS_MOE_RS_SHAPE (read once; moe_wgmma_rs_set_shape for tests): moe.h's MOE_RS_NARROW or
 * MOE_RS_WIDE forces that shape, MOE_RS_BY_PLAN (the default) chooses. */
using rs_shape_wide = rs_shape<128, 3, 8, 1>; /* 128 tokens x 192 rows */
enum { RS_WIDE_MIN_AVG = 192 };

static int g_rs_shape = -1;

void moe_wgmma_rs_set_shape(int shape) {
    env_switch_set(&g_rs_shape, shape, MOE_RS_NARROW, MOE_RS_BY_PLAN);
}

int moe_wgmma_rs_shape(void) {
    return env_switch(&g_rs_shape, "GPTOSS_MOE_RS_SHAPE", MOE_RS_BY_PLAN, MOE_RS_NARROW,
                      MOE_RS_BY_PLAN);
}

/* Whether a launch of `rows` pairs over n_experts experts takes the wide block. Under expert
 * parallelism rows counts every rank's pairs and n_experts only this rank's, so the average is
 * overstated by the rank count: the wide block starts at a smaller T there (the same bits either
 * way; unmeasured). */
static bool rs_wide_for(int rows, int n_experts) {
    const int s = moe_wgmma_rs_shape();
    return s == MOE_RS_BY_PLAN ? rows >= RS_WIDE_MIN_AVG * n_experts : s == MOE_RS_WIDE;
}

/* GPTOSS_MOE_TMA_RS (read once; moe_wgmma_tma_set_rs for tests): the register-A form for every
 * large plan (2, the default), only where the plan has 64-token tiles (1), or never (0). On the
 * H200 (bench/NOTES.md, session 12): at 64-token plans decode 1024 +10.9 %, prefill 1k +13.9 %; in
 * place of ws at 128-token plans the experts alone at T = 4096 −6.5 %, at 16384 equal, prefill 8k
 * +0.5 %. */
static int g_rs = -1;

void moe_wgmma_tma_set_rs(int on) {
    env_switch_set(&g_rs, on, 0, 2);
}

int moe_wgmma_tma_rs(void) {
    return env_switch(&g_rs, "GPTOSS_MOE_TMA_RS", 2, 0, 2);
}

template <int MODE>
static cudaError_t tma_launch_mode(const moe_args &a, const moe_tma_maps &m, int bn, int folded,
                                   int rs, bool wide, dim3 grid, cudaStream_t stream) {
    if (rs && wide)
        return folded ? rs_launch_t<MODE, true, rs_shape_wide>(a, m, grid, stream)
                      : rs_launch_t<MODE, false, rs_shape_wide>(a, m, grid, stream);
    if (rs)
        return folded ? rs_launch_t<MODE, true, rs_shape_default>(a, m, grid, stream)
                      : rs_launch_t<MODE, false, rs_shape_default>(a, m, grid, stream);
    if (bn == 64)
        return folded ? tma_launch_t<MODE, 64, true>(a, m, grid, stream)
                      : tma_launch_t<MODE, 64, false>(a, m, grid, stream);
    return folded ? tma_launch_t<MODE, 128, true>(a, m, grid, stream)
                  : tma_launch_t<MODE, 128, false>(a, m, grid, stream);
}

cudaError_t moe_wgmma_tma_launch(const moe_args &a, int mode, int bn, int folded, int rs,
                                 int n_experts, int rows, uint16_t *scratch, dim3 grid,
                                 cudaStream_t stream) {
    if ((bn != 64 && bn != 128) || n_experts < 1 || rows < 1 ||
        (mode == MODE_GATE_UP && !scratch) || (rs && bn != 64))
        return cudaErrorInvalidValue;
    const uint16_t *b = mode == MODE_GATE_UP ? scratch : a.x;
    moe_tma_maps m; /* before any launch: a map the driver refuses leaves nothing half done */
    /* the boxes: the block's tokens (B's rows) and the row tiles a weight copy brings */
    const bool wide = rs && rs_wide_for(rows, n_experts);
    const int b_rows = wide ? rs_shape_wide::BN : rs ? rs_shape_default::BN : bn;
    const int box = wide ? rs_shape_wide::BOX : 8; /* 8: every other form's copies */
    if (!encode_maps(&m, a, (uint64_t)n_experts * a.RT, box, b, (uint64_t)rows, b_rows))
        return cudaErrorNotSupported;
    if (mode == MODE_GATE_UP) {
        /* grid.y: the routing's tile slots; a quarter of a tile's rows per block */
        if (rs)
            CUDA_TRY(pdl_launch(moe_gather_rows_kernel<true>, dim3(4, grid.y), dim3(128), 0, stream,
                                a, scratch));
        else
            CUDA_TRY(pdl_launch(moe_gather_rows_kernel<false>, dim3(4, grid.y), dim3(128), 0,
                                stream, a, scratch));
        return tma_launch_mode<MODE_GATE_UP>(a, m, bn, folded, rs, wide, grid, stream);
    }
    return tma_launch_mode<MODE_DOWN>(a, m, bn, folded, rs, wide, grid, stream);
}
