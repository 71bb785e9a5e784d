#include "backend/cpu/cpu_model.h"

#include "backend/cpu/ops.h"
#include "base/error.h"
#include "base/numfmt.h"
#include "base/xalloc.h"
#include "model/kv_scale.h"

#include <stdlib.h>
#include <string.h>

void cpu_model_init(cpu_model *m, const model_weights *w) {
    m->w = w;
    m->kv_fp8 = 0;
    m->kv_hook = NULL, m->kv_hook_ctx = NULL;
    m->route_hook = NULL, m->route_hook_ctx = NULL;
    rope_init(&m->rope, &w->cfg);
    tp_plan_make(&w->cfg, 1, false, &m->plan); /* size 1 always fits */
}

int cpu_model_set_parallel(cpu_model *m, int size, bool expert_parallel) {
    return tp_plan_make(&m->w->cfg, size, expert_parallel, &m->plan);
}

int cpu_model_set_dep(cpu_model *m, int size) {
    return tp_plan_make_dep(&m->w->cfg, size, &m->plan);
}

void cpu_kv_init(cpu_kv_cache *kv, const model_config *c) {
    memset(kv, 0, sizeof *kv);
    kv->n_layers = c->n_layers;
    kv->kv_dim = c->n_kv_heads * c->head_dim;
    kv->k = xcalloc((size_t)c->n_layers, sizeof *kv->k);
    kv->v = xcalloc((size_t)c->n_layers, sizeof *kv->v);
}

void cpu_kv_free(cpu_kv_cache *kv) {
    for (int l = 0; l < kv->n_layers; l++) free(kv->k[l]), free(kv->v[l]);
    free(kv->k), free(kv->v);
    memset(kv, 0, sizeof *kv);
}

static void kv_reserve(cpu_kv_cache *kv, int64_t n) {
    if (n <= kv->cap) return;
    int64_t cap = kv->cap ? kv->cap : 64;
    while (cap < n) cap *= 2;
    for (int l = 0; l < kv->n_layers; l++) {
        kv->k[l] = xrealloc(kv->k[l], (size_t)cap * kv->kv_dim * sizeof(float));
        kv->v[l] = xrealloc(kv->v[l], (size_t)cap * kv->kv_dim * sizeof(float));
    }
    kv->cap = cap;
}

/* Scratch buffers of one forward call, sized for T tokens. */
typedef struct {
    float *x, *a, *q, *k, *v, *attn, *proj, *router, *moe, *gate_up, *act, *down, *xin;
    float *part; /* [T][H]: one rank's partial output (tensor parallelism emulated) */
    int *slots_idx;
    float *slots_w;
} scratch;

static void scratch_alloc(scratch *s, const model_config *c, int T) {
    size_t H = (size_t)c->hidden, Q = (size_t)c->n_heads * c->head_dim,
           KV = (size_t)c->n_kv_heads * c->head_dim;
    size_t I = (size_t)c->intermediate, E = (size_t)c->n_experts, K = (size_t)c->experts_per_tok;
    s->x = xmalloc(T * H * sizeof(float));
    s->a = xmalloc(T * H * sizeof(float));
    s->q = xmalloc(T * Q * sizeof(float));
    s->k = xmalloc(T * KV * sizeof(float));
    s->v = xmalloc(T * KV * sizeof(float));
    s->attn = xmalloc(T * Q * sizeof(float));
    s->proj = xmalloc(T * H * sizeof(float));
    s->router = xmalloc(T * E * sizeof(float));
    s->moe = xmalloc(T * H * sizeof(float));
    s->xin = xmalloc(T * H * sizeof(float));
    s->gate_up = xmalloc(T * 2 * I * sizeof(float));
    s->act = xmalloc(T * I * sizeof(float));
    s->down = xmalloc(T * H * sizeof(float));
    s->part = xmalloc(T * H * sizeof(float));
    s->slots_idx = xmalloc(T * K * sizeof(int));
    s->slots_w = xmalloc(T * K * sizeof(float));
}

