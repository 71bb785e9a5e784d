#include "bench/bench_sweep.h"

#include "base/error.h"
#include "base/files.h"
#include "base/log.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "bench/bench_plan.h"
#include "bench/metrics_stats.h"
#include "bench/progress.h"
#include "bench/workload.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* serve's defaults except where InferenceMAX starts vLLM otherwise for a sweep: --max-num-seqs
 * the largest concurrency, --max-model-len ISL + OSL + 20, prefix caching off (bench_sweep fills
 * the zeros once the plan is known). */
void bench_sweep_defaults(bench_sweep_opts *o) {
    memset(o, 0, sizeof *o);
    runtime_args_default(&o->rt);
    bench_plan_defaults(&o->plan);
    o->rt.eng.max_num_seqs = 0;
    o->rt.eng.max_model_len = 0;
    o->rt.eng.enable_prefix_caching = false;
}

typedef struct sweep_ctx sweep_ctx;

typedef struct {
    sweep_ctx *c;
    bench_record *rec;
    double last;
    bool got_token;
} sweep_req;

struct sweep_ctx {
    const bench_sweep_opts *o;
    engine *e;
    bench_run *run;
    sweep_req *reqs;
    int n, next, inflight, done;
    double t_end;
    bench_progress prog;
};

/* On the engine's thread, which is ours: engine_step() calls it. */
static void on_output(const engine_output *out, void *user) {
    sweep_req *q = user;
    sweep_ctx *c = q->c;
    bench_record *r = q->rec;
    double t = now_seconds();
    if (out->n_tokens > 0) { /* one streamed event = one chunk of the HTTP stream */
        if (!q->got_token) {
            q->got_token = true;
            r->ttft = t - r->start;
        } else {
            bench_record_itl(r, t - q->last);
        }
        q->last = t;
    }
    if (!out->finished) return;
    bool ok = q->got_token && strcmp(out->finish_reason, "error") != 0 &&
              strcmp(out->finish_reason, "abort") != 0;
    r->success = ok;
    if (ok) {
        r->latency = q->last - r->start;
        r->output_len = out->completion_tokens;
        r->prompt_len = out->prompt_tokens;
    } else {
        char msg[128];
        snprintf(msg, sizeof msg, "the engine finished the request with '%s' after %d tokens",
                 out->finish_reason, out->completion_tokens);
        bench_run_error(c->run, msg);
    }
    progress_step(&c->prog, !ok);
    c->inflight--;
    if (++c->done == c->n) c->t_end = t;
}

static void submit_more(sweep_ctx *c, const bench_item *items, int concurrency, int32_t *ids) {
    while (c->inflight < concurrency && c->next < c->n) {
        int i = c->next++;
        const bench_item *it = &items[i];
        sweep_req *q = &c->reqs[i];
        q->c = c;
        q->rec = &c->run->rec[i];
        q->rec->expected_output = it->osl;
        q->rec->prompt_len = q->rec->sent_prompt_len = it->isl;
        bench_prompt_ids(it, ids);
        engine_request r = {0};
        r.id = (uint64_t)i + 1;
        r.prompt = ids;
        r.n_prompt = it->isl;
        r.params = sampling_params_default();
        r.params.temperature = (float)c->o->plan.temperature;
        r.params.seed = it->seed, r.params.has_seed = true;
        r.max_tokens = it->osl;
        r.ignore_eos = true;
        r.n = 1;
        r.on_output = on_output;
        r.user = q;
        q->rec->start = now_seconds();
        c->inflight++;
        if (engine_submit(c->e, &r) !=
            0) { /* refused (too long for the model?): a failed request */
            bench_run_error(c->run, err_msg());
            progress_step(&c->prog, true);
            c->inflight--;
            if (++c->done == c->n) c->t_end = now_seconds();
        }
    }
}

