/* The forward pass of one step as a sequence of kernel launches on the backend's stream (nothing
 * here waits or touches the host's view of the step): the embedding, then per layer
 *   attention norm -> QKV -> RoPE + KV write -> attention (prefill tiles and/or decode) -> O ->
 *   residual + MLP norm -> router -> top-4 routing -> experts,
 * with each layer's MoE combine folded into the next layer's norm, and finally, R_cap logits rows
 * at a time, the final norm of those rows only, lm_head and the sampling kernels.
 *
 * runner_launch calls it for eager steps; graphs.c calls it inside a stream capture. Everything it
 * reads about the step comes from the fwd_plan (device pointers into the uploaded step). */
#include "backend/cuda/attn_stream.h"
#include "backend/cuda/dense_mma.h"
#include "backend/cuda/gemv.h"
#include "backend/cuda/moe_fused.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/route_sums.h"
#include "backend/cuda/router_mma.h"
#include "backend/cuda/runner_internal.h"
#include "backend/cuda/step_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Host copies of the rows the host samples, and the test hook's copy of every row, for rows
 * [r0, r0 + nr) now in the logits buffer (as rows 0..nr-1). Eager steps only (graphs:
 * runner_launch). */
int runner_copy_rows_out(struct backend *b, int r0, int nr) {
    const size_t rowb = (size_t)b->V * sizeof(float);
    for (int r = r0; r < r0 + nr && (b->book.n_host > 0 || b->masked.n > 0); r++) {
        const int hi = b->book.row_host[r];
        if (hi >= 0)
            CU(cudaMemcpyAsync(b->hl_host + (size_t)hi * b->V,
                               b->ws.logits + (size_t)(r - r0) * b->V, rowb, cudaMemcpyDeviceToHost,
                               b->stream));
        /* a constrained row sampled at wait: its logits aside, before the next chunk's lm_head */
        if (b->book.row_masked[r] >= 0 && runner_masked_copy(b, b->book.row_masked[r], r - r0))
            return -1;
    }
    if (b->dbg_logits && r0 < b->dbg_cap) {
        const int m = r0 + nr <= b->dbg_cap ? nr : b->dbg_cap - r0;
        CU(cudaMemcpyAsync(b->dbg_logits + (size_t)r0 * b->V, b->ws.logits, (size_t)m * rowb,
                           cudaMemcpyDeviceToHost, b->stream));
        b->dbg_rows = r0 + m;
    }
    return 0;
}

/* Whether a step of T tokens takes the early form for `what` (runner.h; one GPU only: under
 * tensor parallelism the shards' shapes and the all-reduce between kernels are not measured). */
static bool runner_early(const struct backend *b, int T, int what) {
    return !b->ar && (b->early & what) && T <= b->early_max_t;
}

/* The logits of nr final rows: [nr][N] fp32 from lm_head's N rows. One row (batch-1 decode) can be a
 * matrix-vector product on the GEMV's ring form (gemv.h), which streams the 1.16 GB of the 120b
 * lm_head at 4.34 TB/s against cuBLASLt's 4.14 (266.6 against 279.6 µs on the H200,
 * bench/results/gemv-ring-2026-12-02-s6-h200.md); from two rows cuBLASLt is the faster. */
cudaError_t runner_lm_head_rows(struct backend *b, const uint16_t *x, int nr, const uint16_t *W,
                                int N, float *out, cudaStream_t s) {
    if (nr == 1 && runner_early(b, 1, RUNNER_EARLY_LM_HEAD) && gemv_early_supported(1, b->H, N))
        return gemv_bf16_early(x, NULL, 1, b->H, W, N, NULL, out, 1, s);
    if (nr == 1 && gemv_supported(1, b->H, N))
        return gemv_bf16(x, NULL, 1, b->H, W, N, NULL, out, 1, s);
    return gemm_bf16(b->gemm, x, nr, b->H, W, N, NULL, out, GEMM_OUT_F32, s);
}

