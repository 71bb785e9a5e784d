/* The CPU backend behind backend.h: the reference forward pass over a step batch, with paged KV pools
 * (float32 rows) and one worker thread so that launch() returns at once and the engine can prepare the
 * next step meanwhile, exactly as it will with the GPU.
 *
 * DEP (--data-parallel-size 2 with --enable-expert-parallel) is emulated: one pair of KV pools per
 * rank, each step split into the ranks' parts (step/batch_split.h), run by cpu_forward_dep (each
 * rank's attention on its own rows with its own pools, the MoE over all rows). The engine's DEP
 * layout and per-rank block manager are tested against it in CI (tests/test_dep_engine.c). */
#include "step/backend.h"
#include "backend/cpu/cpu_model.h"
#include "base/error.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "step/batch_split.h"
#include "step/sample_row.h"
#include "step/sampler.h"
#include "model/weights.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct backend {
    model_weights w;
    cpu_model m;
    int block_size, num_full, num_swa, kv_dim, max_slots;
    int dp; /* DEP ranks (1 without): each has its own pools, k[r] and v[r] */
    float **k[STEP_DP_MAX], **v[STEP_DP_MAX]; /* per layer: [pool's blocks][block_size][kv_dim] */
    int32_t *slot_last; /* each slot's last sampled token (STEP_TOKEN_FROM_DEVICE reads it) */

    pthread_t worker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    const step_batch *pending; /* launched, not yet taken by the worker */
    bool running, done, quit;
    int rc;
    char err[512];
    step_result result;
    int result_seqs;
};

/* ---- the KV view over the step's block tables ---- */

typedef struct {
    struct backend *b;
    const step_batch *step; /* under DEP, the rank's part (its own tables) */
    float **k, **v;         /* the pools read: the rank's */
    bool bad;
} paged_view;

static float *paged_row(paged_view *pv, float **pool, int layer, int seq, int64_t pos) {
    const step_batch *st = pv->step;
    struct backend *b = pv->b;
    bool sliding = b->w.cfg.layer_sliding[layer];
    int64_t logical = pos / st->block_size;
    int32_t block;
    if (sliding) {
        int64_t j = logical - st->swa_first[seq];
        block =
            (j >= 0 && j < st->swa_stride) ? st->swa_tables[(size_t)seq * st->swa_stride + j] : -1;
    } else {
        block = logical < st->full_stride ? st->full_tables[(size_t)seq * st->full_stride + logical]
                                          : -1;
    }
    int limit = sliding ? b->num_swa : b->num_full;
    if (block < 0 || block >= limit) {
        /* An engine bug, not bad input: report it rather than touch memory we do not own. */
        pv->bad = true;
        block = 0;
    }
    return pool[layer] +
           ((size_t)block * st->block_size + (size_t)(pos % st->block_size)) * b->kv_dim;
}
static float *view_k(void *ctx, int layer, int seq, int64_t pos) {
    paged_view *pv = ctx;
    return paged_row(pv, pv->k, layer, seq, pos);
}
static float *view_v(void *ctx, int layer, int seq, int64_t pos) {
    paged_view *pv = ctx;
    return paged_row(pv, pv->v, layer, seq, pos);
}

/* ---- one step ---- */

static bool wants_prompt_logprobs(const step_batch *st, int i) {
    return st->params[i].prompt_logprobs > 0 && st->start_pos[i] < st->prompt_len[i];
}

/* A DEP step: the whole step's token arrays (tokens, seq_of, pos, rows: as for one rank) cut into
 * the ranks' parts, each with its own view of its own pools; the logits come back in the whole
 * step's row order (rank 0's rows, then rank 1's: the sequences are grouped by rank). */
