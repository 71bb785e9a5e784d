/* The register-A form of the large-batch MoE grouped GEMM (moe_wgmma_tma.cu launches it; the
 * default for every large plan). Device code. */
#pragma once

#include "backend/cuda/moe_kernel_common.cuh"
#include "backend/cuda/moe_tma_copier.cuh" /* maps, bulk tensor copies */
#include "backend/cuda/moe_ws_parts.cuh"
#include "backend/cuda/pdl.cuh"

#include <stdint.h>

/* ── The register-A form (64-token tiles; GPTOSS_MOE_TMA_RS, moe.h) ──────────────────────────
 * No dequantising warps: each consumer thread reads its own 16 bytes of codes (and its scale word)
 * from the slot the copy engine filled, dequantises into registers and issues the four k16 MMAs
 * with A from those registers (wgmma RS). Why: ncu at T = 1024 (session 10)
 * counted per 1,024 weights a dequantiser warp's ~135 instructions plus a consumer warp's ~63
 * (waits, ring arithmetic, descriptors); here one warp's ~95 do both, and A never goes through
 * shared memory (no stores, no proxy fence, no A ring and its hand-over). The cost: B must sit in
 * fragment order (moe_kernel_common.cuh's frag_order_k), so gate_up's gather writes x's rows
 * permuted and gate_up's epilogue writes act permuted for the down projection; the MMAs then add a
 * k16 block's products in another grouping than the shared-memory form, so the bits differ from
 * ws's within rounding (gpu_test_moe bounds them). Two A register sets (the loop unrolled by two)
 * keep one MMA group in flight while the next step is dequantised.
 *
 * One ring of 8 slots, each holding a step's codes, scale words and B: the copier warp (warp 8,
 * lane 0) fills slot kk mod 8 with step kk's three copies (one full barrier: its arrival plus their
 * bytes) once the 8 consumer warps have released it (one empty barrier, arrived by each warp after
 * the MMAs of the step that used it are done; the codes were read before them). The loop runs in
 * pairs of steps from an even slot, so slot and parity follow from the step number with a mask and
 * a shift; a B descriptor is a 32-bit low word beside a constant high word.
 * Measured on the H200 (bench/NOTES.md, session 13): a copier warp of its own instead of a lane of
 * consumer warp 0 took the experts alone at T = 1024 from 1,068 to 906 µs (the consumers had
 * waited mostly for B, which that lane issued only 4 steps ahead and only when warp 0 got there);
 * this loop (one ring instead of a raw ring of 8 and a B ring of 6, each with its own index,
 * parity, wait and release, and 64-bit descriptors moved to uniform registers a half at a time)
 * took it to 810 µs: decode 1024 +5.3 %, prefill 1k +7.5 %. Deeper rings and L2 eviction hints
 * measured nothing. Two blocks an SM at 91 registers: three (85 a thread) made ptxas serialise the
 * MMAs (C7512). */

/* A thread's four code words of a k step (scale word sc) dequantised into the fragments of its four
 * k16 MMAs: words 0/1 are rows g/g+8 of chunk 0, 2/3 of chunk 1; k16 block 2h + m takes pairs 2m,
 * 2m+1 of chunk h's two words. The fragments are pinned before the MMAs: any instruction that
 * defines a wgmma input between the fence and the commit makes ptxas serialise the MMAs (C7513). */
template <bool FOLDED>
static __device__ __forceinline__ void rs_dequant(const uint32_t (&wd)[4], uint32_t sc,
                                                  uint32_t (&f)[4][4]) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
        uint32_t ag[4], a8[4];
        dequant_word_t<FOLDED>(wd[2 * h], sc, 2 * h, ag);
        dequant_word_t<FOLDED>(wd[2 * h + 1], sc, 2 * h + 1, a8);
#pragma unroll
        for (int m = 0; m < 2; m++) {
            f[2 * h + m][0] = ag[2 * m], f[2 * h + m][1] = a8[2 * m];
            f[2 * h + m][2] = ag[2 * m + 1], f[2 * h + m][3] = a8[2 * m + 1];
        }
    }
#pragma unroll
    for (int j = 0; j < 4; j++)
#pragma unroll
        for (int i = 0; i < 4; i++) asm volatile("" : "+r"(f[j][i])::"memory");
}

