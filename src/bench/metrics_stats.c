#include "bench/metrics_stats.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void bench_record_itl(bench_record *r, double gap) {
    if (r->n_itl == r->cap_itl) {
        r->cap_itl = r->cap_itl ? r->cap_itl * 2 : 64;
        r->itl = xrealloc(r->itl, (size_t)r->cap_itl * sizeof *r->itl);
    }
    r->itl[r->n_itl++] = gap;
}

void bench_run_init(bench_run *r, int n) {
    memset(r, 0, sizeof *r);
    r->n = n;
    r->rec = xcalloc((size_t)(n > 0 ? n : 1), sizeof *r->rec);
}

void bench_run_free(bench_run *r) {
    for (int i = 0; i < r->n; i++) free(r->rec[i].itl);
    free(r->rec);
    free(r->first_error);
    memset(r, 0, sizeof *r);
}

void bench_run_error(bench_run *r, const char *msg) {
    if (!r->first_error) r->first_error = xstrdup(msg);
    r->n_errors++;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_percentile(const double *s, size_t n, double p) {
    if (n == 0) return 0;
    double h = (double)(n - 1) * p / 100.0;
    size_t lo = (size_t)floor(h);
    if (lo >= n - 1) return s[n - 1];
    return s[lo] + (h - (double)lo) * (s[lo + 1] - s[lo]);
}

bench_dist bench_dist_of(double *v, size_t n) {
    bench_dist d = {0};
    if (n == 0) return d;
    qsort(v, n, sizeof *v, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += v[i];
    double mean = sum / (double)n, ss = 0;
    for (size_t i = 0; i < n; i++) ss += (v[i] - mean) * (v[i] - mean);
    d.mean = mean * 1e3;
    d.std = sqrt(ss / (double)n) * 1e3; /* numpy's np.std: population, ddof = 0 */
    d.median = bench_percentile(v, n, 50) * 1e3;
    d.p90 = bench_percentile(v, n, 90) * 1e3;
    d.p99 = bench_percentile(v, n, 99) * 1e3;
    return d;
}

typedef struct {
    double t;
    int delta;
} edge;

static int cmp_edge(const void *a, const void *b) {
    const edge *x = a, *y = b;
    if (x->t != y->t) return (x->t > y->t) - (x->t < y->t);
    return x->delta - y->delta; /* a departure (-1) before an arrival (+1) at the same instant */
}

/* vLLM's peak figures: chunk arrivals in one-second buckets from the first successful start, and
 * the most requests in flight at once. */
static void peaks(const bench_run *r, bench_metrics *m) {
    double t0 = INFINITY, t1 = -INFINITY;
    int n_ok = 0;
    for (int i = 0; i < r->n; i++) {
        const bench_record *q = &r->rec[i];
        if (!q->success) continue;
        n_ok++;
        if (q->start < t0) t0 = q->start;
        if (q->start + q->latency > t1) t1 = q->start + q->latency;
    }
    if (n_ok == 0) return;
    size_t nb = (size_t)ceil(t1 - t0) + 1;
    double *buckets = xcalloc(nb, sizeof *buckets);
    edge *ev = xmalloc((size_t)n_ok * 2 * sizeof *ev);
    int ne = 0;
    for (int i = 0; i < r->n; i++) {
        const bench_record *q = &r->rec[i];
        if (!q->success) continue;
        double t = q->start + q->ttft;
        for (int k = -1; k < q->n_itl; k++) {
            if (k >= 0) t += q->itl[k];
            double b = floor(t - t0);
            if (b >= 0 && b < (double)nb) buckets[(size_t)b] += 1;
        }
        ev[ne++] = (edge){q->start, +1};
        ev[ne++] = (edge){q->start + q->latency, -1};
    }
    for (size_t b = 0; b < nb; b++)
        if (buckets[b] > m->max_output_tokens_per_s) m->max_output_tokens_per_s = buckets[b];
    qsort(ev, (size_t)ne, sizeof *ev, cmp_edge);
    int cur = 0;
    for (int i = 0; i < ne; i++) {
        cur += ev[i].delta;
        if (cur > m->max_concurrent_requests) m->max_concurrent_requests = cur;
    }
    free(buckets);
    free(ev);
}

void bench_metrics_compute(const bench_run *r, bench_metrics *m) {
    size_t n_itl = 0;
    for (int i = 0; i < r->n; i++)
        if (r->rec[i].success) n_itl += (size_t)r->rec[i].n_itl;
    double *ttft = xmalloc((size_t)(r->n + 1) * sizeof *ttft),
           *tpot = xmalloc((size_t)(r->n + 1) * sizeof *tpot);
    double *e2el = xmalloc((size_t)(r->n + 1) * sizeof *e2el),
           *itl = xmalloc((n_itl + 1) * sizeof *itl);
    size_t nt = 0, np = 0, ni = 0;
    m->completed = m->failed = 0;
    m->total_input = m->total_output = 0;
    m->short_outputs = 0;
    m->expected_input = m->expected_output = 0;
    for (int i = 0; i < r->n; i++) {
        const bench_record *q = &r->rec[i];
        if (!q->success) {
            m->failed++;
            continue;
        }
        m->completed++;
        m->total_input += q->prompt_len;
        m->total_output += q->output_len;
        if (q->output_len < q->expected_output) m->short_outputs++;
        m->expected_input += q->sent_prompt_len;
        m->expected_output += q->expected_output;
        if (q->output_len > 1) tpot[np++] = (q->latency - q->ttft) / (q->output_len - 1);
        ttft[nt] = q->ttft;
        e2el[nt++] = q->latency;
        /* A one-token answer has no inter-token latencies (and no array): memcpy takes no NULL. */
        if (q->n_itl > 0) memcpy(itl + ni, q->itl, (size_t)q->n_itl * sizeof *itl);
        ni += (size_t)q->n_itl;
    }
    m->duration = r->duration;
    double d = r->duration > 0 ? r->duration : 1e-9;
    m->request_throughput = m->completed / d;
    m->output_throughput = (double)m->total_output / d;
    m->total_token_throughput = (double)(m->total_input + m->total_output) / d;
    m->ttft = bench_dist_of(ttft, nt);
    m->tpot = bench_dist_of(tpot, np);
    m->itl = bench_dist_of(itl, ni);
    m->e2el = bench_dist_of(e2el, nt);
    m->max_output_tokens_per_s = 0;
    m->max_concurrent_requests = 0;
    peaks(r, m);
    m->first_error = r->first_error;
    free(ttft), free(tpot), free(e2el), free(itl);
}

double bench_interactivity(const bench_metrics *m) {
    return m->tpot.median > 0 ? 1000.0 / m->tpot.median : 0;
}

/* Python's "{s:{c}^{n}}": centred, the odd fill character on the right. */
static void header(FILE *f, const char *title, char fill) {
    int n = 50, len = (int)strlen(title), pad = n - len > 0 ? n - len : 0;
    for (int i = 0; i < pad / 2; i++) fputc(fill, f);
    fputs(title, f);
    for (int i = 0; i < pad - pad / 2; i++) fputc(fill, f);
    fputc('\n', f);
}

/* "{:<40} {:<10.2f}" and "{:<40} {:<10}" */
static void row_f(FILE *f, const char *label, double v) {
    fprintf(f, "%-40s %-10.2f\n", label, v);
}
static void row_i(FILE *f, const char *label, long long v) {
    fprintf(f, "%-40s %-10lld\n", label, v);
}

static void dist_block(FILE *f, const char *title, const char *name, const bench_dist *d) {
    char l[64];
    header(f, title, '-');
    snprintf(l, sizeof l, "Mean %s (ms):", name);
    row_f(f, l, d->mean);
    snprintf(l, sizeof l, "Median %s (ms):", name);
    row_f(f, l, d->median);
    snprintf(l, sizeof l, "P90 %s (ms):", name);
    row_f(f, l, d->p90);
    snprintf(l, sizeof l, "P99 %s (ms):", name);
    row_f(f, l, d->p99);
}

void bench_metrics_print(FILE *f, const bench_metrics *m) {
    int gpus = m->num_gpus > 0 ? m->num_gpus : 1;
    header(f, " Serving Benchmark Result ", '=');
    row_i(f, "Successful requests:", m->completed);
    row_i(f, "Failed requests:", m->failed);
    row_i(f, "Maximum request concurrency:", m->max_concurrency);
    row_f(f, "Benchmark duration (s):", m->duration);
    row_i(f, "Total input tokens:", m->total_input);
    row_i(f, "Total generated tokens:", m->total_output);
    row_f(f, "Request throughput (req/s):", m->request_throughput);
    row_f(f, "Output token throughput (tok/s):", m->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", m->max_output_tokens_per_s);
    row_f(f, "Peak concurrent requests:", m->max_concurrent_requests);
    row_f(f, "Total token throughput (tok/s):", m->total_token_throughput);
    dist_block(f, "Time to First Token", "TTFT", &m->ttft);
    dist_block(f, "Time per Output Token (excl. 1st token)", "TPOT", &m->tpot);
    dist_block(f, "Inter-token Latency", "ITL", &m->itl);
    dist_block(f, "End-to-end Latency", "E2EL", &m->e2el);
    header(f, "InferenceMAX", '-');
    row_i(f, "GPUs:", gpus);
    row_f(f, "Total token throughput per GPU (tok/s):", m->total_token_throughput / gpus);
    row_f(f, "Output token throughput per GPU (tok/s):", m->output_throughput / gpus);
    row_f(f, "Interactivity (tok/s/user):", bench_interactivity(m));
    row_f(f, "Client CPU time (s):", m->client_cpu_seconds);
    row_f(f, "Client CPU use (% of one core):",
          m->duration > 0 ? 100 * m->client_cpu_seconds / m->duration : 0);
    header(f, "", '=');
    if (m->failed > 0)
        fprintf(f, "FAILED: %d of %d requests failed; the first error: %s\n", m->failed,
                m->completed + m->failed, m->first_error ? m->first_error : "(no message)");
    if (m->total_output != m->expected_output)
        fprintf(
            f,
            "WARNING: %lld output tokens received, %lld requested (max_tokens with ignore_eos)\n",
            m->total_output, m->expected_output);
    if (m->short_outputs > 0)
        fprintf(f,
                "WARNING: %d requests returned fewer tokens than max_tokens (is ignore_eos "
                "honoured?)\n",
                m->short_outputs);
}

static void put_dist(json_t *o, const char *name, const bench_dist *d) {
    char k[64];
    snprintf(k, sizeof k, "mean_%s_ms", name);
    json_object_set_new(o, k, json_real(d->mean));
    snprintf(k, sizeof k, "median_%s_ms", name);
    json_object_set_new(o, k, json_real(d->median));
    snprintf(k, sizeof k, "std_%s_ms", name);
    json_object_set_new(o, k, json_real(d->std));
    snprintf(k, sizeof k, "p90_%s_ms", name);
    json_object_set_new(o, k, json_real(d->p90));
    snprintf(k, sizeof k, "p99_%s_ms", name);
    json_object_set_new(o, k, json_real(d->p99));
}

/* The keys, in vLLM's order (serve.py main_async then benchmark()): date, backend, label, model_id,
 * num_prompts, request_rate, burstiness, max_concurrency, duration, completed, failed,
 * total_input_tokens, total_output_tokens, request_throughput, request_goodput, output_throughput,
 * total_token_throughput, max_output_tokens_per_s, max_concurrent_requests, then
 * {mean,median,std,p90,p99}_{ttft,tpot,itl,e2el}_ms. Ours after them: the workload (isl, osl,
 * random_range_ratio, num_warmups, seed, base_url), num_gpus and InferenceMAX's derived figures
 * (tput_per_gpu, output_tput_per_gpu, input_tput_per_gpu, median_intvty), client_cpu_seconds and
 * short_outputs, expected_input_tokens and expected_output_tokens (the sums of what was sent:
 * prompt lengths and max_tokens of the completed requests). */
json_t *bench_metrics_json(const bench_metrics *m, const bench_meta *meta) {
    int gpus = m->num_gpus > 0 ? m->num_gpus : 1;
    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", localtime_r(&now, &tm));
    json_t *o = json_object();
    json_object_set_new(o, "date", json_string(date));
    json_object_set_new(o, "backend", json_string(meta->backend));
    json_object_set_new(o, "label", meta->label ? json_string(meta->label) : json_null());
    json_object_set_new(o, "model_id", json_string(meta->model_id ? meta->model_id : ""));
    json_object_set_new(o, "num_prompts", json_integer(m->num_prompts));
    json_object_set_new(o, "request_rate", json_string("inf"));
    json_object_set_new(o, "burstiness", json_real(1.0));
    json_object_set_new(o, "max_concurrency", json_integer(m->max_concurrency));
    json_object_set_new(o, "duration", json_real(m->duration));
    json_object_set_new(o, "completed", json_integer(m->completed));
    json_object_set_new(o, "failed", json_integer(m->failed));
    json_object_set_new(o, "total_input_tokens", json_integer(m->total_input));
    json_object_set_new(o, "total_output_tokens", json_integer(m->total_output));
    json_object_set_new(o, "request_throughput", json_real(m->request_throughput));
    json_object_set_new(o, "request_goodput", json_null());
    json_object_set_new(o, "output_throughput", json_real(m->output_throughput));
    json_object_set_new(o, "total_token_throughput", json_real(m->total_token_throughput));
    json_object_set_new(o, "max_output_tokens_per_s", json_real(m->max_output_tokens_per_s));
    json_object_set_new(o, "max_concurrent_requests", json_integer(m->max_concurrent_requests));
    put_dist(o, "ttft", &m->ttft);
    put_dist(o, "tpot", &m->tpot);
    put_dist(o, "itl", &m->itl);
    put_dist(o, "e2el", &m->e2el);
    json_object_set_new(o, "isl", json_integer(m->isl));
    json_object_set_new(o, "osl", json_integer(m->osl));
    json_object_set_new(o, "random_range_ratio", json_real(m->range_ratio));
    json_object_set_new(o, "num_warmups", json_integer(m->num_warmups));
    json_object_set_new(o, "seed", json_integer((json_int_t)meta->seed));
    json_object_set_new(o, "base_url", meta->base_url ? json_string(meta->base_url) : json_null());
    json_object_set_new(o, "num_gpus", json_integer(gpus));
    json_object_set_new(o, "tput_per_gpu", json_real(m->total_token_throughput / gpus));
    json_object_set_new(o, "output_tput_per_gpu", json_real(m->output_throughput / gpus));
    json_object_set_new(o, "input_tput_per_gpu",
                        json_real((m->total_token_throughput - m->output_throughput) / gpus));
    json_object_set_new(o, "median_intvty", json_real(bench_interactivity(m)));
    json_object_set_new(o, "client_cpu_seconds", json_real(m->client_cpu_seconds));
    json_object_set_new(o, "short_outputs", json_integer(m->short_outputs));
    json_object_set_new(o, "expected_input_tokens", json_integer(m->expected_input));
    json_object_set_new(o, "expected_output_tokens", json_integer(m->expected_output));
    return o;
}

int bench_results_write(const char *path, json_t *array) {
    char *s = json_dumps(array, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
    if (!s) return err_set("%s: cannot serialise the results", path);
    size_t n = strlen(s);
    char *t = xmalloc(n + 2);
    memcpy(t, s, n);
    t[n] = '\n';
    free(s);
    int rc = file_write_all(path, t, n + 1);
    free(t);
    return rc ? err_prefix("%s", path) : 0;
}

int bench_report_level(const bench_run *r, bench_metrics *m, const bench_meta *meta,
                       json_t *results, const char *path) {
    bench_metrics_compute(r, m);
    bench_metrics_print(stdout, m);
    fflush(stdout);
    json_array_append_new(results, bench_metrics_json(m, meta));
    return path ? bench_results_write(path, results) : 0;
}
