/* Every layer of a one-token decode step as one persistent kernel (step_kernel.h says what and
 * why): the kernel and its host side.
 *
 * One block an SM: eight consumer warps and a producer warp whose lane 0 keeps the ring of
 * attn_stream's layout (attn_stream_phases.cuh) full. The producer walks, for every layer in
 * order, the block's QKV row pairs, its O rows, the router's columns of those rows, and then the
 * selected experts' gate_up and down tiles it takes (a fixed share, then one at a time from a
 * counter the blocks share: sk_take_tile) in chunks (step_moe.cuh), telling the consumers what
 * each stage holds (sk_meta); it waits only for a free
 * stage, before a layer's first O row for that layer's QKV barrier (o_go: attn_stream says why),
 * and before its first expert chunk for the routing (route_go). So the next layer's QKV rows
 * stream while this layer's down chunks are multiplied and its norm runs, and down's chunks while
 * gate_up's are. Stage n of the block (counted over the whole step) goes to consumer warp n % 8.
 *
 * The consumers, per layer (a grid barrier after each numbered phase):
 *   0. the layer's per-layer fields into the shared as_params; the attention norm (layers after
 *      the first: h + the previous layer's slots, attn_stream's as_norm_rows) or the first layer's
 *      input from norm_embed_split; the epilogues' preloads;
 *   1. QKV + RoPE + the KV write;                 (then block 0 writes h's new rows)
 *   2. attention with its split-K merge;
 *   3. O with its bias, h + o over the block's rows, and the router by columns over them (its
 *      sums and the block's share of the MLP norm's sum of squares: above SK_ROUTER_ROWS);
 *   4. (none since session 35: it was the MLP norm and one router row a block)
 *   5. the routing in every block by its warp 0 (the sums scaled by 1 / rms, topk_warp: no
 *      last-block chain), which releases the producer's expert chunks; the experts' bf16 input
 *      (h + o normalised); gate_up's chunks, SwiGLU into the activations by the warp that
 *      completes a tile; (block 0 writes h + o into h)
 *   6. the activations staged, then down's chunks, each tile's weighted rows into its expert's
 *      slot (unsplit: k MoE rows).
 * Rows that other blocks wrote in this kernel are read through L2 (__ldcg, cp.async, the CG forms
 * of the norm replays): the same addresses are written again every layer. */
#include "backend/cuda/attn_stream_phases.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/grid_sync.cuh"
#include "backend/cuda/moe_topk.cuh"
#include "backend/cuda/per_device.h"
#include "backend/cuda/step_kernel.h"
#include "backend/cuda/step_moe.cuh"
#include "base/env_switch.h"

#include <string.h>

enum { SK_MAX_K = 8 };

struct sk_params {
    as_params
        base; /* the attention's step fields and buffers; the per-layer ones are set per layer */
    const step_layer *layers;
    float *h, *y_slots;
    uint16_t *act;
    const int32_t *slots_full, *slots_swa;
    attn_seqs seqs_full, seqs_swa;
    int L, E, k, I;
    float alpha, limit;
    unsigned long long *stamps; /* the probe (step_kernel_set_probe), or NULL */
    unsigned *bstamps;          /* the blocks' probe (step_kernel_set_block_probe), or NULL */
    unsigned *wprobe;           /* the wait probe (step_kernel_set_wait_probe), or NULL */
    unsigned *tickets; /* [L][2]: a layer's expert tiles handed out at run time (sk_take_tile) */
    int kc;            /* k steps an expert chunk (a ring stage) */
    int moe_probe;     /* step_kernel_set_moe_probe: 1 chunks not multiplied, 2 chunks not copied */
    unsigned long long *racc; /* step_kernel_args.router_acc */
    float *ss_part;           /* step_kernel_args.ss_part */
};

/* The router by columns (session 35). The logits are b + inv · W_r (g ⊙ (h + o)), inv = 1 /
 * rms(h + o), and after O every block owns n_rows entries j of h + o: it adds W_r[:, j] g_j
 * (h + o)_j over them for every expert (its ring stage holds those columns of the transposed
 * router, [H][E]: the bytes of the one router row a block took before) into the layer's
 * accumulators as 2^-24 fixed point (integer adds: the same bits in any order; block b adds into
 * group b % 8, so that 132 blocks do not queue on the same 8 L2 lines), and writes its share of
 * the sum of squares. In phase 5 warp 0 alone copies the groups and the shares into shared memory,
 * sums them in one order, scales by inv and takes the top-k: no block barrier on the routing's
 * path. The MLP norm's phase and its grid barrier are gone. A first form (one accumulator group,
 * h's rows loaded after O, the shares summed by the block) removed the phase's 3.3 µs but gave
 * 1.9 back in O and 1.8 in the routing (H100, 120b). */
enum { SK_ROUTER_ROWS = 32 }; /* rows of h + o a block (a lane each) */

enum { SK_STAMPS = 8 }; /* a layer's probe stamps: its start, then the end of phases 0-6 */

/* The probe: block 0's %globaltimer (ns) as it reaches point i of layer l (the end of a phase is
 * after its grid barrier: when the slowest block is done). */
static __device__ __forceinline__ void sk_stamp(const sk_params &K, int l, int i) {
    if (K.stamps && blockIdx.x == 0 && threadIdx.x == 0) {
        K.stamps[l * SK_STAMPS + i] = global_ns();
    }
}

/* The blocks' probe: block b's %globaltimer as its consumers are done with phase i of layer l (1-6,
 * before the grid barrier), as its routing is done (7), and its SM (0). The clock's low 32 bits
 * only: the 64-bit read is sk_stamp's, which scripts/device/sass_phases.py takes as the phases'
 * marks. A block barrier first, so the stamp is the block's slowest warp's: the probe adds one a
 * phase (only when on). */
enum { SK_BSTAMPS = 12 }; /* the blocks' probe's slots a layer: 0-7 here, 8-11 sk_attn_mark's */
static __device__ __forceinline__ void sk_block_mark(unsigned *bst, int l, int i) {
    if (!bst || threadIdx.x != 0) return;
    unsigned t;
    if (i == 0)
        asm volatile("mov.u32 %0, %%smid;" : "=r"(t));
    else
        t = global_ns_lo();
    bst[((size_t)l * SK_BSTAMPS + i) * gridDim.x + blockIdx.x] = t;
}
static __device__ __forceinline__ void sk_block_stamp(const sk_params &K, int l, int i) {
    if (!K.bstamps) return;
    consumers_sync();
    sk_block_mark(K.bstamps, l, i);
}
/* The attention's inner points (as_attention's marks 0-3) into the blocks' probe's slots 8-11. */
struct sk_attn_mark {
    const sk_params &K;
    int l;
    __device__ void operator()(int i) const { sk_block_mark(K.bstamps, l, 8 + i); }
};

