/* The attention block of a decode step of 1-4 tokens as one persistent kernel (attn_stream.h):
 * one block an SM, eight consumer warps and one producer warp running the phases of
 * attn_stream_phases.cuh (which says how each works), and the host side: the switch, the plan,
 * the cooperative launch. */
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/attn_stream_kernel.cuh"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/per_device.h"
#include "base/env_switch.h"

#include <math.h>
#include <string.h>

/* ---- host ---- */

enum { AS_AUTO = 3 }; /* the switch unset: the measured default per token count */
static int g_on = -1;
int attn_stream_mode(int T) {
    const int m = env_switch(&g_on, "GPTOSS_ATTN_STREAM", AS_AUTO, 0, AS_AUTO);
    return m == AS_AUTO ? (T == 1 ? 2 : 0) : m;
}
void attn_stream_set(int on) {
    env_switch_set(&g_on, on, 0, AS_AUTO);
}

static int g_stop_after;
void attn_stream_set_probe(int stop_after) {
    g_stop_after = stop_after >= 1 && stop_after <= 5 ? stop_after : 0;
}

extern "C" int attn_stream_supported(const attn_dims *d, const rope_kv_freq *f, int T, int n_seqs,
                                     int H) {
    return T >= 1 && T <= ATTN_STREAM_MAX_T && n_seqs == T && d->head_dim == AS_HD &&
           d->n_kv_heads >= 1 && d->n_kv_heads <= ATTN_STREAM_MAX_KV_HEADS &&
           d->n_heads == AS_GQA * d->n_kv_heads && !d->kv_fp8 && attn_block_shift(d) >= 3 &&
           f->half == AS_HALF && H >= 8 && H % 8 == 0 && H <= ATTN_STREAM_MAX_H &&
           d->n_heads * AS_HD <= ATTN_STREAM_MAX_H;
}

static int slots_for(const attn_dims *d, int T, int sms) {
    return sms / (T * d->n_kv_heads);
}

/* The router by columns' shapes: a lane a row of the block's (at most 32), the rows' columns in
 * one stage, a consumer thread an expert, the shares' room (E a multiple of 8: a row's columns
 * are 16-byte multiples for the bulk copy). */
static bool attn_stream_router_fits(int H, int E, int sms, int stage_bytes) {
    const int rows = (H + sms - 1) / sms;
    return E >= 8 && E % 8 == 0 && E <= 256 && E <= AS_CWARPS * 32 &&
           rows <= ATTN_ROUTER_MAX_ROWS && (size_t)rows * E * 2 <= (size_t)stage_bytes &&
           sms <= ATTN_ROUTER_MAX_G;
}

extern "C" int attn_stream_router_supported(const attn_dims *d, int H, int E) {
    const int sms = per_device_sm_count();
    as_layout L;
    size_t xs_bytes;
    return as_plan_layout(d, 1, H, sms, 0, &L, &xs_bytes) > 0 &&
           attn_stream_router_fits(H, E, sms, L.stage_bytes);
}

extern "C" size_t attn_stream_workspace_bytes(const attn_dims *d, int T) {
    const int sl = slots_for(d, T, per_device_sm_count());
    return (size_t)T * d->n_heads * (sl > 0 ? sl : 1) * (AS_HD + 2) * sizeof(float);
}

static unsigned long long g_setup_done;

static as_kernel kernel_for(int T, bool router = false) {
    static_assert(ATTN_STREAM_MAX_T == 4, "one instantiation a token count");
    return T == 1 && router ? attn_stream_routed_kernel()
           : T == 1         ? attn_stream_kernel<1>
           : T == 2         ? attn_stream_kernel<2>
           : T == 3         ? attn_stream_kernel<3>
                            : attn_stream_kernel<4>;
}

/* The shared-memory layout for T tokens of hidden size H on sms SMs, and the bytes it takes; 0 when
 * there are no split slots or fewer stages than consumer warps fit. min_stage: the least stage
 * size (0: a QKV pair's or an O row's; the step kernel's expert chunks may need more). xs_bytes:
 * the staged rows' room (at xs_off). */
