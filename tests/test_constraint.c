/* Structured output wired into the engine (engine/constraint.c, engine/structured.c, the mask gate
 * of step/step_masks.c and its use in step_sample_row):
 *
 *   - the state machine alone, over the real o200k_harmony vocabulary: root grammars end the
 *     output; harmony headers are offered token by token; the reasoning budget closes the analysis
 *     message and takes analysis off the next header; a token outside the mask is refused;
 *   - the engine on the CPU backend with a random tiny model: every constrained output, at
 *     temperature 0 and 1, with and without asynchronous scheduling and with n = 2, is in its
 *     grammar; the analysis tokens do not depend on the answer's grammar (reasoning is untouched);
 *   - the mask cost per sequence per step (fill + apply to a row of logits), p50 / p99, printed as
 *     a markdown row with --bench and checked against a generous bound always.
 * Skipped (77) without the tokenizer. */
#include "check.h"

#include "base/error.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "engine/constraint.h"
#include "engine/engine.h"
#include "harmony/harmony_special.h"
#include "model/synthetic.h"
#include "step/step_masks.h"
#include "tokenizer/bpe.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tokenizer *T;
static grammar_vocab *V;
static size_t W; /* mask words */
static char model_dir[256];

static bool allowed(const uint32_t *m, int32_t t) {
    return m[t / 32] >> (t % 32) & 1u;
}

static int count_bits(const uint32_t *m) {
    int n = 0;
    for (size_t w = 0; w < W; w++) n += __builtin_popcount(m[w]);
    return n;
}

static int32_t tok1(const char *s) { /* a string that is one token */
    ivec v = {0};
    tokenizer_encode_ordinary(T, s, strlen(s), &v);
    int32_t t = v.len == 1 ? v.v[0] : -1;
    ivec_free(&v);
    return t;
}

static grammar *schema(const char *s) {
    grammar *g = grammar_compile_json_schema(s, strlen(s), NULL);
    CHECK(g != NULL, "compile %s: %s", s, err_msg());
    return g;
}

/* The messages the API layer builds for chat: analysis, final (with `final`'s grammar), and one
 * strict tool "f" when with_tool. */
static engine_constraint *harmony_constraint(grammar *final, int budget, bool with_tool) {
    int32_t restart[2] = {HARMONY_TOK_START, tok1("assistant")};
    engine_constraint *c = constraint_new_messages(HARMONY_TOK_END, restart, 2);
    constraint_set_reasoning_budget(c, budget);
    int32_t analysis[3] = {HARMONY_TOK_CHANNEL, tok1("analysis"), HARMONY_TOK_MESSAGE};
    CHECK(analysis[1] >= 0, "'analysis' is one token");
    constraint_add_message(c, analysis, 3, CONSTRAINT_REASONING, NULL, HARMONY_TOK_END);
    int32_t fin[3] = {HARMONY_TOK_CHANNEL, tok1("final"), HARMONY_TOK_MESSAGE};
    constraint_add_message(c, fin, 3, final ? CONSTRAINT_GRAMMAR : CONSTRAINT_FREE, final,
                           HARMONY_TOK_RETURN);
    if (with_tool) {
        ivec h = {0};
        ivec_push(&h, HARMONY_TOK_CHANNEL);
        tokenizer_encode_ordinary(T, "commentary to=functions.f ", 26, &h);
        ivec_push(&h, HARMONY_TOK_CONSTRAIN);
        tokenizer_encode_ordinary(T, "json", 4, &h);
        ivec_push(&h, HARMONY_TOK_MESSAGE);
        constraint_add_message(c, h.v, (int)h.len, CONSTRAINT_GRAMMAR,
                               schema("{\"type\":\"boolean\"}"), HARMONY_TOK_CALL);
        ivec_free(&h);
    }
    return c;
}

