/* MXFP4 -> bf16 in registers: the reader of the layout moe_repack.cu writes (moe.h). Device code,
 * included by the expert kernels (moe_experts.cu).
 *
 * An e2m1 code is s e1 e0 m (sign, 2 exponent bits, 1 mantissa bit); its value is
 * (−1)^s · 2^(e−1) · (1 + m/2) for e > 0 and (−1)^s · m/2 for e = 0. Put the three bits e1 e0 m into a
 * bf16 at bits 8,7,6 (the two lowest exponent bits and the top mantissa bit) and s at bit 15: that
 * bf16 reads as (−1)^s · 2^(e−127) · (1 + m/2), or for e = 0 the subnormal (−1)^s · m/2 · 2^−126 —
 * in both cases exactly value·2^−126. One bf16 multiply by 2^126 restores the value (exact: a power
 * of two, and the result is a normal number), a second by the block scale 2^(S−127) (bf16 bits S<<7,
 * exact) finishes the job. So the work is moving bits, and the repack chooses where the bits sit
 * so that moving them is cheap. A word's 32 bits hold 8 codes; pair p (k 2p, 2p+1) is output
 * register p (a bf16 pair: low half = even k, high half = odd k), and every output bit comes from a
 * copy of q shifted or rotated as a whole:
 *
 *     pair 0 (k 0,1): m@6  e0@7  e1@8  s@15 | m@22 e0@23 e1@24 s@31  → q              & M
 *     pair 1 (k 2,3): m@2  e0@3  e1@4  s@11 | m@18 e0@19 e1@20 s@27  → (q << 4)       & M
 *     pair 2 (k 4,5): m@28 e0@29 e1@30 s@5  | m@12 e0@13 e1@14 s@21  → rotl(q, 10)    & M
 *     pair 3 (k 6,7): m@0  e0@1  e1@10 s@9  | m@16 e0@17 e1@26 s@25  → (q << 6) & M'  | (q >> 2) & M''
 *
 * with M = 0x81C081C0 (bits 6, 7, 8, 15 of each half), M'' = 0x01000100 (the e1 bits) and
 * M' = M − M''. 9 integer operations for 8 weights: 5 masks/merges, 2 left shifts (IMAD.SHL, the
 * FMA pipe), a rotate and a right shift. Why this layout: it is the cheapest exact cover of the
 * word's 32 bits by shifted copies of the output pattern. Three pairs from one copy each and the
 * fourth from two is the least possible (four pairs from one copy each would tile the 16 positions
 * of a half with translates of {0, 1, 2, 9}, which do not tile). Such covers exist only once a code
 * may sit outside the half of q that its output half is (pair 2's rotation wraps bits 28-30 round to
 * 6-8): the layout before session 26 kept every code in its own half and needed 11 operations (pair 3
 * from three copies). A search found this one (bench/NOTES.md, session 26). A byte-permute lookup
 * table would cost ~17.
 * Moving the right shift to the FMA pipe (IMAD.HI) and the scale pair to one IMAD measured 4 %
 * slower at batch 8-64 on the H200 with the layout before, though ncu had the ALU pipe the busiest.
 * The integer pipe (64 ops/clk/SM) is the scarce one: at 4.2 TB/s an SM must digest ~4 words per
 * clock.
 *
 * Against the layout before (11 operations; the MoE k loops 7.5-8.6 % shorter in SASS), measured on
 * an H100 (bench/NOTES.md, session 27): the 120b prefill +1.8 % at 1k and +1.1 % at 8k, decode 1-256
 * unchanged (0.995-1.003): less than the instruction count promised, so these kernels are not bound
 * by issue alone. place_codes is also the host's decoder in the repack test. */
#pragma once

#include "backend/cuda/device_util.cuh"

#include <stdint.h>

/* Two bf16 products at once, each rounded to nearest even. */
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

/* One repacked word (8 codes of one row) → 4 bf16 pairs (k 0,1 | 2,3 | 4,5 | 6,7), each value
 * times 2^−126 (the table above). The rotate written as two shifts compiles to one funnel shift
 * (SHF.L.W) and lets the host run the same function (tests/gpu/test_moe.cu). */
static __host__ __device__ __forceinline__ void place_codes(uint32_t q, uint32_t r[4]) {
    const uint32_t M = 0x81C081C0u, E1 = 0x01000100u;
    r[0] = q & M;
    r[1] = (q << 4) & M;
    r[2] = ((q << 10) | (q >> 22)) & M;
    r[3] = ((q << 6) & (M & ~E1)) | ((q >> 2) & E1);
}

/* One repacked word (8 codes of one row) → 4 bf16 pairs (k 0,1 | 2,3 | 4,5 | 6,7), scaled. */
static __device__ __forceinline__ void dequant_word(uint32_t q, uint32_t scale2, uint32_t r[4]) {
    const uint32_t TWO_126 = 0x7E807E80u; /* bf16 2^126 = exponent 253 */
    place_codes(q, r);
#pragma unroll
    for (int i = 0; i < 4; i++) r[i] = bf16x2_mul(bf16x2_mul(r[i], TWO_126), scale2);
}

/* When every scale byte S of a matrix is ≤ 128, the two multiplies (by 2^126, then by 2^(S−127)) fold
 * into one by 2^(S−1): the bf16 pair with exponent field S + 126, i.e. scale_pair + (126 << 7) in
 * each half (S + 126 ≤ 254 stays finite). The product is the same exact value rounded once, so the
 * bits equal the two-multiply result (and S = 0 now gives the true tiny value instead of 0). That
 * removes 4 of the ~21 instructions per word from the integer/FMA pipes, which at batch ≥ 64 are
 * as busy as the memory system (moe_scales_max decides at load). The shift and the add compile to
 * one LEA.HI, so a scale pair is two instructions (adding the 126 to the scale word's four bytes
 * once a k step instead counted 2.25 a word in SASS: session 26). */
static __device__ __forceinline__ uint32_t scale_pair_folded(uint32_t sw, int j) {
    return scale_pair(sw, j) + 0x3F003F00u;
}

/* dequant_word with scale byte j of scale word sw, folded (one multiply) or not. */
template <bool FOLDED>
static __device__ __forceinline__ void dequant_word_t(uint32_t q, uint32_t sw, int j,
                                                      uint32_t r[4]) {
    if (!FOLDED) {
        dequant_word(q, scale_pair(sw, j), r);
        return;
    }
    const uint32_t f = scale_pair_folded(sw, j);
    place_codes(q, r);
#pragma unroll
    for (int i = 0; i < 4; i++) r[i] = bf16x2_mul(r[i], f);
}
