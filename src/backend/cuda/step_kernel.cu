/* Every layer of a one-token decode step as one persistent kernel (step_kernel.h says what and
 * why): the kernel and its host side.
 *
 * One block an SM: eight consumer warps and a producer warp whose lane 0 keeps the ring of
 * attn_stream's layout (attn_stream_phases.cuh) full. The producer walks, for every layer in
 * order, the block's QKV row pairs, its O rows and (blocks b < E) router row b; it waits only for a
 * free stage and, before a layer's first O row, for that layer's QKV barrier (o_go: attn_stream
 * says why). Stage n of the block (counted over the whole step) goes to consumer warp n % 8.
 *
 * The consumers, per layer (a grid barrier after each numbered phase):
 *   0. the layer's per-layer fields into the shared as_params; the attention norm (layers after
 *      the first: h + the previous layer's slots, attn_stream's as_norm_rows) or the first layer's
 *      input from norm_embed_split; the epilogues' preloads;
 *   1. QKV + RoPE + the KV write;                 (then block 0 writes h's new rows)
 *   2. attention with its split-K merge;
 *   3. O with its bias;
 *   4. the MLP norm (h + o, replayed in every block) into the router's fp32 input and the experts'
 *      bf16 input, and router row b (block b < E) into the logits; (then block 0 writes h + o)
 *   5. the routing in every block (topk_warp on the logits: no last-block chain), then gate_up:
 *      global warp j takes tiles j, j + 8G, … of the k touched experts (step_moe.cuh), SwiGLU into
 *      the activations;
 *   6. the activations staged, then down: (tile, K split) items the same way, weighted rows into
 *      the slots.
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
    float *h, *logits, *y_slots;
    uint16_t *act;
    const int32_t *slots_full, *slots_swa;
    attn_seqs seqs_full, seqs_swa;
    int L, E, k, I, S;
    float alpha, limit;
    unsigned long long *stamps; /* the probe (step_kernel_set_probe), or NULL */
    int o_early; /* GPTOSS_STEP_O_EARLY=1: O's rows do not wait for their layer's QKV barrier */
};

enum { SK_STAMPS = 8 }; /* a layer's probe stamps: its start, then the end of phases 0-6 */

/* The probe: block 0's %globaltimer (ns) as it reaches point i of layer l (the end of a phase is
 * after its grid barrier: when the slowest block is done). */
static __device__ __forceinline__ void sk_stamp(const sk_params &K, int l, int i) {
    if (K.stamps && blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned long long t;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
        K.stamps[l * SK_STAMPS + i] = t;
    }
}

static __device__ __forceinline__ void sk_barrier(unsigned *bar) {
    grid_barrier_with(bar, 0, [] { consumers_sync(); });
}

/* The first stage index ≥ lo of consumer warp w (stage n goes to warp n % AS_CWARPS). */
static __device__ __forceinline__ int sk_first(int lo, int w) {
    return lo + (w - lo % AS_CWARPS + AS_CWARPS) % AS_CWARPS;
}

/* Asks L2 for the lines of [p, p + bytes) that thread `tid` of `n` covers (128-byte lines). */
static __device__ __forceinline__ void sk_prefetch_l2(const void *p, size_t bytes, int tid, int n) {
    const char *c = (const char *)((uintptr_t)p & ~(uintptr_t)127);
    const char *end = (const char *)p + bytes;
    for (c += (size_t)tid * 128; c < end; c += (size_t)n * 128)
        asm volatile("prefetch.global.L2 [%0];" ::"l"(c));
}

/* Layer ly's small model arrays that its first phases read on their dependent chains (the norms'
 * gains, the biases the epilogues preload, the sinks, the router's bias): asked into L2 during
 * the layer before, by the consumers of every block, each block its share of the lines (they
 * leave L2 between steps: 5 GB of weights stream through it). */
