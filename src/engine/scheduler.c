/* What runs next: continuous batching with chunked prefill under a token budget.
 *
 * Order of a step: first the running sequences in priority order — decodes take one token, partial
 * prefills take what the budget leaves — then waiting sequences in (priority, arrival) order, each
 * with as much of its prompt as fits (a prefix-cache hit skips the cached blocks). When KV blocks run
 * out for a running sequence, the lowest-priority running sequence is preempted: its blocks and slot
 * are given back and it returns to the waiting queue with every token it has, to be recomputed later
 * (its generated tokens are kept, so it continues exactly where it stopped). Preemption only happens
 * when no step is in flight; otherwise a sequence that cannot grow just sits this step out.
 *
 * DEP (--data-parallel-size N > 1): one global scheduler for every rank, not one per rank. Every
 * MoE layer of a step is a collective over all the ranks' rows, so the ranks must run the same
 * steps in lockstep anyway; one scheduler sees every sequence, so the token budget, max_num_seqs,
 * priorities and preemption stay global (a request is never stuck behind a busy rank's queue while
 * the other idles), and the engine above it keeps one step contract and one result per step. A new
 * sequence is placed on the rank with the most free KV blocks (bm_pick_rank) when it is admitted,
 * and lives there until it finishes or is preempted (then placed again: it recomputes anyway); its
 * blocks come from that rank's pools. The step's sequences are chosen exactly as with one rank,
 * then laid out rank by rank in that order (step/batch.h's dp_seq0), so each rank's part is
 * contiguous. With one rank the layout is the order chosen: the step is unchanged.
 *
 * With --target-tpot-ms, prompt tokens (every chunk of more than one token) also draw on a second
 * budget while sequences decode: what the steps' measured cost (step_cost.h) says fits beside this
 * step's decodes within the target, and at least one block's worth. */
#include "engine/engine_internal.h"

#include "base/log.h"
#include "base/timeutil.h"
#include "base/xalloc.h"

#include <string.h>

static int64_t total_len(const seq *s) {
    return s->n_known + s->n_pending;
}

static void ensure_caps(step_slot *st, int n_seqs, int n_tokens) {
    if (n_seqs + 1 > st->cap_seqs) {
        int cap = st->cap_seqs ? st->cap_seqs : 16;
        while (cap < n_seqs + 1) cap *= 2;
        st->seqs = xrealloc(st->seqs, (size_t)cap * sizeof *st->seqs);
        st->b.slot = xrealloc(st->b.slot, (size_t)cap * sizeof(int32_t));
        st->b.query_start = xrealloc(st->b.query_start, (size_t)(cap + 1) * sizeof(int32_t));
        st->b.start_pos = xrealloc(st->b.start_pos, (size_t)cap * sizeof(int32_t));
        st->b.swa_first = xrealloc(st->b.swa_first, (size_t)cap * sizeof(int32_t));
        st->b.sample = xrealloc(st->b.sample, (size_t)cap * sizeof(bool));
        st->b.reset_slot = xrealloc(st->b.reset_slot, (size_t)cap * sizeof(bool));
        st->b.params = xrealloc(st->b.params, (size_t)cap * sizeof(sampling_params));
        st->b.output_len = xrealloc(st->b.output_len, (size_t)cap * sizeof(int32_t));
        st->b.history = xrealloc((void *)st->b.history, (size_t)cap * sizeof(int32_t *));
        st->b.history_len = xrealloc(st->b.history_len, (size_t)cap * sizeof(int32_t));
        st->b.prompt_len = xrealloc(st->b.prompt_len, (size_t)cap * sizeof(int32_t));
        st->b.prompt_next = xrealloc(st->b.prompt_next, (size_t)cap * sizeof(int32_t));
        st->cap_seqs = cap;
    }
    if (n_tokens > st->cap_tokens) {
        int cap = st->cap_tokens ? st->cap_tokens : 256;
        while (cap < n_tokens) cap *= 2;
        st->b.token_ids = xrealloc(st->b.token_ids, (size_t)cap * sizeof(int32_t));
        st->b.positions = xrealloc(st->b.positions, (size_t)cap * sizeof(int32_t));
        st->cap_tokens = cap;
    }
}