/* Runs items[0..n) with at most `concurrency` in the engine; -1 when the backend failed. */
static int run_phase(sweep_ctx *c, const bench_item *items, int n, int concurrency, bench_run *run,
                     const char *what) {
    c->run = run;
    c->n = n;
    c->next = c->inflight = c->done = 0;
    c->t_end = 0;
    c->reqs = xcalloc((size_t)(n > 0 ? n : 1), sizeof *c->reqs);
    int32_t *ids = xmalloc((size_t)c->o->plan.isl * sizeof *ids);
    progress_start(&c->prog, c->o->plan.progress, what, concurrency, n);
    int rc = 0;
    while (c->done < c->n) {
        submit_more(c, items, concurrency, ids);
        if (c->done == c->n) break;
        int s = engine_step(c->e);
        if (s < 0) {
            rc = err_set("the backend failed during the %s at concurrency %d", what, concurrency);
            break;
        }
        if (s == 0 && c->inflight > 0 && c->next >= c->n) {
            rc = err_set("internal: the engine went idle with %d requests unfinished", c->inflight);
            break;
        }
    }
    /* Every request has finished, but with asynchronous scheduling a step that still names some of
     * them may be in flight, and the engine keeps them until it completes: step until idle, so the
     * next phase starts clean and engine_destroy finds nothing left (it would leak their block
     * tables: seq_destroy does not give KV back). */
    if (rc == 0 && engine_run_until_idle(c->e) < 0)
        rc =
            err_set("the backend failed at the end of the %s at concurrency %d", what, concurrency);
    progress_end(&c->prog);
    if (c->t_end == 0) c->t_end = now_seconds();
    free(ids);
    free(c->reqs);
    c->reqs = NULL;
    return rc;
}

static int sweep(sweep_ctx *c) {
    const bench_sweep_opts *o = c->o;
    const bench_plan *p = &o->plan;
    json_t *results = json_array();
    int rc = 0, any_failed = 0;
    char where[96];
    snprintf(where, sizeof where, "in-process engine (%s backend)", o->rt.backend);
    for (int k = 0; k < p->n_concurrency && rc == 0; k++) {
        bench_level lv;
        bench_level_init(p, k, where, &lv);
        bench_run warm;
        bench_run_init(&warm, lv.w);
        rc = run_phase(c, lv.items + lv.n, lv.w, lv.C, &warm, "warmup");
        if (rc == 0 && warm.n_errors > 0)
            fprintf(stderr, "warning: %d of %d warm-up requests failed; the first error: %s\n",
                    warm.n_errors, lv.w, warm.first_error);
        bench_run_free(&warm);
        bench_run run;
        bench_run_init(&run, lv.n);
        if (rc == 0) {
            bench_level_start(&lv);
            const double t0 = now_seconds();
            rc = run_phase(c, lv.items, lv.n, lv.C, &run, "run");
            run.duration = c->t_end - t0;
        }
        bench_meta meta = {"gptoss-engine", o->rt.model, p->label, NULL, p->seed};
        if (rc == 0 && bench_level_report(p, &lv, &run, &meta, results, "gptoss bench sweep",
                                          &any_failed) != 0)
            rc = -1;
        bench_run_free(&run);
        bench_level_free(&lv);
    }
    if (rc == 0 && p->output_json) fprintf(stderr, "results: %s\n", p->output_json);
    json_decref(results);
    return rc ? rc : any_failed;
}

int bench_sweep(const bench_sweep_opts *o) {
    runtime_args ra = o->rt;
    int max_c = 1;
    for (int i = 0; i < o->plan.n_concurrency; i++)
        if (o->plan.concurrency[i] > max_c) max_c = o->plan.concurrency[i];
    engine_options *eo = &ra.eng;
    if (eo->max_num_seqs <= 0) eo->max_num_seqs = max_c;
    if (eo->max_model_len <= 0)
        eo->max_model_len = o->plan.isl + o->plan.osl + 20; /* InferenceMAX: ISL + OSL + 20 */
    const int block_size = ra.block_size > 0 ? ra.block_size : 32;
    if (ra.num_kv_blocks <= 0 && ra.backend && !strcmp(ra.backend, "cpu"))
        /* the CPU default fits only a few sequences: room for every one */
        ra.num_kv_blocks =
            eo->max_num_seqs * ((eo->max_model_len + block_size - 1) / block_size + 1);
    char *model = runtime_resolve_model(&ra);
    if (!model) return -1;
    double t0 = now_seconds();
    runtime rt;
    if (runtime_build(&ra, model, &rt) != 0) {
        free(model);
        return -1;
    }
    sweep_ctx c = {.o = o, .e = rt.eng};
    printf("gptoss bench sweep: %s on the %s backend (loaded in %.1f s), ISL %d, OSL %d (range "
           "ratio %.2f), "
           "max_num_seqs %d, max_model_len %d, prefix caching %s, ignore_eos\n",
           ra.model, rt.ops->name, now_seconds() - t0, o->plan.isl, o->plan.osl,
           o->plan.range_ratio, rt.opt.max_num_seqs, rt.max_model_len,
           rt.opt.enable_prefix_caching ? "on" : "off");
    int rc = sweep(&c);
    engine_destroy(c.e);
    free(model);
    return rc;
}