/* The router logits of T rows of w->a (the split input: lo halves at a_lo) and their routing into
 * rt, in one launch up to RM_MAX_M (16) tokens:
 *   - 2 … 16 tokens: on the tensor cores (router_mma.h, where the measurements are).
 *   - 1 token (and 2-4 when the tensor-core form is off): a matrix-vector product (gemv.h's
 *     gemv_route); the split input's halves are added in fp32 as the tokens are staged. (At one
 *     token without TP the runner takes gemv_norm_route instead, which also does the MLP norm.)
 *   - more: cuBLASLt's 2T-row product and moe_route_split. */
int runner_route(struct backend *b, int T, const uint16_t *a_lo, const gpu_layer *ly,
                 moe_routing *rt, cudaStream_t s) {
    gpu_workspace *w = &b->ws;
    const int H = b->H;
    /* The slices' sums follow the logits in w->router, which holds 2·T_cap ≥ 512 rows. */
    if (T >= 2 && T * rt->k <= RM_MAX_PAIRS && router_mma_supported(T, H, b->E)) {
        CU(router_mma_route(w->a, a_lo, T, H, ly->router_w, b->E, w->router, ly->router_b, rt,
                            w->route_ctr, s));
    } else if (T <= 4) {
        CU(gemv_route(w->a, a_lo, T, H, ly->router_w, b->E, w->router, ly->router_b, rt,
                      w->route_ctr, runner_early(b, T, RUNNER_EARLY_ROUTER), s));
    } else {
        CU(gemm_bf16(b->gemm, w->a, 2 * T, H, ly->router_w, b->E, NULL, w->router, GEMM_OUT_F32,
                     s));
        CU(moe_route_split(w->router, w->router + (size_t)T * b->E, ly->router_b, rt, s));
    }
    return 0;
}

/* Whether the layer's attention block runs as attn_stream.h's one persistent kernel: its mode for
 * the step's token count (by default one token only: attn_stream_mode), a pure decode step of 1-4
 * sequences, one GPU for the whole step (its grid barrier needs every SM: not under TP or DEP,
 * whose ranks may share a GPU). */
static bool runner_attn_stream(const struct backend *b, const fwd_plan *p) {
    return !b->ar && b->dp_size <= 1 && attn_stream_mode(p->T) && p->n_work_full == 0 &&
           p->n_work_swa == 0 && attn_stream_supported(&b->dims, &b->freq, p->T, p->n_seqs, b->H);
}

/* In mode 2 the attention norm of layers after the first (the previous layer's MoE rows into h,
 * then the norm) runs inside the kernel too: runner_forward skips norm_add there. */
static bool runner_attn_norm_inside(const struct backend *b, const fwd_plan *p, int l) {
    return l > 0 && runner_attn_stream(b, p) && attn_stream_mode(p->T) == 2;
}

static int runner_attention_stream(struct backend *b, const fwd_plan *p, int l, cudaStream_t s) {
    gpu_workspace *w = &b->ws;
    gpu_layer *ly = &b->gw.layers[l];
    const bool sliding = b->cfg.layer_sliding[l];
    attn_stream_args a;
    memset(&a, 0, sizeof a);
    a.T = p->T, a.H = b->H, a.positions = p->positions;
    a.slots = sliding ? p->slots_swa : p->slots_full;
    a.seqs.n_seqs = p->n_seqs, a.seqs.query_start = p->query_start, a.seqs.start_pos = p->start_pos;
    a.seqs.tables = sliding ? p->swa_tables : p->full_tables;
    a.seqs.stride = sliding ? p->swa_stride : p->full_stride;
    a.seqs.table_first = sliding ? p->swa_first : NULL;
    a.seqs.window = sliding ? b->W : 0;
    a.x = w->a, a.x_lo = w->a + (size_t)p->T * b->H;
    a.qkv_w = ly->qkv_w, a.qkv_b = ly->qkv_b, a.o_w = ly->o_w, a.o_b = ly->o_b;
    a.sinks = ly->sinks, a.scale = b->scale, a.k_cache = ly->k_cache, a.v_cache = ly->v_cache;
    a.q = w->q, a.attn = w->attn, a.o = w->o;
    a.part = w->dec_ws, a.part_bytes = w->dec_ws_bytes;
    a.bar = w->moe_bar, a.counters = w->stream_ctr;
    if (runner_attn_norm_inside(b, p, l)) {
        a.nh = w->h, a.nscratch = w->qkv, a.nslots = w->y_slots, a.n_slots = p->n_slots;
        a.ngain = ly->attn_norm, a.neps = b->eps;
    }
    if (runner_router_cols_takes(b, p)) { /* route_sums follows (runner_forward) */
        attn_stream_router r;
        memset(&r, 0, sizeof r);
        r.wt = b->step_router_wt + (size_t)l * b->H * b->E;
        r.gain = ly->mlp_norm, r.h = w->h;
        r.acc = b->rcols_acc, r.ss_part = b->rcols_ss, r.E = b->E;
        CU(attn_stream_layer_routed(&b->dims, &b->freq, &a, &r, s));
        return 0;
    }
    CU(attn_stream_layer(&b->dims, &b->freq, &a, s));
    return 0;
}