/* The wait probe: where the expert phases' time goes, per warp (step_kernel.h has the layout).
 * Sums of %clock cycles over every launch (red.add by lane 0: nothing waits for them), and points
 * of the last launch's phases 5-6 on the block's %clock (one SM's clock: comparable within the
 * block), with %globaltimer at two of them to turn cycles into ns. */
enum {
    SKW_META = 0,   /* + SKW_DOWN for down's: cycles waiting for the producer to issue the stage */
    SKW_COPY = 1,   /* waiting for the stage's copy to land */
    SKW_MUL = 2,    /* the multiply (and waiting for the chunk's scale words) */
    SKW_MEET = 3,   /* the release, the tile's meet and the epilogue */
    SKW_CHUNKS = 4, /* chunks */
    SKW_DOWN = 5,
    /* the producer's row: the sums */
    SKW_P_WAIT = 0,  /* + SKW_DOWN: waiting for a free stage (the ring full) */
    SKW_P_ISSUE = 1, /* issuing (all but those waits) */
    SKW_P_DENSE = 2, /* the layer's QKV, O and router stages: waiting for a free stage */
    SKW_P_OGO = 3,   /* waiting for the QKV barrier (o_go) */
    SKW_P_ROUTE = 7, /* waiting for the routing (route_go) */
    SKW_P_TAKE = 8,  /* taking tiles (the ticket counter's answers) */
    /* points (stores): %clock's low 32 bits */
    SKW_T_START = 10,   /* phase 5's start (the barrier passed) */
    SKW_T_LOGITS = 11,  /* warp 0: the logits in */
    SKW_T_TOPK = 12,    /* warp 0: the top-k's rounds done */
    SKW_T_ROUTED = 13,  /* the routing done in the block (producer: route_go seen) */
    SKW_T_FIRST = 14,   /* the warp's first gate_up chunk landed (producer: issued) */
    SKW_T_UP_END = 15,  /* the warp's gate_up loop done (producer: down's first chunk issued) */
    SKW_T_D_START = 16, /* phase 6's start (the barrier passed) */
    SKW_T_D_LOOP = 17,  /* the activations staged: down's loop starts */
    SKW_T_END = 18,     /* the warp's down loop done (producer: the layer's last chunk issued) */
    SKW_G_START = 19,   /* warp 0: %globaltimer's low 32 bits at SKW_T_START */
    SKW_G_END = 20,     /* warp 0: %globaltimer's low 32 bits at SKW_T_END */
    SKW_SCALES = 21,    /* + 1 for down's: of SKW_MUL, cycles until lane 0's scale words are in */
    SKW_LAUNCHES = 23,  /* layer 0, block 0, the producer's row: launches */
    SKW_SLOTS = 24
};
/* Compiled in only with -DGPTOSS_STEP_WAIT_PROBE=1 (CMAKE_CUDA_FLAGS): its off path alone (a
 * clock select and a branch a point) cost 1.3-1.8 % of decode (session 33, H100: 0.976 -> 0.958 of
 * the loop at 120b batch 1, 0.964 -> 0.951 at 20b); without it every point folds away. */
#ifndef GPTOSS_STEP_WAIT_PROBE
#define GPTOSS_STEP_WAIT_PROBE 0
#endif
struct sk_wait {
    unsigned *row; /* this warp's slots of the layer, or NULL */
    __device__ sk_wait(const sk_params &K, int l, int warp)
        : row(GPTOSS_STEP_WAIT_PROBE && K.wprobe && (threadIdx.x & 31) == 0
                  ? K.wprobe +
                        (((size_t)l * gridDim.x + blockIdx.x) * (AS_CWARPS + 1) + warp) * SKW_SLOTS
                  : NULL) {}
    __device__ unsigned now() const { return row ? (unsigned)clock() : 0u; }
    __device__ void add(int i, unsigned v) const {
        if (row) atomicAdd(row + i, v);
    }
    __device__ void since(int i, unsigned t0) const {
        if (row) atomicAdd(row + i, (unsigned)clock() - t0);
    }
    __device__ void point(int i) const {
        if (row) row[i] = (unsigned)clock();
    }
    __device__ void gtime(int i) const {
        if (row) row[i] = global_ns_lo();
    }
};
/* The top-k's points into warp 0's row: each after a branch on a value the point follows, so the
 * clock is read once that value is in. */
struct sk_topk_mark {
    const sk_wait &w;
    __device__ void operator()(int i, float s) const {
        if (!w.row) return;
        if (__float_as_uint(s) == 0x7fc0beefu) asm volatile("trap;");
        w.point(i ? SKW_T_TOPK : SKW_T_LOGITS);
    }
};

/* The grid barrier between phases: grid_sync.cuh's counted form (*target: the count this block's
 * consumers have passed, kept by each thread alike). */
static __device__ __forceinline__ void sk_barrier(unsigned *bar, unsigned *target) {
    grid_barrier_counted(bar, target, [] { consumers_sync(); });
}

/* What a ring stage holds, told by the producer as it issues the stage (the consumers of the
 * experts' stages learn their chunks from it: the tiles are handed out at run time): one 64-bit
 * word a stage, the stage's index in the launch (n) high, and low: its kind (bits 30-31: 0 a
 * gate_up chunk, 1 a down chunk, 2 anything else of a layer, 3 past the launch's last stage),
 * for the experts' chunks the tile's row tile rt (bits 0-8), expert slot i (9-11), the block's
 * local tile lt (12-15) and chunk c (16-17); for kind 2 the layer's first stage (bits 0-29). */
enum { SK_GATE_UP = 0, SK_DOWN = 1, SK_OTHER = 2, SK_END = 3 };
/* An expert chunk's place: row tile rt of expert slot i, the block's local tile lt, chunk c. */
struct sk_place {
    int rt, i, lt, c;
    __device__ unsigned packed() const { return (unsigned)(rt | i << 9 | lt << 12 | c << 16); }
    static __device__ sk_place of(unsigned low) {
        return {(int)(low & 511), (int)(low >> 9 & 7), (int)(low >> 12 & 15), (int)(low >> 16 & 3)};
    }
};
static __device__ __forceinline__ unsigned long long sk_meta(unsigned n, unsigned kind,
                                                             unsigned low) {
    return (unsigned long long)n << 32 | kind << 30 | low;
}
static __device__ __forceinline__ void sk_meta_put(unsigned long long *meta, int s,
                                                   unsigned long long v) {
    asm volatile("st.volatile.shared.u64 [%0], %1;" ::"r"(smem_u32(meta + s)), "l"(v) : "memory");
}
/* The low word of stage n's (at slot s) once the producer has issued it; warp-wide. */
static __device__ __forceinline__ unsigned sk_meta_wait(const unsigned long long *meta, int s,
                                                        unsigned n) {
    unsigned low = 0;
    if ((threadIdx.x & 31) == 0) {
        unsigned long long v;
        const long long t0 = clock64();
        for (;;) {
            asm volatile("ld.volatile.shared.u64 %0, [%1];" : "=l"(v) : "r"(smem_u32(meta + s)));
            if ((unsigned)(v >> 32) == n) break;
            if (clock64() - t0 > 4000000000ll) __trap(); /* ~2 s: the stage never came */
        }
        low = (unsigned)v;
    }
    return __shfl_sync(0xffffffffu, low, 0);
}