/* The block's shape: BN tokens (a 64-token half of a routing tile, or the whole 128-token tile),
 * WGS consumer warpgroups (64 weight rows each: 128, 192 or 256 rows a block), a ring of SLOTS slots
 * (a power of two, even: the pairs' second slot is + 1), MINB blocks an SM (the launch bound). The
 * default (rs_shape_default) is 64 tokens x 128 rows, 8 slots, two blocks an SM: 8 x (8 KB of B +
 * 4,352 B raw) + barriers.
 *
 * Why a wider one (moe_wgmma_tma.cu chooses by the plan; measured in session 20): at 64-token
 * blocks a routing tile of 128 tokens is two blocks that each dequantise the same weights, so at
 * T ≥ 4096 (prefill 8k: 256 pairs an expert) every weight is dequantised 2-8 times and each
 * 64-token block copies 4.3 KB of codes a step beside its 8 KB of B. A 128-token block dequantises
 * once for twice the MMAs (the same A registers feed one m64n128 MMA instead of two blocks'
 * m64n64), and 192 rows share each B stage among three warpgroups (B's L2 bytes a FLOP −33 %;
 * 192 rows divide both matrices, 5,760 and 2,880, exactly). Every output is the same k16 MMAs in
 * the same order at any shape: the bits are the default's.
 * Registers decide which shapes can be built: a 128-token warpgroup holds 64 accumulators beside
 * its two A sets (~128 a thread), so only one block an SM of at most three consumer warpgroups
 * keeps its MMAs pipelined; 128 tokens at two blocks an SM or with four warpgroups compiled to
 * 94-96 registers with the MMAs serialised (ptxas C7511). Measured and removed: 128 tokens x 128
 * rows (T = 8192 −3 %, prefill 8k +2 %) and 64 x 256 (slower everywhere but T = 8192, −2 %). */
template <int BN_, int WGS_, int SLOTS_, int MINB_> struct rs_shape {
    static constexpr int BN = BN_, WGS = WGS_, S = SLOTS_, MINB = MINB_;
    static constexpr int WARPS = 4 * WGS; /* consumer warps = row tiles a block */
    static constexpr int CONSUMERS = 32 * WARPS;
    static constexpr int THREADS = CONSUMERS + 32; /* + the copier warp */
    static constexpr int B_BYTES = BN * 128;       /* BN token rows of 64 k, bf16 */
    static constexpr int CODE_BYTES = WARPS * 512; /* a step's codes: 16 B a lane a row tile */
    static constexpr int SCALE_BYTES = WARPS * 32;
    static constexpr int RAW_BYTES = CODE_BYTES + SCALE_BYTES; /* a multiple of 128 */
    static constexpr int BOX = WARPS % 8 == 0 ? 8 : 4; /* row tiles a codes/scales copy brings */
    static constexpr int COPIES = WARPS / BOX;
    static constexpr int SMEM = S * (B_BYTES + RAW_BYTES) + 8 * 2 * S + 1024;
    static_assert((S & (S - 1)) == 0 && S >= 2, "slots: a power of two, even");
    static_assert(WARPS % 4 == 0 && RAW_BYTES % 128 == 0 && B_BYTES % 1024 == 0, "layout");
    static_assert(MINB * (SMEM + 1024) <= 228 * 1024, "MINB blocks an SM");
};
using rs_shape_default = rs_shape<64, 2, 8, 2>;
static_assert(rs_shape_default::CODE_BYTES == WS_CODE_BYTES &&
                  rs_shape_default::RAW_BYTES == WS_RAW_BYTES,
              "the default shape's raw slot is the ws kernels' (moe_ws_parts.cuh)");

/* One k step's four k16 MMAs, A from registers, B at the descriptor whose low word is lo (the high
 * word of every 128-byte-swizzled K-major descriptor here is the same constant: smem_desc_sw128). */
template <int NN>
static __device__ __forceinline__ void rs_mma_step(float (&d)[NN / 2], const uint32_t (&v)[4][4],
                                                   uint32_t lo) {
    /* The 64-bit descriptor once, then each MMA's as d0 + 2j: the same values (lo + 2j never
     * carries out of the low word), but ptxas no longer re-sets the constant high word before each
     * MMA (SASS: the folded loop 191 -> 185 instructions a pair of steps, UMOV 16 -> 10).
     * Measured on an H100: a lone 1k prefill +2.1 %, 8k +0.1 % (bench/NOTES.md, session 28). */
    const uint64_t d0 = (smem_desc_sw128(0) & 0xFFFFFFFF00000000ull) | (uint64_t)lo;
    wgmma_fence();
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint64_t db = d0 + (uint64_t)(2 * j);
        const uint32_t(&f)[4] = v[j];
        if constexpr (NN == 128)
            wgmma_m64n128k16(d, f, db, 1);
        else if constexpr (NN == 96)
            wgmma_rs_m64n96k16(d, f, db);
        else if constexpr (NN == 64)
            wgmma_m64n64k16(d, f, db, 1);
        else if constexpr (NN == 48)
            wgmma_rs_m64n48k16(d, f, db);
        else if constexpr (NN == 32)
            wgmma_rs_m64n32k16(d, f, db);
        else
            wgmma_rs_m64n16k16(d, f, db);
    }
    wgmma_commit();
}