/* Appends sequence s with n_new tokens (positions num_scheduled ..) to the step being built. */
static void add_seq(step_slot *st, seq *s, int64_t n_new) {
    step_batch *b = &st->b;
    int i = b->n_seqs;
    ensure_caps(st, i + 1, b->n_tokens + (int)n_new);
    st->seqs[i] = s;
    b->slot[i] = s->slot;
    b->query_start[i] = b->n_tokens;
    b->start_pos[i] = (int32_t)s->num_scheduled;
    for (int64_t p = s->num_scheduled; p < s->num_scheduled + n_new; p++) {
        b->token_ids[b->n_tokens] = p < s->n_known ? s->tokens[p] : STEP_TOKEN_FROM_DEVICE;
        b->positions[b->n_tokens] = (int32_t)p;
        b->n_tokens++;
    }
    b->query_start[i + 1] = b->n_tokens;
    b->sample[i] = s->num_scheduled + n_new == total_len(s);
    b->reset_slot[i] = s->slot_fresh;
    s->slot_fresh = false;
    b->params[i] = s->params;
    b->output_len[i] = s->n_output + s->n_pending;
    /* Penalties read the sequence's history while the step runs; the engine may append to (and so
     * reallocate) s->tokens meanwhile, so the step carries its own copy — only when it is needed. */
    const sampling_params *p = &s->params;
    bool penalized =
        p->repetition_penalty != 1.0f || p->presence_penalty != 0 || p->frequency_penalty != 0;
    b->history[i] = NULL;
    b->history_len[i] = 0;
    if (penalized && b->sample[i]) {
        if (st->hist_len + s->n_known > st->hist_cap) {
            st->hist_cap = (st->hist_len + s->n_known) * 2;
            st->hist_buf = xrealloc(st->hist_buf, (size_t)st->hist_cap * sizeof *st->hist_buf);
        }
        memcpy(st->hist_buf + st->hist_len, s->tokens, (size_t)s->n_known * sizeof *s->tokens);
        b->history_len[i] = (int32_t)s->n_known;
        st->hist_len += s->n_known;
    }
    b->prompt_len[i] = (int32_t)s->prompt_len;
    const int64_t next = s->num_scheduled + n_new;
    b->prompt_next[i] = next < s->prompt_len ? s->tokens[next] : -1;
    s->num_scheduled += n_new;
    b->n_seqs++;
}

/* Block tables go in last, once every sequence's tables have grown. */
static void fill_tables(step_slot *st) {
    step_batch *b = &st->b;
    int full_stride = 1, swa_stride = 1;
    for (int i = 0; i < b->n_seqs; i++) {
        if (st->seqs[i]->kv.n_full > full_stride) full_stride = st->seqs[i]->kv.n_full;
        if (st->seqs[i]->kv.n_swa > swa_stride) swa_stride = st->seqs[i]->kv.n_swa;
    }
    if (b->n_seqs * full_stride > st->cap_full) {
        st->cap_full = b->n_seqs * full_stride * 2;
        b->full_tables = xrealloc(b->full_tables, (size_t)st->cap_full * sizeof(int32_t));
    }
    if (b->n_seqs * swa_stride > st->cap_swa) {
        st->cap_swa = b->n_seqs * swa_stride * 2;
        b->swa_tables = xrealloc(b->swa_tables, (size_t)st->cap_swa * sizeof(int32_t));
    }
    b->full_stride = full_stride, b->swa_stride = swa_stride;
    int64_t off = 0;
    for (int i = 0; i < b->n_seqs; i++) {
        b->history[i] = b->history_len[i] ? st->hist_buf + off : NULL;
        off += b->history_len[i];
    }
    for (int i = 0; i < b->n_seqs; i++) {
        const bm_seq *kv = &st->seqs[i]->kv;
        int32_t *fr = b->full_tables + (size_t)i * full_stride,
                *sr = b->swa_tables + (size_t)i * swa_stride;
        for (int j = 0; j < full_stride; j++) fr[j] = j < kv->n_full ? kv->full[j] : -1;
        for (int j = 0; j < swa_stride; j++) sr[j] = j < kv->n_swa ? kv->swa[j] : -1;
        b->swa_first[i] = kv->swa_first;
    }
}

static void release_slot(engine *e, seq *s) {
    if (s->slot >= 0) e->free_slots[e->n_free_slots++] = s->slot;
    s->slot = -1;
}