int runner_attention(struct backend *b, const fwd_plan *p, int l, cudaStream_t s) {
    if (runner_attn_stream(b, p)) return runner_attention_stream(b, p, l, s);
    gpu_workspace *w = &b->ws;
    gpu_layer *ly = &b->gw.layers[l];
    const int T = p->T, H = b->H;
    const bool sliding = b->cfg.layer_sliding[l];
    const float *qkv_lo = w->qkv + (size_t)T * b->QKV;
    /* The early form (runner_early) sees T rows: the split input's halves are added as it stages
     * them, so no lo products follow. */
    if (runner_early(b, T, RUNNER_EARLY_QKV) && gemv_early_supported(T, H, b->QKV)) {
        CU(gemv_bf16_early(w->a, w->a + (size_t)T * H, T, H, ly->qkv_w, b->QKV, NULL, w->qkv, 1,
                           s));
        qkv_lo = NULL;
    } else if (T >= 2 && dense_mma_mode() == DENSE_MMA_O_QKV && dense_mma_supported(T, H, b->QKV)) {
        /* the split input's halves are added inside (two MMAs into one accumulator) */
        CU(dense_mma(w->a, w->a + (size_t)T * H, T, H, ly->qkv_w, b->QKV, NULL, w->qkv, 1, s));
        qkv_lo = NULL;
    } else
        CU(gemm_bf16(b->gemm, w->a, 2 * T, H, ly->qkv_w, b->QKV, NULL, w->qkv, GEMM_OUT_F32, s));
    CU(rope_kv_launch_f32(&b->dims, &b->freq, w->qkv, qkv_lo, ly->qkv_b, b->QKV, T, p->positions,
                          sliding ? p->slots_swa : p->slots_full, w->q, ly->k_cache, ly->v_cache,
                          ly->kv_scales, s));
    attn_seqs as;
    as.n_seqs = p->n_seqs, as.query_start = p->query_start, as.start_pos = p->start_pos;
    as.tables = sliding ? p->swa_tables : p->full_tables;
    as.stride = sliding ? p->swa_stride : p->full_stride;
    as.table_first = sliding ? p->swa_first : NULL;
    as.window = sliding ? b->W : 0;
    const int n_work = sliding ? p->n_work_swa : p->n_work_full;
    if (n_work > 0)
        CU(attn_prefill(&b->dims, &as, sliding ? p->work_swa : p->work_full, n_work, w->q,
                        ly->k_cache, ly->v_cache, ly->kv_scales, ly->sinks, b->scale, w->attn, s));
    if (p->has_decode)
        CU(attn_decode(&b->dims, &as, w->q, ly->k_cache, ly->v_cache, ly->kv_scales, ly->sinks,
                       b->scale, w->attn, sliding ? p->splits_swa : p->splits_full, w->dec_ws, s));
    if (runner_early(b, T, RUNNER_EARLY_O) && gemv_early_supported(T, b->Q, H))
        CU(gemv_bf16_early(w->attn, NULL, T, b->Q, ly->o_w, H, ly->o_b, w->o, 0, s));
    else if (T >= 2 && dense_mma_mode() >= DENSE_MMA_O && dense_mma_supported(T, b->Q, H))
        CU(dense_mma(w->attn, NULL, T, b->Q, ly->o_w, H, ly->o_b, w->o, 0, s));
    else
        CU(gemm_bf16(b->gemm, w->attn, T, b->Q, ly->o_w, H, ly->o_b, w->o, GEMM_OUT_BF16, s));
    return 0;
}

