#include "bench/bench_serve.h"

#include "base/error.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "bench/bench_plan.h"
#include "bench/http_client.h"
#include "bench/metrics_stats.h"
#include "bench/progress.h"
#include "bench/sse.h"
#include "bench/workload.h"
#include "tokenizer/bpe.h"

#include <event2/event.h>
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

void bench_serve_defaults(bench_serve_opts *o) {
    memset(o, 0, sizeof *o);
    bench_plan_defaults(&o->plan);
    o->timeout = 600;
}

typedef struct serve_ctx serve_ctx;

/* One request in flight. */
typedef struct {
    serve_ctx *ctx;
    bench_record *rec;
    const bench_item *item;
    sse_parser sse;
    double t_read; /* arrival time of the body bytes being parsed */
    double last;   /* the last chunk that carried a choice */
    bool got_choice;
    int chunks;
    int usage_completion, usage_prompt; /* -1 until a usage object reports them */
    char *err;                          /* a failure seen inside the stream */
    char head[320];                     /* the body's first bytes, for error messages */
    size_t head_len;
} req_state;

struct serve_ctx {
    const bench_serve_opts *o;
    struct event_base *base;
    hc_pool *pool;
    char *path, *headers, *model_json;
    const char *model_name;
    tokenizer *tok; /* chat prompts */
    /* the phase being run */
    const bench_item *items;
    bench_run *run;
    int n, next, inflight, done, concurrency;
    double t_end;
    bench_progress prog;
};

/* ---- request bodies ---- */

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? b->cap * 2 : 4096;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}
static void sb_str(sbuf *b, const char *s) {
    sb_put(b, s, strlen(s));
}

static void sb_int(sbuf *b, long v) {
    char t[24];
    int n = snprintf(t, sizeof t, "%ld", v);
    sb_put(b, t, (size_t)n);
}

/* The tail every request shares: output length, sampling, streaming with usage. */
static void common_fields(serve_ctx *c, sbuf *b, const char *max_tokens_key, int osl) {
    char t[96];
    snprintf(t, sizeof t, ",\"%s\":", max_tokens_key);
    sb_str(b, t);
    sb_int(b, osl);
    if (c->o->plan.temperature >= 0) {
        snprintf(t, sizeof t, ",\"temperature\":%.17g", c->o->plan.temperature);
        sb_str(b, t);
    }
    sb_str(b, ",\"ignore_eos\":true,\"stream\":true,\"stream_options\":{\"include_usage\":true}}");
}

/* Completions: {"model":…,"prompt":[ids],"max_tokens":…,…}. Built by hand: an 8k-id prompt through
 * jansson would cost thousands of allocations per request. */
static char *completion_body(serve_ctx *c, const bench_item *it, size_t *len) {
    sbuf b = {0};
    sb_str(&b, "{\"model\":");
    sb_str(&b, c->model_json);
    sb_str(&b, ",\"prompt\":[");
    int32_t *ids = xmalloc((size_t)it->isl * sizeof *ids);
    bench_prompt_ids(it, ids);
    for (int j = 0; j < it->isl; j++) {
        if (j) sb_put(&b, ",", 1);
        sb_int(&b, ids[j]);
    }
    free(ids);
    sb_put(&b, "]", 1);
    common_fields(c, &b, "max_tokens", it->osl);
    *len = b.len;
    return b.p;
}

/* Chat: one user message with a text prompt; vLLM's client names the limit max_completion_tokens.
 */
static char *chat_body(serve_ctx *c, const bench_item *it, size_t *len) {
    char *text = bench_prompt_text(it, c->tok);
    json_t *msg = json_pack("[{ss ss}]", "role", "user", "content", text);
    char *msgs = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    free(text);
    sbuf b = {0};
    sb_str(&b, "{\"model\":");
    sb_str(&b, c->model_json);
    sb_str(&b, ",\"messages\":");
    sb_str(&b, msgs);
    free(msgs);
    common_fields(c, &b, "max_completion_tokens", it->osl);
    *len = b.len;
    return b.p;
}

/* ---- one streamed response ---- */

