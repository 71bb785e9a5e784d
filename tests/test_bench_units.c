/* The benchmark's pure parts: numpy-identical statistics, vLLM's metric definitions on hand-made
 * records, the HTTP/1.1 response parser and the SSE reader fed in every possible split, the
 * workload's bounds and determinism, URL parsing and the Pareto envelope. */
#include "check.h"

#include "base/xalloc.h"
#include "bench/bench_plot.h"
#include "bench/http_client.h"
#include "bench/http_parse.h"
#include "bench/metrics_stats.h"
#include "bench/sse.h"
#include "bench/workload.h"

#include <stdlib.h>
#include <string.h>

/* ---- statistics ---- */

static void test_stats(void) {
    /* numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97 */
    double a[] = {1, 2, 3, 4};
    CHECK_NEAR(bench_percentile(a, 4, 50), 2.5, 1e-12, "p50");
    CHECK_NEAR(bench_percentile(a, 4, 90), 3.7, 1e-12, "p90");
    CHECK_NEAR(bench_percentile(a, 4, 99), 3.97, 1e-12, "p99");
    CHECK_NEAR(bench_percentile(a, 4, 100), 4, 1e-12, "p100");
    CHECK_NEAR(bench_percentile(a, 4, 0), 1, 1e-12, "p0");
    double one[] = {7};
    CHECK_NEAR(bench_percentile(one, 1, 99), 7, 1e-12, "single value");
    CHECK_NEAR(bench_percentile(NULL, 0, 50), 0, 0, "empty");
    /* Unsorted input in seconds → ms; np.std([0.004, 0.001, 0.003, 0.002]) = 0.00111803... */
    double v[] = {0.004, 0.001, 0.003, 0.002};
    bench_dist d = bench_dist_of(v, 4);
    CHECK_NEAR(d.mean, 2.5, 1e-9, "mean ms");
    CHECK_NEAR(d.median, 2.5, 1e-9, "median ms");
    CHECK_NEAR(d.std, 1.118033988749895, 1e-9, "population std ms");
    CHECK_NEAR(d.p90, 3.7, 1e-9, "p90 ms");
    CHECK_NEAR(d.p99, 3.97, 1e-9, "p99 ms");
    bench_dist z = bench_dist_of(NULL, 0);
    CHECK(z.mean == 0 && z.median == 0 && z.p99 == 0, "empty distribution is zeros (numpy on [0])");
}