/* GPTOSS_ROUTE_DUMP=FILE, a debugging aid: for eager steps on the routed path (2 tokens and up
 * unless the fused or norm-route kernels take them), appends to FILE one line per token and layer,
 * "layer L token t: e0 e1 ... (w0 w1 ...)", the experts the GPU chose in rank order and their
 * weights. It waits for the stream; under a graph capture it does nothing. Why: the forward test's
 * CPU comparison names rows whose error has an expert swap's size (session 36); this says which
 * experts the GPU took for them. */
static void route_dump(const moe_routing *rt, int layer, cudaStream_t s) {
    const char *path =
        getenv("GPTOSS_ROUTE_DUMP"); /* read each time: a test sets it around a run */
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    const size_t n = (size_t)rt->T * rt->k;
    if (!path || !*path || n > 65536 || cudaStreamIsCapturing(s, &cs) != cudaSuccess ||
        cs != cudaStreamCaptureStatusNone)
        return;
    int *idx = malloc(n * sizeof *idx);
    float *wts = malloc(n * sizeof *wts);
    FILE *f = idx && wts ? fopen(path, "a") : NULL;
    if (f &&
        cudaMemcpyAsync(idx, rt->topk_idx, n * sizeof *idx, cudaMemcpyDeviceToHost, s) ==
            cudaSuccess &&
        cudaMemcpyAsync(wts, rt->topk_w, n * sizeof *wts, cudaMemcpyDeviceToHost, s) ==
            cudaSuccess &&
        cudaStreamSynchronize(s) == cudaSuccess)
        for (int t = 0; t < rt->T; t++) {
            fprintf(f, "layer %d token %d:", layer, t);
            for (int j = 0; j < rt->k; j++) fprintf(f, " %d", idx[(size_t)t * rt->k + j]);
            fprintf(f, " (");
            for (int j = 0; j < rt->k; j++)
                fprintf(f, "%s%.4f", j ? " " : "", wts[(size_t)t * rt->k + j]);
            fprintf(f, ")\n");
        }
    if (f) fclose(f);
    free(idx);
    free(wts);
}

/* GPTOSS_MOE_COUNTS=1, a measurement aid: for eager steps of at least 256 tokens, prints to stderr
 * per layer how the step's pairs spread over the experts — the touched experts, the largest count,
 * and the 64-token tiles by the tokens they hold (what the MoE kernels' narrow MMA widths see:
 * moe_ws_parts.cuh). It waits for the stream, so it is for looking, not for timing; under a graph
 * capture it does nothing. Why: the experts-alone bench (tests/gpu/test_moe.cu) and the model's
 * steps gained differently from the same kernel change (bench/NOTES.md, session 11). */