static void stream_fail(req_state *s, char *msg) {
    if (!s->err)
        s->err = msg;
    else
        free(msg);
}

/* One SSE event: a chunk with a choice is a token arrival (vLLM counts it even when its text is
 * empty); a usage object gives the token counts; an error object fails the request. */
static void on_event(void *user, const char *data, size_t len) {
    req_state *s = user;
    if (s->err || (len == 6 && !memcmp(data, "[DONE]", 6))) return;
    json_error_t jerr;
    /* JSON_ALLOW_NUL: a token that is the byte 0 streams as a backslash-u0000 escape, valid JSON
     * that jansson refuses by default (seen from our server on random prompts). */
    json_t *j = json_loadb(data, len, JSON_ALLOW_NUL, &jerr);
    if (!j) {
        stream_fail(s, xasprintf("invalid JSON in the stream (%s): %.120s", jerr.text, data));
        return;
    }
    json_t *e = json_object_get(j, "error");
    if (e && !json_is_null(e)) {
        const char *m = json_string_value(json_object_get(e, "message"));
        stream_fail(s, xasprintf("error event in the stream: %s", m ? m : data));
    }
    json_t *ch = json_object_get(j, "choices");
    if (json_is_array(ch) && json_array_size(ch) > 0) {
        bench_record *r = s->rec;
        if (!s->got_choice) {
            s->got_choice = true;
            r->ttft = s->t_read - r->start;
        } else {
            bench_record_itl(r, s->t_read - s->last);
        }
        s->last = s->t_read;
        s->chunks++;
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        json_t *ct = json_object_get(u, "completion_tokens"),
               *pt = json_object_get(u, "prompt_tokens");
        if (json_is_integer(ct)) s->usage_completion = (int)json_integer_value(ct);
        if (json_is_integer(pt)) s->usage_prompt = (int)json_integer_value(pt);
    }
    json_decref(j);
}

static void on_body(void *user, const char *data, size_t len, double t) {
    req_state *s = user;
    s->t_read = t;
    if (s->head_len + 1 < sizeof s->head) {
        size_t n = len < sizeof s->head - 1 - s->head_len ? len : sizeof s->head - 1 - s->head_len;
        memcpy(s->head + s->head_len, data, n);
        s->head_len += n;
        s->head[s->head_len] = 0;
    }
    sse_feed(&s->sse, data, len, on_event, s);
}

static void start_more(serve_ctx *c);

