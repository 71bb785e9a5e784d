/* Prefill attention on Hopper's warpgroup MMA (FA3-style): the kernel attn_prefill runs for full
 * layers, with a bf16 or an FP8 cache, unless GPTOSS_ATTN_WGMMA=0 (attention.cu). Included by
 * attention.cu only: it uses that file's
 * attn_args, swizzle (swz), Q copies (load_q_chunk), softmax helpers and the tile's end
 * (store_prefill_rows). Device code.
 *
 * The work is the mma.sync kernel's (attn_prefill_kernel): a CTA owns a tile of 16 new tokens x the
 * 8 query heads of KV head j, 128 query rows, row r = (token r / 8, head r % 8), so each key tile
 * serves all 8 heads of the group. What changes is how the tensor cores are fed:
 *
 *   warps 8-11 (copiers) bring Q once, then key tiles of BC = 128 keys (K and V, 16 KiB each;
 *                        64-key tiles measured 10 % slower at 8k) into a ring of stages with cp.async, a warp instruction
 *                        covering four whole key rows, zero-filling keys past the end (the pages
 *                        hold NaN there for all we know). Each thread's copies arrive on the stage's
 *                        full barrier as they land (cp.async.mbarrier.arrive), so the copiers run
 *                        ahead as far as the ring allows. cp.async writes through the generic proxy
 *                        and the MMAs read through the async proxy: a consumer fences
 *                        (fence.proxy.async) after each wait on a full barrier.
 *   warpgroups 0 and 1   own query rows 0-63 and 64-127 (tokens 0-7 and 8-15). Per key tile:
 *                          S  = Q K^T   4 wgmma m64n128k16, A = Q and B = K both from shared memory
 *                                       (K-major, 128-byte swizzle: a key row is 128 bytes);
 *                          online softmax of S in registers (base 2, as attn_prefill_kernel);
 *                          O += P V     8 wgmma m64n64k16, A = P from registers (the accumulator
 *                                       layout of S is the A-fragment layout, as with mma.sync), B =
 *                                       V from shared memory read "MN-major" (transposed): a V tile
 *                                       is [key][dim] with dims contiguous, the k of this product
 *                                       is the key, so one k16 step is 16 rows = two 8-row swizzle
 *                                       atoms 1024 bytes apart (the descriptor's stride offset).
 *
 * Overlap: tile i's P V is issued together with tile i+1's Q K^T and runs while the softmax of tile
 * i+1 waits only for its S (wait_group 1): P of tile i stays in registers (32) beside S (64) and O
 * (32) until then. The two warpgroups interleave on their own. FA3 also makes them take turns
 * issuing their MMAs (named barriers), so that one's softmax runs under the other's MMAs: here
 * that measured 0.6-1.7 % slower at 8k (session 14), and it is not done.
 *
 * Ring protocol (tma_ring.cuh's, with the 128 copier threads' copies arriving on full instead of a
 * byte count):
 * tile i lives in stage i mod S; the copier waits for empty[s] before reusing it; a consumer warp
 * releases tile i's stage once tile i's P V is complete (in iteration i + 1). */
#pragma once

#include "backend/cuda/tma_ring.cuh"
#include "backend/cuda/wgmma.cuh"

enum {
    PW_CONSUMERS = 2 * 128,
    PW_COPIERS = 128, /* one warpgroup: a single copier warp was issue-bound (session 14, call 4) */
    PW_THREADS = PW_CONSUMERS + PW_COPIERS,
    PW_Q_BYTES = PF_ROWS * ROW_BYTES
};
enum {
    PW_BC = 128,   /* keys per tile */
    PW_STAGES = 5, /* 160 KiB of K and V tiles */
    PW_BAR_OFF =
        PW_Q_BYTES + PW_STAGES * 2 * PW_BC * ROW_BYTES, /* the barriers (88 of 128 bytes) */
    PW_SMEM = 1024 /* alignment slack */ + PW_BAR_OFF + 128,
    /* FP8 cache: two slots of a tile's e4m3 codes (K and V), after the barriers */
    PW_RAW_BYTES = 2 * PW_BC * ROW8,
    PW_SMEM8 = PW_SMEM + 2 * PW_RAW_BYTES
};
static_assert(PF_ROWS == 128, "two warpgroups of 64 query rows");

