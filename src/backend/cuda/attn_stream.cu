/* The attention block of a decode step of 1-4 tokens as one persistent kernel (attn_stream.h):
 * one block an SM, eight consumer warps and one producer warp running the phases of
 * attn_stream_phases.cuh (which says how each works), and the host side: the switch, the plan,
 * the cooperative launch. */
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/attn_stream_kernel.cuh"
#include "backend/cuda/attn_stream_route.h"
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

static int g_route = -1;
int attn_stream_route_on(void) {
    return env_switch(&g_route, "GPTOSS_ATTN_ROUTE", 0, 0, 1);
}
void attn_stream_route_set(int on) {
    env_switch_set(&g_route, on, 0, 1);
}

extern "C" int attn_stream_route_supported(const moe_routing *rr, int T) {
    return rr && T == 1 && rr->T == T && rr->E >= 1 && rr->E <= ROUTE_SMALL_MIN_THREADS &&
           rr->k >= 1 && rr->k <= 8 && rr->k <= rr->E && T * rr->k <= ROUTE_SMALL_MAX_PAIRS &&
           rr->e0 >= 0 && rr->n_e >= 1 && rr->e0 + rr->n_e <= rr->E;
}

extern "C" size_t attn_stream_route_workspace_bytes(int E) {
    return (size_t)per_device_sm_count() * (E + 1) * sizeof(float);
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

extern "C" size_t attn_stream_workspace_bytes(const attn_dims *d, int T) {
    const int sl = slots_for(d, T, per_device_sm_count());
    return (size_t)T * d->n_heads * (sl > 0 ? sl : 1) * (AS_HD + 2) * sizeof(float);
}

static unsigned long long g_setup_done;

static as_kernel kernel_for(int T, bool route) {
    static_assert(ATTN_STREAM_MAX_T == 4, "one instantiation a token count");
    if (route) return T == 1 ? attn_stream_route_kernel() : NULL;
    return T == 1   ? attn_stream_kernel<1>
           : T == 2 ? attn_stream_kernel<2>
           : T == 3 ? attn_stream_kernel<3>
                    : attn_stream_kernel<4>;
}

extern "C" cudaError_t attn_stream_layer_route(const attn_dims *d, const rope_kv_freq *f,
                                               const attn_stream_args *a,
                                               const attn_stream_route *route_arg,
                                               cudaStream_t stream) {
    const bool norm = a->nh != NULL;
    if (norm && (!a->nscratch || !a->ngain || (a->nslots && a->n_slots < 1) ||
                 a->H / 8 > 2 * AS_CWARPS * 32 || ((uintptr_t)a->nh & 15) ||
                 ((uintptr_t)a->nscratch & 15) || ((uintptr_t)a->nslots & 15) ||
                 ((uintptr_t)a->ngain & 15)))
        return cudaErrorInvalidValue;
    const bool route = route_arg != NULL;
    attn_stream_route R;
    memset(&R, 0, sizeof R);
    if (route) {
        R = *route_arg;
        if (!attn_stream_route_supported(&R.rr, a->T) || !R.h || !R.gain || !R.w || !R.y ||
            !R.logits || !R.counter || (norm && R.h != a->nh) || ((uintptr_t)R.h & 15) ||
            ((uintptr_t)R.y & 15) || ((uintptr_t)R.gain & 15) ||
            a->part_bytes < attn_stream_route_workspace_bytes(R.rr.E))
            return cudaErrorInvalidValue;
    }
    if (!attn_stream_supported(d, f, a->T, a->seqs.n_seqs, a->H) || (!norm && !a->x) || !a->qkv_w ||
        !a->o_w || !a->sinks || !a->q || !a->attn || !a->o || !a->bar || !a->counters ||
        ((uintptr_t)a->x & 15) || ((uintptr_t)a->x_lo & 15) || ((uintptr_t)a->qkv_w & 15) ||
        ((uintptr_t)a->o_w & 15) || ((uintptr_t)a->q & 15) || ((uintptr_t)a->attn & 15) ||
        ((uintptr_t)a->part & 15))
        return cudaErrorInvalidValue;
    const int sms = per_device_sm_count();
    as_layout L;
    L.slots = slots_for(d, a->T, sms);
    if (L.slots < 1 || a->part_bytes < attn_stream_workspace_bytes(d, a->T) || !a->part)
        return cudaErrorInvalidValue;
    const int Q = d->n_heads * AS_HD;
    int stage = 4 * a->H > 2 * Q ? 4 * a->H : 2 * Q;
    L.stage_bytes = (stage + 127) / 128 * 128;
    /* the staged token rows (phase 1: x, phase 3: the attention output) and phase 2's two chunk
     * buffers: B over x's rows, A past them (asked for while phase 1 reads x) */
    const size_t x_rows = ((size_t)a->T * a->H * 4 + 127) / 128 * 128;
    size_t xs = (size_t)a->T * Q * 4;
    if (xs < x_rows + AS_KV_BUF) xs = x_rows + AS_KV_BUF;
    if (xs < (size_t)AS_KV_BUF + AS_KV_BUF) xs = 2 * AS_KV_BUF;
    xs = (xs + 127) / 128 * 128;
    /* the preloaded values: per pair its biases and T (cos, sin), per O row its bias */
    const int pairs_all = (d->n_heads + 2 * d->n_kv_heads) * AS_HALF;
    L.max_pairs = (pairs_all + sms - 1) / sms;
    size_t pre = ((size_t)L.max_pairs * (2 + 2 * a->T) + (size_t)(a->H + sms - 1) / sms) * 4;
    if (route) pre = (pre + 15) / 16 * 16 + as_route_bytes((a->H + sms - 1) / sms, R.rr.E);
    /* as many stages as fit beside the staged rows, the barriers and those, in whole multiples of
     * the consumer warps (16 up to two tokens, 8 at three and four): stage q goes to warp q % 8,
     * so every use of a stage is then one warp's, in order. With 14 stages a warp could wait for a
     * stage's second fill before its first had landed; that wait's parity names the phase before,
     * which counts as complete, and the warp would read a stage still being filled (session 6's
     * ring flaw, found again in session 23 by reading; the tests had passed by timing). */
    const size_t bars = (2 * AS_MAX_STAGES + 2) * sizeof(uint64_t), rest = xs + bars + pre;
    L.stages = rest < AS_MAX_SMEM ? (int)((AS_MAX_SMEM - rest) / L.stage_bytes) : 0;
    if (L.stages > AS_MAX_STAGES) L.stages = AS_MAX_STAGES;
    L.stages -= L.stages % AS_CWARPS;
    if (L.stages < AS_CWARPS) return cudaErrorInvalidValue;
    L.xs_off = L.stages * L.stage_bytes;
    L.kv_a_off = L.xs_off + (int)(x_rows > (size_t)AS_KV_BUF ? x_rows : (size_t)AS_KV_BUF);
    L.bar_off = L.xs_off + (int)xs;
    L.pre_off = L.bar_off + (int)bars;
    /* the routing's area past the preloaded values (16-byte aligned: pre_off is, bars being) */
    L.route_off =
        L.pre_off +
        (int)((((size_t)L.max_pairs * (2 + 2 * a->T) + (size_t)(a->H + sms - 1) / sms) * 4 + 15) /
              16 * 16);
    const size_t smem = (size_t)L.pre_off + pre;

    as_params P;
    P.a = *a, P.f = *f;
    P.n_heads = d->n_heads, P.n_kv_heads = d->n_kv_heads, P.bs_shift = attn_block_shift(d);
    P.stop_after = g_stop_after;
    as_kernel kern = kernel_for(a->T, route);
    /* Once per device: the shared-memory opt-in, and that one block an SM fits (the cooperative
     * launch would refuse the grid otherwise; the layout is the same for every step of a model). */
    if (!per_device_done(&g_setup_done)) {
        for (int t = 1; t <= ATTN_STREAM_MAX_T; t++)
            for (int r = 0; r <= (t == 1); r++) {
                const void *k = (const void *)kernel_for(t, r);
                CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              AS_MAX_SMEM));
                int per = 0;
                CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, k, AS_THREADS, smem));
                if (per < 1) return cudaErrorInvalidConfiguration;
            }
        per_device_mark(&g_setup_done);
    }
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        cooperative_config((unsigned)sms, AS_THREADS, smem, stream, &attr, 1);
    CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, P, L, R));
    return cudaGetLastError();
}

extern "C" cudaError_t attn_stream_layer(const attn_dims *d, const rope_kv_freq *f,
                                         const attn_stream_args *a, cudaStream_t stream) {
    return attn_stream_layer_route(d, f, a, NULL, stream);
}
