/* GET /metrics: the engine's counters in the Prometheus text format, under vLLM's metric names and
 * `model_name` label so existing dashboards and routers work unchanged. Counters follow the
 * Prometheus client convention: `# TYPE vllm:prompt_tokens counter` with the sample named
 * `vllm:prompt_tokens_total`. */
#include "server/server_internal.h"

#include "base/xalloc.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t len, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        b->cap = b->cap * 2 + (size_t)(n > 0 ? n : 0) + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
}

static void header(sbuf *b, const char *name, const char *type, const char *help) {
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gauge(sbuf *b, const char *name, const char *help, const char *label, double v) {
    header(b, name, "gauge", help);
    sb_printf(b, "%s{%s} %.17g\n", name, label, v);
}

static void counter(sbuf *b, const char *name, const char *help, const char *label, uint64_t v) {
    header(b, name, "counter", help);
    sb_printf(b, "%s_total{%s} %llu\n", name, label, (unsigned long long)v);
}

static void hist(sbuf *b, const char *name, const char *help, const char *label,
                 const histogram *h) {
    header(b, name, "histogram", help);
    uint64_t cum = 0;
    for (int i = 0; i < h->n_buckets; i++) {
        cum += h->counts[i];
        sb_printf(b, "%s_bucket{%s,le=\"%.17g\"} %llu\n", name, label, h->bounds[i],
                  (unsigned long long)cum);
    }
    cum += h->counts[h->n_buckets];
    sb_printf(b, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, label, (unsigned long long)cum);
    sb_printf(b, "%s_sum{%s} %.17g\n", name, label, h->sum);
    sb_printf(b, "%s_count{%s} %llu\n", name, label, (unsigned long long)h->count);
}

/* Label values escape backslash, quote and newline. */
static void label_for(const char *model, char *out, size_t cap) {
    size_t o = 0;
    o += (size_t)snprintf(out, cap, "model_name=\"");
    for (const char *p = model; *p && o + 3 < cap; p++) {
        if (*p == '\\' || *p == '"')
            out[o++] = '\\', out[o++] = *p;
        else if (*p == '\n')
            out[o++] = '\\', out[o++] = 'n';
        else
            out[o++] = *p;
    }
    if (o + 2 > cap) o = cap - 2;
    out[o++] = '"';
    out[o] = 0;
}

char *metrics_prom_render(const engine_metrics *m, const char *model_name, size_t *len) {
    sbuf b = {0};
    char L[512], lr[600];
    label_for(model_name, L, sizeof L);
    gauge(&b, "vllm:num_requests_running", "Number of requests in model execution batches.", L,
          m->num_requests_running);
    gauge(&b, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", L,
          m->num_requests_waiting);
    gauge(&b, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", L,
          m->kv_cache_usage);
    counter(&b, "vllm:prompt_tokens", "Number of prefill tokens processed.", L, m->prompt_tokens);
    counter(&b, "vllm:generation_tokens", "Number of generation tokens processed.", L,
            m->generation_tokens);
    counter(&b, "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.", L,
            m->prefix_cache_queries);
    counter(&b, "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
            L, m->prefix_cache_hits);
    counter(&b, "vllm:num_preemptions", "Cumulative number of preemption from the engine.", L,
            m->num_preemptions);
    header(&b, "vllm:request_success", "counter", "Count of successfully processed requests.");
    const struct {
        const char *reason;
        uint64_t v;
    } fin[] = {{"stop", m->requests_finished_stop},
               {"length", m->requests_finished_length},
               {"abort", m->requests_finished_abort},
               {"error", m->requests_finished_error}};
    for (size_t i = 0; i < sizeof fin / sizeof fin[0]; i++) {
        snprintf(lr, sizeof lr, "%s,finished_reason=\"%s\"", L, fin[i].reason);
        sb_printf(&b, "vllm:request_success_total{%s} %llu\n", lr, (unsigned long long)fin[i].v);
    }
    hist(&b, "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", L,
         &m->ttft);
    hist(&b, "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", L,
         &m->itl);
    hist(&b, "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", L,
         &m->e2e);
    hist(&b, "vllm:request_queue_time_seconds",
         "Histogram of time spent in WAITING phase for request.", L, &m->queue_time);
    hist(&b, "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", L,
         &m->batch_tokens);
    /* Ours (no vLLM equivalent): the engine's step time and sequences per step. */
    hist(&b, "gptoss:step_time_seconds", "Histogram of engine step time in seconds.", L,
         &m->step_time);
    hist(&b, "gptoss:step_sequences", "Histogram of sequences per engine step.", L, &m->batch_seqs);
    counter(&b, "gptoss:engine_steps", "Engine steps run.", L, m->steps);
    *len = b.len;
    return b.p;
}

void handle_metrics(srv_loop *l, struct evhttp_request *req) {
    server *s = l->srv;
    engine_metrics m;
    if (atomic_load(&s->state) != SRV_LOADING && s->eng)
        engine_get_metrics(s->eng, &m);
    else
        metrics_init(&m);
    size_t len;
    char *body = metrics_prom_render(&m, s->model_name, &len);
    /* The event loops' worst stall (server_internal.h, max_cb_ns): the health of the front end.
     * Labelled by model like every other family (the dashboard filters each panel by model). */
    char L[512];
    label_for(s->model_name, L, sizeof L);
    size_t cap = len + 256 + (size_t)s->n_loops * (96 + strlen(L));
    body = xrealloc(body, cap);
    len += (size_t)snprintf(body + len, cap - len,
                            "# HELP gptoss:event_loop_max_callback_seconds Longest CPU time one "
                            "callback held an event loop.\n"
                            "# TYPE gptoss:event_loop_max_callback_seconds gauge\n");
    for (int i = 0; i < s->n_loops; i++)
        len += (size_t)snprintf(body + len, cap - len,
                                "gptoss:event_loop_max_callback_seconds{%s,loop=\"%d\"} %.6f\n", L,
                                i, (double)atomic_load(&s->loops[i].max_cb_ns) / 1e9);
    reply_text(s, req, 200, "text/plain; version=0.0.4; charset=utf-8", body, len);
    free(body);
}