static void test_root(void) {
    const char *ch[] = {"yes", "no"};
    size_t lens[] = {3, 2};
    engine_constraint *c = constraint_new_root(grammar_compile_choice(ch, lens, 2));
    constraint_state *s = constraint_state_new(c, V);
    constraint_unref(c); /* the state keeps its own reference */
    uint32_t *m = calloc(W, 4);
    int32_t stops[1] = {HARMONY_TOK_RETURN};
    CHECK(constraint_fill_mask(s, m, stops, 1), "root is masked from the first token");
    int32_t yes = tok1("yes"), no = tok1("no"), y = tok1("y"), x = tok1("x");
    CHECK(allowed(m, yes) && allowed(m, no) && allowed(m, y) && !allowed(m, x), "choice mask");
    CHECK(!allowed(m, HARMONY_TOK_RETURN), "no stop before the choice is complete");
    CHECK(constraint_advance(s, x) == -1 && constraint_done(s), "a token outside the mask");
    constraint_state_free(s);

    c = constraint_new_root(grammar_compile_regex("[0-9]+", 6));
    s = constraint_state_new(c, V);
    constraint_unref(c);
    int32_t d12 = tok1("12");
    CHECK(constraint_advance(s, d12) == 0, "digits");
    CHECK(constraint_fill_mask(s, m, stops, 1) && allowed(m, HARMONY_TOK_RETURN) && allowed(m, d12),
          "after digits: more digits or the stop token");
    CHECK(constraint_advance(s, HARMONY_TOK_RETURN) == 0 && constraint_done(s), "stop at the end");
    constraint_state_free(s);

    c = constraint_new_root(grammar_compile_choice(ch, lens, 2));
    s = constraint_state_new(c, V);
    constraint_unref(c);
    CHECK(constraint_advance(s, yes) == 1, "a complete choice ends the output");
    constraint_state_free(s);
    free(m);
}

static void test_harmony(void) {
    uint32_t *m = calloc(W, 4);
    const int32_t an = tok1("analysis"), fi = tok1("final");
    /* budget 0: straight to the final channel */
    engine_constraint *c = harmony_constraint(schema("{\"enum\":[\"a\",\"b\"]}"), 0, false);
    constraint_state *s = constraint_state_new(c, V);
    CHECK(constraint_fill_mask(s, m, NULL, 0) && count_bits(m) == 1 &&
              allowed(m, HARMONY_TOK_CHANNEL),
          "the header starts with <|channel|>");
    constraint_advance(s, HARMONY_TOK_CHANNEL);
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(allowed(m, fi) && !allowed(m, an) && count_bits(m) == 1, "budget 0: no analysis");
    constraint_advance(s, fi);
    constraint_advance(s, HARMONY_TOK_MESSAGE);
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(allowed(m, tok1("\"")) && !allowed(m, HARMONY_TOK_RETURN), "body: the grammar's mask");
    ivec av = {0};
    tokenizer_encode_ordinary(T, "\"a\"", 3, &av);
    for (size_t i = 0; i < av.len; i++)
        CHECK(constraint_advance(s, av.v[i]) == 0, "an enum value, token %zu", i);
    ivec_free(&av);
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(count_bits(m) == 1 && allowed(m, HARMONY_TOK_RETURN), "complete: <|return|> forced");
    CHECK(constraint_advance(s, HARMONY_TOK_RETURN) == 0 && constraint_done(s), "done");
    constraint_state_free(s);
    constraint_unref(c);

    /* budget 2: two free analysis tokens, then <|end|> and the restart are forced, and the next
     * header offers no analysis */
    c = harmony_constraint(NULL, 2, true);
    s = constraint_state_new(c, V);
    constraint_advance(s, HARMONY_TOK_CHANNEL);
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(allowed(m, an) && allowed(m, fi) && allowed(m, tok1("comment")) && count_bits(m) == 3,
          "three headers offered (%d)", count_bits(m));
    constraint_advance(s, an);
    constraint_advance(s, HARMONY_TOK_MESSAGE);
    CHECK(!constraint_fill_mask(s, m, NULL, 0) && !constraint_needs_mask(s),
          "analysis is free (and sampled on the device)");
    constraint_advance(s, tok1("hello"));
    CHECK(!constraint_fill_mask(s, m, NULL, 0), "still free");
    constraint_advance(s, tok1(" world"));
    CHECK(constraint_reasoning_used(s) == 2, "two reasoning tokens");
    CHECK(constraint_needs_mask(s) && constraint_fill_mask(s, m, NULL, 0) && count_bits(m) == 1 &&
              allowed(m, HARMONY_TOK_END),
          "budget spent: <|end|> forced");
    constraint_advance(s, HARMONY_TOK_END);
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(count_bits(m) == 1 && allowed(m, HARMONY_TOK_START), "then <|start|>");
    constraint_advance(s, HARMONY_TOK_START);
    constraint_advance(s, tok1("assistant"));
    constraint_advance(s, HARMONY_TOK_CHANNEL);
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(!allowed(m, an) && allowed(m, fi), "no second analysis past the budget");
    CHECK(constraint_advance(s, an) == -1 && constraint_done(s), "a refused header token");
    constraint_state_free(s);

    /* the tool's header, then its grammar, closed by <|call|> */
    s = constraint_state_new(c, V);
    ivec h = {0};
    ivec_push(&h, HARMONY_TOK_CHANNEL);
    tokenizer_encode_ordinary(T, "commentary to=functions.f ", 26, &h);
    ivec_push(&h, HARMONY_TOK_CONSTRAIN);
    tokenizer_encode_ordinary(T, "json", 4, &h);
    ivec_push(&h, HARMONY_TOK_MESSAGE);
    for (size_t i = 0; i < h.len; i++) {
        constraint_fill_mask(s, m, NULL, 0);
        CHECK(allowed(m, h.v[i]), "tool header token %zu allowed", i);
        CHECK(constraint_advance(s, h.v[i]) == 0, "tool header token %zu", i);
    }
    ivec_free(&h);
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(allowed(m, tok1("true")) && !allowed(m, tok1("1")), "arguments: the tool's schema");
    constraint_advance(s, tok1("true"));
    constraint_fill_mask(s, m, NULL, 0);
    CHECK(count_bits(m) == 1 && allowed(m, HARMONY_TOK_CALL), "<|call|> forced");
    constraint_state_free(s);
    constraint_unref(c);
    free(m);
}