static void moe_counts_dump(const moe_routing *rt, int layer, cudaStream_t s) {
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("GPTOSS_MOE_COUNTS");
        on = v && !strcmp(v, "1");
    }
    enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (!on || rt->T < 256 || rt->n_e > 1024 || cudaStreamIsCapturing(s, &cs) != cudaSuccess ||
        cs != cudaStreamCaptureStatusNone)
        return;
    int count[1024];
    if (cudaMemcpyAsync(count, rt->count, (size_t)rt->n_e * sizeof(int), cudaMemcpyDeviceToHost,
                        s) != cudaSuccess ||
        cudaStreamSynchronize(s) != cudaSuccess)
        return;
    int touched = 0, max = 0, by_width[4] = {0, 0, 0, 0};
    for (int e = 0; e < rt->n_e; e++) {
        const int c = count[e];
        touched += c > 0;
        max = c > max ? c : max;
        for (int base = 0; base < c; base += 64) {
            const int n = c - base < 64 ? c - base : 64;
            by_width[(n - 1) / 16]++;
        }
    }
    fprintf(stderr,
            "moe counts: layer %d T %d pairs %d touched %d max %d tiles64 by tokens: 1-16 %d, "
            "17-32 %d, 33-48 %d, 49-64 %d\n",
            layer, rt->T, rt->T * rt->k, touched, max, by_width[0], by_width[1], by_width[2],
            by_width[3]);
}