/* The expert tiles of one matrix of a layer (N = k · RT, tile j = expert slot j / RT, row tile
 * j % RT), handed to the blocks: each block first takes its fixed share (ns = N / G - SK_SLACK
 * tiles, at least 0: j = b · ns ...), then one tile at a time from the layer's ticket counter
 * (j = G · ns + ticket) until they run out. The next ticket is asked for as the current tile is
 * issued, so its round trip hides behind the ring's wait. A block takes at most SK_MAX_TILES tiles
 * of a matrix (its partial sums' room).
 * Why: a phase ends when its slowest block does. Measured (session 32, H100, 120b batch 1, against
 * the layer loop): fixed shares alone 0.938, slack 2 0.970, slack 0 (only N mod G from the
 * counter) 0.959, every tile from the counter 0.953. The blocks' probe had put the fixed shares'
 * last block only ~1.5 µs after the median in gate_up, so not all of the gain is balance: with the
 * tiles unknown in advance the block-wide table of their biases (and the block barrier behind its
 * loads at phase 5's start) went too. */
enum { SK_SLACK = 2 };
struct sk_take_tile {
    unsigned *ticket;
    int ns, N, G, lt;
    unsigned next;
    bool have;
    __device__ sk_take_tile(unsigned *t, int N_, int G_) : ticket(t), N(N_), G(G_), lt(0) {
        ns = N / G >= SK_SLACK ? N / G - SK_SLACK : 0;
        have = ns < SK_MAX_TILES;
        if (have) next = atomicAdd(ticket, 1u);
    }
    /* the next tile's j (its local index: lt - 1 after the call), or -1 when there are no more */
    __device__ int take(int b) {
        int j;
        if (lt < ns) {
            j = b * ns + lt;
        } else {
            if (!have) return -1;
            j = G * ns + (int)next;
            if (j >= N) return -1;
            have = lt + 1 < SK_MAX_TILES;
            if (have) next = atomicAdd(ticket, 1u);
        }
        lt++;
        return j;
    }
};

/* The first stage index ≥ lo of consumer warp w (stage n goes to warp n % AS_CWARPS). */
static __device__ __forceinline__ int sk_first(int lo, int w) {
    return lo + (w - lo % AS_CWARPS + AS_CWARPS) % AS_CWARPS;
}

/* Asks L2 for [p, p + bytes): one bulk prefetch (tma_ring.cuh) by thread 0 when the range is
 * 16-byte aligned and sized, as the model's arrays are; else line by line over the n threads. */
static __device__ __forceinline__ void sk_prefetch_l2(const void *p, size_t bytes, int tid, int n) {
    if ((((uintptr_t)p | bytes) & 15) == 0) {
        if (tid == 0) bulk_prefetch_l2(p, (uint32_t)bytes);
        return;
    }
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)127);
    const char *end = (const char *)p + bytes;
    for (c += (size_t)tid * 128; c < end; c += (size_t)n * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c));
}

/* Layer ly's small model arrays that its first phases read on their dependent chains (the norms'
 * gains, the biases the epilogues preload, the sinks, the router's bias): asked into L2 during
 * the layer before, by the consumers of every block, each block its share of the lines (they
 * leave L2 between steps: 5 GB of weights stream through it). */
static __device__ void sk_prefetch_layer(const step_layer *ly, int H, int QKV, int n_heads, int E,
                                         int tid) {
    const int n = AS_CWARPS * 32, b = blockIdx.x, G = gridDim.x;
    if (b == 0) sk_prefetch_l2(ly->attn_norm, (size_t)H * 2, tid, n);
    if (b == 1 % G) sk_prefetch_l2(ly->mlp_norm, (size_t)H * 2, tid, n);
    if (b == 2 % G && ly->qkv_b) sk_prefetch_l2(ly->qkv_b, (size_t)QKV * 2, tid, n);
    if (b == 3 % G && ly->o_b) sk_prefetch_l2(ly->o_b, (size_t)H * 2, tid, n);
    if (b == 4 % G) sk_prefetch_l2(ly->sinks, (size_t)n_heads * 4, tid, n);
    if (b == 5 % G && ly->router_b) sk_prefetch_l2(ly->router_b, (size_t)E * 2, tid, n);
}