/* Three requests: two successes (one with a bundled chunk) and one failure. */
static void test_metrics(void) {
    bench_run r;
    bench_run_init(&r, 3);
    bench_record *q = &r.rec[0];
    q->start = 100.0, q->ttft = 0.1, q->latency = 0.1 + 9 * 0.01; /* 10 tokens, one per chunk */
    for (int i = 0; i < 9; i++) bench_record_itl(q, 0.01);
    q->prompt_len = 50, q->output_len = 10, q->expected_output = 10, q->success = true;
    q = &r.rec[1];
    q->start = 100.05, q->ttft = 0.2, q->latency = 0.2 + 0.08; /* 5 tokens in 2 chunks: 1 + 4 */
    bench_record_itl(q, 0.08);
    q->prompt_len = 40, q->output_len = 5, q->expected_output = 6, q->success = true;
    q = &r.rec[2];
    q->start = 100.1, q->prompt_len = 30, q->expected_output = 10, q->success = false;
    bench_run_error(&r, "HTTP 500: boom");
    bench_run_error(&r, "HTTP 500: again");
    r.duration = 2.0;
    bench_metrics m = {.max_concurrency = 2, .num_gpus = 2};
    bench_metrics_compute(&r, &m);
    CHECK(m.completed == 2 && m.failed == 1, "completed %d failed %d", m.completed, m.failed);
    CHECK(m.total_input == 90 && m.total_output == 15,
          "tokens %lld/%lld (failed requests excluded)", m.total_input, m.total_output);
    CHECK_NEAR(m.request_throughput, 1.0, 1e-12, "request throughput");
    CHECK_NEAR(m.output_throughput, 7.5, 1e-12, "output throughput");
    CHECK_NEAR(m.total_token_throughput, 52.5, 1e-12, "total throughput");
    /* TPOT: (0.19 - 0.1)/9 = 10 ms and (0.28 - 0.2)/4 = 20 ms */
    CHECK_NEAR(m.tpot.mean, 15, 1e-9, "TPOT mean");
    CHECK_NEAR(m.tpot.median, 15, 1e-9, "TPOT median");
    /* ITL: nine 10 ms gaps and one 80 ms gap (a bundled chunk is one sample, vLLM's definition) */
    CHECK_NEAR(m.itl.mean, 17, 1e-9, "ITL mean");
    CHECK_NEAR(m.itl.median, 10, 1e-9, "ITL median");
    CHECK_NEAR(m.ttft.mean, 150, 1e-9, "TTFT mean");
    CHECK_NEAR(m.e2el.median, 235, 1e-9, "E2EL median");
    CHECK(m.short_outputs == 1, "short outputs %d", m.short_outputs);
    CHECK(m.max_concurrent_requests == 2, "peak concurrency %d", m.max_concurrent_requests);
    CHECK_NEAR(m.max_output_tokens_per_s, 12, 0,
               "peak chunks per second bucket"); /* 10 + 2 chunks */
    CHECK(m.first_error && !strcmp(m.first_error, "HTTP 500: boom") && r.n_errors == 2,
          "first error kept");
    CHECK_NEAR(bench_interactivity(&m), 1000.0 / 15, 1e-9, "interactivity = 1000 / median TPOT");

    bench_meta meta = {"openai", "m", NULL, "http://x", 0};
    json_t *j = bench_metrics_json(&m, &meta);
    static const char *const keys[] = {"max_concurrency",
                                       "num_prompts",
                                       "completed",
                                       "failed",
                                       "total_input_tokens",
                                       "total_output_tokens",
                                       "request_throughput",
                                       "output_throughput",
                                       "total_token_throughput",
                                       "duration",
                                       "mean_ttft_ms",
                                       "median_ttft_ms",
                                       "p90_ttft_ms",
                                       "p99_ttft_ms",
                                       "std_ttft_ms",
                                       "mean_tpot_ms",
                                       "median_tpot_ms",
                                       "p99_tpot_ms",
                                       "mean_itl_ms",
                                       "median_itl_ms",
                                       "p99_itl_ms",
                                       "mean_e2el_ms",
                                       "median_e2el_ms",
                                       "p99_e2el_ms",
                                       "num_gpus",
                                       "client_cpu_seconds",
                                       "tput_per_gpu",
                                       "median_intvty"};
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        CHECK(json_object_get(j, keys[k]) != NULL, "JSON key %s", keys[k]);
    CHECK_NEAR(json_real_value(json_object_get(j, "tput_per_gpu")), 26.25, 1e-12, "per GPU");
    json_decref(j);
    bench_run_free(&r);
}

/* ---- HTTP ---- */

typedef struct {
    char buf[4096];
    size_t len;
} sink;

static void body_sink(void *user, const char *d, size_t n) {
    sink *s = user;
    if (s->len + n < sizeof s->buf) memcpy(s->buf + s->len, d, n), s->len += n;
    s->buf[s->len] = 0;
}

/* Feeds msg in pieces of `step` bytes (0: all at once); returns consumed bytes, -1 on error. */
static long feed(http_parser *p, const char *msg, size_t len, size_t step, sink *s) {
    hp_init(p);
    memset(s, 0, sizeof *s);
    size_t off = 0;
    while (off < len && !hp_done(p)) {
        size_t n = step ? (len - off < step ? len - off : step) : len - off;
        long c = hp_feed(p, msg + off, n, body_sink, s);
        if (c < 0) return -1;
        off += (size_t)c;
        if ((size_t)c < n) break;
    }
    return (long)off;
}

