/* Engine internals shared by engine.c (the loop), scheduler.c (what runs next), step_builder.c (the
 * flat step arrays) and output.c (tokens → stop checks → streamed events). Not for other modules. */
#ifndef GPTOSS_ENGINE_ENGINE_INTERNAL_H
#define GPTOSS_ENGINE_ENGINE_INTERNAL_H

#include "step/batch.h"
#include "engine/block_manager.h"
#include "engine/engine.h"

#include <pthread.h>

typedef enum { SEQ_WAITING, SEQ_RUNNING, SEQ_FINISHED } seq_status;

typedef struct seq seq;
struct seq {
    uint64_t request_id;
    int index; /* of the request's n */
    seq *parent; /* index > 0: admitted once the parent's prompt is cached, to share its blocks */
    seq_status status;
    int priority;
    uint64_t arrival; /* submission order, for FCFS among equal priorities */

    /* tokens: prompt followed by the generated tokens known on the host */
    int32_t *tokens;
    int64_t n_known, cap;
    int64_t prompt_len;
    int n_pending;          /* sampled by a launched step, not yet known here (0 or 1) */
    int64_t num_scheduled;  /* KV positions computed or being computed by launched steps */
    int64_t num_computed;   /* KV positions whose step has completed */
    int n_output;           /* generated tokens known here */
    int inflight;           /* launched steps containing this sequence, not yet processed */
    int slot;               /* backend slot, -1 when none */
    bool slot_fresh;        /* first step since the slot was taken */
    bm_seq kv;
    int64_t cached_tokens;  /* prompt tokens found in the prefix cache at first admission */
    bool admitted_once;

    sampling_params params;
    logit_bias_entry *logit_bias;
    int max_tokens;
    int32_t *stop_ids;
    int n_stop_ids;
    char **stop_strings;
    int n_stop_strings;
    size_t max_stop_len;
    engine_output_fn on_output;
    void *user;

    /* output streaming */
    int emitted;            /* generated tokens already sent to the callback */
    float *logprobs;        /* per generated token */
    int32_t *top_ids;       /* [n_output * params.logprobs] */
    float *top_logprobs;
    int32_t *prompt_top_ids; /* [(prompt_len - 1) * prompt_logprobs], filled as chunks complete */
    float *prompt_top_logprobs;
    int64_t prompt_rows_done; /* prompt positions 1..prompt_rows_done have rows */
    bool prompt_rows_sent;
    char *tail;             /* the last bytes of generated text, for stop strings across tokens */
    size_t tail_len;
    size_t text_len;        /* bytes of generated text so far */
    const char *finish_reason;
    int32_t stop_token;
    int stop_string;
    int trim_bytes;
    bool final_sent;

    double t_arrival, t_first_token, t_last_token;
    seq *next; /* intrusive list link (waiting / running / finished lists) */
};

typedef struct {
    seq *head, *tail;
    int n;
} seq_list;

/* The arrays of one step plus the sequences they describe. */
typedef struct {
    step_batch b;
    seq **seqs;
    int32_t *hist_buf; /* copies of the histories the penalties read (the sequences' own arrays can
                          be reallocated while the step runs) */
    int64_t hist_len, hist_cap;
    int cap_seqs, cap_tokens, cap_full, cap_swa;
    bool launched;
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
    bool failed;

    pthread_mutex_t mu; /* guards inbox, metrics, n_waiting_submitted and the thread flags */
    inbox_item *inbox_head, *inbox_tail;
    int inbox_waiting;  /* sequences submitted but not yet finished or running (for max_waiting) */
    engine_metrics metrics;
    pthread_t thread;
    pthread_cond_t wake;
    bool thread_running, stop_requested;
};

/* lists */
void seq_list_push(seq_list *l, seq *s);
void seq_list_remove(seq_list *l, seq *s);
/* Inserts by (priority, arrival). */
void seq_list_insert_ordered(seq_list *l, seq *s);

/* scheduler.c: fills `st` with the next step; allow_preempt only when no step is in flight. */
void schedule_step(engine *e, step_slot *st, bool allow_preempt);

/* output.c */
void seq_append_token(engine *e, seq *s, int32_t tok, const seq_result *r);
void seq_record_prompt_rows(seq *s, int64_t start_pos, const seq_result *r);
void seq_finish(engine *e, seq *s, const char *reason);
void seq_emit(engine *e, seq *s, bool force);
void seq_release(engine *e, seq *s); /* blocks and slot back, once nothing in flight uses them */
void seq_destroy(seq *s);

#endif