__global__ void __launch_bounds__(AS_THREADS, 1) step_kernel(const sk_params K, const as_layout L) {
    extern __shared__ __align__(128) unsigned char as_smem[];
    __shared__ as_params sP; /* the layer's: the base with its per-layer fields */
    __shared__ int s_e[SK_MAX_K];
    __shared__ float s_w[SK_MAX_K];
    __shared__ float s_oc[SK_ROUTER_ROWS]; /* g (h + o) over the block's rows */
    __shared__ float s_sq[SK_ROUTER_ROWS]; /* the squares of the block's rows of h + o */
    __shared__ float s_inv;                /* the layer's 1 / rms(h + o) */
    __shared__ sk_partials s_part;
    __shared__ unsigned s_probe_sink; /* the wait probe's: where lane 0 puts its scale words' xor */
    __shared__ unsigned long long s_meta[AS_MAX_STAGES]; /* what each stage holds (sk_meta) */
    unsigned char *ring = as_smem;
    float *xs = (float *)(as_smem + L.xs_off);
    const int S = L.stages;
    uint64_t *full = (uint64_t *)(as_smem + L.bar_off), *empty = full + S;
    uint64_t *o_go = full + 2 * AS_MAX_STAGES; /* a layer's phase 1 is done over the grid */
    uint64_t *route_go = o_go + 1;             /* a layer's experts are known (s_e) */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int H = K.base.a.H, Q = K.base.n_heads * AS_HD, G = gridDim.x, b = blockIdx.x;
    int p0, r0;
    const int n_pairs = asp_share(b, G, (K.base.n_heads + 2 * K.base.n_kv_heads) * AS_HALF, &p0);
    const int n_rows = asp_share(b, G, H, &r0);
    const int n_router = n_rows > 0 ? 1 : 0; /* the router's columns of the block's rows */
    /* the experts: the block's share of the k · RT tiles of each matrix, kc k steps a chunk */
    const int I = K.I, RT1 = 2 * I / 16, KK1 = H / 64, RT2 = H / 16, KK2 = I / 64, kc = K.kc;
    const int nc1 = (KK1 + kc - 1) / kc, nc2 = (KK2 + kc - 1) / kc;
    /* the block's stages a layer: QKV pairs, O rows, its router row, then gate_up's and down's
     * chunks (as many as the block takes: sk_take_tile) */
    const int q_o = n_pairs, q_r = q_o + n_rows, q_g = q_r + n_router;
    const int qkv_row_bytes = H * 2, o_row_bytes = Q * 2;
    if (tid == 0) {
        for (int s = 0; s < S; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 1);
        mbar_init(o_go, 1), mbar_init(route_go, 1);
        mbar_init_fence();
    }
    if (tid < SK_MAX_TILES) s_part.count[tid] = 0;
    if (tid < AS_MAX_STAGES) s_meta[tid] = ~0ull; /* no stage index */
    for (int i = tid; i < (int)(sizeof(as_params) / 4); i += AS_THREADS)
        ((int *)&sP)[i] = ((const int *)&K.base)[i];
    __syncthreads();

    if (warp == AS_CWARPS) { /* the producer */
        if (lane != 0) return;
        const uint64_t once = l2_policy_evict_first();
        unsigned n = 0; /* stages issued in the launch */
        /* stage n's slot, free (its use n - S released) */
        unsigned wait_sum = 0; /* the wait probe: cycles acquire waited */
        auto acquire = [&](const sk_wait &w) {
            const int s = (int)(n % S);
            const unsigned t0 = w.now();
            if (n >= (unsigned)S) mbar_wait_or_trap(&empty[s], (n / S - 1) & 1);
            wait_sum += w.now() - t0;
            return s;
        };
        if (GPTOSS_STEP_WAIT_PROBE && K.wprobe && b == 0)
            atomicAdd(K.wprobe + AS_CWARPS * SKW_SLOTS + SKW_LAUNCHES, 1u);
        for (int l = 0; l < K.L; l++) {
            const step_layer *ly = K.layers + l;
            const uint16_t *qkv_w = ly->qkv_w, *o_w = ly->o_w;
            const unsigned nb = n;
            const sk_wait w(K, l, AS_CWARPS);
            wait_sum = 0;
            for (int q = 0; q < q_g; q++, n++) {
                if (q == q_o) {
                    const unsigned t0 = w.now();
                    mbar_wait_or_trap(o_go, l & 1);
                    w.since(SKW_P_OGO, t0);
                }
                const int s = acquire(w);
                sk_meta_put(s_meta, s, sk_meta(n, SK_OTHER, nb));
                unsigned char *dst = ring + (size_t)s * L.stage_bytes;
                if (q < q_o) {
                    const int p = p0 + q, hh = p / AS_HALF, i = p % AS_HALF;
                    const uint16_t *w1 = qkv_w + (size_t)(hh * AS_HD + i) * H;
                    mbar_arrive_expect_tx(&full[s], (uint32_t)(2 * qkv_row_bytes));
                    bulk_copy_g2s_hint(dst, w1, (uint32_t)qkv_row_bytes, &full[s], once);
                    bulk_copy_g2s_hint(dst + qkv_row_bytes, w1 + (size_t)AS_HALF * H,
                                       (uint32_t)qkv_row_bytes, &full[s], once);
                } else if (q < q_r) {
                    mbar_arrive_expect_tx(&full[s], (uint32_t)o_row_bytes);
                    bulk_copy_g2s_hint(dst, o_w + (size_t)(r0 + q - q_o) * Q, (uint32_t)o_row_bytes,
                                       &full[s], once);
                } else {
                    const uint32_t bytes = (uint32_t)(n_rows * K.E * 2); /* the router's columns */
                    mbar_arrive_expect_tx(&full[s], bytes);
                    bulk_copy_g2s_hint(dst, ly->router_wt + (size_t)r0 * K.E, bytes, &full[s],
                                       once);
                }
            }
            w.add(SKW_P_DENSE, wait_sum);
            /* the routing: the experts whose tiles follow (reading the layer's expert arrays before
             * this wait, off the first chunk's path, measured no gain: session 34, with the
             * redux top-k, 0.969 -> 0.962 of the loop, within the noise; nor did asking L2 for the
             * next layer's first 4 or 8 QKV pairs of the block here, while the DRAM idles:
             * session 35, H100, 120b batch 1, 0.933 -> 0.930 / 0.932; every pair: session 33,
             * -3 %) */
            {
                const unsigned t0 = w.now();
                mbar_wait_or_trap(route_go, l & 1);
                w.since(SKW_P_ROUTE, t0);
                w.point(SKW_T_ROUTED);
            }
            int e_sel[SK_MAX_K];
#pragma unroll
            for (int i = 0; i < SK_MAX_K; i++) e_sel[i] = i < K.k ? s_e[i] : 0;
            for (int m = 0; m < 2; m++) { /* gate_up's tiles, then down's */
                const bool up = m == 0;
                const int nc = up ? nc1 : nc2, KK = up ? KK1 : KK2, RT = up ? RT1 : RT2;
                const uint8_t *wq = up ? ly->w1_q : ly->w2_q, *ws = up ? ly->w1_s : ly->w2_s;
                const uint16_t *bias = up ? ly->b1 : ly->b2;
                const int o = m ? SKW_DOWN : 0;
                unsigned t_take = w.now(), take_sum = 0, t_issue = t_take, chunks = 0;
                wait_sum = 0;
                sk_take_tile take(K.tickets + 2 * l + m, K.k * RT, G);
                for (int j; (j = take.take(b)) >= 0; t_take = w.now()) {
                    take_sum += w.now() - t_take;
                    const int i = j / RT, rt = j - i * RT;
                    const sk_place at = {rt, i, take.lt - 1, 0};
                    const size_t tile = (size_t)e_sel[i] * RT + rt;
                    /* the tile's scale words and biases into L2 for its consumers' loads (the
                     * biases: 16 contiguous bf16 of either matrix, moe.h's ρ for gate_up) */
                    sk_prefetch_l2(ws + tile * KK * 32, (size_t)KK * 32, 0, 1);
                    sk_prefetch_l2(bias + tile * 16, 32, 0, 1);
                    for (int c = 0; c < nc; c++, n++) {
                        const int s = acquire(w);
                        sk_meta_put(s_meta, s, sk_meta(n, m, sk_place{rt, i, at.lt, c}.packed()));
                        if (chunks++ == 0) w.point(m ? SKW_T_UP_END : SKW_T_FIRST);
                        if (K.moe_probe == 2) { /* the probe: the chunk's stage as it is */
                            mbar_arrive(&full[s]);
                            continue;
                        }
                        const int kk0 = c * kc, nk = min(kc, KK - kk0);
                        mbar_arrive_expect_tx(&full[s], (uint32_t)(nk * SK_STEP_CODE_BYTES));
                        bulk_copy_g2s_hint(ring + (size_t)s * L.stage_bytes,
                                           wq + (tile * KK + kk0) * SK_STEP_CODE_BYTES,
                                           (uint32_t)(nk * SK_STEP_CODE_BYTES), &full[s], once);
                    }
                }
                w.add(o + SKW_P_WAIT, wait_sum);
                w.add(o + SKW_P_ISSUE, w.now() - t_issue - wait_sum);
                w.add(o + SKW_CHUNKS, chunks);
                w.add(SKW_P_TAKE, take_sum);
            }
            w.point(SKW_T_END);
        }
        /* past the last stage: one a consumer warp, so each sees its down loop end */
        for (int w = 0; w < AS_CWARPS; w++, n++)
            sk_meta_put(s_meta, acquire(sk_wait(K, K.L - 1, AS_CWARPS)), sk_meta(n, SK_END, 0));
        return;
    }

    const as_params &P = sP;
    as_pre pre;
    pre.qkv_bias = (float *)(as_smem + L.pre_off);
    pre.cs = pre.qkv_bias + 2 * L.max_pairs;
    pre.o_bias = pre.cs + 2 * L.max_pairs;
    /* the MoE's inputs, over the staged rows' room (free after the router's dot products): the
     * token's bf16 row past the router's fp32 one, then the k activation rows */
    uint16_t *ys = (uint16_t *)((unsigned char *)xs + ((size_t)H * 4 + 127) / 128 * 128);
    uint16_t *acts = (uint16_t *)xs;
    const int t4 = lane & 3, g8 = lane >> 2;
    /* Measured and undone (session 35, H100, 120b batch 1): each warp asking L1 for its next chunk's
     * scale words and biases as it starts a chunk (0.933 -> 0.934 of the loop, 20b 0.937 -> 0.930;
     * phase 5 +1.2 µs), and the layer's expert arrays read from shared memory instead of the layer
     * table (0.935 -> 0.933). */
    /* One expert chunk at stage n (its place p, told by sk_meta) of the matrix with scale words w_s,
     * biases bias, RT row tiles of KK k steps in nc chunks: the scale words and the tile's two
     * biases (o0, o1 of its 16) asked for, the stage waited for, multiplied with the staged rows at
     * x0 (+ x_stride a selected expert; zero under the stream-alone probe) and released, the tile's
     * sums met. True for the warp that completes the tile (lanes t4 = 0: out its rows g8, g8 + 8,
     * bb their biases). */
    auto expert_chunk = [&](const sk_wait &w, int o, bool first, unsigned &t_meet, int n,
                            const sk_place &p, const uint8_t *w_s, const uint16_t *bias, int RT,
                            int KK, int nc, int o0, int o1, uint32_t x0, uint32_t x_stride,
                            float out[2], float bb[2]) {
        const unsigned t0 = w.now();
        const int s = n % S, kk0 = p.c * kc, nk = min(kc, KK - kk0);
        const size_t tile = (size_t)s_e[p.i] * RT + p.rt;
        uint32_t sc[SK_SC_WORDS];
        sk_chunk_scales((const uint32_t *)w_s + (tile * KK + kk0) * 8, nk, sc);
        bb[0] = bb[1] = 0.f;
        if (t4 == 0) {
            bb[0] = bf16_bits_to_f32(__ldg(bias + tile * 16 + o0));
            bb[1] = bf16_bits_to_f32(__ldg(bias + tile * 16 + o1));
        }
        mbar_wait_or_trap(&full[s], (n / S) & 1);
        const unsigned t1 = w.now();
        w.add(o + SKW_COPY, t1 - t0);
        if (first) w.point(SKW_T_FIRST);
        if (GPTOSS_STEP_WAIT_PROBE && w.row) { /* lane 0 alone: waits for its scale words */
            uint32_t x = 0;
#pragma unroll
            for (int i = 0; i < SK_SC_WORDS; i++) x ^= sc[i];
            asm volatile("st.volatile.shared.u32 [%0], %1;" ::"r"(smem_u32(&s_probe_sink)), "r"(x)
                         : "memory");
            w.since(SKW_SCALES + (o ? 1 : 0), t1);
        }
        float acc[4];
        if (K.moe_probe == 1)
            acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
        else
            sk_chunk(smem_u32(ring + (size_t)s * L.stage_bytes), nk, sc,
                     x0 + (uint32_t)p.i * x_stride + (uint32_t)kk0 * 128, acc);
        __syncwarp();
        t_meet = w.now();
        w.add(o + SKW_MUL, t_meet - t1);
        if (lane == 0) mbar_arrive(&empty[s]);
        return sk_tile_meet(&s_part, p.lt, p.c, nc, acc, out);
    };
    unsigned bar_n = 0; /* grid barrier arrivals passed (sk_barrier) */
    int nb = 0;         /* the layer's first stage (told by the producer at each layer's end) */

    for (int l = 0; l < K.L; l++) {
        const step_layer *ly = K.layers + l;
        if (tid == 0) {
            attn_stream_args &a = sP.a;
            a.slots = ly->sliding ? K.slots_swa : K.slots_full;
            a.seqs = ly->sliding ? K.seqs_swa : K.seqs_full;
            a.qkv_w = ly->qkv_w, a.qkv_b = ly->qkv_b, a.o_w = ly->o_w, a.o_b = ly->o_b;
            a.sinks = ly->sinks, a.k_cache = ly->k_cache, a.v_cache = ly->v_cache;
            a.nh = l ? K.h : NULL, a.ngain = ly->attn_norm;
        }
        sk_stamp(K, l, 0);
        consumers_sync();

        /* 0: the input row, the epilogues' preloads, phase 2's item */
        as_early<1> early;
        as_early_load<1>(P, L, p0, n_pairs, r0, n_rows, early);
        if (P.a.nh)
            as_norm_rows<1, true>(P.a, xs);
        else
            as_early_rows<1>(early, H, xs);
        as_preload<1>(P, pre, early, p0, n_pairs, r0, n_rows);
        const int slot = early.slot;
        const as_item item = as_item_plan<1>(P, L, early);
        consumers_sync();
        sk_stamp(K, l, 1);

        /* 1: QKV pairs, RoPE, the KV write */
        for (int q = sk_first(nb, warp) - nb; q < n_pairs; q += AS_CWARPS) {
            const int n = nb + q, s = n % S;
            mbar_wait_or_trap(&full[s], (n / S) & 1);
            float acc[2][1];
            as_rows_dot<1, 2>(ring + (size_t)s * L.stage_bytes, qkv_row_bytes, H / 8, xs, acc);
            __syncwarp();
            if (lane == 0) {
                mbar_arrive(&empty[s]);
                const int p = p0 + q;
                as_qkv_store<1>(P, pre, q, p / AS_HALF, p % AS_HALF, 0, slot, acc[0][0], acc[1][0]);
            }
        }
        /* phase 2's first chunk of keys (asking at phase 0's end instead measured no gain:
         * session 33, H100, 120b batch 1 0.972 -> 0.976 of the loop, phase 0 +1.0 µs, 1 -0.9) */
        as_item_prefetch(P, L, item, as_smem);
        sk_block_stamp(K, l, 1);
        sk_barrier(P.a.bar, &bar_n);
        sk_stamp(K, l, 2);
        if (tid == 0) mbar_arrive(o_go);
        /* every block is past the layer before's tiles (and the launch before's last layer's):
         * their tickets back to 0 (this thread's barrier arrivals order the stores) */
        if (b == 0 && tid == 0) {
            unsigned *t = K.tickets + 2 * ((l + K.L - 1) % K.L);
            t[0] = t[1] = 0u;
        }
        if (P.a.nh && b == 0) /* every block has read h: its new row (written by this block) */
            for (int i = tid; i < H / 4; i += AS_CWARPS * 32)
                ((float4 *)K.h)[i] = ((const float4 *)P.a.nscratch)[i];

        /* 2: attention */
        as_attention(P, L, item, as_smem, sk_attn_mark{K, l});
        sk_block_stamp(K, l, 2);
        sk_barrier(P.a.bar, &bar_n);
        sk_stamp(K, l, 3);

        /* 3: O, then the router by columns over the block's rows (above SK_ROUTER_ROWS) */
        const int par = l & 1;
        as_stage_rows(P.a.attn, 1, Q, xs);
        consumers_sync();
        for (int q = sk_first(nb + n_pairs, warp) - nb; q < n_pairs + n_rows; q += AS_CWARPS) {
            const int n = nb + q, s = n % S, j = q - n_pairs;
            /* h and the MLP norm's gain of row j, asked before the row's dot product */
            const float hj = lane == 0 ? __ldcg(K.h + r0 + j) : 0.0f;
            const uint16_t gj = lane == 0 ? __ldg(ly->mlp_norm + r0 + j) : (uint16_t)0;
            mbar_wait_or_trap(&full[s], (n / S) & 1);
            float acc[1][1];
            as_rows_dot<1, 1>(ring + (size_t)s * L.stage_bytes, o_row_bytes, Q / 8, xs, acc);
            __syncwarp();
            if (lane == 0) {
                mbar_arrive(&empty[s]);
                const uint16_t ob = f32_to_bf16_bits(acc[0][0] + pre.o_bias[j]);
                P.a.o[r0 + j] = ob;
                const float v = hj + bf16_bits_to_f32(ob); /* h + o (phase 5 reads it) */
                __stcg(P.a.nscratch + r0 + j, v);
                s_oc[j] = v * bf16_bits_to_f32(gj);
                s_sq[j] = v * v;
            }
        }
        consumers_sync(); /* s_oc, s_sq */
        if (warp == 0) {  /* the block's share of the sum of squares */
            float ss = lane < n_rows ? s_sq[lane] : 0.0f;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            if (lane == 0) __stcg(K.ss_part + par * ATTN_ROUTER_MAX_G + b, ss);
        }
        if (n_router) {
            const int n = nb + n_pairs + n_rows, s = n % S;
            if (tid < K.E) {
                mbar_wait_or_trap(&full[s], (n / S) & 1);
                const uint16_t *wt = (const uint16_t *)(ring + (size_t)s * L.stage_bytes);
                float p = 0.0f;
                for (int j = 0; j < n_rows; j++) p += bf16_bits_to_f32(wt[j * K.E + tid]) * s_oc[j];
                atomicAdd(K.racc +
                              ((size_t)par * ATTN_ROUTER_GROUPS + b % ATTN_ROUTER_GROUPS) * K.E +
                              tid,
                          (unsigned long long)__float2ll_rn(p * ATTN_ROUTER_ONE));
            }
            consumers_sync();
            if (tid == 0) mbar_arrive(&empty[s]);
        }
        sk_block_stamp(K, l, 3);
        sk_barrier(P.a.bar, &bar_n);
        sk_stamp(K, l, 4);

        /* 4: (the MLP norm and one router row a block, with a grid barrier, until session 35:
         * the router by columns in phase 3 replaced them) */
        sk_block_stamp(K, l, 4);
        sk_stamp(K, l, 5);
        if (b == 0) /* every block has read h: h + o (through L2: every block wrote its rows) */
            for (int i = tid; i < H / 4; i += AS_CWARPS * 32)
                ((float4 *)K.h)[i] = __ldcg((const float4 *)P.a.nscratch + i);

        /* 5: the routing (the producer then streams the experts' chunks), then gate_up with SwiGLU:
         * each warp takes its stages in turn, whatever chunk the producer put there, until one
         * holds something else (its first of down's, which phase 6 starts from) */
        const sk_wait w(K, l, warp);
        w.point(SKW_T_START);
        if (warp == 0) { /* the routing, by warp 0 alone (above SK_ROUTER_ROWS) */
            w.gtime(SKW_G_START);
            /* the layer's accumulator groups and the blocks' shares into xs's head (free: O's
             * staged row is done), by cp.async: held in registers they spilled; then the logits */
            unsigned long long *s_racc = (unsigned long long *)xs; /* [RGROUPS][E] */
            float *s_ssp = xs + 2 * ATTN_ROUTER_GROUPS * K.E;      /* [MAX_G] */
            const unsigned long long *ra = K.racc + (size_t)par * ATTN_ROUTER_GROUPS * K.E;
            for (int i = lane; i < ATTN_ROUTER_GROUPS * K.E / 2; i += 32)
                cp_async16(smem_u32(s_racc + 2 * i), ra + 2 * i, 16);
            for (int i = lane; i < ATTN_ROUTER_MAX_G / 4; i += 32)
                cp_async16(smem_u32(s_ssp + 4 * i), K.ss_part + par * ATTN_ROUTER_MAX_G + 4 * i,
                           16);
            cp_async_commit();
            cp_async_wait<0>();
            __syncwarp();
            float ss = 0.0f; /* zero past the grid (never written: runner_step.c) */
#pragma unroll
            for (int i = 0; i < ATTN_ROUTER_MAX_G / 32; i++) ss += s_ssp[lane + 32 * i];
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
            const float inv = rms_inv(ss, H, P.a.neps);
            if (lane == 0) s_inv = inv;
            /* the logits less their bias (topk_warp adds it) into xs past the groups: the copy
             * is read back from shared memory, as the fused MoE kernel's top-k reads its own */
            float *s_logit = s_ssp + ATTN_ROUTER_MAX_G; /* [E] */
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int ex = lane + 32 * i;
                if (ex >= K.E) break;
                long long sum = 0;
#pragma unroll
                for (int g = 0; g < ATTN_ROUTER_GROUPS; g++) sum += (long long)s_racc[g * K.E + ex];
                s_logit[ex] = inv * ((float)sum * (1.0f / ATTN_ROUTER_ONE));
            }
            __syncwarp();
            topk_warp<false>(s_logit, NULL, ly->router_b, K.E, K.k, lane, s_e, s_w,
                             sk_topk_mark{w});
            __syncwarp();
            if (lane == 0) mbar_arrive(route_go); /* the experts are known: the producer goes */
        }
        consumers_sync(); /* s_inv */
        { /* the MoE's input row: h + o normalised, bf16 (read by gate_up's chunks) */
            const float inv = s_inv;
            for (int c = tid; c < H / 8; c += AS_CWARPS * 32) {
                const uint4 g8 = gain_at(ly->mlp_norm, c, true);
                const float4 a = __ldcg((const float4 *)(P.a.nscratch + 8 * c)),
                             z = __ldcg((const float4 *)(P.a.nscratch + 8 * c + 4));
                const float x[8] = {a.x, a.y, a.z, a.w, z.x, z.y, z.z, z.w};
                uint4 hi, lo;
                norm_split8(x, inv, g8, hi, lo);
                *(uint4 *)(ys + 8 * c) = hi;
            }
        }
        consumers_sync(); /* ys */
        w.point(SKW_T_ROUTED);
        sk_block_stamp(K, l, 7);
        sk_block_stamp(K, l, 0);
        int q = sk_first(nb + q_g, warp) - nb; /* this warp's next stage of the layer */
        {
            const uint32_t xa = smem_u32(ys) + 16 * t4;
            for (bool first = true;; q += AS_CWARPS, first = false) {
                const int n = nb + q, s = n % S;
                const unsigned ta = w.now();
                const unsigned mt = sk_meta_wait(s_meta, s, (unsigned)n);
                w.since(SKW_META, ta);
                if (mt >> 30 != SK_GATE_UP) break; /* down's first chunk (or what follows) */
                const sk_place p = sk_place::of(mt);
                /* gate_up: tile row r < 8 is output rt·8 + r's gate, r ≥ 8 its up (moe.h's ρ) */
                float out[2], bb[2];
                unsigned tm;
                if (expert_chunk(w, 0, first, tm, n, p, ly->w1_s, ly->b1, RT1, KK1, nc1, 2 * g8,
                                 2 * g8 + 1, xa, 0, out, bb) &&
                    t4 == 0)
                    K.act[(size_t)p.i * I + p.rt * 8 + g8] =
                        f32_to_bf16_bits(swiglu(out[0] + bb[0], out[1] + bb[1], K.alpha, K.limit));
                w.since(SKW_MEET, tm);
                w.add(SKW_CHUNKS, 1);
            }
        }
        w.point(SKW_T_UP_END);
        sk_block_stamp(K, l, 5);
        sk_barrier(P.a.bar, &bar_n);
        sk_stamp(K, l, 6);

        /* 6: down, weighted into the slots (one a selected expert: unsplit). Measured and undone
         * (session 34, H100, 120b batch 1, against the layer loop): the activations staged by
         * cp.async with every copy in flight, 0.968 -> 0.969 (phase 6 13.0 µs either way); each
         * chunk split between two warps, half its k steps each, 0.962 -> 0.939 (phase 6 +1.3 µs:
         * a chunk's fixed costs twice; gate_up the same way 0.896). Down beside gate_up (session
         * 36, 0d393c2: strided tile shares so the grid completes the expert slots in order, each
         * slot's down tiles in the ring once the block's gate_up moved past it, per-slot done
         * counters, the slot's activations staged by the block's first warp to need them, this
         * barrier gone): 0.969 -> 0.830 of the loop at 120b, 0.979 -> 0.842 at 20b; phases 5 + 6
         * 38.2 -> 49.9 µs, their arithmetic alone 35.3 -> 49.3: warps waiting for a slot's count
         * hold their stages and the ring stalls. The same bits ((h) equal). */
        w.point(SKW_T_D_START);
        if (b == 0) /* every block has read the layer's router sums: back to 0 for layer l + 2 */
            for (int i = tid; i < ATTN_ROUTER_GROUPS * K.E; i += AS_CWARPS * 32)
                __stcg(K.racc + (size_t)par * ATTN_ROUTER_GROUPS * K.E + i, 0ull);
        if (l + 1 < K.L)
            sk_prefetch_layer(ly + 1, H, (K.base.n_heads + 2 * K.base.n_kv_heads) * AS_HD,
                              K.base.n_heads, K.E, tid);
        for (int v = tid; v < K.k * I / 8; v += AS_CWARPS * 32)
            ((uint4 *)acts)[v] = __ldcg((const uint4 *)K.act + v);
        consumers_sync();
        w.point(SKW_T_D_LOOP);
        for (;; q += AS_CWARPS) {
            const int n = nb + q, s = n % S;
            const unsigned ta = w.now();
            const unsigned mt = sk_meta_wait(s_meta, s, (unsigned)n);
            w.since(SKW_DOWN + SKW_META, ta);
            if (mt >> 30 != SK_DOWN) { /* the next layer's first stages, or the launch's end */
                if (mt >> 30 == SK_OTHER) nb = (int)(mt & 0x3fffffffu);
                break;
            }
            const sk_place p = sk_place::of(mt);
            float out[2], bb[2];
            unsigned tm;
            if (expert_chunk(w, SKW_DOWN, false, tm, n, p, ly->w2_s, ly->b2, RT2, KK2, nc2, g8,
                             8 + g8, smem_u32(acts) + 16 * t4, (uint32_t)I * 2, out, bb) &&
                t4 == 0) {
                float *yrow = K.y_slots + (size_t)p.i * H + p.rt * 16 + g8;
                yrow[0] = s_w[p.i] * (out[0] + bb[0]);
                yrow[8] = s_w[p.i] * (out[1] + bb[1]);
            }
            w.since(SKW_DOWN + SKW_MEET, tm);
            w.add(SKW_DOWN + SKW_CHUNKS, 1);
        }
        w.point(SKW_T_END);
        if (warp == 0) w.gtime(SKW_G_END);
        sk_block_stamp(K, l, 6);
        if (l + 1 < K.L)
            sk_barrier(P.a.bar, &bar_n);
        else /* the launch's end: the count back to 0 (the kernel's end is the last barrier) */
            grid_exit_counted(P.a.bar, bar_n);
        sk_stamp(K, l, 7);
    }
}