static __device__ __forceinline__ void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
/* The executing thread's cp.async copies issued so far arrive on bar once they have all landed
 * (.noinc: the arrival is one of those bar was initialised to expect). */
static __device__ __forceinline__ void cp_async_mbar_arrive(uint64_t *bar) {
    asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_u32(bar))
                 : "memory");
}
/* The copiers' share of one key tile (BC keys): copier thread ct copies chunk ct % 8 of rows
 * ct / 8 + 16 i, so each warp instruction covers four whole 128-byte rows (the L2 sees whole lines);
 * keys >= key_end become zero rows and read nothing. The rows' block-table entries are read first,
 * all of them, and only then are the copies issued: the copies are asm with a memory clobber, which
 * the compiler may not move a load across, so interleaved each lookup would wait out its latency
 * alone (call 2 of session 14: 4.1 ms at 8k against 2.6 with a table read per 32 rows). Addresses
 * are 32-bit row numbers in the pool, widened once: one warp doing this in 64-bit arithmetic spent
 * ~1,100 instructions a tile and could not keep up with the MMAs (call 4). */
static __device__ __forceinline__ void pw_load_tile(const attn_args &a, const int32_t *table,
                                                    int first, int kvh, int key0, int key_end,
                                                    uint32_t s_k, int ct) {
    constexpr int BC = PW_BC, ROWS = BC / (PW_COPIERS / 8); /* rows per copier thread */
    const int c = ct & 7, sh = a.bs_shift;
    const uint32_t mask = (1u << sh) - 1u;
    int32_t blk[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int key = key0 + (ct >> 3) + 16 * i;
        blk[i] = key < key_end ? table[(key >> sh) - first] : -1;
    }
    const char *kc = (const char *)a.k_cache + c * 16, *vc = (const char *)a.v_cache + c * 16;
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int r = (ct >> 3) + 16 * i;
        const bool valid = blk[i] >= 0;
        /* the key's row in the pool: (block, KV head, row in block), 128 bytes each */
        const uint32_t row =
            valid ? ((((uint32_t)blk[i] * (uint32_t)a.n_kv_heads + (uint32_t)kvh) << sh) |
                     ((uint32_t)(key0 + r) & mask))
                  : 0u;
        const size_t off = (size_t)row * ROW_BYTES;
        cp_async16(s_k + swz(r, c), kc + off, valid ? 16 : 0);
        cp_async16(s_k + BC * ROW_BYTES + swz(r, c), vc + off, valid ? 16 : 0);
    }
}

/* FP8 cache: the copiers' share of one key tile's e4m3 codes (64-byte rows, K then V) into a raw
 * slot at s_raw, row-major: copier thread ct copies chunk ct % 4 (16 codes) of rows ct / 4 + 32 i,
 * so a warp instruction covers 8 whole rows. Keys >= key_end become zero codes (+0). */
static __device__ __forceinline__ void pw_load_raw8(const attn_args &a, const int32_t *table,
                                                    int first, int kvh, int key0, int key_end,
                                                    uint32_t s_raw, int ct) {
    constexpr int ROWS = PW_BC / (PW_COPIERS / 4);
    const int c = ct & 3, sh = a.bs_shift;
    const uint32_t mask = (1u << sh) - 1u;
    int32_t blk[ROWS];
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int key = key0 + (ct >> 2) + 32 * i;
        blk[i] = key < key_end ? table[(key >> sh) - first] : -1;
    }
    const uint8_t *kc = a.k8 + c * 16, *vc = a.v8 + c * 16;
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int r = (ct >> 2) + 32 * i;
        const bool valid = blk[i] >= 0;
        const uint32_t row =
            valid ? ((((uint32_t)blk[i] * (uint32_t)a.n_kv_heads + (uint32_t)kvh) << sh) |
                     ((uint32_t)(key0 + r) & mask))
                  : 0u;
        const size_t off = (size_t)row * ROW8;
        cp_async16(s_raw + r * ROW8 + c * 16, kc + off, valid ? 16 : 0);
        cp_async16(s_raw + PW_BC * ROW8 + r * ROW8 + c * 16, vc + off, valid ? 16 : 0);
    }
}