/* ---- the mask cost: fill + apply, per sequence per step ---- */

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static const char *bench_schemas[] = {
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":"
    "\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",\"c\"]}}},"
    "\"required\":[\"name\",\"age\",\"tags\"],\"additionalProperties\":false}",
    "{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"number\"},\"kids\":"
    "{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/n\"},\"maxItems\":2}},\"required\":[\"v\","
    "\"kids\"],\"additionalProperties\":false}},\"$ref\":\"#/$defs/n\"}",
    "{\"anyOf\":[{\"type\":\"string\"},{\"type\":\"array\",\"items\":{\"type\":\"boolean\"}},"
    "{\"type\":\"null\"}]}",
};

typedef struct {
    double *v;
    size_t n;
} samples;

static void add(samples *s, double x) {
    if (s->n < 20000) s->v[s->n++] = x;
}

static double pct(samples *s, double q) {
    qsort(s->v, s->n, sizeof *s->v, dcmp);
    return s->n ? s->v[(size_t)(q * (double)(s->n - 1))] : 0;
}

static void row(const char *what, samples *s) {
    printf("| %s | %zu | %.1f | %.1f | %.1f |\n", what, s->n, 1e6 * pct(s, 0.5), 1e6 * pct(s, 0.99),
           1e6 * pct(s, 1.0));
}

/* Generations drawn uniformly from the masks of a few schemas under the harmony constraint (budget
 * 0); every step's fill and apply are timed (the second pass: token tables built). Returns the
 * fill's p50. */
static double mask_cost(bool bench) {
    samples fill = {malloc(20000 * sizeof(double)), 0}, apply = {malloc(20000 * sizeof(double)), 0};
    uint32_t *m = calloc(W, 4);
    float *lg = malloc(201088 * sizeof *lg);
    rng_t r;
    rng_seed(&r, 7);
    for (int rep = 0; rep < 2; rep++)
        for (size_t k = 0; k < sizeof bench_schemas / sizeof *bench_schemas; k++)
            for (int gen = 0; gen < 6; gen++) {
                engine_constraint *c = harmony_constraint(schema(bench_schemas[k]), 0, false);
                constraint_state *s = constraint_state_new(c, V);
                for (int step = 0; step < 300 && !constraint_done(s); step++) {
                    for (int i = 0; i < 201088; i++) lg[i] = 0.0f;
                    double t0 = now_seconds();
                    bool masked = constraint_fill_mask(s, m, NULL, 0);
                    double t1 = now_seconds();
                    if (masked) step_mask_apply(lg, 201088, m, W);
                    double t2 = now_seconds();
                    if (rep == 1) add(&fill, t1 - t0), add(&apply, t2 - t1);
                    /* draw uniformly among the allowed tokens, the end token rarely */
                    int nb = count_bits(m), pick = (int)(rng_next(&r) % (uint64_t)nb);
                    int32_t tok = -1;
                    for (int32_t id = 0; id < 201088 && tok < 0; id++)
                        if (allowed(m, id) && pick-- == 0) tok = id;
                    if (tok == HARMONY_TOK_RETURN && step < 20 && nb > 1) continue;
                    CHECK(constraint_advance(s, tok) >= 0, "advance %d", tok);
                }
                constraint_state_free(s);
                constraint_unref(c);
            }
    if (bench) {
        printf("| per sequence per step | n | p50 µs | p99 µs | max µs |\n| --- | --- | --- | --- "
               "| --- |\n");
        row("mask (constraint_fill_mask)", &fill);
        row("apply to the logits row (step_mask_apply)", &apply);
    }
    double p50 = pct(&fill, 0.5);
    free(fill.v), free(apply.v), free(m), free(lg);
    return p50;
}