/* ---- host ---- */

static int g_on = -1;
int step_kernel_enabled(void) {
    return env_switch(&g_on, "GPTOSS_STEP_KERNEL", 0, 0, 1);
}
void step_kernel_set(int on) {
    env_switch_set(&g_on, on, 0, 1);
}

static unsigned long long *g_stamps;
void step_kernel_set_probe(unsigned long long *stamps) {
    g_stamps = stamps;
}

static unsigned *g_bstamps;
void step_kernel_set_block_probe(unsigned *stamps) {
    g_bstamps = stamps;
}

static unsigned *g_wprobe;
int step_kernel_set_wait_probe(unsigned *probe) {
    g_wprobe = probe;
    return GPTOSS_STEP_WAIT_PROBE;
}

static int g_moe_probe;
void step_kernel_set_moe_probe(int mode) {
    g_moe_probe = mode == 1 || mode == 2 ? mode : 0;
}

/* The layout for one token on this device, or 0 when the MoE's staged rows do not fit its room;
 * *kc: the k steps of an expert chunk — a tile's codes in as few chunks as stages of about a QKV
 * pair's size allow, evened out (120b: 45 steps as 23 + 22, stages of 11.75 KB for 11.25). */
static size_t sk_layout(const attn_dims *d, int H, int k, int I, as_layout *L, int *kc) {
    const int Q = d->n_heads * AS_HD, base = 4 * H > 2 * Q ? 4 * H : 2 * Q;
    const int kk = (H > I ? H : I) / 64;
    const int nc = (kk * SK_STEP_CODE_BYTES + base - 1) / base;
    *kc = (kk + nc - 1) / nc;
    if (nc > SK_MAX_CHUNKS || *kc > SK_MAX_KC) return 0;
    size_t xs = 0;
    const size_t smem =
        as_plan_layout(d, 1, H, per_device_sm_count(), *kc * SK_STEP_CODE_BYTES, L, &xs);
    const size_t ys_end = ((size_t)H * 4 + 127) / 128 * 128 + (size_t)H * 2;
    if (!smem || ys_end > xs || (size_t)k * I * 2 > xs) return 0;
    return smem;
}