static int run_dep(struct backend *b, const step_batch *st, const int32_t *tokens,
                   const int32_t *seq_of, const int64_t *pos, int n_rows, const int32_t *rows,
                   float *logits) {
    const int V = b->w.cfg.vocab;
    step_batch part[STEP_DP_MAX];
    paged_view pv[STEP_DP_MAX];
    cpu_kv_view view[STEP_DP_MAX];
    cpu_dep_part dp[STEP_DP_MAX];
    int32_t *qs[STEP_DP_MAX], *lseq[STEP_DP_MAX], *lrows[STEP_DP_MAX];
    int row = 0;
    for (int r = 0; r < b->dp; r++) {
        const int i0 = st->dp_seq0[r], n = st->dp_seq0[r + 1] - i0;
        qs[r] = xmalloc((size_t)(n + 1) * sizeof *qs[r]);
        step_batch_part(st, r, &part[r], qs[r]);
        const int t0 = st->query_start[i0], T = part[r].n_tokens;
        /* its tokens' sequences and its logits rows, numbered within the part */
        lseq[r] = xmalloc((size_t)(T ? T : 1) * sizeof *lseq[r]);
        lrows[r] = xmalloc((size_t)(T ? T : 1) * sizeof *lrows[r]);
        for (int t = 0; t < T; t++) lseq[r][t] = seq_of[t0 + t] - i0;
        int nr = 0;
        const int row0 = row;
        while (row < n_rows && rows[row] < t0 + T) lrows[r][nr++] = rows[row++] - t0;
        pv[r] = (paged_view){b, &part[r], b->k[r], b->v[r], false};
        view[r] = (cpu_kv_view){view_k, view_v, &pv[r]};
        dp[r] = (cpu_dep_part){&view[r], T,  tokens + t0, lseq[r],
                               pos + t0, nr, lrows[r],    logits + (size_t)row0 * V};
    }
    int rc = cpu_forward_dep(&b->m, b->dp, dp);
    for (int r = 0; r < b->dp; r++) {
        if (rc == 0 && pv[r].bad)
            rc = err_set("cpu backend: rank %d: a block table entry is missing or out of range", r);
        free(qs[r]), free(lseq[r]), free(lrows[r]);
    }
    return rc;
}

static int run_step(struct backend *b, const step_batch *st, step_result *res) {
    const int V = b->w.cfg.vocab, T = st->n_tokens;
    int32_t *tokens = xmalloc((size_t)T * sizeof *tokens),
            *seq_of = xmalloc((size_t)T * sizeof *seq_of);
    int64_t *pos = xmalloc((size_t)T * sizeof *pos);
    int32_t *rows = xmalloc((size_t)T * sizeof *rows);
    int n_rows = 0;
    for (int i = 0; i < st->n_seqs; i++) {
        bool all_rows = wants_prompt_logprobs(st, i);
        for (int t = st->query_start[i]; t < st->query_start[i + 1]; t++) {
            int32_t tok = st->token_ids[t];
            if (tok == STEP_TOKEN_FROM_DEVICE) tok = b->slot_last[st->slot[i]];
            tokens[t] = tok, seq_of[t] = i, pos[t] = st->positions[t];
            if (all_rows || (st->sample[i] && t == st->query_start[i + 1] - 1)) rows[n_rows++] = t;
        }
    }
    float *logits = xmalloc((size_t)(n_rows ? n_rows : 1) * V * sizeof *logits);
    int rc;
    if (b->dp > 1) {
        rc = run_dep(b, st, tokens, seq_of, pos, n_rows, rows, logits);
    } else {
        paged_view pv = {b, st, b->k[0], b->v[0], false};
        cpu_kv_view view = {view_k, view_v, &pv};
        rc = cpu_forward_batch(&b->m, &view, T, tokens, seq_of, pos, n_rows, rows, logits);
        if (rc == 0 && pv.bad)
            rc = err_set("cpu backend: a block table entry is missing or out of range");
    }
    res->seqs = xcalloc((size_t)st->n_seqs, sizeof *res->seqs);
    res->n = 0;
    for (int i = 0, r = 0; rc == 0 && i < st->n_seqs; i++) {
        seq_result *out = &res->seqs[i];
        const sampling_params *p = &st->params[i];
        int n_new = st->query_start[i + 1] - st->query_start[i];
        if (wants_prompt_logprobs(st, i)) {
            out->n_prompt_rows = n_new, out->prompt_k = p->prompt_logprobs;
            out->prompt_top_ids = xmalloc((size_t)n_new * p->prompt_logprobs * sizeof(int32_t));
            out->prompt_top_logprobs = xmalloc((size_t)n_new * p->prompt_logprobs * sizeof(float));
            out->prompt_token_logprobs = xmalloc((size_t)n_new * sizeof(float));
            const int q0 = st->query_start[i];
            for (int j = 0; j < n_new; j++) {
                const float *row = logits + (size_t)(r + j) * V;
                sampler_top_logprobs(row, V, 0, p->prompt_logprobs,
                                     out->prompt_top_ids + (size_t)j * p->prompt_logprobs,
                                     out->prompt_top_logprobs + (size_t)j * p->prompt_logprobs);
                /* The prompt token this row predicts: the step's next one, or the next chunk's. */
                int32_t next = j + 1 < n_new     ? st->token_ids[q0 + j + 1]
                               : st->prompt_next ? st->prompt_next[i]
                                                 : -1;
                out->prompt_token_logprobs[j] = sampler_logprob_of(row, V, 0, next);
            }
            r += n_new;
        } else if (st->sample[i]) {
            r += 1;
        }
        if (!st->sample[i]) continue;
        float *row = logits + (size_t)(r - 1) * V; /* penalties and bias edit it in place */
        out->token = step_sample_row(st, i, row, V, b->slot_last[st->slot[i]], out);
        b->slot_last[st->slot[i]] = out->token;
        res->n++;
    }
    free(tokens), free(seq_of), free(pos), free(rows), free(logits);
    return rc;
}

