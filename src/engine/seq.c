/* A sequence's lists, its creation from a request, the arrays it fills as outputs arrive, and its
 * destruction. See seq.h for why this file calls nothing of the engine's. */
#include "engine/seq.h"

#include "base/rng.h"
#include "base/timeutil.h"
#include "base/xalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- lists ---- */

void seq_list_push(seq_list *l, seq *s) {
    s->next = NULL;
    if (l->tail)
        l->tail->next = s;
    else
        l->head = s;
    l->tail = s;
    l->n++;
}

void seq_list_remove(seq_list *l, seq *s) {
    seq *prev = NULL;
    for (seq *c = l->head; c; prev = c, c = c->next)
        if (c == s) {
            if (prev)
                prev->next = c->next;
            else
                l->head = c->next;
            if (l->tail == c) l->tail = prev;
            l->n--;
            s->next = NULL;
            return;
        }
}

static bool before(const seq *a, const seq *b) {
    return a->priority < b->priority || (a->priority == b->priority && a->arrival < b->arrival);
}

void seq_list_insert_ordered(seq_list *l, seq *s) {
    seq *prev = NULL, *c = l->head;
    while (c && !before(s, c)) prev = c, c = c->next;
    s->next = c;
    if (prev)
        prev->next = s;
    else
        l->head = s;
    if (!c) l->tail = s;
    l->n++;
}

/* ---- create / destroy ---- */

seq *seq_create(const engine_request *r, int index, seq *parent, int max_model_len,
                const model_config *cfg) {
    seq *s = xcalloc(1, sizeof *s);
    s->request_id = r->id;
    s->index = index;
    s->parent = parent;
    s->priority = r->priority;
    s->cap = r->n_prompt + 16;
    s->tokens = xmalloc((size_t)s->cap * sizeof *s->tokens);
    memcpy(s->tokens, r->prompt, (size_t)r->n_prompt * sizeof *s->tokens);
    s->n_known = s->prompt_len = r->n_prompt;
    s->slot = -1;
    s->params = r->params;
    /* Without a seed, draw one per sequence; with one, the i-th of n samples uses seed + i. */
    s->params.seed = r->params.has_seed ? r->params.seed + (uint64_t)index
                                        : rng_hash2(0x9e3779b97f4a7c15ull ^ (uint64_t)now_seconds(),
                                                    r->id * 131 + (uint64_t)index);
    if (r->params.n_logit_bias > 0) {
        s->logit_bias = xmalloc((size_t)r->params.n_logit_bias * sizeof *s->logit_bias);
        memcpy(s->logit_bias, r->params.logit_bias,
               (size_t)r->params.n_logit_bias * sizeof *s->logit_bias);
        s->params.logit_bias = s->logit_bias;
    }
    int max_new = max_model_len - r->n_prompt;
    s->max_tokens = r->max_tokens > 0 && r->max_tokens < max_new ? r->max_tokens : max_new;
    /* Stop tokens: harmony's <|return|> and <|call|> and the config's eos unless ignore_eos; the
     * request's own stop_token_ids always. */
    s->stop_ids = xmalloc((size_t)(r->n_stop_token_ids + 2 + cfg->n_eos) * sizeof *s->stop_ids);
    if (!r->ignore_eos) {
        s->stop_ids[s->n_stop_ids++] = 200002;
        s->stop_ids[s->n_stop_ids++] = 200012;
        for (int i = 0; i < cfg->n_eos; i++) s->stop_ids[s->n_stop_ids++] = cfg->eos[i];
    }
    for (int i = 0; i < r->n_stop_token_ids; i++)
        s->stop_ids[s->n_stop_ids++] = r->stop_token_ids[i];
    /* The stop strings are copied once per request, not once per sample: n = 128 samples of a
     * request with megabytes of stop strings would otherwise hold 128 copies. */
    if (parent && parent->stops)
        s->stops = stop_set_ref(parent->stops);
    else if (r->n_stop_strings > 0)
        s->stops = stop_set_new(r->stop_strings, r->n_stop_strings);
    if (s->stops) s->stop_state = xcalloc((size_t)s->stops->n, sizeof *s->stop_state);
    s->stop_body_token = r->stop_body_token;
    /* Text before any special token is content too (a model that writes no harmony header at all
     * is answered with it as the message), so the output starts inside a body. */
    s->in_stop_body = true;
    s->stop_token = -1;
    s->stop_string = -1;
    s->on_output = r->on_output;
    s->user = r->user;
    s->t_arrival = now_seconds();
    return s;
}