static void scratch_free(scratch *s) {
    free(s->x), free(s->a), free(s->q), free(s->k), free(s->v), free(s->attn), free(s->proj);
    free(s->router), free(s->moe), free(s->xin), free(s->gate_up), free(s->act), free(s->down);
    free(s->part);
    free(s->slots_idx), free(s->slots_w);
}

/* One query head of token (seq, p) over keys k0..p of its sequence, fetched through the view. */
static void head_attention(const cpu_kv_view *kv, int layer, int seq, int kv_head, int head_dim,
                           int64_t k0, int64_t p, float scale, float sink, const float *q,
                           float *out) {
    int64_t n = p - k0 + 1;
    const float **k_rows = xmalloc((size_t)n * sizeof *k_rows),
                **v_rows = xmalloc((size_t)n * sizeof *v_rows);
    for (int64_t u = 0; u < n; u++) {
        k_rows[u] = kv->k_row(kv->ctx, layer, seq, k0 + u) + (size_t)kv_head * head_dim;
        v_rows[u] = kv->v_row(kv->ctx, layer, seq, k0 + u) + (size_t)kv_head * head_dim;
    }
    cpu_sink_attention_rows(q, k_rows, v_rows, n, head_dim, scale, sink, out);
    free(k_rows), free(v_rows);
}