size_t as_plan_layout(const attn_dims *d, int T, int H, int sms, int min_stage, as_layout *L,
                      size_t *xs_bytes) {
    L->slots = slots_for(d, T, sms);
    if (L->slots < 1) return 0;
    const int Q = d->n_heads * AS_HD;
    int stage = 4 * H > 2 * Q ? 4 * H : 2 * Q;
    if (stage < min_stage) stage = min_stage;
    L->stage_bytes = (stage + 127) / 128 * 128;
    /* the staged token rows (phase 1: x, phase 3: the attention output) and phase 2's two chunk
     * buffers: B over x's rows, A past them (asked for while phase 1 reads x) */
    const size_t x_rows = ((size_t)T * H * 4 + 127) / 128 * 128;
    size_t xs = (size_t)T * Q * 4;
    if (xs < x_rows + AS_KV_BUF) xs = x_rows + AS_KV_BUF;
    if (xs < (size_t)AS_KV_BUF + AS_KV_BUF) xs = 2 * AS_KV_BUF;
    xs = (xs + 127) / 128 * 128;
    /* the preloaded values: per pair its biases and T (cos, sin), per O row its bias */
    const int pairs_all = (d->n_heads + 2 * d->n_kv_heads) * AS_HALF;
    L->max_pairs = (pairs_all + sms - 1) / sms;
    const size_t pre = ((size_t)L->max_pairs * (2 + 2 * T) + (size_t)(H + sms - 1) / sms) * 4;
    /* as many stages as fit beside the staged rows, the barriers and those, in whole multiples of
     * the consumer warps (16 up to two tokens, 8 at three and four): stage q goes to warp q % 8,
     * so every use of a stage is then one warp's, in order. With 14 stages a warp could wait for a
     * stage's second fill before its first had landed; that wait's parity names the phase before,
     * which counts as complete, and the warp would read a stage still being filled (session 6's
     * ring flaw, found again in session 23 by reading; the tests had passed by timing). */
    const size_t bars = (2 * AS_MAX_STAGES + 2) * sizeof(uint64_t), rest = xs + bars + pre;
    L->stages = rest < AS_MAX_SMEM ? (int)((AS_MAX_SMEM - rest) / L->stage_bytes) : 0;
    if (L->stages > AS_MAX_STAGES) L->stages = AS_MAX_STAGES;
    L->stages -= L->stages % AS_CWARPS;
    if (L->stages < AS_CWARPS) return 0;
    L->xs_off = L->stages * L->stage_bytes;
    L->kv_a_off = L->xs_off + (int)(x_rows > (size_t)AS_KV_BUF ? x_rows : (size_t)AS_KV_BUF);
    L->bar_off = L->xs_off + (int)xs;
    L->pre_off = L->bar_off + (int)bars;
    *xs_bytes = xs;
    return (size_t)L->pre_off + pre;
}

static cudaError_t stream_layer(const attn_dims *d, const rope_kv_freq *f,
                                const attn_stream_args *a, const attn_stream_router *r,
                                cudaStream_t stream) {
    const bool norm = a->nh != NULL;
    if (norm && (!a->nscratch || !a->ngain || (a->nslots && a->n_slots < 1) ||
                 a->H / 8 > 2 * AS_CWARPS * 32 || ((uintptr_t)a->nh & 15) ||
                 ((uintptr_t)a->nscratch & 15) || ((uintptr_t)a->nslots & 15) ||
                 ((uintptr_t)a->ngain & 15)))
        return cudaErrorInvalidValue;
    if (!attn_stream_supported(d, f, a->T, a->seqs.n_seqs, a->H) || (!norm && !a->x) || !a->qkv_w ||
        !a->o_w || !a->sinks || !a->q || !a->attn || !a->o || !a->bar || !a->counters ||
        ((uintptr_t)a->x & 15) || ((uintptr_t)a->x_lo & 15) || ((uintptr_t)a->qkv_w & 15) ||
        ((uintptr_t)a->o_w & 15) || ((uintptr_t)a->q & 15) || ((uintptr_t)a->attn & 15) ||
        ((uintptr_t)a->part & 15))
        return cudaErrorInvalidValue;
    const int sms = per_device_sm_count();
    as_layout L;
    size_t xs_bytes;
    const size_t smem = as_plan_layout(d, a->T, a->H, sms, 0, &L, &xs_bytes);
    if (!smem || a->part_bytes < attn_stream_workspace_bytes(d, a->T) || !a->part)
        return cudaErrorInvalidValue;
    if (r && (!r->wt || a->T != 1 || !attn_stream_router_fits(a->H, r->E, sms, L.stage_bytes) ||
              !r->gain || !r->h || !r->acc || !r->ss_part || ((uintptr_t)r->wt & 15)))
        return cudaErrorInvalidValue;

    as_params P;
    P.a = *a, P.f = *f;
    P.n_heads = d->n_heads, P.n_kv_heads = d->n_kv_heads, P.bs_shift = attn_block_shift(d);
    P.stop_after = g_stop_after;
    as_kernel kern = kernel_for(a->T, r != NULL);
    /* Once per device: the shared-memory opt-in, and that one block an SM fits (the cooperative
     * launch would refuse the grid otherwise; the layout is the same for every step of a model). */
    if (!per_device_done(&g_setup_done)) {
        /* t = 0: one token with the router */
        for (int t = 0; t <= ATTN_STREAM_MAX_T; t++) {
            const void *k =
                t == 0 ? (const void *)kernel_for(1, true) : (const void *)kernel_for(t);
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
    attn_stream_router R;
    memset(&R, 0, sizeof R);
    if (r) R = *r;
    CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, P, L, R));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_stream_layer(const attn_dims *d, const rope_kv_freq *f,
                                         const attn_stream_args *a, cudaStream_t stream) {
    return stream_layer(d, f, a, NULL, stream);
}

extern "C" cudaError_t attn_stream_layer_routed(const attn_dims *d, const rope_kv_freq *f,
                                                const attn_stream_args *a,
                                                const attn_stream_router *r, cudaStream_t stream) {
    return r ? stream_layer(d, f, a, r, stream) : cudaErrorInvalidValue;
}
