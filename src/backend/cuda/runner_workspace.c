/* The activation workspace of the step runner: one device allocation, carved into the arrays of
 * gpu_workspace (runner.h), sized for T_cap tokens and R_cap logits rows. It is allocated for
 * T_reserve tokens at init and grows (doubling) when a longer step comes; growing frees the old
 * allocation, so the captured CUDA graphs, which hold its addresses, are dropped first.
 *
 * The MoE plan lives here because y_slots is sized from it: every step must plan its MoE with
 * runner_moe_plan, the same function the size came from. */
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/runner_internal.h"
#include "base/log.h"

#include <string.h>

/* The split-K partials of attn_decode: a fixed 64 MiB (runner.c caps the split count to fit). */
enum { DEC_WS_BYTES = 64 << 20, WS_ALIGN = 256 };
/* attn_stream's merge counters: one per (sequence, KV head) of its largest step. */
enum { STREAM_CTRS = ATTN_STREAM_MAX_T * ATTN_STREAM_MAX_KV_HEADS };

moe_plan runner_moe_plan(const struct backend *b, int T) {
    moe_plan p = moe_plan_for(T, b->E, b->K, b->sm_count);
    const int ksteps = b->I / 64;
    if (p.down_splits > ksteps) p.down_splits = ksteps;
    if (p.down_splits < 1) p.down_splits = 1;
    return p;
}

int runner_moe_slots(const struct backend *b, const moe_plan *p) {
    return b->K * (p->large ? 1 : p->down_splits);
}

/* Reserves bytes (at least 1) at offset *o, aligned to WS_ALIGN; returns where they start. */
static size_t carve(size_t *o, size_t bytes) {
    size_t at = *o;
    *o += ((bytes ? bytes : 1) + WS_ALIGN - 1) / WS_ALIGN * WS_ALIGN;
    return at;
}

/* y_slots of the largest step up to T tokens (the plan's K splits shrink as T grows). */
static size_t y_slots_bytes_max(const struct backend *b, int T) {
    size_t best = 0;
    for (int t = 1; t <= T; t++) {
        moe_plan p = runner_moe_plan(b, t);
        size_t v = moe_y_slots_bytes(t, b->K, b->H, &p);
        if (v > best) best = v;
    }
    return best;
}

int workspace_ensure(struct backend *b, int T) {
    gpu_workspace *w = &b->ws;
    if (w->base && T <= w->T_cap) return 0;
    int cap = T;
    if (w->base) {
        cap = T > 2 * w->T_cap ? T : 2 * w->T_cap;
        log_info("cuda backend: a step of %d tokens: growing the activation workspace from %d to "
                 "%d tokens "
                 "(CUDA graphs are captured again)",
                 T, w->T_cap, cap);
        CU(cudaStreamSynchronize(b->stream));
        graphs_invalidate(b);
        cudaFree(w->base);
        w->base = NULL;
        w->T_cap = 0;
    }
    cap = (cap + 255) & ~255;
    const size_t Tc = (size_t)cap, H = (size_t)b->H, R = (size_t)w->R_cap;
    size_t o = 0;
    /* a, qkv and router hold 2T rows: the split-bf16 GEMM inputs [hi; lo] and their two fp32 products
     * (norm.h). */
    const size_t o_ids = carve(&o, Tc * 4), o_h = carve(&o, Tc * H * 4),
                 o_a = carve(&o, 2 * Tc * H * 2);
    const size_t o_qkv = carve(&o, 2 * Tc * (size_t)b->QKV * 4),
                 o_q = carve(&o, Tc * (size_t)b->Q * 2);
    const size_t o_attn = carve(&o, Tc * (size_t)b->Q * 2), o_o = carve(&o, Tc * H * 2);
    const size_t o_router = carve(&o, 2 * Tc * (size_t)b->E * 4),
                 o_routing = carve(&o, moe_routing_bytes(cap, b->E, b->K));
    const size_t o_act = carve(&o, moe_act_bytes(cap, b->K, b->I)),
                 o_y = carve(&o, y_slots_bytes_max(b, cap));
    const size_t o_dec = carve(&o, DEC_WS_BYTES), o_sel = carve(&o, R * H * 2);
    const size_t o_logits = carve(&o, R * (size_t)b->V * 4),
                 o_outs = carve(&o, Tc * sizeof(gpu_row_out));
    const size_t samp_bytes = sampling_workspace_bytes(w->R_cap), o_samp = carve(&o, samp_bytes);
    const size_t o_bar = carve(&o, 2 * sizeof(unsigned)), o_rctr = carve(&o, sizeof(int)),
                 o_sctr = carve(&o, STREAM_CTRS * sizeof(unsigned));
    void *base = NULL;
    if (cudaMalloc(&base, o) != cudaSuccess) {
        (void)cudaGetLastError();
        return err_set(
            "cuda backend: cannot allocate %.2f GB of activations for steps of %d tokens",
            (double)o / 1e9, cap);
    }
    char *p = base;
    w->base = base, w->bytes = o, w->T_cap = cap;
    w->ids = (int32_t *)(p + o_ids), w->h = (float *)(p + o_h), w->a = (uint16_t *)(p + o_a);
    w->qkv = (float *)(p + o_qkv), w->q = (uint16_t *)(p + o_q), w->attn = (uint16_t *)(p + o_attn);
    w->o = (uint16_t *)(p + o_o), w->router = (float *)(p + o_router), w->routing = p + o_routing;
    w->act = (uint16_t *)(p + o_act), w->y_slots = (float *)(p + o_y);
    w->dec_ws = (float *)(p + o_dec), w->dec_ws_bytes = DEC_WS_BYTES;
    w->sel = (uint16_t *)(p + o_sel), w->logits = (float *)(p + o_logits),
    w->outs = (gpu_row_out *)(p + o_outs);
    w->samp_ws = p + o_samp, w->moe_bar = (unsigned *)(p + o_bar);
    w->route_ctr = (int *)(p + o_rctr), w->stream_ctr = (unsigned *)(p + o_sctr);
    /* Once: sampling's counters, the persistent kernels' barrier, gemv_route's counter and
     * attn_stream's merge counters start at 0 (each launch leaves them at 0 again, or ready for
     * the next). */
    CU(cudaMemsetAsync(w->samp_ws, 0, samp_bytes, b->stream));
    CU(cudaMemsetAsync(w->moe_bar, 0, 2 * sizeof(unsigned), b->stream));
    CU(cudaMemsetAsync(w->route_ctr, 0, sizeof(int), b->stream));
    CU(cudaMemsetAsync(w->stream_ctr, 0, STREAM_CTRS * sizeof(unsigned), b->stream));
    return 0;
}

void workspace_free(struct backend *b) {
    cudaFree(b->ws.base);
    int R = b->ws.R_cap;
    memset(&b->ws, 0, sizeof b->ws);
    b->ws.R_cap = R;
}