/* h += Attention(RMSNorm(h)) for the batch's T tokens (spec §2.3). */
static void attention_block(const cpu_model *m, const cpu_kv_view *kv, int layer, int T,
                            const int32_t *seq, const int64_t *pos, scratch *s) {
    const model_weights *w = m->w;
    const model_config *c = &w->cfg;
    const int H = c->hidden, D = c->head_dim, Q = c->n_heads * D, KVD = c->n_kv_heads * D;
    cpu_rmsnorm(s->x, weights_dense(w, layer, TK_ATTN_NORM), T, H, c->rms_norm_eps, s->a);
    dense_ref qb = weights_dense(w, layer, TK_Q_B), kb = weights_dense(w, layer, TK_K_B),
              vb = weights_dense(w, layer, TK_V_B), ob = weights_dense(w, layer, TK_O_B);
    dense_ref qw = weights_dense(w, layer, TK_Q_W), kw = weights_dense(w, layer, TK_K_W),
              vw = weights_dense(w, layer, TK_V_W), ow = weights_dense(w, layer, TK_O_W);
    /* q, k, v: each rank the rows of its heads (every head's rows are its own dot products, so the
     * ranks together give exactly the unsharded q, k, v; ranks sharing a KV head compute it alike). */
    const tp_plan *P = &m->plan;
    for (int r = 0; r < P->size; r++) {
        const tp_rank *rk = &P->rank[r];
        const size_t q0 = (size_t)rk->q_head0 * D, kv0 = (size_t)rk->kv_head0 * D;
        const int nq = rk->n_q_heads * D, nkv = rk->n_kv_heads * D;
        dense_ref qbr = dense_shift(qb, q0), kbr = dense_shift(kb, kv0), vbr = dense_shift(vb, kv0);
        cpu_linear_strided(s->a, (size_t)H, T, H, dense_shift(qw, q0 * H), (size_t)H, &qbr, nq,
                           s->q + q0, (size_t)Q);
        cpu_linear_strided(s->a, (size_t)H, T, H, dense_shift(kw, kv0 * H), (size_t)H, &kbr, nkv,
                           s->k + kv0, (size_t)KVD);
        cpu_linear_strided(s->a, (size_t)H, T, H, dense_shift(vw, kv0 * H), (size_t)H, &vbr, nkv,
                           s->v + kv0, (size_t)KVD);
    }

    /* RoPE on q and k; K is cached after RoPE, V as projected (with FP8 KV: both rounded to e4m3
     * with the layer's per-KV-head scales first, as the GPU stores them). */
    float cosv[ROPE_MAX_HALF], sinv[ROPE_MAX_HALF];
    float sc[4 * 64];
    const int NKV = c->n_kv_heads;
    if (m->kv_fp8) kv_fp8_scales(c, layer, sc);
    for (int t = 0; t < T; t++) {
        rope_cos_sin(&m->rope, pos[t], cosv, sinv);
        for (int h = 0; h < c->n_heads; h++)
            rope_apply(&m->rope, cosv, sinv, s->q + (size_t)t * Q + (size_t)h * D);
        for (int h = 0; h < c->n_kv_heads; h++)
            rope_apply(&m->rope, cosv, sinv, s->k + (size_t)t * KVD + (size_t)h * D);
        for (int h = 0; m->kv_fp8 && h < NKV; h++)
            for (int i = 0; i < D; i++) {
                float *k = s->k + (size_t)t * KVD + (size_t)h * D + i,
                      *v = s->v + (size_t)t * KVD + (size_t)h * D + i;
                *k = e4m3_kv_roundtrip(*k, sc[h], sc[2 * NKV + h]);
                *v = e4m3_kv_roundtrip(*v, sc[NKV + h], sc[3 * NKV + h]);
            }
        for (int h = 0; m->kv_hook && h < NKV; h++)
            m->kv_hook(m->kv_hook_ctx, layer, h, pos[t], s->k + (size_t)t * KVD + (size_t)h * D,
                       s->v + (size_t)t * KVD + (size_t)h * D, D);
        memcpy(kv->k_row(kv->ctx, layer, seq[t], pos[t]), s->k + (size_t)t * KVD,
               (size_t)KVD * sizeof(float));
        memcpy(kv->v_row(kv->ctx, layer, seq[t], pos[t]), s->v + (size_t)t * KVD,
               (size_t)KVD * sizeof(float));
    }

    /* Causal attention with sinks; sliding layers see the last `sliding_window` keys, the current one
     * included. Query head h reads KV head h / (heads per KV head). */
    dense_ref sinks = weights_dense(w, layer, TK_SINKS);
    int group = c->n_heads / c->n_kv_heads;
    float scale = 1.0f / sqrtf((float)D);
#pragma omp parallel for collapse(2) schedule(static)
    for (int t = 0; t < T; t++)
        for (int h = 0; h < c->n_heads; h++) {
            int64_t p = pos[t];
            int64_t k0 = c->layer_sliding[layer] && p - c->sliding_window + 1 > 0
                             ? p - c->sliding_window + 1
                             : 0;
            head_attention(kv, layer, seq[t], h / group, D, k0, p, scale,
                           dense_at(sinks, (size_t)h), s->q + (size_t)t * Q + (size_t)h * D,
                           s->attn + (size_t)t * Q + (size_t)h * D);
        }
    if (P->size == 1) {
        cpu_linear(s->attn, T, Q, ow, &ob, H, s->proj);
    } else {
        /* O by its input columns: rank r's heads' attention times their columns of O, the bias
         * once (rank 0); the partials summed in rank order (the all-reduce). */
        memset(s->proj, 0, (size_t)T * H * sizeof(float));
        for (int r = 0; r < P->size; r++) {
            const tp_rank *rk = &P->rank[r];
            const size_t q0 = (size_t)rk->q_head0 * D;
            cpu_linear_strided(s->attn + q0, (size_t)Q, T, rk->n_q_heads * D, dense_shift(ow, q0),
                               (size_t)Q, rk->adds_biases ? &ob : NULL, H, s->part, (size_t)H);
            for (size_t i = 0; i < (size_t)T * H; i++) s->proj[i] += s->part[i];
        }
    }
    for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] += s->proj[i];
}

/* h += MoE(RMSNorm(h)) (spec §2.5): route each token to its top-k experts, run each expert once over
 * the tokens routed to it, and sum the expert outputs weighted by the routing softmax. */
static void moe_mix(const cpu_model *m, int layer, int T, scratch *s);