int runner_forward(struct backend *b, const fwd_plan *p, bool copy_host_rows) {
    const cudaStream_t s = b->stream;
    gpu_workspace *w = &b->ws;
    gpu_weights *g = &b->gw;
    const int T = p->T, H = b->H;
    if (T < 1 || T > w->T_cap)
        return err_set("cuda backend: step of %d tokens exceeds the workspace", T);

    CU(step_resolve_tokens(p->token_ids, p->token_slot, T, b->slot_last, b->max_slots, w->ids, s));
    /* Precision: the inputs of the QKV and router GEMMs go in as split bf16 (a = a_hi + a_lo, 2T rows,
     * one pass over the weights) with fp32 products, and q/k/v are rounded to bf16 once, after RoPE.
     * Rounding those inputs to bf16 moved router logits by ~3e-3 — enough to swap near-tied experts and
     * flip top-1 tokens against the fp32 reference (tests/fixtures/tiny64, bench/NOTES.md). */
    uint16_t *a_lo = w->a + (size_t)T * H;
    CU(norm_embed_split(w->ids, T, g->embed, b->V, H, w->h, g->layers[0].attn_norm, b->eps, w->a,
                        a_lo, s));
    moe_routing rt;
    moe_routing_carve(&rt, w->routing, T, b->E, b->K);
    /* Expert parallelism: every rank routes every token; it groups and runs its experts' pairs only
     * (moe.h). One GPU and TP: every expert, the carve's default. */
    rt.e0 = b->tp_share.expert0, rt.n_e = b->tp_share.n_experts;
    /* Small decode steps: the MoE block in one persistent kernel (moe_fused.h). Not under tensor
     * parallelism: its grid barrier needs the whole GPU, which two ranks on one GPU would share. */
    const bool fused =
        !b->ar && moe_fused_enabled() && moe_fused_supported(T, b->E, b->K, H, b->I, &p->moe);

    /* Every layer as one persistent kernel (step_kernel.h), when the step is one it takes. Its
     * down projection is unsplit: k MoE rows a token, so the norms that sum them (its own, each
     * layer, and the final rows') read half of what the plan's split would have them read. */
    const bool step_kernel = !fused && runner_step_kernel_takes(b, p);
    /* the router by columns in attn_stream's O (runner_router_cols.c) */
    const bool rcols = !fused && runner_attn_stream(b, p) && runner_router_cols_takes(b, p);
    fwd_plan unsplit;
    if (step_kernel) {
        unsplit = *p;
        unsplit.moe.down_splits = 1;
        unsplit.n_slots = runner_moe_slots(b, &unsplit.moe);
        p = &unsplit;
        if (runner_step_kernel(b, p, s)) return -1;
    }

    for (int l = 0; l < (step_kernel ? 0 : b->L); l++) {
        gpu_layer *ly = &g->layers[l];
        /* The previous layer's MoE slots join the residual here, then the attention norm (under
         * TP, summed over the ranks on the way: allreduce.h). */
        if (l > 0 && b->ar) {
            if (tp_all_reduce(b, 1, w->y_slots, p->n_slots, NULL, T, w->h, ly->attn_norm, b->eps,
                              w->a, a_lo, s))
                return -1;
        } else if (l > 0 && !runner_attn_norm_inside(b, p, l))
            CU(norm_add_rmsnorm_split(w->h, NULL, w->y_slots, p->n_slots, T, H, ly->attn_norm,
                                      b->eps, w->a, a_lo, s));
        if (runner_attention(b, p, l, s)) return -1;
        /* The router by columns: attn_stream made h + o and the router's sums; the routing and
         * the MoE's input row from them (route_sums.h). */
        if (rcols) {
            CU(route_from_sums(b->rcols_acc, b->rcols_ss, w->h, ly->mlp_norm, b->eps, H,
                               ly->router_b, w->router, w->a, &rt, s));
            CU(moe_experts(&ly->moe, w->a, &rt, &p->moe, w->act, w->y_slots, s));
            continue;
        }
        /* The MLP norm inside the router's kernel (gemv.h's gemv_norm_route; runner.h). */
        if (!b->ar && !fused && T <= b->norm_route_max_t) {
            const gemv_norm_in nm = {w->h, w->o, ly->mlp_norm, b->eps, w->a};
            CU(gemv_norm_route(&nm, T, H, ly->router_w, b->E, w->router, ly->router_b, &rt,
                               w->route_ctr, runner_early(b, T, RUNNER_EARLY_ROUTER), s));
            CU(moe_experts(&ly->moe, w->a, &rt, &p->moe, w->act, w->y_slots, s));
            continue;
        }
        if (b->ar) {
            if (tp_all_reduce(b, 0, NULL, 0, w->o, T, w->h, ly->mlp_norm, b->eps, w->a, a_lo, s))
                return -1;
        } else
            CU(norm_add_rmsnorm_split(w->h, w->o, NULL, 0, T, H, ly->mlp_norm, b->eps, w->a, a_lo,
                                      s));
        if (fused) {
            CU(moe_decode_fused(&ly->moe, w->a, a_lo, ly->router_w, ly->router_b, w->router, &rt,
                                &p->moe, w->act, w->y_slots, w->moe_bar, s));
            continue;
        }
        if (runner_route(b, T, a_lo, ly, &rt, s)) return -1;
        moe_counts_dump(&rt, l, s);
        route_dump(&rt, l, s);
        CU(moe_experts(&ly->moe, w->a, &rt, &p->moe, w->act, w->y_slots, s));
    }

    /* Under TP the last layer's MoE is summed over the ranks into h first (every token: the
     * ranks' sequence of collective calls must not depend on the rows). */
    if (b->ar &&
        tp_all_reduce(b, 1, w->y_slots, p->n_slots, NULL, T, w->h, NULL, b->eps, NULL, NULL, s))
        return -1;
    const float *last_slots = b->ar ? NULL : w->y_slots;

    /* Logits only for the rows that need them, R_cap rows at a time; under TP each rank makes its
     * vocabulary rows' logits and the gather gives every rank the whole rows. */
    for (int r0 = 0; r0 < p->n_rows; r0 += w->R_cap) {
        const int nr = p->n_rows - r0 < w->R_cap ? p->n_rows - r0 : w->R_cap;
        CU(step_final_rows(w->h, last_slots, p->n_slots, p->rows + r0, nr, H, g->final_norm, b->eps,
                           w->sel, s));
        if (b->ar) {
            CU(runner_lm_head_rows(b, w->sel, nr, g->lm_head, b->V_lm, b->ar->gather[b->tp_rank],
                                   s));
            CU(tp_gather(b, nr, w->logits, s));
        } else {
            CU(runner_lm_head_rows(b, w->sel, nr, g->lm_head, b->V, w->logits, s));
        }
        CU(sampling_launch(w->logits, b->V, p->rows + r0, nr, w->outs + r0, b->slot_last,
                           b->max_slots, w->samp_ws, w->R_cap, s));
        if (copy_host_rows && runner_copy_rows_out(b, r0, nr)) return -1;
    }
    return 0;
}
