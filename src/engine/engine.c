/* The engine loop: inbox → schedule → launch → collect → outputs. See engine.h for the contract and
 * scheduler.c / output.c for the policies and seq.c for a sequence and the memory it owns. */
#include "engine/engine_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

void engine_options_default(engine_options *o) {
    memset(o, 0, sizeof *o);
    o->max_num_seqs = 256;
    o->max_num_batched_tokens = 8192;
    o->max_model_len = 131072;
    o->stream_interval = 1;
    o->enable_prefix_caching = true;
    o->async_scheduling = true;
}

/* ---- create / destroy ---- */

int engine_create(const engine_options *opt, const backend_ops *ops, backend *b, engine **out) {
    engine *e = xcalloc(1, sizeof *e);
    e->opt = *opt;
    e->ops = ops;
    e->be = b;
    e->cfg = ops->config(b);
    e->inflight = -1;
    if (e->opt.max_num_seqs < 1) e->opt.max_num_seqs = 1;
    if (e->opt.max_num_batched_tokens < 1) e->opt.max_num_batched_tokens = 1;
    if (e->opt.stream_interval < 1) e->opt.stream_interval = 1;
    if (e->opt.max_model_len < 1 || e->opt.max_model_len > e->cfg->max_position)
        e->opt.max_model_len = e->cfg->max_position;
    int n_full = 0, n_swa = 0, block_size = 0;
    ops->kv_blocks(b, &n_full, &n_swa, &block_size);
    e->block_size = block_size;
    bm_options bo = {.block_size = e->block_size,
                     .num_full_blocks = n_full,
                     .num_swa_blocks = n_swa,
                     .window = e->cfg->sliding_window,
                     .prefix_caching = opt->enable_prefix_caching,
                     .n_ranks = opt->data_parallel_size};
    e->bm = bm_create(&bo);
    if (!e->bm) {
        free(e);
        return -1;
    }
    e->free_slots = xmalloc((size_t)e->opt.max_num_seqs * sizeof *e->free_slots);
    for (int i = e->opt.max_num_seqs - 1; i >= 0; i--) e->free_slots[e->n_free_slots++] = i;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->wake, NULL);
    step_masks_init(&e->steps[0].masks), step_masks_init(&e->steps[1].masks);
    metrics_init(&e->metrics);
    *out = e;
    return 0;
}

/* At shutdown: every sequence still held gives its blocks back (bm_free also frees its tables). */
static void free_list(engine *e, seq_list *l) {
    for (seq *s = l->head, *n; s; s = n) {
        n = s->next;
        bm_free(e->bm, &s->kv);
        seq_destroy(s);
    }
    memset(l, 0, sizeof *l);
}

static void step_slot_free(step_slot *st) {
    step_batch *b = &st->b;
    free(st->seqs), free(b->slot), free(b->query_start), free(b->start_pos), free(b->swa_first),
        free(b->sample);
    free(b->reset_slot), free(b->params), free(b->output_len), free((void *)b->history),
        free(b->history_len);
    free(b->prompt_len), free(b->prompt_next), free(st->hist_buf), free(b->token_ids),
        free(b->positions), free(b->full_tables), free(b->swa_tables);
    free((void *)st->mask_rows), free(st->mask_buf);
    free(st->plan_seq), free(st->plan_n);
    step_masks_destroy(&st->masks);
}

void engine_destroy(engine *e) {
    if (!e) return;
    engine_stop(e);
    if (e->inflight >= 0) {
        step_result r = {0};
        e->ops->wait(e->be, &r);
        step_result_free(&r, e->steps[e->inflight].b.n_seqs);
    }
    for (inbox_item *it = e->inbox_head, *n; it; it = n) {
        n = it->next;
        for (seq *s = it->seqs, *sn; s; s = sn) sn = s->next, seq_destroy(s);
        free(it);
    }
    free_list(e, &e->waiting), free_list(e, &e->running), free_list(e, &e->finished);
    step_slot_free(&e->steps[0]), step_slot_free(&e->steps[1]);
    bm_destroy(e->bm);
    e->ops->destroy(e->be);
    free(e->free_slots);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->wake);
    free(e);
}