/* FP8 cache: the same thread's chunks of the raw slot (landed: its own copies) converted, exactly,
 * into the bf16 K and V tiles of stage s_k (e4m3 chunk c of a row = dims 16c..16c+15 = bf16 chunks
 * 2c and 2c + 1). The values are the unscaled e4m3 values: the K scale joins the score scale, the
 * V scale the final normalisation, as in attn_prefill_kernel. */
static __device__ __forceinline__ void pw_convert8(uint32_t s_raw, uint32_t s_k, int ct) {
    const int c = ct & 3;
#pragma unroll
    for (int kv = 0; kv < 2; kv++)
#pragma unroll
        for (int i = 0; i < PW_BC / (PW_COPIERS / 4); i++) {
            const int r = (ct >> 2) + 32 * i;
            const uint4 x = lds128(s_raw + kv * PW_BC * ROW8 + r * ROW8 + c * 16);
            store_e4m3_chunk_bf16(x, s_k + kv * PW_BC * ROW_BYTES, r, c);
        }
}

/* FP8: the cache holds e4m3 codes (attention.h); the copiers convert each tile to bf16 in the stage
 * (pw_convert8), so the consumers are the same. */
template <bool FP8>
__global__ void __launch_bounds__(PW_THREADS, 1) attn_prefill_wg_kernel(attn_args a) {
    constexpr int BC = PW_BC, STAGES = PW_STAGES;
    constexpr int TILE = BC * ROW_BYTES, STAGE = 2 * TILE; /* K or V of a tile; a stage */
    pdl_prologue();                                        /* first: see pdl.cuh */
    extern __shared__ __align__(1024) uint8_t pw_raw[];
    const uint32_t raw = smem_u32(pw_raw);
    uint8_t *smem = pw_raw + (((raw + 1023u) & ~1023u) - raw);
    const uint32_t s_q = smem_u32(smem), s_kv = s_q + PW_Q_BYTES;
    uint64_t *full = (uint64_t *)(smem + PW_BAR_OFF);
    uint64_t *empty = full + STAGES, *q_full = empty + STAGES;

    const int kvh = blockIdx.y;
    const int seq = a.work[2 * blockIdx.x], tok0 = a.work[2 * blockIdx.x + 1];
    const int qs = a.query_start[seq], n_new = a.query_start[seq + 1] - qs;
    const int n_valid = min(PF_TOKENS, n_new - tok0);
    if (n_valid <= 0) return; /* uniform per CTA: before any barrier */
    const int W = a.window;
    const int pos0 = a.start_pos[seq] + tok0, pos_last = pos0 + n_valid - 1;
    const int k_first = W > 0 ? max(0, pos0 - W + 1) : 0;
    const int key_end = pos_last + 1;
    const int n_tiles = (key_end - k_first + BC - 1) / BC; /* >= 1 */
    const int32_t *table = a.tables + (size_t)seq * (size_t)a.stride;
    const int first = a.table_first ? a.table_first[seq] : 0;
    /* the warp index through a shuffle: ptxas then knows it is warp-uniform and keeps the MMA
     * loop's descriptors in uniform registers (8 R2UR a tile gone; moe_wgmma_rs.cuh says more) */
    const int warp = __shfl_sync(0xffffffffu, threadIdx.x >> 5, 0), lane = threadIdx.x & 31;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(&full[s], PW_COPIERS); /* every copier thread's copies */
            mbar_init(&empty[s], 8);         /* the consumer warps */
        }
        mbar_init(q_full, PW_COPIERS);
        mbar_init_fence();
    }
    __syncthreads();

    if (warp >= 8) {
        /* The copiers: Q (rows of tokens past n_valid are zeros), then tile i into stage i mod S
         * once tile i - S has left it. Each thread's copies arrive on the stage's full barrier when
         * they land (cp.async.mbarrier.arrive), so the copiers never wait for their own copies. */
        const int ct = threadIdx.x - PW_CONSUMERS;
#pragma unroll
        for (int i = 0; i < PF_ROWS / 16; i++)
            load_q_chunk(a, qs + tok0, kvh, n_valid, s_q, (ct >> 3) + 16 * i, ct & 7);
        cp_async_mbar_arrive(q_full);
        if constexpr (FP8) {
            /* Raw tile it + 1 is in flight while tile it is converted: two raw slots. A thread
             * converts only the chunks it copied, so wait_group (its own copies) is enough; its
             * stores then reach the MMAs' async proxy through its fence before it arrives. */
            const uint32_t s_raw = s_q + PW_BAR_OFF + 128; /* after the barriers */
            pw_load_raw8(a, table, first, kvh, k_first, key_end, s_raw, ct);
            cp_async_commit();
            for (int it = 0; it < n_tiles; it++) {
                const int s = it % STAGES;
                if (it + 1 < n_tiles) {
                    pw_load_raw8(a, table, first, kvh, k_first + (it + 1) * BC, key_end,
                                 s_raw + ((it + 1) & 1) * PW_RAW_BYTES, ct);
                    cp_async_commit();
                    cp_async_wait<1>();
                } else {
                    cp_async_wait<0>();
                }
                if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                pw_convert8(s_raw + (it & 1) * PW_RAW_BYTES, s_kv + s * STAGE, ct);
                fence_proxy_async_smem();
                mbar_arrive(&full[s]);
            }
        } else {
            for (int it = 0; it < n_tiles; it++) {
                const int s = it % STAGES;
                if (it >= STAGES) mbar_wait(&empty[s], ((it / STAGES) & 1) ^ 1);
                pw_load_tile(a, table, first, kvh, k_first + it * BC, key_end, s_kv + s * STAGE,
                             ct);
                cp_async_mbar_arrive(&full[s]);
            }
        }
        cp_async_wait<0>();
        return;
    }

    /* Consumers: warpgroup wg, warp w of it; lane (g, t) holds rows g and g + 8 of the warp's 16,
     * i.e. tokens 2 warp and 2 warp + 1 of head g (as attn_prefill_kernel). */
    const int wg = warp >> 2, g = lane >> 2, t = lane & 3;
    const uint64_t q_desc = smem_desc_sw128(s_q + wg * 64 * ROW_BYTES);
    const uint64_t kv_desc = smem_desc_sw128(s_kv);
    const float sl2 = FP8 ? a.scale_log2 * a.kv_scales[kvh] : a.scale_log2; /* FP8: K scale */
    const float sink = a.sinks[kvh * GQA + g] * LOG2E;
    float m_a = sink, m_b = sink, l_a = 0.f, l_b = 0.f;
    float o[32];
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.f;
    uint32_t p[BC / 16][4]; /* P of the previous tile, bf16 A fragments */
    mbar_wait(q_full, 0);
    fence_proxy_async_smem(); /* the copies wrote through the generic proxy, the MMAs read async */

    float sc[BC / 2]; /* S, then P in fp32 */
    /* S = Q K^T of the tile in stage s (4 k16 slices: 32 bytes into each 128-byte row). */
    auto issue_s = [&](int s) {
        const uint64_t kd = kv_desc + ((s * STAGE) >> 4);
        wgmma_ss_m64n128k16_first(sc, q_desc, kd);
#pragma unroll
        for (int j = 1; j < 4; j++) wgmma_ss_m64n128k16(sc, q_desc + 2 * j, kd + 2 * j);
        wgmma_commit();
    };
    /* O += P V of the tile in stage ps (8 k16 steps of 16 keys: 2048 bytes of V each). */
    auto issue_pv = [&](int ps) {
        const uint64_t vd = kv_desc + ((ps * STAGE + TILE) >> 4);
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++)
            wgmma_rs_m64n64k16_tb(o, p[kk], vd + ((kk * 16 * ROW_BYTES) >> 4));
        wgmma_commit();
    };
    /* The online softmax of tile it's scores in sc: masks the edge tiles, updates (m, l), turns sc
     * into P (fp32) and returns the rescale factors of the rows' earlier sums. */
    auto softmax = [&](int it, float &corr_a, float &corr_b) {
        const int kt = k_first + it * BC;
        /* Edge tiles: the causal diagonal (a key past some row's position) or the window start. */
        if (kt + BC - 1 > pos0 || (W > 0 && kt < pos_last - W + 1)) {
            const int p_a = pos0 + 2 * warp, p_b = p_a + 1;
            const int lo_a = W > 0 ? p_a - W + 1 : 0, lo_b = W > 0 ? p_b - W + 1 : 0;
#pragma unroll
            for (int nt = 0; nt < BC / 8; nt++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    const int key = kt + nt * 8 + 2 * t + (j & 1);
                    const bool ok =
                        j < 2 ? (key <= p_a && key >= lo_a) : (key <= p_b && key >= lo_b);
                    if (!ok) sc[4 * nt + j] = -INFINITY;
                }
        }
        float mx_a = -INFINITY, mx_b = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            mx_a = fmaxf(mx_a, fmaxf(sc[4 * nt], sc[4 * nt + 1]));
            mx_b = fmaxf(mx_b, fmaxf(sc[4 * nt + 2], sc[4 * nt + 3]));
        }
        mx_a = fmaxf(mx_a, shfl_xor(mx_a, 1)), mx_b = fmaxf(mx_b, shfl_xor(mx_b, 1));
        mx_a = fmaxf(mx_a, shfl_xor(mx_a, 2)), mx_b = fmaxf(mx_b, shfl_xor(mx_b, 2));
        const float mn_a = fmaxf(m_a, mx_a * sl2), mn_b = fmaxf(m_b, mx_b * sl2);
        corr_a = fast_exp2(m_a - mn_a), corr_b = fast_exp2(m_b - mn_b);
        m_a = mn_a, m_b = mn_b;
        float sum_a = 0.f, sum_b = 0.f;