static void test_http(void) {
    static const char chunked[] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
        "7\r\ndata: a\r\n2\r\n\n\n\r\nB;ext=1\r\ndata: bcd\n\n\r\n0\r\nX-Trailer: 1\r\n\r\n";
    http_parser p;
    sink s;
    for (size_t step = 0; step <= 9; step++) {
        long n = feed(&p, chunked, sizeof chunked - 1, step, &s);
        CHECK(n == (long)sizeof chunked - 1 && hp_done(&p),
              "chunked, step %zu: consumed %ld, error '%s'", step, n, p.error);
        CHECK(p.status == 200 && p.keep_alive && p.chunked, "chunked, step %zu: status/flags",
              step);
        CHECK(!strcmp(s.buf, "data: a\n\ndata: bcd\n\n"), "chunked, step %zu: body '%s'", step,
              s.buf);
    }
    /* Content-Length, Connection: close, and bytes after the message are left alone. */
    static const char fixed[] =
        "HTTP/1.1 400 Bad Request\r\nconnection: Close\r\ncontent-length: 5\r\n\r\nhelloEXTRA";
    long n = feed(&p, fixed, sizeof fixed - 1, 0, &s);
    CHECK(n == (long)sizeof fixed - 1 - 5 && hp_done(&p) && p.status == 400 && !p.keep_alive,
          "content-length: consumed %ld status %d", n, p.status);
    CHECK(!strcmp(s.buf, "hello") && !strcmp(p.reason, "Bad Request"), "content-length body '%s'",
          s.buf);
    /* 100 Continue first; an HTTP/1.0 body that runs to the close. */
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nuntil close";
    n = feed(&p, cont, sizeof cont - 1, 1, &s);
    CHECK(n == (long)sizeof cont - 1 && !hp_done(&p) && p.status == 200 && !p.keep_alive,
          "eof body: %ld", n);
    CHECK(hp_eof(&p) == 0 && hp_done(&p) && !strcmp(s.buf, "until close"),
          "eof body ends at the close");
    /* Errors. */
    const char *bad = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n";
    n = feed(&p, bad, strlen(bad), 0, &s);
    CHECK(n == -1 && strstr(p.error, "chunk size"), "bad chunk size: '%s'", p.error);
    n = feed(&p, "SSH-2.0-OpenSSH\r\n", strlen("SSH-2.0-OpenSSH\r\n"), 0, &s);
    CHECK(n == -1 && strstr(p.error, "status line"), "not HTTP: '%s'", p.error);
    hp_init(&p);
    CHECK(hp_eof(&p) == -1 && strstr(p.error, "without a response"),
          "closed before answering: '%s'", p.error);
    hp_init(&p);
    const char *trunc = "HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc";
    hp_feed(&p, trunc, strlen(trunc), body_sink, &s);
    CHECK(hp_eof(&p) == -1 && strstr(p.error, "middle"), "truncated body: '%s'", p.error);
}

/* ---- SSE ---- */

typedef struct {
    char ev[8][128];
    int n;
} events;

static void on_ev(void *user, const char *d, size_t len) {
    events *e = user;
    if (e->n < 8) snprintf(e->ev[e->n++], sizeof e->ev[0], "%.*s", (int)len, d);
}

static void test_sse(void) {
    static const char stream[] =
        ": ping\r\n\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata:two\ndata: lines\n\n"
        "id: 3\r\rdata: [DONE]\n\ndata: tail";
    for (size_t step = 1; step <= sizeof stream; step++) {
        sse_parser s;
        events e = {0};
        sse_init(&s);
        for (size_t off = 0; off < sizeof stream - 1; off += step) {
            size_t n = sizeof stream - 1 - off < step ? sizeof stream - 1 - off : step;
            sse_feed(&s, stream + off, n, on_ev, &e);
        }
        CHECK(e.n == 3, "step %zu: %d events before the end", step, e.n);
        sse_finish(&s, on_ev, &e);
        CHECK(e.n == 4, "step %zu: %d events", step, e.n);
        CHECK(!strcmp(e.ev[0], "{\"a\":1}") && !strcmp(e.ev[1], "two\nlines") &&
                  !strcmp(e.ev[2], "[DONE]") && !strcmp(e.ev[3], "tail"),
              "step %zu: events '%s' '%s' '%s' '%s'", step, e.ev[0], e.ev[1], e.ev[2], e.ev[3]);
        sse_free(&s);
    }
}

/* ---- workload ---- */

