/* Engine internals shared by engine.c (the loop), scheduler.c (what runs next, and the flat step
 * arrays: it fills a step_slot with add_seq / fill_tables, engine.c frees them) and output.c (tokens →
 * stop checks → streamed events). The sequence itself is seq.h's. Not for other modules. */
#ifndef GPTOSS_ENGINE_ENGINE_INTERNAL_H
#define GPTOSS_ENGINE_ENGINE_INTERNAL_H

#include "step/batch.h"
#include "engine/block_manager.h"
#include "engine/engine.h"
#include "engine/step_cost.h"
#include "engine/seq.h"

#include <pthread.h>

/* The arrays of one step plus the sequences they describe. */
typedef struct {
    step_batch b;
    seq **seqs;
    int32_t *hist_buf; /* copies of the histories the penalties read (the sequences' own arrays can
                          be reallocated while the step runs) */
    int64_t hist_len, hist_cap;
    int cap_seqs, cap_tokens, cap_full, cap_swa;
    /* what schedule_step chose, before it is laid out rank by rank: plan_seq[k] gets plan_n[k] new
     * tokens */
    seq **plan_seq;
    int64_t *plan_n;
    int n_plan, cap_plan;
    bool launched;
    /* structured output: the gate the step's samplers wait on, one mask row per constrained
     * sequence (mask_buf holds cap_mask rows), filled by fill_masks while the step runs */
    step_masks masks;
    const uint32_t **mask_rows;
    uint32_t *mask_buf;
    int cap_mask_rows, cap_mask;
} step_slot;

typedef enum { INBOX_SUBMIT, INBOX_ABORT } inbox_kind;
typedef struct inbox_item {
    inbox_kind kind;
    uint64_t id;
    seq *seqs; /* SUBMIT: a chain of n prepared sequences */
    struct inbox_item *next;
} inbox_item;

struct engine {
    engine_options opt;
    const backend_ops *ops;
    backend *be;
    const model_config *cfg;
    block_manager *bm;
    int block_size, window;

    seq_list waiting, running, finished;
    int *free_slots, n_free_slots;
    uint64_t arrivals;

    step_slot steps[2]; /* double buffer: one in flight, one being built */
    int inflight;       /* index of the launched step, or -1 */
    /* --target-tpot-ms: the steps' cost as learned (step_cost.h), and when the step in flight was
     * launched and the last one finished (a step's time when the backend does not measure it). */
    step_cost cost;
    double t_launched, t_collected;
    bool failed;

    pthread_mutex_t mu; /* guards inbox, metrics, n_waiting_submitted and the thread flags */
    inbox_item *inbox_head, *inbox_tail;
    int inbox_waiting; /* sequences submitted but not yet finished or running (for max_waiting) */
    engine_metrics metrics;
    pthread_t thread;
    pthread_cond_t wake;
    bool thread_running, stop_requested;
};

/* scheduler.c: fills `st` with the next step; allow_preempt only when no step is in flight. */
void schedule_step(engine *e, step_slot *st, bool allow_preempt);

/* structured.c: before launch, the step's mask gate (closed); after launch, its masks (opened) */
void structured_prepare(engine *e, step_slot *st);
void structured_fill(engine *e, step_slot *st);

/* output.c */
void seq_append_token(engine *e, seq *s, int32_t tok, const seq_result *r);
void seq_finish(engine *e, seq *s, const char *reason);
void seq_emit(engine *e, seq *s, bool force);
void seq_release(engine *e, seq *s); /* blocks and slot back, once nothing in flight uses them */

#endif
