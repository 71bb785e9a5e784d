/* From sampled tokens to what a request sees: stop conditions (stop tokens, stop strings across token
 * boundaries, max_tokens, the model length), token metrics, and streaming every stream_interval
 * tokens (the first at once; tokens that might be the start of a stop string are held back so
 * streamed text never shows part of one). The arrays the tokens and logprobs are kept in are
 * seq.c's. */
#include "engine/engine_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/timeutil.h"

#include <string.h>

static bool is_stop_token(const seq *s, int32_t tok) {
    for (int i = 0; i < s->n_stop_ids; i++)
        if (s->stop_ids[i] == tok) return true;
    return false;
}

/* Feeds the token's bytes to the stop-string matchers (stop_set.c): a stop string that ends inside
 * them finishes the sequence, with trim_bytes covering it and what follows. */
static void check_stop_strings(engine *e, seq *s, int32_t tok) {
    if (!s->stops || !e->opt.token_bytes) return;
    size_t n = 0;
    const char *bytes = e->opt.token_bytes(e->opt.token_bytes_ctx, tok, &n);
    if (!bytes) n = 0;
    int64_t before = s->n_output > 1 ? s->text_ends[s->n_output - 2] : 0;
    seq_note_text_end(s, before + (int64_t)n);
    if (s->stop_body_token) {
        /* Only message bodies are matched, each from a fresh state: a body opens after its
         * token and closes at the next special token (no bytes). */
        if (tok == s->stop_body_token || n == 0) {
            s->in_stop_body = tok == s->stop_body_token;
            memset(s->stop_state, 0, (size_t)s->stops->n * sizeof *s->stop_state);
            return;
        }
        if (!s->in_stop_body) return;
    }
    size_t trim = 0;
    int k = stop_set_feed(s->stops, s->stop_state, bytes, n, &trim);
    if (k >= 0) {
        s->stop_string = k;
        s->trim_bytes = (int)trim;
        seq_finish(e, s, "stop");
    }
}

/* How many of the last generated tokens to hold back: those whose bytes could begin a stop string
 * that the next tokens might complete. The fewest last tokens that cover those bytes, found by
 * bisection over the text ends (a walk back over the tokens would cost the held text per token). */
static int held_tokens(engine *e, const seq *s) {
    if (!s->stops || !e->opt.token_bytes || s->status == SEQ_FINISHED || s->n_output == 0) return 0;
    int64_t longest = (int64_t)stop_set_partial(s->stops, s->stop_state);
    if (longest == 0) return 0;
    int n = s->n_output, lo = 0, hi = n - s->emitted; /* answer in [lo, hi] */
    const int64_t end = s->text_ends[n - 1];
    while (lo < hi) {
        int h = lo + (hi - lo) / 2; /* do the last h tokens cover `longest` bytes? */
        int64_t start = n - h - 1 >= 0 ? s->text_ends[n - h - 1] : 0;
        if (end - start >= longest)
            hi = h;
        else
            lo = h + 1;
    }
    return lo;
}

void seq_append_token(engine *e, seq *s, int32_t tok, const seq_result *r) {
    seq_store_token(s, tok, r);
    int i = s->n_output - 1;
    double now = now_seconds();
    pthread_mutex_lock(&e->mu);
    e->metrics.generation_tokens++;
    if (i == 0)
        histogram_observe(&e->metrics.ttft, now - s->t_arrival);
    else
        histogram_observe(&e->metrics.itl, now - s->t_last_token);
    pthread_mutex_unlock(&e->mu);
    if (i == 0) s->t_first_token = now;
    s->t_last_token = now;

    if (is_stop_token(s, tok)) {
        s->stop_token = tok;
        seq_finish(e, s, "stop");
        return;
    }
    if (s->cs && !constraint_done(s->cs)) {
        int rc = constraint_advance(s->cs, tok);
        if (rc < 0) log_warn("request %llu: %s", (unsigned long long)s->request_id, err_msg());
        if (constraint_done(s->cs)) s->params.constrained = false;
        if (rc == 1) { /* a root grammar that nothing can follow: the output is complete */
            seq_finish(e, s, "stop");
            return;
        }
    }
    check_stop_strings(e, s, tok);
    if (s->status == SEQ_FINISHED) return;
    if (s->n_output >= s->max_tokens || s->n_known >= e->opt.max_model_len)
        seq_finish(e, s, "length");
}