/* ---- submission (any thread) ---- */

static int validate(const engine *e, const engine_request *r) {
    const sampling_params *p = &r->params;
    if (r->n_prompt < 1) return err_set("prompt: must hold at least one token");
    if (r->n_prompt >= e->opt.max_model_len)
        return err_set("prompt: %d tokens leave no room to generate within the model length of %d",
                       r->n_prompt, e->opt.max_model_len);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= e->cfg->vocab)
            return err_set("prompt: token id %d at index %d is outside the vocabulary [0, %d)",
                           r->prompt[i], i, e->cfg->vocab);
    if (!(p->temperature >= 0) || p->temperature > 1e4)
        return err_set("temperature: must be in [0, 10000]");
    if (!(p->top_p > 0 && p->top_p <= 1)) return err_set("top_p: must be in (0, 1]");
    if (!(p->min_p >= 0 && p->min_p <= 1)) return err_set("min_p: must be in [0, 1]");
    if (!(p->repetition_penalty > 0) || p->repetition_penalty > 100)
        return err_set("repetition_penalty: must be in (0, 100]");
    if (!(p->presence_penalty >= -2 && p->presence_penalty <= 2))
        return err_set("presence_penalty: must be in [-2, 2]");
    if (!(p->frequency_penalty >= -2 && p->frequency_penalty <= 2))
        return err_set("frequency_penalty: must be in [-2, 2]");
    if (p->logprobs < 0 || p->logprobs > 20) return err_set("logprobs: must be in [0, 20]");
    if (p->prompt_logprobs < 0 || p->prompt_logprobs > 20)
        return err_set("prompt_logprobs: must be in [0, 20]");
    if (r->n < 1 || r->n > 128) return err_set("n: must be in [1, 128]");
    for (int i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= e->cfg->vocab)
            return err_set("logit_bias: token id %d is outside the vocabulary",
                           p->logit_bias[i].token);
    if (r->n_stop_strings > 0 && !e->opt.token_bytes)
        return err_set("stop: stop strings need a tokenizer");
    for (int i = 0; i < r->n_stop_strings; i++)
        if (!r->stop_strings[i] || !r->stop_strings[i][0])
            return err_set("stop: stop strings must not be empty");
    if (r->constraint && !e->opt.grammar_vocab)
        return err_set("structured output needs the model's tokenizer (none is loaded)");
    /* DEP's first form: the CUDA ranks cannot sample constrained rows yet (dp_backend.c); refused
     * here, as a bad request, rather than failing the step of every sequence */
    if (r->constraint && e->opt.data_parallel_size > 1)
        return err_set("structured output is not supported with --data-parallel-size %d yet",
                       e->opt.data_parallel_size);
    return 0;
}

/* Appends an item to the inbox and wakes the engine thread (the only thread-safe entry into the
 * engine's state); n_waiting counts the sequences it brings. */
static void post(engine *e, inbox_item *it, int n_waiting) {
    pthread_mutex_lock(&e->mu);
    e->inbox_waiting += n_waiting;
    if (e->inbox_tail)
        e->inbox_tail->next = it;
    else
        e->inbox_head = it;
    e->inbox_tail = it;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
}

int engine_submit(engine *e, const engine_request *r) {
    if (validate(e, r) != 0) return -1;
    int n = r->n > 0 ? r->n : 1;
    pthread_mutex_lock(&e->mu);
    bool full = e->opt.max_waiting > 0 && e->inbox_waiting + n > e->opt.max_waiting;
    pthread_mutex_unlock(&e->mu);
    if (full)
        return err_set("too many requests are waiting (--max-waiting-requests %d)",
                       e->opt.max_waiting);
    inbox_item *it = xcalloc(1, sizeof *it);
    it->kind = INBOX_SUBMIT;
    it->id = r->id;
    seq *first = NULL, *last = NULL;
    for (int i = 0; i < n; i++) {
        seq *s = seq_create(r, i, first, e->opt.max_model_len, e->cfg);
        if (r->constraint) {
            s->cs = constraint_state_new(r->constraint, e->opt.grammar_vocab);
            s->params.constrained = true;
        }
        if (last)
            last->next = s;
        else
            first = s;
        last = s;
    }
    it->seqs = first;
    post(e, it, n);
    return 0;
}