#pragma unroll
        for (int nt = 0; nt < BC / 8; nt++) {
            sc[4 * nt] = fast_exp2(fmaf(sc[4 * nt], sl2, -mn_a));
            sc[4 * nt + 1] = fast_exp2(fmaf(sc[4 * nt + 1], sl2, -mn_a));
            sc[4 * nt + 2] = fast_exp2(fmaf(sc[4 * nt + 2], sl2, -mn_b));
            sc[4 * nt + 3] = fast_exp2(fmaf(sc[4 * nt + 3], sl2, -mn_b));
            sum_a += sc[4 * nt] + sc[4 * nt + 1];
            sum_b += sc[4 * nt + 2] + sc[4 * nt + 3];
        }
        l_a = l_a * corr_a + sum_a;
        l_b = l_b * corr_b + sum_b;
    };
    auto pack_p = [&]() {
#pragma unroll
        for (int kk = 0; kk < BC / 16; kk++) {
            p[kk][0] = pack_bf16x2(sc[8 * kk], sc[8 * kk + 1]);
            p[kk][1] = pack_bf16x2(sc[8 * kk + 2], sc[8 * kk + 3]);
            p[kk][2] = pack_bf16x2(sc[8 * kk + 4], sc[8 * kk + 5]);
            p[kk][3] = pack_bf16x2(sc[8 * kk + 6], sc[8 * kk + 7]);
        }
    };

    /* Tile 0: S alone (O is zero, nothing to rescale). */
    float corr_a, corr_b;
    mbar_wait(&full[0], 0);
    fence_proxy_async_smem();
    wgmma_fence();
    issue_s(0);
    wgmma_wait<0>();
    fence_acc(sc);
    softmax(0, corr_a, corr_b);
    pack_p();
    /* Tile it: its S with the previous tile's P V; the softmax needs only S (wait_group 1). */
    for (int it = 1; it < n_tiles; it++) {
        const int s = it % STAGES, ps = (it - 1) % STAGES;
        mbar_wait(&full[s], (it / STAGES) & 1);
        fence_proxy_async_smem();
        wgmma_fence();
        issue_s(s);
        issue_pv(ps);
        wgmma_wait<1>();
        fence_acc(sc);
        softmax(it, corr_a, corr_b);
        wgmma_wait<0>(); /* the previous tile's P V is done: its stage is free, O and P are ours */
        fence_acc(o);
        if (lane == 0) mbar_arrive(&empty[ps]);
#pragma unroll
        for (int i = 0; i < 8; i++)
            o[4 * i] *= corr_a, o[4 * i + 1] *= corr_a, o[4 * i + 2] *= corr_b,
                o[4 * i + 3] *= corr_b;
        pack_p();
    }
    wgmma_fence();
    issue_pv((n_tiles - 1) % STAGES);
    wgmma_wait<0>();
    fence_acc(o);

    const float vmul = FP8 ? a.kv_scales[a.n_kv_heads + kvh] : 1.f; /* the V scale */
    store_prefill_rows(a, qs + tok0, n_valid, kvh, warp, g, t, l_a, l_b, m_a, m_b, sink, vmul, o);
}