static void moe_block(const cpu_model *m, int layer, int T, scratch *s) {
    const model_config *c = &m->w->cfg;
    const int H = c->hidden;
    cpu_rmsnorm(s->x, weights_dense(m->w, layer, TK_MLP_NORM), T, H, c->rms_norm_eps, s->a);
    moe_mix(m, layer, T, s);
    for (size_t i = 0; i < (size_t)T * H; i++) s->x[i] += s->moe[i];
}

/* moe = MoE(a) for T normalised rows: routing, then rank by rank (below) each rank's experts over
 * every row, the ranks' partials summed in rank order. */
static void moe_mix(const cpu_model *m, int layer, int T, scratch *s) {
    const model_weights *w = m->w;
    const model_config *c = &w->cfg;
    const int H = c->hidden, I = c->intermediate, E = c->n_experts, K = c->experts_per_tok;
    dense_ref rb = weights_dense(w, layer, TK_ROUTER_B);
    cpu_linear(s->a, T, H, weights_dense(w, layer, TK_ROUTER_W), &rb, E, s->router);
    for (int t = 0; t < T; t++)
        cpu_topk_softmax(s->router + (size_t)t * E, E, K, s->slots_idx + (size_t)t * K,
                         s->slots_w + (size_t)t * K);
    if (m->route_hook) m->route_hook(m->route_hook_ctx, layer, T, s->router, E, s->slots_idx, K);
    memset(s->moe, 0, (size_t)T * H * sizeof(float));

    const uint8_t *gu_blocks = weights_bytes(w, layer, TK_GATE_UP_BLOCKS),
                  *gu_scales = weights_bytes(w, layer, TK_GATE_UP_SCALES);
    const uint8_t *dn_blocks = weights_bytes(w, layer, TK_DOWN_BLOCKS),
                  *dn_scales = weights_bytes(w, layer, TK_DOWN_SCALES);
    dense_ref gu_bias = weights_dense(w, layer, TK_GATE_UP_BIAS),
              dn_bias = weights_dense(w, layer, TK_DOWN_BIAS);
    const size_t gu_rows = 2 * (size_t)I, gu_nb = (size_t)H / 32, dn_nb = (size_t)I / 32;
    int *tok = xmalloc((size_t)T * sizeof *tok);
    float *gate = xmalloc((size_t)T * sizeof *gate);
    /* Rank by rank (one rank covering everything without parallelism): TP ranks hold intermediate
     * units [u0, u0 + nu) of every expert, EP ranks whole experts; each rank's output is summed into
     * moe (directly when there is one rank, so the plain forward pass is unchanged). */
    const tp_plan *P = &m->plan;
    for (int rr = 0; rr < P->size; rr++) {
        const tp_rank *rk = &P->rank[rr];
        const int u0 = rk->unit0 * TP_UNIT, nu = rk->n_units * TP_UNIT; /* intermediate range */
        const size_t row0 = 2 * (size_t)u0; /* gate_up rows of unit u0 (gate and up interleaved) */
        const bool down_bias = P->expert_parallel || rk->adds_biases;
        float *acc = P->size == 1 ? s->moe : s->part;
        if (P->size > 1) memset(acc, 0, (size_t)T * H * sizeof(float));
        for (int e = rk->expert0; e < rk->expert0 + rk->n_experts; e++) {
            int n = 0; /* gather the tokens routed to expert e */
            for (int t = 0; t < T; t++)
                for (int j = 0; j < K; j++)
                    if (s->slots_idx[(size_t)t * K + j] == e)
                        tok[n] = t, gate[n] = s->slots_w[(size_t)t * K + j], n++;
            if (!n) continue;
            for (int i = 0; i < n; i++)
                memcpy(s->xin + (size_t)i * H, s->a + (size_t)tok[i] * H,
                       (size_t)H * sizeof(float));
            const size_t gr = (size_t)e * gu_rows + row0;
            cpu_mxfp4_linear_part(s->xin, n, H, gu_blocks + gr * gu_nb * 16, gu_scales + gr * gu_nb,
                                  gu_nb, &gu_bias, gr, 2 * nu, s->gate_up);
            for (int i = 0; i < n; i++)
                cpu_swiglu(s->gate_up + (size_t)i * 2 * nu, nu, (float)c->swiglu_alpha,
                           (float)c->swiglu_limit, s->act + (size_t)i * nu);
            const size_t dr = (size_t)e * H;
            cpu_mxfp4_linear_part(s->act, n, nu, dn_blocks + (dr * dn_nb + (size_t)u0 / 32) * 16,
                                  dn_scales + dr * dn_nb + (size_t)u0 / 32, dn_nb,
                                  down_bias ? &dn_bias : NULL, dr, H, s->down);
            /* The expert's bias is inside `down`; the routing weight multiplies the whole output. */
            for (int i = 0; i < n; i++)
                for (int r = 0; r < H; r++)
                    acc[(size_t)tok[i] * H + r] += gate[i] * s->down[(size_t)i * H + r];
        }
        if (P->size > 1)
            for (size_t i = 0; i < (size_t)T * H; i++) s->moe[i] += acc[i];
    }
    free(tok), free(gate);
}