static void preempt(engine *e, seq *s) {
    bm_free(e->bm, &s->kv);
    release_slot(e, s);
    s->num_scheduled = s->num_computed = 0;
    seq_list_remove(&e->running, s);
    s->status = SEQ_WAITING;
    seq_list_insert_ordered(&e->waiting, s);
    pthread_mutex_lock(&e->mu);
    e->metrics.num_preemptions++;
    e->inbox_waiting++;
    pthread_mutex_unlock(&e->mu);
}

/* A child of an n > 1 request waits until its parent's prompt is computed, so that it finds the
 * prompt's blocks in the prefix cache instead of computing them again. */
static bool ready_to_admit(const seq *s) {
    const seq *p = s->parent;
    return !p || p->status == SEQ_FINISHED || p->num_computed >= p->prompt_len;
}

static int running_in_step(const step_slot *st) {
    return st->n_plan;
}

/* Chooses s for this step with n_new tokens (laid out by lay_out, at the end). */
static void plan_seq(step_slot *st, seq *s, int64_t n_new) {
    if (st->n_plan == st->cap_plan) {
        st->cap_plan = st->cap_plan ? 2 * st->cap_plan : 16;
        st->plan_seq = xrealloc(st->plan_seq, (size_t)st->cap_plan * sizeof *st->plan_seq);
        st->plan_n = xrealloc(st->plan_n, (size_t)st->cap_plan * sizeof *st->plan_n);
    }
    st->plan_seq[st->n_plan] = s, st->plan_n[st->n_plan] = n_new;
    st->n_plan++;
}

/* The chosen sequences into the step, rank by rank (one rank: in the order chosen). */
static void lay_out(engine *e, step_slot *st) {
    const int R = bm_n_ranks(e->bm);
    st->b.dp_size = R > 1 ? R : 0;
    st->b.dp_seq0[0] = 0;
    for (int r = 0; r < R; r++) {
        for (int k = 0; k < st->n_plan; k++)
            if (R == 1 || st->plan_seq[k]->kv.rank == r)
                add_seq(st, st->plan_seq[k], st->plan_n[k]);
        if (R > 1) st->b.dp_seq0[r + 1] = st->b.n_seqs;
    }
}

/* Prompt tokens this step may carry: all of the budget, unless --target-tpot-ms is set and
 * sequences are decoding (one new token each), whose time per token the prefill would stretch. */
static int64_t prompt_token_budget(engine *e, int64_t budget) {
    if (!(e->opt.target_tpot_ms > 0)) return budget;
    int decodes = 0, prefills = 0;
    for (const seq *s = e->running.head; s; s = s->next) {
        const int64_t remaining = total_len(s) - s->num_scheduled;
        if (remaining == 1)
            decodes++;
        else if (remaining > 1)
            prefills++;
    }
    if (decodes == 0) return budget; /* nobody waits for a token: prefill at full speed */
    if (e->waiting.head) prefills++;
    const int64_t floor = e->block_size > 0 ? e->block_size : 16;
    return step_cost_prefill_budget(&e->cost, decodes, prefills, e->opt.target_tpot_ms / 1e3, floor,
                                    budget > decodes ? budget - decodes : floor);
}