static void *worker_main(void *arg) {
    struct backend *b = arg;
    pthread_mutex_lock(&b->mu);
    for (;;) {
        while (!b->pending && !b->quit) pthread_cond_wait(&b->cv, &b->mu);
        if (b->quit) break;
        const step_batch *st = b->pending;
        b->pending = NULL;
        pthread_mutex_unlock(&b->mu);
        step_result res = {0};
        const double t0 = now_seconds();
        int rc = run_step(b, st, &res);
        res.seconds = now_seconds() - t0;
        pthread_mutex_lock(&b->mu);
        b->rc = rc;
        if (rc) snprintf(b->err, sizeof b->err, "%s", err_msg());
        b->result = res;
        b->result_seqs = st->n_seqs;
        b->done = true;
        pthread_cond_broadcast(&b->cv);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

/* ---- the interface ---- */

static int cpu_create(const backend_options *opt, backend **out) {
    struct backend *b = xcalloc(1, sizeof *b);
    if (weights_load(opt->model, &b->w) != 0) {
        free(b);
        return -1;
    }
    const model_config *c = &b->w.cfg;
    cpu_model_init(&b->m, &b->w);
    if (opt->kv_dtype != BACKEND_KV_AUTO && opt->kv_dtype != BACKEND_KV_FP8) {
        weights_free(&b->w);
        free(b);
        return err_set("cpu backend: unknown KV cache dtype %d", opt->kv_dtype);
    }
    if (c->n_kv_heads > 64) {
        weights_free(&b->w);
        free(b);
        return err_set("cpu backend: more than 64 KV heads");
    }
    const int tp = opt->tensor_parallel_size > 0 ? opt->tensor_parallel_size : 1;
    b->dp = opt->data_parallel_size > 1 ? opt->data_parallel_size : 1;
    const char *dp_bad =
        b->dp > STEP_DP_MAX || opt->data_parallel_size < 0 ? "only 1 and 2 are supported"
        : b->dp > 1 && !opt->enable_expert_parallel        ? "needs --enable-expert-parallel"
        : b->dp > 1 && tp > 1                              ? "needs --tensor-parallel-size 1"
                                                           : NULL;
    if (dp_bad) {
        weights_free(&b->w);
        free(b);
        return err_set("--data-parallel-size %d: %s", opt->data_parallel_size, dp_bad);
    }
    if ((b->dp > 1 ? cpu_model_set_dep(&b->m, b->dp)
                   : cpu_model_set_parallel(&b->m, tp, opt->enable_expert_parallel)) != 0) {
        weights_free(&b->w);
        free(b);
        return -1;
    }
    if (b->dp > 1)
        log_info("cpu backend: %d data-parallel ranks emulated (DEP: attention on each rank's own "
                 "sequences, %d of %d experts each)",
                 b->dp, c->n_experts / b->dp, c->n_experts);
    if (b->dp < 2 && (tp > 1 || opt->enable_expert_parallel))
        log_info("cpu backend: %d ranks emulated one after the other (%s parallel)", tp,
                 opt->enable_expert_parallel ? "tensor + expert" : "tensor");
    b->m.kv_fp8 = opt->kv_dtype == BACKEND_KV_FP8;
    b->block_size = opt->block_size > 0 ? opt->block_size : 32;
    b->max_slots = opt->max_slots > 0 ? opt->max_slots : 64;
    b->kv_dim = c->n_kv_heads * c->head_dim;
    int max_len = opt->max_model_len > 0 ? opt->max_model_len : 8192;
    int blocks_per_seq = (max_len + b->block_size - 1) / b->block_size;
    int n_sliding = 0;
    for (int l = 0; l < c->n_layers; l++) n_sliding += c->layer_sliding[l];
    /* Defaults: room for a few full-length sequences in the full pool; the sliding pool needs only a
     * window (+1 block, +a prefill chunk's worth) per slot. */
    b->num_full = n_sliding == c->n_layers   ? 0
                  : opt->num_full_blocks > 0 ? opt->num_full_blocks
                                             : 4 * blocks_per_seq;
    b->num_swa =
        n_sliding == 0 ? 0
        : opt->num_swa_blocks > 0
            ? opt->num_swa_blocks
            : b->max_slots * ((c->sliding_window + b->block_size - 1) / b->block_size + 2) +
                  blocks_per_seq;
    for (int r = 0; r < b->dp; r++) { /* DEP: every rank's pools of these sizes */
        b->k[r] = xcalloc((size_t)c->n_layers, sizeof *b->k[r]);
        b->v[r] = xcalloc((size_t)c->n_layers, sizeof *b->v[r]);
        for (int l = 0; l < c->n_layers; l++) {
            size_t rows = (size_t)(c->layer_sliding[l] ? b->num_swa : b->num_full) * b->block_size;
            b->k[r][l] = xcalloc(rows ? rows * b->kv_dim : 1, sizeof(float));
            b->v[r][l] = xcalloc(rows ? rows * b->kv_dim : 1, sizeof(float));
        }
    }
    b->slot_last = xcalloc((size_t)b->max_slots, sizeof *b->slot_last);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    if (pthread_create(&b->worker, NULL, worker_main, b) != 0) {
        err_set("cpu backend: cannot start the worker thread");
        b->quit = true;
        *out = b;
        return -1;
    }
    *out = b;
    return 0;
}

static const model_config *cpu_config(backend *b) {
    return &b->w.cfg;
}

static void cpu_kv_blocks(backend *b, int *full, int *swa, int *block_size) {
    *full = b->num_full;
    *swa = b->num_swa;
    *block_size = b->block_size;
}

static int cpu_launch(backend *b, const step_batch *step) {
    pthread_mutex_lock(&b->mu);
    if (b->running) {
        pthread_mutex_unlock(&b->mu);
        return err_set("cpu backend: a step is already in flight");
    }
    if (step->block_size != b->block_size) {
        pthread_mutex_unlock(&b->mu);
        return err_set("cpu backend: the step uses blocks of %d tokens, the pools have %d",
                       step->block_size, b->block_size);
    }
    if ((b->dp > 1 || step->dp_size > 1) && step_batch_check_parts(step, b->dp)) {
        pthread_mutex_unlock(&b->mu);
        return err_prefix("cpu backend");
    }
    for (int i = 0; i < step->n_seqs; i++)
        if (step->slot[i] < 0 || step->slot[i] >= b->max_slots) {
            pthread_mutex_unlock(&b->mu);
            return err_set("cpu backend: slot %d out of range", step->slot[i]);
        }
    b->pending = step;
    b->running = true;
    b->done = false;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    return 0;
}

static int cpu_wait(backend *b, step_result *result) {
    pthread_mutex_lock(&b->mu);
    if (!b->running) {
        pthread_mutex_unlock(&b->mu);
        return err_set("cpu backend: no step in flight");
    }
    while (!b->done) pthread_cond_wait(&b->cv, &b->mu);
    b->running = false;
    int rc = b->rc;
    *result = b->result;
    memset(&b->result, 0, sizeof b->result);
    if (rc) err_set("%s", b->err);
    pthread_mutex_unlock(&b->mu);
    return rc;
}

static void cpu_destroy(backend *b) {
    if (!b) return;
    pthread_mutex_lock(&b->mu);
    bool had_worker = !b->quit;
    b->quit = true;
    pthread_cond_broadcast(&b->cv);
    pthread_mutex_unlock(&b->mu);
    if (had_worker) pthread_join(b->worker, NULL);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    for (int r = 0; r < STEP_DP_MAX; r++) {
        if (b->k[r])
            for (int l = 0; l < b->w.cfg.n_layers; l++) free(b->k[r][l]), free(b->v[r][l]);
        free(b->k[r]), free(b->v[r]);
    }
    free(b->slot_last);
    weights_free(&b->w);
    free(b);
}

const backend_ops cpu_backend_ops = {
    .name = "cpu",
    .create = cpu_create,
    .config = cpu_config,
    .kv_blocks = cpu_kv_blocks,
    .launch = cpu_launch,
    .wait = cpu_wait,
    .destroy = cpu_destroy,
};