template <int MODE, bool FOLDED, class C>
__global__ void __launch_bounds__(C::THREADS, C::MINB)
    moe_wgmma_rs_kernel(const moe_args a, const __grid_constant__ moe_tma_maps maps) {
    constexpr int S = C::S;
    pdl_prologue(); /* first: see pdl.cuh */
    extern __shared__ __align__(1024) uint8_t rs_smem_raw[];
    const uint32_t raw_base = smem_u32(rs_smem_raw);
    uint8_t *smem = rs_smem_raw + (((raw_base + 1023u) & ~1023u) - raw_base);
    uint8_t *b_st = smem;                  /* S x B */
    uint8_t *raws = b_st + S * C::B_BYTES; /* S x {codes, scales} */
    uint64_t *full = (uint64_t *)(raws + S * C::RAW_BYTES);
    uint64_t *empty = full + S;

    tile_pos tp;
    if (!tile_of_block_bn<C::BN>(a, &tp)) return;
    const int rb = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31;
    /* The warp index through a shuffle from lane 0: ptxas then knows it is the same in every lane,
     * so the branch on it below is warp-uniform and the k loop's step counter, slot, parity and B
     * descriptors live in uniform registers. From tid >> 5 it built each descriptor in ordinary
     * registers and moved it over before every MMA: 16 R2UR and 9 moves in each pair of steps
     * (SASS, scripts/sass/disasm.sh: the default shape's folded loop 197 -> 191 instructions, the
     * R2URs and their latency before each MMA gone). Measured with the prefill attention's same
     * change (bench/NOTES.md, session 27, H100): the 120b prefill +6.0 % at 1k, +5.8 % at 8k. */
    const int w = __shfl_sync(0xffffffffu, tid >> 5, 0);
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(&full[s], 1); /* the copier's arrival, plus the bytes */
            mbar_init(&empty[s], C::WARPS);
        }
        mbar_init_fence();
    }
    __syncthreads();

    const uint32_t r0 = smem_u32(raws), b0 = smem_u32(b_st);
    if (w == C::WARPS) { /* the copier: step kk into slot kk mod S once step kk − S has left it */
        if (lane == 0) {
            const int tile0 = tp.e * a.RT + rb * C::WARPS, row0 = tp.off + tp.n_base;
            for (int kk = 0; kk < a.KK; kk++) {
                const int s = kk & (S - 1);
                if (kk >= S) mbar_wait(&empty[s], ((kk / S) & 1) ^ 1);
                mbar_arrive_expect_tx(&full[s], C::RAW_BYTES + C::B_BYTES);
                const uint32_t slot = r0 + s * C::RAW_BYTES;
#pragma unroll
                for (int c = 0; c < C::COPIES; c++) { /* C::BOX row tiles a copy */
                    const int t = tile0 + C::BOX * c;
                    tma_load_3d(slot + c * C::BOX * 512, &maps.codes, 0, kk, t, &full[s]);
                    tma_load_3d(slot + C::CODE_BYTES + c * C::BOX * 32, &maps.scales, 0, kk, t,
                                &full[s]);
                }
                tma_load_2d(b0 + s * C::B_BYTES, &maps.b, kk * 64, row0, &full[s]);
            }
        }
        return;
    }
    /* thread (warp w, lane (g, t)): row tile w's 16 bytes and its rows' scale word (as ws) */
    const uint32_t code_at = r0 + w * 512 + lane * 16,
                   scale_at = r0 + C::CODE_BYTES + w * 32 + (lane >> 2) * 4;
    const uint32_t lo0 = (uint32_t)smem_desc_sw128(b0);
    auto k_loop = [&](auto nn) {
        constexpr int NN = decltype(nn)::value;
        float acc[NN / 2];
#pragma unroll
        for (int i = 0; i < NN / 2; i++) acc[i] = 0.0f;
        uint32_t v[2][4][4]; /* two A register sets: step kk's MMAs read set kk & 1 */
        /* step kk in slot s (parity ph): wait, read the codes, dequantise, MMAs; then the step
         * before's MMAs are done and its slot (ps) goes back to the copier */
        auto step = [&](int kk, int s, uint32_t ph, int ps, uint32_t(&vs)[4][4]) {
            mbar_wait(&full[s], ph);
            uint32_t wd[4];
            asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(wd[0]), "=r"(wd[1]), "=r"(wd[2]), "=r"(wd[3])
                         : "r"(code_at + s * C::RAW_BYTES)
                         : "memory");
            const uint32_t sc = ws_lds32(scale_at + s * C::RAW_BYTES);
            rs_dequant<FOLDED>(wd, sc, vs);
            rs_mma_step<NN>(acc, vs, lo0 + s * (C::B_BYTES >> 4));
            wgmma_wait<1>();
            if (kk >= 1 && lane == 0) mbar_arrive(&empty[ps]);
        };
        /* pairs of steps from an even slot (the second is the first + 1, the same parity), then
         * the odd step: a step that may be skipped inside the loop leaves ptxas a path on which
         * set 0 is rewritten with its MMAs still in flight (C7513) */
        int kk = 0;
        for (; kk + 1 < a.KK; kk += 2) {
            const int s = kk & (S - 1);
            const uint32_t ph = (kk / S) & 1;
            step(kk, s, ph, (s + S - 1) & (S - 1), v[0]);
            step(kk + 1, s + 1, ph, s, v[1]);
        }
        if (kk < a.KK) {
            const int s = kk & (S - 1);
            step(kk, s, (kk / S) & 1, (s + S - 1) & (S - 1), v[0]);
        }
        wgmma_wait<0>();
        fence_acc(acc);
        store_tile_n<MODE, NN / 8, MODE == MODE_GATE_UP>(a, tp, rb * C::WARPS + w, acc);
    };
    ws_with_width<C::BN>(tp.n_valid, k_loop);
}