/* The final norm and lm_head of n_rows rows of s->x (rows[] their indices). */
static void final_logits(const model_weights *w, scratch *s, int n_rows, const int32_t *rows,
                         float *logits) {
    const model_config *c = &w->cfg;
    const int H = c->hidden;
    if (n_rows <= 0) return;
    for (int r = 0; r < n_rows; r++)
        memcpy(s->xin + (size_t)r * H, s->x + (size_t)rows[r] * H, (size_t)H * sizeof(float));
    cpu_rmsnorm(s->xin, weights_dense(w, -1, TK_FINAL_NORM), n_rows, H, c->rms_norm_eps, s->a);
    cpu_linear(s->a, n_rows, H, weights_dense(w, -1, TK_LM_HEAD), NULL, c->vocab, logits);
}

int cpu_forward_batch(const cpu_model *m, const cpu_kv_view *kv, int T, const int32_t *tokens,
                      const int32_t *seq, const int64_t *pos, int n_rows, const int32_t *rows,
                      float *logits) {
    const model_weights *w = m->w;
    const model_config *c = &w->cfg;
    const int H = c->hidden;
    if (T <= 0) return err_set("forward: no tokens");
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab)
            return err_set("token id %d at index %d is outside the vocabulary [0, %d)", tokens[t],
                           t, c->vocab);
    scratch s;
    scratch_alloc(&s, c, T);
    dense_ref embed = weights_dense(w, -1, TK_EMBED);
    for (int t = 0; t < T; t++)
        dense_read(embed, (size_t)tokens[t] * H, (size_t)H, s.x + (size_t)t * H);
    for (int l = 0; l < c->n_layers; l++) {
        attention_block(m, kv, l, T, seq, pos, &s);
        moe_block(m, l, T, &s);
    }
    final_logits(w, &s, n_rows, rows, logits);
    scratch_free(&s);
    return 0;
}

/* ---- DEP emulated (tp_plan_make_dep) ---- */