void seq_destroy(seq *s) {
    free(s->tokens), free(s->logit_bias), free(s->stop_ids);
    stop_set_unref(s->stops);
    constraint_state_free(s->cs);
    free(s->stop_state), free(s->text_ends);
    free(s->logprobs), free(s->top_ids), free(s->top_logprobs);
    free(s->prompt_top_ids), free(s->prompt_top_logprobs), free(s->prompt_logprobs);
    free(s);
}

/* ---- outputs ---- */

void seq_store_token(seq *s, int32_t tok, const seq_result *r) {
    if (s->n_known + 1 > s->cap) {
        s->cap = s->cap * 2 + 16;
        s->tokens = xrealloc(s->tokens, (size_t)s->cap * sizeof *s->tokens);
    }
    s->tokens[s->n_known++] = tok;
    int i = s->n_output++;
    s->logprobs = xrealloc(s->logprobs, (size_t)s->n_output * sizeof *s->logprobs);
    s->logprobs[i] = r->logprob;
    int k = s->params.logprobs;
    if (k > 0) {
        s->top_ids = xrealloc(s->top_ids, (size_t)s->n_output * k * sizeof *s->top_ids);
        s->top_logprobs =
            xrealloc(s->top_logprobs, (size_t)s->n_output * k * sizeof *s->top_logprobs);
        for (int j = 0; j < k; j++) {
            s->top_ids[(size_t)i * k + j] = j < r->n_top ? r->top_ids[j] : -1;
            s->top_logprobs[(size_t)i * k + j] = j < r->n_top ? r->top_logprobs[j] : 0;
        }
    }
}

void seq_record_prompt_rows(seq *s, int64_t start_pos, const seq_result *r) {
    int k = s->params.prompt_logprobs;
    if (k <= 0 || !r->prompt_top_ids || r->prompt_k != k) return;
    if (!s->prompt_top_ids && s->prompt_len > 1) {
        s->prompt_top_ids = xcalloc((size_t)(s->prompt_len - 1) * k, sizeof *s->prompt_top_ids);
        s->prompt_top_logprobs =
            xcalloc((size_t)(s->prompt_len - 1) * k, sizeof *s->prompt_top_logprobs);
        s->prompt_logprobs = xmalloc((size_t)(s->prompt_len - 1) * sizeof *s->prompt_logprobs);
        for (int64_t q = 0; q < s->prompt_len - 1; q++) s->prompt_logprobs[q] = NAN;
    }
    for (int j = 0; j < r->n_prompt_rows; j++) {
        int64_t q = start_pos + j + 1; /* the prompt position this row predicts */
        if (q < 1 || q >= s->prompt_len) continue;
        memcpy(s->prompt_top_ids + (size_t)(q - 1) * k, r->prompt_top_ids + (size_t)j * k,
               (size_t)k * sizeof(int32_t));
        memcpy(s->prompt_top_logprobs + (size_t)(q - 1) * k, r->prompt_top_logprobs + (size_t)j * k,
               (size_t)k * sizeof(float));
        if (r->prompt_token_logprobs) s->prompt_logprobs[q - 1] = r->prompt_token_logprobs[j];
        if (q > s->prompt_rows_done) s->prompt_rows_done = q;
    }
}

void seq_note_text_end(seq *s, int64_t text_end) {
    if (s->n_output > s->text_ends_cap) {
        s->text_ends_cap = 2 * s->n_output + 16;
        s->text_ends = xrealloc(s->text_ends, (size_t)s->text_ends_cap * sizeof *s->text_ends);
    }
    s->text_ends[s->n_output - 1] = text_end;
}