/* Book-keeping of a finished request (success when error is NULL); frees s. */
static void finish_state(serve_ctx *c, req_state *s, const char *error) {
    bench_record *r = s->rec;
    r->success = error == NULL;
    if (error) {
        char *m = xasprintf("%s", error);
        for (char *p = m; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
        bench_run_error(c->run, m);
        free(m);
    }
    progress_step(&c->prog, error != NULL);
    sse_free(&s->sse);
    free(s->err);
    free(s);
    c->inflight--;
    c->done++;
    if (c->done == c->n) {
        c->t_end = now_seconds();
        event_base_loopbreak(c->base);
    }
}

static void request_done(serve_ctx *c, req_state *s, const char *error) {
    finish_state(c, s, error);
    start_more(c);
}

static void on_done(void *user, int status, const char *error, double t) {
    req_state *s = user;
    serve_ctx *c = s->ctx;
    (void)t;
    if (error) {
        request_done(c, s, error);
        return;
    }
    if (status != 200) {
        char msg[400];
        snprintf(msg, sizeof msg, "HTTP %d: %s", status, s->head);
        request_done(c, s, msg);
        return;
    }
    sse_finish(&s->sse, on_event, s);
    if (s->err) {
        request_done(c, s, s->err);
        return;
    }
    if (!s->got_choice) { /* e.g. a server that ignored stream: true and sent one JSON object */
        char msg[400];
        snprintf(msg, sizeof msg,
                 "the response had no streamed chunk carrying a choice; it began: %.200s", s->head);
        request_done(c, s, msg);
        return;
    }
    bench_record *r = s->rec;
    r->latency = s->last - r->start;
    r->output_len = s->usage_completion >= 0 ? s->usage_completion : s->chunks;
    r->prompt_len = s->usage_prompt >= 0 ? s->usage_prompt : s->item->isl;
    request_done(c, s, NULL);
}

static const hc_handler STREAM_HANDLER = {on_body, on_done};

static void start_more(serve_ctx *c) {
    while (c->inflight < c->concurrency && c->next < c->n) {
        int i = c->next++;
        const bench_item *it = &c->items[i];
        req_state *s = xcalloc(1, sizeof *s);
        s->ctx = c;
        s->item = it;
        s->rec = &c->run->rec[i];
        s->usage_completion = s->usage_prompt = -1;
        sse_init(&s->sse);
        s->rec->expected_output = it->osl;
        s->rec->prompt_len = s->rec->sent_prompt_len = it->isl;
        size_t len;
        char *body = c->o->chat ? chat_body(c, it, &len) : completion_body(c, it, &len);
        c->inflight++;
        s->rec->start = now_seconds(); /* vLLM: perf_counter() just before session.post */
        int rc = hc_request(c->pool, "POST", c->path, c->headers, body, len, &STREAM_HANDLER, s);
        free(body);
        if (rc != 0)
            finish_state(c, s, err_msg()); /* no connection: fails at once, the loop goes on */
    }
}

/* Runs items[0..n) with at most `concurrency` in flight; records go to run. */
static void run_phase(serve_ctx *c, const bench_item *items, int n, int concurrency, bench_run *run,
                      const char *what) {
    c->items = items;
    c->run = run;
    c->n = n;
    c->next = c->inflight = c->done = 0;
    c->concurrency = concurrency;
    progress_start(&c->prog, c->o->plan.progress, what, concurrency, n);
    if (n > 0) {
        start_more(c);
        if (c->done < c->n) event_base_dispatch(c->base);
    }
    c->t_end = c->t_end > 0 ? c->t_end : now_seconds();
    progress_end(&c->prog);
}

/* ---- GET /v1/models ---- */

typedef struct {
    serve_ctx *c;
    sbuf body;
    int status;
    char *error;
    bool done;
} models_req;

static void models_body(void *user, const char *data, size_t len, double t) {
    (void)t;
    models_req *m = user;
    if (m->body.len < (1 << 20)) sb_put(&m->body, data, len);
}

static void models_done(void *user, int status, const char *error, double t) {
    (void)t;
    models_req *m = user;
    m->status = status;
    if (error) m->error = xstrdup(error);
    m->done = true;
    event_base_loopbreak(m->c->base);
}

static const hc_handler MODELS_HANDLER = {models_body, models_done};

/* The first model the server lists (vLLM's client does the same when --model is not given). */
static char *first_model(serve_ctx *c, const char *prefix) {
    models_req m = {.c = c};
    char *path = xasprintf("%s/models", prefix);
    int rc = hc_request(c->pool, "GET", path, c->headers, NULL, 0, &MODELS_HANDLER, &m);
    free(path);
    if (rc != 0) return NULL;
    while (!m.done) event_base_dispatch(c->base);
    char *id = NULL;
    if (m.error) {
        err_set("GET %s/models: %s", prefix, m.error);
    } else if (m.status != 200) {
        err_set("GET %s/models: HTTP %d: %.200s", prefix, m.status, m.body.p ? m.body.p : "");
    } else {
        json_t *j = json_loadb(m.body.p ? m.body.p : "", m.body.len, 0, NULL);
        const char *s =
            json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
        if (s)
            id = xstrdup(s);
        else
            err_set("GET %s/models: no model id in the answer (give --model)", prefix);
        json_decref(j);
    }
    free(m.body.p);
    free(m.error);
    return id;
}

/* ---- the sweep ---- */

/* Thousands of streams need thousands of descriptors: lift the soft limit to the hard one. */
static void raise_fd_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

static int sweep(serve_ctx *c, const char *base_url) {
    const bench_serve_opts *o = c->o;
    const bench_plan *p = &o->plan;
    json_t *results = json_array();
    int any_failed = 0, rc = 0;
    for (int k = 0; k < p->n_concurrency && rc == 0; k++) {
        bench_level lv;
        bench_level_init(p, k, c->path, &lv);
        bench_run warm;
        bench_run_init(&warm, lv.w);
        run_phase(c, lv.items + lv.n, lv.w, lv.C, &warm, "warmup");
        if (lv.w > 0 && warm.n_errors == lv.w) {
            rc = err_set("every warm-up request failed at concurrency %d; the first error: %s",
                         lv.C, warm.first_error);
            bench_run_free(&warm);
            bench_level_free(&lv);
            break;
        }
        if (warm.n_errors > 0)
            fprintf(stderr, "warning: %d of %d warm-up requests failed; the first error: %s\n",
                    warm.n_errors, lv.w, warm.first_error);
        bench_run_free(&warm);

        bench_run run;
        bench_run_init(&run, lv.n);
        bench_level_start(&lv);
        c->t_end = 0;
        double t0 = now_seconds();
        run_phase(c, lv.items, lv.n, lv.C, &run, "run");
        run.duration = c->t_end - t0;
        bench_meta meta = {o->chat ? "openai-chat" : "openai", c->model_name, p->label, base_url,
                           p->seed};
        if (bench_level_report(p, &lv, &run, &meta, results, "gptoss bench serve", &any_failed) !=
            0)
            rc = -1;
        printf("client: %d connections opened so far (keep-alive reuse), %d open\n",
               hc_pool_opened(c->pool), hc_pool_open_now(c->pool));
        bench_run_free(&run);
        bench_level_free(&lv);
    }
    if (rc == 0 && p->output_json) fprintf(stderr, "results: %s\n", p->output_json);
    json_decref(results);
    return rc ? rc : any_failed;
}

int bench_serve(const bench_serve_opts *o) {
    hc_url u;
    if (hc_url_parse(o->url, &u) != 0) return -1;
    signal(SIGPIPE, SIG_IGN); /* a server closing a socket must be an error, not the end of us */
    raise_fd_limit();
    serve_ctx c = {.o = o};
    int rc = -1;
    /* "http://h:p" and "http://h:p/v1" both name the same API. */
    size_t pl = strlen(u.prefix);
    char *v1 = pl >= 3 && !strcmp(u.prefix + pl - 3, "/v1") ? xstrdup(u.prefix)
                                                            : xasprintf("%s/v1", u.prefix);
    c.path = xasprintf("%s/%s", v1, o->chat ? "chat/completions" : "completions");
    const char *key = o->api_key ? o->api_key : getenv("OPENAI_API_KEY");
    c.headers = key && *key ? xasprintf("Authorization: Bearer %s\r\n", key) : xstrdup("");
    char *model = NULL;
    c.base = event_base_new();
    if (!c.base) {
        err_set("cannot create the event loop");
        goto out;
    }
    if (!(c.pool = hc_pool_new(c.base, u.host, u.port, o->timeout))) goto out;
    if (o->chat) {
        c.tok = tokenizer_load_for_model(NULL); /* optional: without it the prompts are words */
        if (!c.tok) fprintf(stderr, "note: no tokenizer found; chat prompts are random words\n");
    }
    model = o->model ? xstrdup(o->model) : first_model(&c, v1);
    if (!model) goto out;
    c.model_name = model;
    json_t *ms = json_string(model);
    c.model_json = json_dumps(ms, JSON_ENCODE_ANY);
    json_decref(ms);
    printf("gptoss bench serve: %s (POST %s), model %s, ISL %d, OSL %d (range ratio %.2f), "
           "ignore_eos, "
           "request rate inf\n",
           o->url, c.path, model, o->plan.isl, o->plan.osl, o->plan.range_ratio);
    rc = sweep(&c, o->url);
out:
    hc_pool_free(c.pool);
    if (c.base) event_base_free(c.base);
    tokenizer_free(c.tok);
    free(model);
    free(c.model_json);
    free(c.path);
    free(c.headers);
    free(v1);
    hc_url_free(&u);
    return rc;
}