extern "C" int step_kernel_supported(const attn_dims *d, const rope_kv_freq *f, int H, int E, int k,
                                     int I) {
    as_layout L;
    int kc;
    const int G = per_device_sm_count();
    /* every block has at least a QKV pair for each consumer warp: a warp that has done its last
     * down chunk waits for the stage that follows in its turn (to learn the next layer's first),
     * which must not be an O row (those wait for the next layer's phase 1) */
    const int pairs_all = (d->n_heads + 2 * d->n_kv_heads) * AS_HALF;
    return attn_stream_supported(d, f, 1, 1, H) && pairs_all / G >= AS_CWARPS && E >= 1 &&
           E <= 256 && k >= 1 && k <= SK_MAX_K && k <= E && H % 64 == 0 && I % 64 == 0 &&
           H / 8 <= 2 * AS_CWARPS * 32 && (k * (2 * I / 16) + G - 1) / G <= SK_MAX_TILES &&
           (k * (H / 16) + G - 1) / G <= SK_MAX_TILES && sk_layout(d, H, k, I, &L, &kc) > 0 &&
           /* the router by columns: a lane a row of h + o, the columns in one stage, the groups
            * and shares in xs's head before the MoE's row, an accumulator a consumer thread */
           G <= ATTN_ROUTER_MAX_G && (H + G - 1) / G <= SK_ROUTER_ROWS && E % 8 == 0 &&
           E <= AS_CWARPS * 32 && (size_t)((H + G - 1) / G) * E * 2 <= (size_t)L.stage_bytes &&
           64 * E + 4 * ATTN_ROUTER_MAX_G + 4 * E <= 4 * H;
}