/* ---- the engine on the CPU backend ---- */

typedef struct {
    int32_t tokens[2][1024];
    int n[2];
    const char *finish[2];
} got;

static void collect(const engine_output *o, void *user) {
    got *g = user;
    for (int i = 0; i < o->n_tokens && g->n[o->index] < 1024; i++)
        g->tokens[o->index][g->n[o->index]++] = o->tokens[i];
    if (o->finished) g->finish[o->index] = o->finish_reason;
}

static engine *make_engine(bool async) {
    backend_options bo = {
        .model = model_dir, .block_size = 32, .max_slots = 16, .max_model_len = 4096};
    backend *b;
    if (cpu_backend_ops.create(&bo, &b) != 0) {
        fprintf(stderr, "backend: %s\n", err_msg());
        exit(1);
    }
    engine_options o;
    engine_options_default(&o);
    o.max_num_seqs = 16;
    o.max_model_len = 4096;
    o.async_scheduling = async;
    o.grammar_vocab = V;
    engine *e;
    if (engine_create(&o, &cpu_backend_ops, b, &e) != 0) {
        fprintf(stderr, "engine: %s\n", err_msg());
        exit(1);
    }
    return e;
}

/* The bytes of an output's tokens in [from, to) match g completely. */
static bool in_grammar(grammar *g, const int32_t *toks, int from, int to) {
    char *text = NULL;
    size_t len = 0;
    tokenizer_decode(T, toks + from, (size_t)(to - from), &text, &len);
    grammar_matcher *mt = grammar_matcher_new(g, NULL);
    bool ok = grammar_matcher_advance_bytes(mt, text, len) == 0 && grammar_matcher_can_end(mt);
    grammar_matcher_free(mt);
    free(text);
    return ok;
}

