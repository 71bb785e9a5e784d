/* The periodic one-line stats log, like vLLM's: throughput since the last line, queue sizes, KV
 * usage and prefix-cache hit rate. Runs on loop 0's timer; silent while nothing happens. */
#include "server/server_internal.h"

#include "base/log.h"
#include "base/timeutil.h"

void stats_log_tick(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    server *s = arg;
    if (atomic_load(&s->state) == SRV_LOADING || !s->eng) return;
    engine_metrics m;
    engine_get_metrics(s->eng, &m);
    double now = now_seconds();
    if (s->last_t == 0) {
        s->last_t = now;
        s->last_prompt = m.prompt_tokens, s->last_gen = m.generation_tokens;
        s->last_queries = m.prefix_cache_queries, s->last_hits = m.prefix_cache_hits;
        return;
    }
    double dt = now - s->last_t;
    uint64_t dp = m.prompt_tokens - s->last_prompt, dg = m.generation_tokens - s->last_gen;
    uint64_t dq = m.prefix_cache_queries - s->last_queries, dh = m.prefix_cache_hits - s->last_hits;
    bool active = dp || dg || m.num_requests_running || m.num_requests_waiting;
    if (active && dt > 0)
        log_info("Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
                 "Running: %d reqs, "
                 "Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
                 (double)dp / dt, (double)dg / dt, m.num_requests_running, m.num_requests_waiting,
                 100.0 * m.kv_cache_usage, dq ? 100.0 * (double)dh / (double)dq : 0.0);
    s->last_t = now;
    s->last_prompt = m.prompt_tokens, s->last_gen = m.generation_tokens;
    s->last_queries = m.prefix_cache_queries, s->last_hits = m.prefix_cache_hits;
}