static unsigned long long g_setup_done;

extern "C" cudaError_t step_kernel_launch(const attn_dims *d, const rope_kv_freq *f,
                                          const step_kernel_args *a, cudaStream_t stream) {
    if (!step_kernel_supported(d, f, a->H, a->E, a->k, a->I) || a->L < 1 || !a->layers ||
        !a->positions || !a->slots_full || !a->slots_swa || !a->x || !a->h || !a->scratch ||
        !a->y_slots || !a->act || !a->q || !a->attn || !a->o || !a->part || !a->bar ||
        !a->counters || !a->tickets || !a->router_acc || !a->ss_part ||
        a->part_bytes < attn_stream_workspace_bytes(d, 1) ||
        (((uintptr_t)a->x | (uintptr_t)a->x_lo | (uintptr_t)a->h | (uintptr_t)a->scratch |
          (uintptr_t)a->y_slots | (uintptr_t)a->act | (uintptr_t)a->q | (uintptr_t)a->attn |
          (uintptr_t)a->part) &
         15))
        return cudaErrorInvalidValue;
    as_layout L;
    int kc = 0;
    const size_t smem = sk_layout(d, a->H, a->k, a->I, &L, &kc);
    if (!smem) return cudaErrorInvalidValue;

    sk_params K;
    memset(&K, 0, sizeof K);
    attn_stream_args *s = &K.base.a;
    s->T = 1, s->H = a->H, s->positions = a->positions;
    s->seqs = a->seqs_full;
    s->x = a->x, s->x_lo = a->x_lo;
    s->nscratch = a->scratch, s->nslots = a->y_slots, s->n_slots = a->k, s->neps = a->eps;
    s->scale = a->scale;
    s->q = a->q, s->attn = a->attn, s->o = a->o;
    s->part = a->part, s->part_bytes = a->part_bytes, s->bar = a->bar, s->counters = a->counters;
    K.base.f = *f;
    K.base.n_heads = d->n_heads, K.base.n_kv_heads = d->n_kv_heads;
    K.base.bs_shift = attn_block_shift(d);
    K.base.stop_after = 0;
    K.layers = a->layers;
    K.h = a->h, K.y_slots = a->y_slots, K.act = a->act;
    K.slots_full = a->slots_full, K.slots_swa = a->slots_swa;
    K.seqs_full = a->seqs_full, K.seqs_swa = a->seqs_swa;
    K.L = a->L, K.E = a->E, K.k = a->k, K.I = a->I;
    K.alpha = a->alpha, K.limit = a->limit;
    K.stamps = g_stamps;
    K.bstamps = g_bstamps;
    K.wprobe = g_wprobe;
    K.kc = kc;
    K.tickets = a->tickets;
    K.moe_probe = g_moe_probe;
    K.racc = a->router_acc, K.ss_part = a->ss_part;

    const int sms = per_device_sm_count();
    /* Once per device: the shared-memory opt-in (what the card allows a block beside the
     * kernel's static shared memory: the partial sums, the tiles' biases) and that one block an
     * SM fits. */
    if (!per_device_done(&g_setup_done)) {
        const void *k = (const void *)step_kernel;
        cudaFuncAttributes fa;
        int dev = 0, optin = 0;
        CUDA_TRY(cudaFuncGetAttributes(&fa, k));
        CUDA_TRY(cudaGetDevice(&dev));
        CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        const int dyn = optin - (int)fa.sharedSizeBytes;
        if (dyn < (int)smem) return cudaErrorInvalidConfiguration;
        CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, dyn));
        int per = 0;
        CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, AS_THREADS, smem));
        if (per < 1) return cudaErrorInvalidConfiguration;
        per_device_mark(&g_setup_done);
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        cooperative_config((unsigned)sms, AS_THREADS, smem, stream, &attr, 1);
    CUDA_TRY(cudaLaunchKernelEx(&cfg, step_kernel, K, L));
    return cudaGetLastError();
}