static void test_workload(void) {
    CHECK(bench_len_lower(1024, 0.8) == 819, "int(0.8 * 1024) = 819, got %d",
          bench_len_lower(1024, 0.8));
    CHECK(bench_len_lower(10, 0.8) == 8 && bench_len_lower(1, 0.8) == 1 &&
              bench_len_lower(8192, 1.0) == 8192,
          "lower bounds");
    enum { N = 4000 };
    bench_item *a = xmalloc(N * sizeof *a), *b = xmalloc(N * sizeof *b);
    bench_workload(N, 1024, 128, 0.8, 42, a);
    bench_workload(N, 1024, 128, 0.8, 42, b);
    CHECK(!memcmp(a, b, N * sizeof *a), "same seed, same workload");
    double si = 0, so = 0;
    int min_i = 1 << 30, max_i = 0, min_o = 1 << 30, max_o = 0;
    for (int i = 0; i < N; i++) {
        si += a[i].isl, so += a[i].osl;
        if (a[i].isl < min_i) min_i = a[i].isl;
        if (a[i].isl > max_i) max_i = a[i].isl;
        if (a[i].osl < min_o) min_o = a[i].osl;
        if (a[i].osl > max_o) max_o = a[i].osl;
    }
    CHECK(min_i == 819 && max_i == 1024 && min_o == 102 && max_o == 128, "ranges [%d,%d] [%d,%d]",
          min_i, max_i, min_o, max_o);
    CHECK_NEAR(si / N, (819 + 1024) / 2.0, 5, "mean ISL");
    CHECK_NEAR(so / N, (102 + 128) / 2.0, 1, "mean OSL");
    bench_workload(N, 1024, 128, 0.8, 43, b);
    CHECK(memcmp(a, b, N * sizeof *a) != 0, "another seed, another workload");
    int32_t *ids = xmalloc(1024 * sizeof *ids), *ids2 = xmalloc(1024 * sizeof *ids2);
    bench_prompt_ids(&a[0], ids);
    bench_prompt_ids(&a[0], ids2);
    bool in_range = true;
    for (int j = 0; j < a[0].isl; j++) in_range &= ids[j] >= 0 && ids[j] < BENCH_TOKEN_LIMIT;
    CHECK(in_range && !memcmp(ids, ids2, (size_t)a[0].isl * sizeof *ids),
          "ids ordinary and deterministic");
    bench_prompt_ids(&a[1], ids2);
    CHECK(memcmp(ids, ids2, 16 * sizeof *ids) != 0, "prompts differ");
    bench_item w = {.isl = 5, .osl = 3, .seed = 9};
    char *t = bench_prompt_text(&w, NULL);
    int spaces = 0;
    for (char *c = t; *c; c++) spaces += *c == ' ';
    CHECK(spaces == 4 && t[0] != ' ', "five words without a tokenizer: '%s'", t);
    free(t);
    free(a), free(b), free(ids), free(ids2);
}

static void test_url_pareto(void) {
    hc_url u;
    CHECK(hc_url_parse("http://127.0.0.1:8000", &u) == 0 && !strcmp(u.host, "127.0.0.1") &&
              u.port == 8000 && !strcmp(u.prefix, ""),
          "plain url");
    hc_url_free(&u);
    CHECK(hc_url_parse("http://gpu-box/v1/", &u) == 0 && !strcmp(u.host, "gpu-box") &&
              u.port == 80 && !strcmp(u.prefix, "/v1"),
          "url with prefix");
    hc_url_free(&u);
    CHECK(hc_url_parse("http://[::1]:9000/x", &u) == 0 && !strcmp(u.host, "::1") && u.port == 9000,
          "ipv6 url");
    hc_url_free(&u);
    CHECK(hc_url_parse("https://x", &u) == -1, "https refused");
    CHECK(hc_url_parse("http://x:0", &u) == -1, "bad port refused");

    /* (x, y): (10, 100) (20, 90) (15, 80: dominated by 20/90) (40, 50) (40, 20: dominated) (5, 60:
     * dominated) */
    double x[] = {10, 20, 15, 40, 40, 5}, y[] = {100, 90, 80, 50, 20, 60};
    int idx[6], m = bench_pareto(x, y, 6, idx);
    CHECK(m == 3 && idx[0] == 0 && idx[1] == 1 && idx[2] == 3, "pareto: %d points (%d %d %d)", m,
          idx[0], idx[1], idx[2]);
}

int main(void) {
    test_stats();
    test_metrics();
    test_http();
    test_sse();
    test_workload();
    test_url_pareto();
    return check_report("test_bench_units");
}
