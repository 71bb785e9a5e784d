/* --target-tpot-ms (engine_options.target_tpot_ms, engine/step_cost.c, the scheduler's prompt
 * budget), deterministic: a fake backend whose steps "take" a + b * sequences + c * tokens seconds
 * (reported in step_result.seconds, which the engine learns from; nothing sleeps).
 *   1. step_cost alone: the fit recovers a, b, c from noisy steps, predicts within 3 %, and sizes
 *      the prompt budget as the formula says; too few steps, or only decode steps, give the cap.
 *   2. The engine: 8 sequences decode when a 4,000-token prompt arrives. Without a target, one step
 *      carries a whole --max-num-batched-tokens chunk (2,048 tokens: 43 ms against a decode step's
 *      ~3 ms, every running user's next token held that long). With --target-tpot-ms 10 every step
 *      that carries decodes stays within 10 ms (5 % slack) once the model has its 8 steps (at most
 *      one step over it, while c is still unknown), the prompt still advances every step and is done
 *      in a bounded number of steps, and every request gets all its tokens. */
#include "check.h"

#include "base/error.h"
#include "engine/engine.h"
#include "engine/step_cost.h"
#include "model/synthetic.h"
#include "step/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const double A = 2e-3, B = 1e-4, C = 2e-5; /* seconds: per step, per sequence, per token */

/* ---- 1. the model ---- */

static double rnd01(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(*s >> 11) / 9007199254740992.0;
}

static void test_model(void) {
    step_cost c;
    step_cost_init(&c);
    CHECK(step_cost_predict(&c, 4, 4) < 0, "no steps: no prediction");
    CHECK(step_cost_prefill_budget(&c, 8, 1, 0.01, 32, 2048) == 2048, "no steps: the cap");
    uint64_t s = 1;
    for (int i = 0; i < 200; i++) {
        const int seqs = 1 + (int)(rnd01(&s) * 64);
        const int64_t tokens = seqs + (rnd01(&s) < 0.3 ? (int64_t)(rnd01(&s) * 3000) : 0);
        const double t = (A + B * seqs + C * (double)tokens) * (1 + 0.02 * (rnd01(&s) - 0.5));
        step_cost_observe(&c, seqs, tokens, t);
    }
    const int seqs[] = {1, 8, 64, 9};
    const int64_t toks[] = {1, 8, 64, 2000};
    for (int i = 0; i < 4; i++) {
        const double want = A + B * seqs[i] + C * (double)toks[i],
                     got = step_cost_predict(&c, seqs[i], toks[i]);
        CHECK(fabs(got - want) <= 0.03 * want, "predict(%d, %lld) = %.3g ms, want %.3g", seqs[i],
              (long long)toks[i], got * 1e3, want * 1e3);
    }
    /* 8 decodes + 1 prefill within 10 ms: (0.01 - A - 9 B - 8 C) / C = 347 tokens */
    const int64_t n = step_cost_prefill_budget(&c, 8, 1, 0.010, 32, 2048);
    CHECK(n >= 330 && n <= 365, "prompt budget %lld, want ~347", (long long)n);
    CHECK(step_cost_prefill_budget(&c, 8, 1, 0.001, 32, 2048) == 32,
          "target below a decode: the floor");
    CHECK(step_cost_prefill_budget(&c, 8, 1, 10.0, 32, 2048) == 2048, "a loose target: the cap");
    /* Only decode steps (tokens == sequences): c cannot be told from b; no crash, a finite answer. */
    step_cost d;
    step_cost_init(&d);
    for (int i = 0; i < 50; i++)
        step_cost_observe(&d, 8 + i % 8, 8 + i % 8, A + (B + C) * (8 + i % 8));
    const int64_t m = step_cost_prefill_budget(&d, 8, 1, 0.010, 32, 2048);
    CHECK(m >= 32 && m <= 2048, "decode-only history: budget %lld within [floor, cap]",
          (long long)m);
    CHECK(fabs(step_cost_predict(&d, 12, 12) - (A + (B + C) * 12)) < 1e-4,
          "decode-only: predicts decodes");
}

/* ---- 2. the engine on a backend with a known cost ---- */

typedef struct {
    int n_seqs, n_tokens, n_decode, n_prompt_tokens;
    double seconds;
} step_log;

struct backend {
    model_config cfg;
    const step_batch *st;
    step_log *log;
    int n_log, cap_log;
};

