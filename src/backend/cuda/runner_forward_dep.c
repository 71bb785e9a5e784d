/* DEP's forward pass (--data-parallel-size 2 with --enable-expert-parallel; model/tp_plan.h's
 * tp_plan_make_dep; dp_backend.c): this rank's part of the step, T rows of its own sequences,
 * against its own KV pools. Per layer:
 *   attention (runner_attention: whole heads, this rank's rows only) -> residual + MLP norm
 *   (local: the O output of a row is whole on its own rank, so no all-reduce here) ->
 *   all-gather of the ranks' normed rows (T_all rows, rank order) -> router and top-4 on every row
 *   -> this rank's experts' pairs (the other ranks' rows of y_slots zero, as under EP) ->
 *   reduce-scatter of y_slots: each rank sums every rank's slots for its own rows only, adds them
 *   to its residual and takes the next layer's attention norm (allreduce.h).
 * So the MoE's collectives move T_all x H bf16 rows (twice: the split input's hi and lo halves)
 * in and T_all x k x H fp32 slots out, as EP does today; dispatching only the routed rows is the
 * later form (bench/NOTES.md). The router sees the same split input as runner_forward's, so a row's
 * routing, and so its experts, are those of the same row under TP1 up to the attention's rounding.
 *
 * A rank without rows (T = 0) skips its attention and still joins each collective: every rank
 * makes the same sequence of calls with the same T_all. Eager only (dp_launch turns graphs off). */
#include "backend/cuda/norm.h"
#include "backend/cuda/runner_internal.h"
#include "backend/cuda/step_kernels.h"

int runner_forward_dep(struct backend *b, const fwd_plan *p) {
    const cudaStream_t s = b->stream;
    gpu_workspace *w = &b->ws;
    gpu_weights *g = &b->gw;
    const int T = p->T, TA = p->dep_T_all, H = b->H;
    if (TA < 1 || TA > w->T_cap || T < 0 || p->dep_row0 < 0 || p->dep_row0 + T > TA)
        return err_set("cuda backend: DEP rank %d: rows [%d, %d) of a step of %d (workspace %d)",
                       b->tp_rank, p->dep_row0, p->dep_row0 + T, TA, w->T_cap);
    uint16_t *a_lo = w->a + (size_t)T * H; /* this rank's rows' lo halves, before the gather */
    const uint16_t *ga_lo = w->a + (size_t)TA * H; /* every row's, after it */
    if (T > 0) {
        CU(step_resolve_tokens(p->token_ids, p->token_slot, T, b->slot_last, b->max_slots, w->ids,
                               s));
        CU(norm_embed_split(w->ids, T, g->embed, b->V, H, w->h, g->layers[0].attn_norm, b->eps,
                            w->a, a_lo, s));
    }
    moe_routing rt;
    moe_routing_carve(&rt, w->routing, TA, b->E, b->K);
    rt.e0 = b->tp_share.expert0, rt.n_e = b->tp_share.n_experts;

    for (int l = 0; l < b->L; l++) {
        gpu_layer *ly = &g->layers[l];
        if (l > 0 && dep_reduce_scatter(b, p, ly->attn_norm, w->a, a_lo, s)) return -1;
        if (T > 0) {
            if (runner_attention(b, p, l, s)) return -1;
            CU(norm_add_rmsnorm_split(w->h, w->o, NULL, 0, T, H, ly->mlp_norm, b->eps, w->a, a_lo,
                                      s));
        }
        if (dep_gather_rows(b, p, s)) return -1;
        /* the router as runner_forward runs it, for the gathered rows */
        if (runner_route(b, TA, ga_lo, ly, &rt, s)) return -1;
        CU(moe_experts(&ly->moe, w->a, &rt, &p->moe, w->act, w->y_slots, s));
    }
    /* the last layer's MoE into this rank's rows of h (no norm: the final norm is per logits row) */
    if (dep_reduce_scatter(b, p, NULL, NULL, NULL, s)) return -1;

    /* Logits of this rank's rows, with its whole lm_head: nothing to gather. */
    for (int r0 = 0; r0 < p->n_rows; r0 += w->R_cap) {
        const int nr = p->n_rows - r0 < w->R_cap ? p->n_rows - r0 : w->R_cap;
        CU(step_final_rows(w->h, NULL, p->n_slots, p->rows + r0, nr, H, g->final_norm, b->eps,
                           w->sel, s));
        CU(runner_lm_head_rows(b, w->sel, nr, g->lm_head, b->V, w->logits, s));
        CU(sampling_launch(w->logits, b->V, p->rows + r0, nr, w->outs + r0, b->slot_last,
                           b->max_slots, w->samp_ws, w->R_cap, s));
        if (runner_copy_rows_out(b, r0, nr)) return -1;
    }
    return 0;
}