void engine_abort(engine *e, uint64_t request_id) {
    inbox_item *it = xcalloc(1, sizeof *it);
    it->kind = INBOX_ABORT;
    it->id = request_id;
    post(e, it, 0);
}

static void abort_in(engine *e, seq_list *l, uint64_t id) {
    for (seq *s = l->head, *n; s; s = n) {
        n = s->next;
        if (s->request_id == id) {
            seq_finish(e, s, "abort");
            seq_emit(e, s, true);
        }
    }
}

static void take_inbox(engine *e) {
    pthread_mutex_lock(&e->mu);
    inbox_item *it = e->inbox_head;
    e->inbox_head = e->inbox_tail = NULL;
    pthread_mutex_unlock(&e->mu);
    while (it) {
        inbox_item *next = it->next;
        if (it->kind == INBOX_SUBMIT) {
            for (seq *s = it->seqs, *sn; s; s = sn) {
                sn = s->next;
                s->arrival = e->arrivals++;
                s->status = SEQ_WAITING;
                seq_list_insert_ordered(&e->waiting, s);
            }
        } else {
            abort_in(e, &e->waiting, it->id);
            abort_in(e, &e->running, it->id);
        }
        free(it);
        it = next;
    }
}

/* ---- the step loop ---- */

static void release_finished(engine *e) {
    for (seq *s = e->finished.head, *n; s; s = n) {
        n = s->next;
        if (s->inflight == 0) seq_release(e, s);
    }
}

static void launch(engine *e, int idx) {
    step_slot *st = &e->steps[idx];
    for (int i = 0; i < st->b.n_seqs; i++) {
        seq *s = st->seqs[i];
        s->inflight++;
        if (st->b.sample[i]) s->n_pending++;
        /* Publish the blocks this step completes now, not when it returns: every later step runs after
         * this one, so a request that finds them will read finished KV — and the sliding window may
         * recycle them before this step's results are collected. */
        bm_commit(e->bm, &s->kv, s->tokens,
                  s->num_scheduled < s->n_known ? s->num_scheduled : s->n_known);
    }
    structured_prepare(e, st);
    e->t_launched = now_seconds();
    if (e->ops->launch(e->be, &st->b) != 0) {
        log_error("backend launch failed: %s", err_msg());
        e->failed = true;
        return;
    }
    e->inflight = idx;
    structured_fill(e, st); /* while the forward pass runs */
}

/* Applies a completed step's results. */
static void collect(engine *e, int idx, step_result *r) {
    step_slot *st = &e->steps[idx];
    for (int i = 0; i < st->b.n_seqs; i++) {
        seq *s = st->seqs[i];
        s->inflight--;
        if (st->b.sample[i]) s->n_pending--;
        int64_t end = st->b.start_pos[i] + (st->b.query_start[i + 1] - st->b.query_start[i]);
        if (end > s->num_computed) s->num_computed = end;
        if (s->status == SEQ_FINISHED)
            continue; /* stopped while this step ran: its extra work is dropped */
        if (r) seq_record_prompt_rows(s, st->b.start_pos[i], &r->seqs[i]);
        if (r && st->b.sample[i]) seq_append_token(e, s, r->seqs[i].token, &r->seqs[i]);
        bm_commit(e->bm, &s->kv, s->tokens,
                  s->num_computed < s->n_known ? s->num_computed : s->n_known);
        seq_emit(e, s, false);
    }
}

static void fail_all(engine *e) {
    for (seq_list *l = &e->running; l; l = l == &e->running ? &e->waiting : NULL)
        for (seq *s = l->head, *n; s; s = n) {
            n = s->next;
            seq_finish(e, s, "error");
            seq_emit(e, s, true);
        }
}