int cpu_forward_dep(const cpu_model *m, int n_ranks, const cpu_dep_part *part) {
    const model_weights *w = m->w;
    const model_config *c = &w->cfg;
    const int H = c->hidden;
    if (!m->plan.data_parallel || m->plan.size != n_ranks || n_ranks < 1 || n_ranks > DP_MAX)
        return err_set("cpu backend: a DEP step of %d ranks without the DEP plan of as many",
                       n_ranks);
    int off[DP_MAX + 1], TA = 0;
    for (int r = 0; r < n_ranks; r++) {
        const cpu_dep_part *pr = &part[r];
        if (pr->T < 0 || (pr->T > 0 && !pr->kv)) return err_set("DEP forward: rank %d's rows", r);
        for (int t = 0; t < pr->T; t++)
            if (pr->tokens[t] < 0 || pr->tokens[t] >= c->vocab)
                return err_set("token id %d at index %d of rank %d is outside the vocabulary "
                               "[0, %d)",
                               pr->tokens[t], t, r, c->vocab);
        off[r] = TA, TA += pr->T;
    }
    off[n_ranks] = TA;
    if (TA == 0) return err_set("forward: no tokens");
    /* Attention: whole, each rank on its own rows with its own KV (the plain plan: one rank). */
    cpu_model att = *m;
    tp_plan_make(c, 1, false, &att.plan);
    scratch s[DP_MAX], all;
    scratch_alloc(&all, c, TA);
    dense_ref embed = weights_dense(w, -1, TK_EMBED);
    for (int r = 0; r < n_ranks; r++) {
        scratch_alloc(&s[r], c, part[r].T > 0 ? part[r].T : 1);
        for (int t = 0; t < part[r].T; t++)
            dense_read(embed, (size_t)part[r].tokens[t] * H, (size_t)H, s[r].x + (size_t)t * H);
    }
    for (int l = 0; l < c->n_layers; l++) {
        dense_ref mlp_norm = weights_dense(w, l, TK_MLP_NORM);
        for (int r = 0; r < n_ranks; r++) {
            const cpu_dep_part *pr = &part[r];
            if (pr->T == 0) continue; /* a rank without rows still joins the MoE below */
            attention_block(&att, pr->kv, l, pr->T, pr->seq, pr->pos, &s[r]);
            /* its normalised rows, gathered in rank order (the all-gather) */
            cpu_rmsnorm(s[r].x, mlp_norm, pr->T, H, c->rms_norm_eps, all.a + (size_t)off[r] * H);
        }
        /* every rank routes every row and runs its experts; the partials summed (m's plan) */
        moe_mix(m, l, TA, &all);
        for (int r = 0; r < n_ranks; r++) /* each rank keeps its own rows (the reduce-scatter) */
            for (size_t i = 0; i < (size_t)part[r].T * H; i++)
                s[r].x[i] += all.moe[(size_t)off[r] * H + i];
    }
    for (int r = 0; r < n_ranks; r++) {
        final_logits(w, &s[r], part[r].n_rows, part[r].rows, part[r].logits);
        scratch_free(&s[r]);
    }
    scratch_free(&all);
    return 0;
}

/* The contiguous per-sequence cache as a view: one sequence, rows indexed by position. */
static float *contig_k(void *ctx, int layer, int seq, int64_t pos) {
    cpu_kv_cache *kv = ctx;
    (void)seq;
    return kv->k[layer] + (size_t)pos * kv->kv_dim;
}
static float *contig_v(void *ctx, int layer, int seq, int64_t pos) {
    cpu_kv_cache *kv = ctx;
    (void)seq;
    return kv->v[layer] + (size_t)pos * kv->kv_dim;
}

int cpu_forward(const cpu_model *m, cpu_kv_cache *kv, const int32_t *tokens, int T,
                enum cpu_logits want, float *logits) {
    if (T <= 0) return err_set("forward: no tokens");
    int64_t pos0 = kv->len;
    kv_reserve(kv, pos0 + T);
    int32_t *seq = xcalloc((size_t)T, sizeof *seq), *rows = xmalloc((size_t)T * sizeof *rows);
    int64_t *pos = xmalloc((size_t)T * sizeof *pos);
    for (int t = 0; t < T; t++) pos[t] = pos0 + t, rows[t] = t;
    int n_rows = want == CPU_LOGITS_ALL ? T : want == CPU_LOGITS_LAST ? 1 : 0;
    const int32_t *row_list = want == CPU_LOGITS_LAST ? rows + T - 1 : rows;
    cpu_kv_view view = {contig_k, contig_v, kv};
    int rc = cpu_forward_batch(m, &view, T, tokens, seq, pos, n_rows, row_list, logits);
    if (rc == 0) kv->len = pos0 + T;
    free(seq), free(rows), free(pos);
    return rc;
}