void seq_finish(engine *e, seq *s, const char *reason) {
    if (s->status == SEQ_FINISHED) return;
    if (s->status == SEQ_RUNNING)
        seq_list_remove(&e->running, s);
    else if (s->status == SEQ_WAITING) {
        seq_list_remove(&e->waiting, s);
        pthread_mutex_lock(&e->mu);
        e->inbox_waiting--;
        pthread_mutex_unlock(&e->mu);
    }
    s->status = SEQ_FINISHED;
    s->finish_reason = reason;
    seq_list_push(&e->finished, s);
    double now = now_seconds();
    pthread_mutex_lock(&e->mu);
    histogram_observe(&e->metrics.e2e, now - s->t_arrival);
    if (!strcmp(reason, "stop"))
        e->metrics.requests_finished_stop++;
    else if (!strcmp(reason, "length"))
        e->metrics.requests_finished_length++;
    else if (!strcmp(reason, "abort"))
        e->metrics.requests_finished_abort++;
    else
        e->metrics.requests_finished_error++;
    pthread_mutex_unlock(&e->mu);
}

void seq_emit(engine *e, seq *s, bool force) {
    if (s->final_sent) return;
    bool finished = s->status == SEQ_FINISHED;
    int held = held_tokens(e, s);
    int ready = s->n_output - s->emitted - held;
    bool prompt_rows = s->params.prompt_logprobs > 0 && !s->prompt_rows_sent &&
                       s->prompt_rows_done >= s->prompt_len - 1;
    bool due = ready > 0 && (s->emitted == 0 || ready >= e->opt.stream_interval);
    if (!finished && !due && !force) return;
    if (!finished && ready <= 0) return;
    int k = s->params.logprobs;
    engine_output o = {0};
    o.request_id = s->request_id;
    o.index = s->index;
    o.n_tokens = ready > 0 ? ready : 0;
    o.tokens = s->tokens + s->prompt_len + s->emitted;
    o.logprobs = s->logprobs ? s->logprobs + s->emitted : NULL;
    o.top_k = k;
    if (k > 0 && s->top_ids) {
        o.top_ids = s->top_ids + (size_t)s->emitted * k;
        o.top_logprobs = s->top_logprobs + (size_t)s->emitted * k;
    }
    if (prompt_rows) {
        o.prompt_top_ids = s->prompt_top_ids;
        o.prompt_top_logprobs = s->prompt_top_logprobs;
        o.prompt_logprobs = s->prompt_logprobs;
        o.n_prompt_rows = (int)(s->prompt_len - 1);
        o.prompt_k = s->params.prompt_logprobs;
        s->prompt_rows_sent = true;
    }
    o.finished = finished;
    o.finish_reason = finished ? s->finish_reason : NULL;
    o.stop_token = s->stop_token;
    o.stop_string = s->stop_string;
    o.trim_bytes = s->trim_bytes;
    o.prompt_tokens = (int)s->prompt_len;
    o.cached_tokens = (int)s->cached_tokens;
    o.completion_tokens = s->n_output;
    if (finished) {
        o.ttft = s->t_first_token > 0 ? s->t_first_token - s->t_arrival : 0;
        o.e2e = now_seconds() - s->t_arrival;
        s->final_sent = true;
    }
    s->emitted += o.n_tokens;
    if (s->on_output) s->on_output(&o, s->user);
}

void seq_release(engine *e, seq *s) {
    /* Children of an n > 1 request that still wait on this one no longer need to. */
    for (seq *w = e->waiting.head; w; w = w->next)
        if (w->parent == s) w->parent = NULL;
    bm_free(e->bm, &s->kv);
    if (s->slot >= 0) e->free_slots[e->n_free_slots++] = s->slot;
    s->slot = -1;
    seq_list_remove(&e->finished, s);
    seq_destroy(s);
}