static __device__ void sk_prefetch_layer(const step_layer *ly, int H, int QKV, int E, int tid) {
    const int n = AS_CWARPS * 32, b = blockIdx.x, G = gridDim.x;
    if (b == 0) sk_prefetch_l2(ly->attn_norm, (size_t)H * 2, tid, n);
    if (b == 1 % G) sk_prefetch_l2(ly->mlp_norm, (size_t)H * 2, tid, n);
    if (b == 2 % G && ly->qkv_b) sk_prefetch_l2(ly->qkv_b, (size_t)QKV * 2, tid, n);
    if (b == 3 % G && ly->o_b) sk_prefetch_l2(ly->o_b, (size_t)H * 2, tid, n);
    if (b == 4 % G) sk_prefetch_l2(ly->sinks, (size_t)QKV / 64 * 4, tid, n);
    if (b == 5 % G && ly->router_b) sk_prefetch_l2(ly->router_b, (size_t)E * 2, tid, n);
}

template <int U>
__global__ void __maxnreg__(224) step_kernel(const sk_params K, const as_layout L) {
    extern __shared__ __align__(128) unsigned char as_smem[];
    __shared__ as_params sP; /* the layer's: the base with its per-layer fields */
    __shared__ int s_e[SK_MAX_K];
    __shared__ float s_w[SK_MAX_K], s_red[32];
    unsigned char *ring = as_smem;
    float *xs = (float *)(as_smem + L.xs_off);
    const int S = L.stages;
    uint64_t *full = (uint64_t *)(as_smem + L.bar_off), *empty = full + S;
    uint64_t *o_go = full + 2 * AS_MAX_STAGES; /* a layer's phase 1 is done over the grid */
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, tid = threadIdx.x;
    const int H = K.base.a.H, Q = K.base.n_heads * AS_HD, G = gridDim.x, b = blockIdx.x;
    int p0, r0;
    const int n_pairs = asp_share(b, G, (K.base.n_heads + 2 * K.base.n_kv_heads) * AS_HALF, &p0);
    const int n_rows = asp_share(b, G, H, &r0);
    const int n_router = b < K.E ? 1 : 0;
    const int C = n_pairs + n_rows + n_router; /* the block's stages a layer */
    const int qkv_row_bytes = H * 2, o_row_bytes = Q * 2;
    if (tid == 0) {
        for (int s = 0; s < S; s++) mbar_init(&full[s], 1), mbar_init(&empty[s], 1);
        mbar_init(o_go, 1);
        mbar_init_fence();
    }
    for (int i = tid; i < (int)(sizeof(as_params) / 4); i += AS_THREADS)
        ((int *)&sP)[i] = ((const int *)&K.base)[i];
    __syncthreads();

    if (warp == AS_CWARPS) { /* the producer */
        if (lane != 0) return;
        const uint64_t once = l2_policy_evict_first();
        int n = 0;
        for (int l = 0; l < K.L; l++) {
            const step_layer *ly = K.layers + l;
            const uint16_t *qkv_w = ly->qkv_w, *o_w = ly->o_w, *rw = ly->router_w;
            for (int q = 0; q < C; q++, n++) {
                if (q == n_pairs && !K.o_early) mbar_wait_or_trap(o_go, l & 1);
                const int s = n % S;
                if (n >= S) mbar_wait_or_trap(&empty[s], (n / S - 1) & 1);
                unsigned char *dst = ring + (size_t)s * L.stage_bytes;
                if (q < n_pairs) {
                    const int p = p0 + q, hh = p / AS_HALF, i = p % AS_HALF;
                    const uint16_t *w1 = qkv_w + (size_t)(hh * AS_HD + i) * H;
                    mbar_arrive_expect_tx(&full[s], (uint32_t)(2 * qkv_row_bytes));
                    bulk_copy_g2s_hint(dst, w1, (uint32_t)qkv_row_bytes, &full[s], once);
                    bulk_copy_g2s_hint(dst + qkv_row_bytes, w1 + (size_t)AS_HALF * H,
                                       (uint32_t)qkv_row_bytes, &full[s], once);
                } else if (q < n_pairs + n_rows) {
                    mbar_arrive_expect_tx(&full[s], (uint32_t)o_row_bytes);
                    bulk_copy_g2s_hint(dst, o_w + (size_t)(r0 + q - n_pairs) * Q,
                                       (uint32_t)o_row_bytes, &full[s], once);
                } else {
                    mbar_arrive_expect_tx(&full[s], (uint32_t)qkv_row_bytes);
                    bulk_copy_g2s_hint(dst, rw + (size_t)b * H, (uint32_t)qkv_row_bytes, &full[s],
                                       once);
                }
            }
        }
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
    const int NW = G * AS_CWARPS, gw = warp * G + b, t4 = lane & 3, g8 = lane >> 2;
    const int I = K.I, RT1 = 2 * I / 16, KK1 = H / 64, RT2 = H / 16, KK2 = I / 64;

    for (int l = 0; l < K.L; l++) {
        const step_layer *ly = K.layers + l;
        const int nb = l * C;
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
        as_item_prefetch(P, L, item, as_smem);
        sk_barrier(P.a.bar);
        sk_stamp(K, l, 2);
        if (tid == 0) mbar_arrive(o_go);
        if (P.a.nh && b == 0) /* every block has read h: its new row (written by this block) */
            for (int i = tid; i < H / 4; i += AS_CWARPS * 32)
                ((float4 *)K.h)[i] = ((const float4 *)P.a.nscratch)[i];

        /* 2: attention */
        as_attention(P, L, item, as_smem);
        sk_barrier(P.a.bar);
        sk_stamp(K, l, 3);

        /* 3: O */
        as_stage_rows(P.a.attn, 1, Q, xs);
        consumers_sync();
        for (int q = sk_first(nb + n_pairs, warp) - nb; q < n_pairs + n_rows; q += AS_CWARPS) {
            const int n = nb + q, s = n % S;
            mbar_wait_or_trap(&full[s], (n / S) & 1);
            float acc[1][1];
            as_rows_dot<1, 1>(ring + (size_t)s * L.stage_bytes, o_row_bytes, Q / 8, xs, acc);
            __syncwarp();
            if (lane == 0) {
                mbar_arrive(&empty[s]);
                P.a.o[r0 + q - n_pairs] = f32_to_bf16_bits(acc[0][0] + pre.o_bias[q - n_pairs]);
            }
        }
        sk_barrier(P.a.bar);
        sk_stamp(K, l, 4);

        /* 4: the MLP norm (h + o, norm_add_kernel's row in every block), the router's row */
        {
            const int Cg = H / 8;
            const uint4 gain0 = gain_at(ly->mlp_norm, tid, tid < Cg),
                        gain1 =
                            gain_at(ly->mlp_norm, tid + AS_CWARPS * 32, tid + AS_CWARPS * 32 < Cg);
            float v[2][8];
            const float ss = norm_replay_row_with<2, true>(
                AS_CWARPS * 32, [] { consumers_sync(); }, K.h, NULL, 0, P.a.o, H, v, s_red);
            const float inv = rms_inv(ss, H, P.a.neps);
#pragma unroll
            for (int r = 0; r < 2; r++) {
                const int c = tid + r * AS_CWARPS * 32;
                if (c >= Cg) continue;
                uint4 hi, lo;
                norm_split8(v[r], inv, r ? gain1 : gain0, hi, lo);
                store_split8_f32(hi, lo, xs + 8 * c);
                *(uint4 *)(ys + 8 * c) = hi;
                if (b == 0) store8_f32(v[r], P.a.nscratch + 8 * c);
            }
        }
        consumers_sync();
        if (n_router) {
            const int n = nb + n_pairs + n_rows, s = n % S;
            if (warp == n % AS_CWARPS) {
                mbar_wait_or_trap(&full[s], (n / S) & 1);
                float acc[1][1];
                as_rows_dot<1, 1>(ring + (size_t)s * L.stage_bytes, qkv_row_bytes, H / 8, xs, acc);
                __syncwarp();
                if (lane == 0) {
                    mbar_arrive(&empty[s]);
                    __stcg(K.logits + b, acc[0][0]);
                }
            }
        }
        sk_barrier(P.a.bar);
        sk_stamp(K, l, 5);
        if (b == 0) /* every block has read h: h + o */
            for (int i = tid; i < H / 4; i += AS_CWARPS * 32)
                ((float4 *)K.h)[i] = ((const float4 *)P.a.nscratch)[i];

        /* 5: the routing, then gate_up with SwiGLU */
        if (warp == 0) topk_warp<true>(K.logits, NULL, ly->router_b, K.E, K.k, lane, s_e, s_w);
        consumers_sync();
        {
            const uint8_t *wq = ly->w1_q, *ws = ly->w1_s;
            const uint16_t *b1 = ly->b1;
            const bool folded = ly->w1_folded != 0;
            const uint32_t xa = smem_u32(ys) + 16 * t4;
            for (int j = gw; j < K.k * RT1; j += NW) {
                const int i = j / RT1, rt = j - i * RT1, e = s_e[i], o = rt * 8 + g8;
                const float bg = bf16_bits_to_f32(b1[(size_t)e * 2 * I + 2 * o]);
                const float bu = bf16_bits_to_f32(b1[(size_t)e * 2 * I + 2 * o + 1]);
                const uint4 *qp;
                const uint32_t *sp;
                step_tile_at(wq, ws, e, rt, RT1, 0, KK1, &qp, &sp);
                float acc[4];
                if (folded)
                    step_tile<U, true>(qp, sp, KK1, xa, acc);
                else
                    step_tile<U, false>(qp, sp, KK1, xa, acc);
                if (t4 == 0)
                    K.act[(size_t)i * I + o] =
                        f32_to_bf16_bits(swiglu(acc[0] + bg, acc[2] + bu, K.alpha, K.limit));
            }
        }
        sk_barrier(P.a.bar);
        sk_stamp(K, l, 6);

        /* 6: down, weighted into the slots */
        if (l + 1 < K.L)
            sk_prefetch_layer(ly + 1, H, (K.base.n_heads + 2 * K.base.n_kv_heads) * AS_HD, K.E,
                              tid);
        for (int v = tid; v < K.k * I / 8; v += AS_CWARPS * 32)
            ((uint4 *)acts)[v] = __ldcg((const uint4 *)K.act + v);
        consumers_sync();
        {
            const uint8_t *wq = ly->w2_q, *ws = ly->w2_s;
            const uint16_t *b2 = ly->b2;
            const bool folded = ly->w2_folded != 0;
            const int per = RT2 * K.S;
            for (int j = gw; j < K.k * per; j += NW) {
                const int i = j / per, rem = j - i * per, rt = rem / K.S, s = rem - rt * K.S;
                const int kk0 = s * KK2 / K.S, nk = (s + 1) * KK2 / K.S - kk0;
                const int e = s_e[i], row = rt * 16 + g8;
                const float wgt = s_w[i];
                const float ba = s == 0 ? bf16_bits_to_f32(b2[(size_t)e * H + row]) : 0.0f;
                const float bb = s == 0 ? bf16_bits_to_f32(b2[(size_t)e * H + row + 8]) : 0.0f;
                const uint4 *qp;
                const uint32_t *sp;
                step_tile_at(wq, ws, e, rt, RT2, kk0, KK2, &qp, &sp);
                const uint32_t xa =
                    smem_u32(acts + (size_t)i * I) + (uint32_t)(kk0 * 128 + 16 * t4);
                float acc[4];
                if (folded)
                    step_tile<U, true>(qp, sp, nk, xa, acc);
                else
                    step_tile<U, false>(qp, sp, nk, xa, acc);
                if (t4 == 0) {
                    float *yrow = K.y_slots + (size_t)(i * K.S + s) * H;
                    yrow[row] = wgt * (acc[0] + ba);
                    yrow[row + 8] = wgt * (acc[2] + bb);
                }
            }
        }
        sk_barrier(P.a.bar);
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

/* GPTOSS_STEP_MOE_U: k steps a register batch of the expert tiles (6, the small kernel's, by
 * default; 9 or 12: more bytes in flight a warp). */
static int g_moe_u = -1;
static int sk_moe_u(void) {
    const int u = env_switch(&g_moe_u, "GPTOSS_STEP_MOE_U", 6, 6, 12);
    return u >= 12 ? 12 : u >= 9 ? 9 : 6;
}

typedef void (*sk_kernel)(sk_params, as_layout);
static sk_kernel sk_kernel_for(int u) {
    return u == 12 ? step_kernel<12> : u == 9 ? step_kernel<9> : step_kernel<6>;
}

/* GPTOSS_STEP_O_EARLY=1 (a measurement): O's rows stream as soon as stages free, not after their
 * layer's QKV barrier (attn_stream's rule, sessions 22-23, measured there for one layer). */
static int g_o_early = -1;

static unsigned long long *g_stamps;
void step_kernel_set_probe(unsigned long long *stamps) {
    g_stamps = stamps;
}

/* The layout for one token on this device, or 0 when the MoE's staged rows do not fit its room. */
static size_t sk_layout(const attn_dims *d, int H, int k, int I, as_layout *L) {
    size_t xs = 0;
    const size_t smem = as_plan_layout(d, 1, H, per_device_sm_count(), L, &xs);
    const size_t ys_end = ((size_t)H * 4 + 127) / 128 * 128 + (size_t)H * 2;
    if (!smem || ys_end > xs || (size_t)k * I * 2 > xs) return 0;
    return smem;
}

extern "C" int step_kernel_supported(const attn_dims *d, const rope_kv_freq *f, int H, int E, int k,
                                     int I) {
    as_layout L;
    return attn_stream_supported(d, f, 1, 1, H) && E >= 1 && E <= per_device_sm_count() &&
           E <= 256 && k >= 1 && k <= SK_MAX_K && k <= E && H % 64 == 0 && I % 64 == 0 &&
           H / 8 <= 2 * AS_CWARPS * 32 && sk_layout(d, H, k, I, &L) > 0;
}

static unsigned long long g_setup_done;

extern "C" cudaError_t step_kernel_launch(const attn_dims *d, const rope_kv_freq *f,
                                          const step_kernel_args *a, cudaStream_t stream) {
    if (!step_kernel_supported(d, f, a->H, a->E, a->k, a->I) || a->L < 1 || !a->layers ||
        a->S < 1 || a->S > a->I / 64 || !a->positions || !a->slots_full || !a->slots_swa || !a->x ||
        !a->h || !a->scratch || !a->y_slots || !a->logits || !a->act || !a->q || !a->attn ||
        !a->o || !a->part || !a->bar || !a->counters ||
        a->part_bytes < attn_stream_workspace_bytes(d, 1) ||
        (((uintptr_t)a->x | (uintptr_t)a->x_lo | (uintptr_t)a->h | (uintptr_t)a->scratch |
          (uintptr_t)a->y_slots | (uintptr_t)a->act | (uintptr_t)a->q | (uintptr_t)a->attn |
          (uintptr_t)a->part) &
         15))
        return cudaErrorInvalidValue;
    as_layout L;
    const size_t smem = sk_layout(d, a->H, a->k, a->I, &L);
    if (!smem) return cudaErrorInvalidValue;

    sk_params K;
    memset(&K, 0, sizeof K);
    attn_stream_args *s = &K.base.a;
    s->T = 1, s->H = a->H, s->positions = a->positions;
    s->seqs = a->seqs_full;
    s->x = a->x, s->x_lo = a->x_lo;
    s->nscratch = a->scratch, s->nslots = a->y_slots, s->n_slots = a->k * a->S, s->neps = a->eps;
    s->scale = a->scale;
    s->q = a->q, s->attn = a->attn, s->o = a->o;
    s->part = a->part, s->part_bytes = a->part_bytes, s->bar = a->bar, s->counters = a->counters;
    K.base.f = *f;
    K.base.n_heads = d->n_heads, K.base.n_kv_heads = d->n_kv_heads;
    K.base.bs_shift = attn_block_shift(d);
    K.base.stop_after = 0;
    K.layers = a->layers;
    K.h = a->h, K.logits = a->logits, K.y_slots = a->y_slots, K.act = a->act;
    K.slots_full = a->slots_full, K.slots_swa = a->slots_swa;
    K.seqs_full = a->seqs_full, K.seqs_swa = a->seqs_swa;
    K.L = a->L, K.E = a->E, K.k = a->k, K.I = a->I, K.S = a->S;
    K.alpha = a->alpha, K.limit = a->limit;
    K.stamps = g_stamps;
    K.o_early = env_switch(&g_o_early, "GPTOSS_STEP_O_EARLY", 0, 0, 1);

    const int sms = per_device_sm_count();
    if (!per_device_done(&g_setup_done)) {
        for (int u : {6, 9, 12}) {
            const void *k = (const void *)sk_kernel_for(u);
            CUDA_TRY(
                cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, AS_MAX_SMEM));
            int per = 0;
            CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, AS_THREADS, smem));
            if (per < 1) return cudaErrorInvalidConfiguration;
        }
        per_device_mark(&g_setup_done);
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        cooperative_config((unsigned)sms, AS_THREADS, smem, stream, &attr, 1);
    CUDA_TRY(cudaLaunchKernelEx(&cfg, sk_kernel_for(sk_moe_u()), K, L));
    return cudaGetLastError();
}