static int fake_create(const backend_options *opt, backend **out) {
    (void)opt;
    struct backend *b = calloc(1, sizeof *b);
    config_preset_tiny(&b->cfg);
    *out = b;
    return 0;
}
static const model_config *fake_config(backend *b) {
    return &b->cfg;
}
static void fake_kv_blocks(backend *b, int *full, int *swa, int *bs) {
    (void)b;
    *full = 4096, *swa = 4096, *bs = 16;
}
static int fake_launch(backend *b, const step_batch *st) {
    b->st = st;
    return 0;
}
static int fake_wait(backend *b, step_result *r) {
    const step_batch *st = b->st;
    memset(r, 0, sizeof *r);
    r->seqs = calloc((size_t)st->n_seqs, sizeof *r->seqs);
    step_log l = {st->n_seqs, st->n_tokens, 0, 0, 0};
    for (int i = 0; i < st->n_seqs; i++) {
        const int nn = st->query_start[i + 1] - st->query_start[i];
        if (nn == 1)
            l.n_decode++;
        else
            l.n_prompt_tokens += nn;
        if (!st->sample[i]) continue;
        r->seqs[i].token = 1000 + (st->start_pos[i] + nn) % 5000; /* never a stop token */
        r->seqs[i].logprob = -1.0f;
        r->n++;
    }
    l.seconds = r->seconds = A + B * st->n_seqs + C * st->n_tokens;
    if (b->n_log == b->cap_log) {
        b->cap_log = b->cap_log ? 2 * b->cap_log : 256;
        b->log = realloc(b->log, (size_t)b->cap_log * sizeof *b->log);
    }
    b->log[b->n_log++] = l;
    return 0;
}
static void fake_destroy(backend *b) {
    free(b->log);
    free(b);
}
static const backend_ops fake_ops = {.name = "fake",
                                     .create = fake_create,
                                     .config = fake_config,
                                     .kv_blocks = fake_kv_blocks,
                                     .launch = fake_launch,
                                     .wait = fake_wait,
                                     .destroy = fake_destroy};

typedef struct {
    int tokens;
    bool done;
} out_t;
static void on_out(const engine_output *o, void *user) {
    out_t *u = user;
    u->tokens += o->n_tokens;
    if (o->finished) u->done = true;
}

enum { N_DEC = 8, LONG = 4000, GEN = 120 };

/* Runs the scenario; copies the backend's step log out. */
static int run(double target_ms, step_log **log_out, int *long_first, int *long_steps) {
    backend *b = NULL;
    fake_ops.create(NULL, &b);
    engine_options eo;
    engine_options_default(&eo);
    eo.max_num_seqs = 16, eo.max_num_batched_tokens = 2048, eo.max_model_len = 8192;
    eo.target_tpot_ms = target_ms;
    engine *e = NULL;
    CHECK(engine_create(&eo, &fake_ops, b, &e) == 0, "engine: %s", err_msg());
    static int32_t prompt[LONG + N_DEC]; /* request k reads from prompt + k */
    for (int i = 0; i < LONG + N_DEC; i++) prompt[i] = 500 + i % 3000;
    out_t outs[N_DEC + 1];
    memset(outs, 0, sizeof outs);
    for (int k = 0; k <= N_DEC; k++) {
        if (k == N_DEC) /* the long prompt arrives once the others decode */
            for (int s = 0; s < 30; s++) engine_step(e);
        engine_request r;
        memset(&r, 0, sizeof r);
        r.id = (uint64_t)k + 1;
        r.prompt = prompt + k, r.n_prompt = k == N_DEC ? LONG : 16;
        r.params = sampling_params_default();
        r.max_tokens = k == N_DEC ? 4 : GEN, r.ignore_eos = true, r.n = 1;
        r.on_output = on_out, r.user = &outs[k];
        CHECK(engine_submit(e, &r) == 0, "submit: %s", err_msg());
    }
    *long_first = b->n_log; /* the steps from here on may carry the long prompt */
    CHECK(engine_run_until_idle(e) == 0, "run");
    for (int k = 0; k <= N_DEC; k++)
        CHECK(outs[k].done && outs[k].tokens == (k == N_DEC ? 4 : GEN), "request %d: %d tokens", k,
              outs[k].tokens);
    *long_steps = 0;
    for (int i = *long_first; i < b->n_log; i++) *long_steps += b->log[i].n_prompt_tokens > 0;
    const int n = b->n_log;
    *log_out = malloc((size_t)n * sizeof **log_out);
    memcpy(*log_out, b->log, (size_t)n * sizeof **log_out);
    engine_destroy(e);
    return n;
}

static void test_engine(void) {
    step_log *plain, *capped;
    int first_p, steps_p, first_c, steps_c;
    const int np = run(0, &plain, &first_p, &steps_p);
    const int nc = run(10, &capped, &first_c, &steps_c);
    double worst_plain = 0, worst_capped = 0;
    int over = 0, prompt_steps = 0;
    for (int i = first_p; i < np; i++)
        if (plain[i].n_decode > 0) worst_plain = fmax(worst_plain, plain[i].seconds);
    for (int i = 0; i < nc; i++) {
        if (capped[i].n_decode == 0) continue;
        worst_capped = fmax(worst_capped, i >= first_c ? capped[i].seconds : 0);
        if (i >= 8 && capped[i].seconds > 0.0105) over++;
        if (i >= first_c && capped[i].n_prompt_tokens > 0) prompt_steps++;
    }
    printf("no target: the long prompt in %d steps, the slowest step with decodes %.1f ms\n",
           steps_p, worst_plain * 1e3);
    printf("--target-tpot-ms 10: the long prompt in %d steps, the slowest step with decodes "
           "%.1f ms, %d over 10.5 ms\n",
           steps_c, worst_capped * 1e3, over);
    CHECK(worst_plain > 0.030,
          "without a target a decode step should carry a whole chunk (%.1f ms)", worst_plain * 1e3);
    CHECK(over <= 1, "%d steps with decodes over the 10 ms target (one allowed while learning)",
          over);
    CHECK(prompt_steps >= LONG / 400 && steps_c <= LONG / 250,
          "the long prompt took %d steps (%d with decodes): want about %d", steps_c, prompt_steps,
          LONG / 347);
    free(plain), free(capped);
}

int main(void) {
    test_model();
    test_engine();
    return check_report("test_step_budget");
}