static void test_engine(void) {
    const char *num_re = "-?[1-9][0-9]{0,3}";
    const char *obj = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},\"k\":"
                      "{\"enum\":[\"x\",\"y\"]}},\"required\":[\"ok\",\"k\"],"
                      "\"additionalProperties\":false}";
    grammar *check_re = grammar_compile_regex(num_re, strlen(num_re));
    grammar *check_obj = schema(obj);
    int32_t prompt[4] = {200006, 1428, 200008, 200006};
    for (int async = 0; async < 2; async++) {
        engine *e = make_engine(async);
        got outs[8];
        memset(outs, 0, sizeof outs);
        for (int k = 0; k < 8; k++) {
            engine_request r = {0};
            r.id = (uint64_t)k + 1;
            r.prompt = prompt, r.n_prompt = 4;
            r.params = sampling_params_default();
            r.params.temperature = k % 2 ? 1.0f : 0.0f;
            r.params.has_seed = true, r.params.seed = 100 + (uint64_t)k;
            r.n = 2;
            r.max_tokens = 300;
            r.on_output = collect, r.user = &outs[k];
            if (k < 4) {
                r.constraint = constraint_new_root(grammar_compile_regex(num_re, strlen(num_re)));
            } else {
                r.constraint = harmony_constraint(schema(obj), k < 6 ? 0 : 3, false);
                /* a bias towards the closing tokens keeps the random model's strings short */
            }
            CHECK(engine_submit(e, &r) == 0, "submit: %s", err_msg());
            constraint_unref(r.constraint);
        }
        CHECK(engine_run_until_idle(e) == 0, "run");
        for (int k = 0; k < 8; k++)
            for (int i = 0; i < 2; i++) {
                got *g = &outs[k];
                CHECK(g->finish[i] && !strcmp(g->finish[i], "stop"), "request %d.%d finished %s", k,
                      i, g->finish[i] ? g->finish[i] : "never");
                if (getenv("SHOW")) {
                    fprintf(stderr, "%d.%d:", k, i);
                    for (int j = 0; j < g->n[i] && j < 40; j++)
                        fprintf(stderr, " %d", g->tokens[i][j]);
                    fprintf(stderr, "\n");
                }
                if (k < 4) {
                    const int end = g->n[i] > 0 && g->tokens[i][g->n[i] - 1] >= 199998
                                        ? g->n[i] - 1
                                        : g->n[i]; /* a stop token after the match */
                    CHECK(in_grammar(check_re, g->tokens[i], 0, end),
                          "async %d request %d.%d: regex output", async, k, i);
                    continue;
                }
                /* <|channel|>final<|message|> BODY <|return|>, after any analysis */
                int start = -1;
                for (int j = 0; j + 2 < g->n[i]; j++)
                    if (g->tokens[i][j] == HARMONY_TOK_CHANNEL &&
                        g->tokens[i][j + 1] == tok1("final"))
                        start = j + 3;
                CHECK(start >= 0, "request %d.%d: a final message", k, i);
                if (start < 0) continue;
                CHECK(g->tokens[i][g->n[i] - 1] == HARMONY_TOK_RETURN, "ends with <|return|>");
                CHECK(in_grammar(check_obj, g->tokens[i], start, g->n[i] - 1),
                      "async %d request %d.%d: final message in the schema", async, k, i);
                if (k >= 6 && g->tokens[i][1] == tok1("analysis")) /* budget 3 */
                    CHECK(g->tokens[i][3 + 3] == HARMONY_TOK_END, "request %d.%d: budget 3", k, i);
                if (k < 6) CHECK(g->tokens[i][1] == tok1("final"), "request %d.%d: budget 0", k, i);
            }
        engine_destroy(e);
    }
    grammar_free(check_re);
    grammar_free(check_obj);

    /* Reasoning untouched: the same seed gives the same analysis tokens whatever the answer's
     * grammar, and with no grammar at all (k = 2: the request without a schema, whose final
     * message is free; the budget keeps the random model's analysis as long in all three). The
     * analysis body is never masked. */
    engine *e = make_engine(true);
    got a[3];
    memset(a, 0, sizeof a);
    for (int k = 0; k < 3; k++) {
        engine_request r = {0};
        r.id = (uint64_t)k + 1;
        r.prompt = prompt, r.n_prompt = 4;
        r.params = sampling_params_default();
        r.params.has_seed = true, r.params.seed = 5;
        r.n = 1;
        r.max_tokens = 200;
        r.on_output = collect, r.user = &a[k];
        /* the same bias in both makes the random model open the analysis channel */
        logit_bias_entry lb = {tok1("analysis"), 60.0f};
        r.params.logit_bias = &lb, r.params.n_logit_bias = 1;
        r.constraint = harmony_constraint(k == 0   ? schema(obj)
                                          : k == 1 ? grammar_compile_regex("[a-z]{1,8}", 10)
                                                   : NULL,
                                          20, false);
        CHECK(engine_submit(e, &r) == 0, "submit: %s", err_msg());
        constraint_unref(r.constraint);
    }
    CHECK(engine_run_until_idle(e) == 0, "run");
    CHECK(a[0].n[0] > 24 && a[1].n[0] > 24 && !memcmp(a[0].tokens[0], a[1].tokens[0], 24 * 4),
          "identical header + 20 analysis tokens + <|end|> (schema vs regex)");
    CHECK(a[2].n[0] > 24 && !memcmp(a[0].tokens[0], a[2].tokens[0], 24 * 4),
          "identical header + 20 analysis tokens + <|end|> (schema vs none)");
    engine_destroy(e);
}

int main(int argc, char **argv) {
    const bool bench = argc > 1 && !strcmp(argv[1], "--bench");
    char *path = tokenizer_find_json(NULL);
    if (!path) {
        fprintf(stderr, "SKIP: %s\n", err_msg());
        return 77;
    }
    T = tokenizer_load(path);
    free(path);
    if (!T) return fprintf(stderr, "tokenizer: %s\n", err_msg()), 1;
    V = grammar_vocab_new(T);
    W = grammar_mask_words(V);
    test_root();
    test_harmony();
    double p50 = mask_cost(bench);
    CHECK(p50 < 500e-6, "mask p50 %.1f µs (target 50 µs; this bound only catches a regression)",
          1e6 * p50);
    snprintf(model_dir, sizeof model_dir, "/tmp/gptoss-test-constraint-%d", (int)getpid());
    model_config c;
    config_preset_tiny(&c);
    if (synthetic_write(&c, model_dir, 11, 2) != 0) {
        fprintf(stderr, "make model: %s\n", err_msg());
        return 1;
    }
    test_engine();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", model_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", model_dir);
    grammar_vocab_free(V);
    tokenizer_free(T);
    return check_report("test_constraint");
}