void schedule_step(engine *e, step_slot *st, bool allow_preempt) {
    st->b.n_seqs = 0;
    st->b.n_tokens = 0;
    st->hist_len = 0;
    st->n_plan = 0;
    st->b.block_size = e->block_size;
    ensure_caps(st, 1, 1);
    st->b.query_start[0] = 0;
    int64_t budget = e->opt.max_num_batched_tokens;
    int64_t prefill_budget = prompt_token_budget(e, budget);

    /* 1. running sequences, highest priority first */
    for (seq *s = e->running.head, *next; s && budget > 0; s = next) {
        next = s->next;
        int64_t remaining = total_len(s) - s->num_scheduled;
        if (remaining <= 0) continue;
        /* Asynchronous scheduling: when the token a launched step is sampling is this sequence's
         * last (max_tokens or the model length), a step for it now would compute a token nobody
         * reads and hold its blocks until that step ends (under ASan on a loaded machine, longer
         * than a client waits for the server to go idle). */
        if (s->n_pending > 0 && (s->n_output + s->n_pending >= s->max_tokens ||
                                 s->n_known + s->n_pending >= e->opt.max_model_len))
            continue;
        int64_t n_new = remaining < budget ? remaining : budget;
        if (n_new > 1) { /* a prompt chunk (or a recomputation): the prompt budget too */
            if (prefill_budget <= 0) continue;
            if (n_new > prefill_budget) n_new = prefill_budget;
        }
        for (;;) {
            if (bm_can_grow(e->bm, &s->kv, s->num_scheduled + n_new, s->num_scheduled)) {
                bm_grow(e->bm, &s->kv, s->num_scheduled + n_new, s->num_scheduled);
                plan_seq(st, s, n_new);
                budget -= n_new;
                if (n_new > 1) prefill_budget -= n_new;
                break;
            }
            if (!allow_preempt) break;
            seq *victim = e->running.tail;
            if (victim == s) {
                preempt(e, s);
                break;
            }
            /* The tail is `next` whenever s is the last but one: preempted, it moves to the waiting
             * list, so the loop must not step onto it (it ends here instead: the tail has no next). */
            if (victim == next) next = victim->next;
            preempt(e, victim);
        }
    }

    /* 2. waiting sequences, in (priority, arrival) order */
    for (seq *s = e->waiting.head, *next; s && budget > 0; s = next) {
        next = s->next;
        if (running_in_step(st) >= e->opt.max_num_seqs || e->running.n >= e->opt.max_num_seqs ||
            e->n_free_slots == 0)
            break;
        if (!ready_to_admit(s)) continue;
        int64_t cached = -1; /* tokens found in the prefix cache (-1: not looked up) */
        /* DEP: its rank, while it holds no block (one rank: 0) */
        if (!s->kv.n_full && !s->kv.n_swa && !s->kv.num_tokens) s->kv.rank = bm_pick_rank(e->bm);
        /* Prompt logprobs need the logits of every prompt position, which a cache hit would skip
         * (vLLM makes the same exception); such a sequence still fills the cache for others. */
        if (s->num_scheduled == 0 && e->opt.enable_prefix_caching &&
            s->params.prompt_logprobs == 0) {
            cached = bm_match_prefix(e->bm, &s->kv, s->tokens, s->n_known);
            if (cached < 0) cached = 0;
            log_debug("request %llu.%d: %lld of %lld tokens found in the prefix cache",
                      (unsigned long long)s->request_id, s->index, (long long)cached,
                      (long long)s->n_known);
            s->num_scheduled = s->num_computed = cached;
        }
        int64_t remaining = s->n_known - s->num_scheduled;
        int64_t n_new = remaining < budget ? remaining : budget;
        if (n_new > 1 && n_new > prefill_budget) n_new = prefill_budget;
        if (n_new <= 0 || !bm_can_grow(e->bm, &s->kv, s->num_scheduled + n_new, s->num_scheduled)) {
            bm_free(e->bm, &s->kv); /* give back the prefix it matched; it will look again */
            s->num_scheduled = s->num_computed = 0;
            break;
        }
        bm_grow(e->bm, &s->kv, s->num_scheduled + n_new, s->num_scheduled);
        bool first_admission = !s->admitted_once;
        seq_list_remove(&e->waiting, s);
        s->status = SEQ_RUNNING;
        s->admitted_once = true;
        s->slot = e->free_slots[--e->n_free_slots];
        s->slot_fresh = true;
        seq_list_insert_ordered(&e->running, s);
        pthread_mutex_lock(&e->mu);
        e->inbox_waiting--;
        /* The prefix cache's counters: once per sequence, when it is admitted (a sequence that
         * looked and could not be admitted looks again next time). */
        if (first_admission && cached >= 0) {
            e->metrics.prefix_cache_queries += (uint64_t)s->n_known;
            e->metrics.prefix_cache_hits += (uint64_t)cached;
            s->cached_tokens = cached;
        }
        if (first_admission) {
            e->metrics.prompt_tokens += (uint64_t)s->prompt_len;
            histogram_observe(&e->metrics.queue_time, now_seconds() - s->t_arrival);
        }
        pthread_mutex_unlock(&e->mu);
        plan_seq(st, s, n_new);
        budget -= n_new;
        if (n_new > 1) prefill_budget -= n_new;
    }
    lay_out(e, st);
    fill_tables(st);
}