static int finish_inflight(engine *e) {
    int idx = e->inflight;
    step_result r = {0};
    int rc = e->ops->wait(e->be, &r);
    e->inflight = -1;
    /* The step's time: the backend's own measure, else from when it could start (launched, and
     * the previous one done) until now. */
    const double now = now_seconds();
    const double start = e->t_launched > e->t_collected ? e->t_launched : e->t_collected;
    const step_batch *sb = &e->steps[idx].b;
    if (rc == 0)
        step_cost_observe(&e->cost, sb->n_seqs, sb->n_tokens,
                          r.seconds > 0 ? r.seconds : now - start);
    e->t_collected = now;
    if (rc != 0) {
        log_error("backend step failed: %s", err_msg());
        e->failed = true;
        collect(e, idx, NULL);
    } else {
        collect(e, idx, &r);
    }
    step_result_free(&r, e->steps[idx].b.n_seqs);
    return rc;
}

static void observe_step(engine *e, const step_slot *st, double seconds) {
    pthread_mutex_lock(&e->mu);
    e->metrics.steps++;
    histogram_observe(&e->metrics.step_time, seconds);
    histogram_observe(&e->metrics.batch_tokens, st->b.n_tokens);
    histogram_observe(&e->metrics.batch_seqs, st->b.n_seqs);
    pthread_mutex_unlock(&e->mu);
}

static void update_gauges(engine *e) {
    pthread_mutex_lock(&e->mu);
    e->metrics.num_requests_running = e->running.n;
    e->metrics.num_requests_waiting = e->waiting.n;
    e->metrics.kv_cache_usage = bm_usage(e->bm);
    pthread_mutex_unlock(&e->mu);
}

int engine_step(engine *e) {
    take_inbox(e);
    if (e->failed) {
        fail_all(e);
        release_finished(e);
        update_gauges(e);
        return -1;
    }
    double t0 = now_seconds();
    int next = e->inflight < 0 ? 0 : 1 - e->inflight;
    step_slot *st = &e->steps[next];
    if (e->opt.async_scheduling && e->inflight >= 0) {
        /* Build step N+1 while step N runs, then swap. */
        schedule_step(e, st, false);
        finish_inflight(e);
        if (!e->failed && st->b.n_seqs > 0) launch(e, next);
    } else {
        if (e->inflight >= 0) finish_inflight(e);
        schedule_step(e, st, true);
        if (!e->failed && st->b.n_seqs > 0) {
            launch(e, next);
            if (!e->opt.async_scheduling && e->inflight >= 0) finish_inflight(e);
        }
    }
    if (st->b.n_seqs > 0) observe_step(e, st, now_seconds() - t0);
    release_finished(e);
    update_gauges(e);
    if (e->failed) {
        fail_all(e);
        release_finished(e);
        return -1;
    }
    return e->inflight >= 0 || e->running.n > 0 || e->waiting.n > 0 || e->finished.n > 0;
}

int engine_run_until_idle(engine *e) {
    int rc;
    while ((rc = engine_step(e)) > 0) {
    }
    return rc;
}

static void *engine_thread(void *arg) {
    engine *e = arg;
    for (;;) {
        int rc = engine_step(e);
        pthread_mutex_lock(&e->mu);
        if (e->stop_requested && rc <= 0) {
            pthread_mutex_unlock(&e->mu);
            break;
        }
        /* Idle: sleep until a submission or abort arrives. */
        while (rc <= 0 && !e->inbox_head && !e->stop_requested) pthread_cond_wait(&e->wake, &e->mu);
        pthread_mutex_unlock(&e->mu);
    }
    return NULL;
}

int engine_start(engine *e) {
    if (pthread_create(&e->thread, NULL, engine_thread, e) != 0)
        return err_set("cannot start the engine thread");
    e->thread_running = true;
    return 0;
}

void engine_stop(engine *e) {
    if (!e->thread_running) return;
    pthread_mutex_lock(&e->mu);
    e->stop_requested = true;
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->thread_running = false;
}

void engine_get_metrics(engine *e, engine_metrics *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->metrics;
    pthread_mutex_unlock(&e->mu);
}
