/* Tensor and expert parallelism's sharding maths (issue 17), on the CPU, in CI:
 *   1. the plan (model/tp_plan.c) for the tiny, 20b and 120b configs at 1, 2, 4 and 8 ranks, TP and
 *      EP: the ranks' query heads, intermediate units, experts and vocabulary rows partition the
 *      model's in rank order; every query head's KV head is among its rank's; only rank 0 adds the
 *      biases; and the refusals (a size that does not divide the heads, too many ranks, EP over a
 *      count of experts it does not divide) name the flag;
 *   2. the CPU backend's emulation (cpu_model_set_parallel): rank by rank from the ranks' slices of
 *      the weights, partial outputs summed, against the plain forward pass, on the random-weight tiny
 *      model and on one whose intermediate size splits unevenly (3 units over 2 ranks, 5 over 4):
 *      a prompt and three decode steps, every logits row within 1e-4 of the largest logit, the same
 *      argmax wherever the plain pass's top two are apart by more than that; and the same run with a
 *      plan whose ranks all add the biases must fail that check (the comparison can fail);
 *   3. DEP2 (cpu_forward_dep): three sequences over two ranks' sub-batches, prompts then decode
 *      steps, one step with rank 1 empty, against the plain batched pass on the same sequences
 *      (same tolerance, no flips), and a plan running rank 0's experts twice must fail it. */
#include "check.h"

#include "backend/cpu/cpu_model.h"
#include "base/error.h"
#include "model/synthetic.h"
#include "model/tp_plan.h"
#include "model/weights.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- 1. the plan ---- */

static void check_plan(const model_config *c, const char *name, int size, bool ep) {
    tp_plan p;
    CHECK(tp_plan_make(c, size, ep, &p) == 0, "%s N=%d ep=%d: %s", name, size, ep, err_msg());
    if (p.size != size) return;
    const int group = c->n_heads / c->n_kv_heads, units = c->intermediate / TP_UNIT;
    int q = 0, u = 0, e = 0, v = 0;
    bool kv_seen[64] = {0};
    for (int r = 0; r < size; r++) {
        const tp_rank *k = &p.rank[r];
        CHECK(k->q_head0 == q && k->n_q_heads > 0,
              "%s N=%d rank %d: query heads from %d, expected %d", name, size, r, k->q_head0, q);
        q += k->n_q_heads;
        for (int h = k->q_head0; h < k->q_head0 + k->n_q_heads; h++)
            CHECK(h / group >= k->kv_head0 && h / group < k->kv_head0 + k->n_kv_heads,
                  "%s N=%d rank %d: query head %d reads KV head %d, not among [%d, %d)", name, size,
                  r, h, h / group, k->kv_head0, k->kv_head0 + k->n_kv_heads);
        for (int h = k->kv_head0; h < k->kv_head0 + k->n_kv_heads && h < 64; h++) kv_seen[h] = 1;
        if (ep) {
            CHECK(k->unit0 == 0 && k->n_units == units, "%s EP N=%d rank %d: every unit", name,
                  size, r);
            CHECK(k->expert0 == e, "%s EP N=%d rank %d: experts from %d, expected %d", name, size,
                  r, k->expert0, e);
            e += k->n_experts;
        } else {
            CHECK(k->unit0 == u, "%s N=%d rank %d: units from %d, expected %d", name, size, r,
                  k->unit0, u);
            u += k->n_units;
            CHECK(k->expert0 == 0 && k->n_experts == c->n_experts, "%s N=%d rank %d: every expert",
                  name, size, r);
        }
        CHECK(k->vocab0 == v, "%s N=%d rank %d: vocabulary from %d, expected %d", name, size, r,
              k->vocab0, v);
        v += k->n_vocab;
        CHECK(k->adds_biases == (r == 0), "%s N=%d rank %d: adds the biases: %d", name, size, r,
              k->adds_biases);
    }
    CHECK(q == c->n_heads, "%s N=%d: %d query heads covered of %d", name, size, q, c->n_heads);
    if (ep)
        CHECK(e == c->n_experts, "%s EP N=%d: %d experts covered of %d", name, size, e,
              c->n_experts);
    else
        CHECK(u == units, "%s N=%d: %d units covered of %d", name, size, u, units);
    CHECK(v == c->vocab, "%s N=%d: %d vocabulary rows covered of %d", name, size, v, c->vocab);
    for (int h = 0; h < c->n_kv_heads && h < 64; h++)
        CHECK(kv_seen[h], "%s N=%d: KV head %d on no rank", name, size, h);
}

static void refused(const model_config *c, int size, bool ep, const char *needle) {
    tp_plan p;
    CHECK(tp_plan_make(c, size, ep, &p) < 0 && strstr(err_msg(), needle),
          "N=%d ep=%d: expected a refusal naming '%s', got '%s'", size, ep, needle,
          err_msg() ? err_msg() : "");
}

static void test_plans(void) {
    model_config c[3];
    config_preset_tiny(&c[0]);
    config_preset_20b(&c[1]);
    config_preset("120b", &c[2]);
    const char *names[3] = {"tiny", "20b", "120b"};
    const int sizes[4] = {1, 2, 4, 8};
    for (int m = 0; m < 3; m++)
        for (int i = 0; i < 4; i++) {
            check_plan(&c[m], names[m], sizes[i], false);
            check_plan(&c[m], names[m], sizes[i], true);
        }
    /* 120b at N = 4: 90 units of 32 split 23, 23, 22, 22 */
    tp_plan p;
    tp_plan_make(&c[2], 4, false, &p);
    CHECK(p.rank[0].n_units == 23 && p.rank[1].n_units == 23 && p.rank[2].n_units == 22 &&
              p.rank[3].n_units == 22,
          "120b N=4 units %d %d %d %d", p.rank[0].n_units, p.rank[1].n_units, p.rank[2].n_units,
          p.rank[3].n_units);
    CHECK(p.rank[1].q_head0 == 16 && p.rank[1].kv_head0 == 2 && p.rank[1].n_kv_heads == 2,
          "120b N=4 rank 1: heads from %d, KV heads %d+%d", p.rank[1].q_head0, p.rank[1].kv_head0,
          p.rank[1].n_kv_heads);
    tp_plan_make(&c[0], 8, false, &p); /* tiny: 2 KV heads over 8 ranks, each held by 4 */
    CHECK(p.rank[3].kv_head0 == 0 && p.rank[4].kv_head0 == 1 && p.rank[7].n_kv_heads == 1,
          "tiny N=8: KV heads replicated over 4 ranks each");
    /* 16 ranks (two 8-GPU nodes, --nnodes 2): the real models' 64 heads, 4 a rank, each KV head
     * held by two ranks; the tiny model's 8 heads cannot be split so */
    for (int m = 1; m < 3; m++) {
        check_plan(&c[m], names[m], 16, false);
        check_plan(&c[m], names[m], 16, true);
    }
    tp_plan_make(&c[2], 16, false, &p);
    CHECK(p.rank[15].q_head0 == 60 && p.rank[15].kv_head0 == 7 && p.rank[15].n_kv_heads == 1 &&
              p.rank[14].kv_head0 == 7,
          "120b N=16 rank 15: heads from %d, KV head %d+%d", p.rank[15].q_head0,
          p.rank[15].kv_head0, p.rank[15].n_kv_heads);
    refused(&c[0], 16, false, "--tensor-parallel-size 16 does not divide");
    refused(&c[1], 3, false, "--tensor-parallel-size 3");
    refused(&c[1], 32, false, "--tensor-parallel-size 32");
    refused(&c[1], 0, false, "--tensor-parallel-size 0");
    model_config odd = c[0];
    odd.n_experts = 6;
    refused(&odd, 4, true, "--enable-expert-parallel");
    odd = c[0];
    odd.n_kv_heads = 4, odd.n_heads = 12; /* 12 heads over 8 ranks */
    refused(&odd, 8, false, "attention heads");
    odd = c[0];
    odd.n_heads = 12, odd.n_kv_heads = 3; /* 3 heads a rank, but 3 KV heads over 4 ranks */
    refused(&odd, 4, false, "KV heads");
    check_plan(&odd, "12 heads, 3 KV", 6, false); /* each KV head replicated over 2 ranks */
}

/* ---- 2. the CPU emulation against the plain forward pass ---- */

enum { PROMPT = 16, DECODE = 3 };

/* Logits of every prompt token and then of DECODE single-token steps (greedy from the plain run's
 * tokens, fed to all runs alike). */
static float *run(const model_weights *w, int size, bool ep, bool all_biases,
                  const int32_t *tokens) {
    const model_config *c = &w->cfg;
    cpu_model m;
    cpu_model_init(&m, w);
    if (cpu_model_set_parallel(&m, size, ep) != 0) {
        CHECK(false, "N=%d ep=%d: %s", size, ep, err_msg());
        return NULL;
    }
    for (int r = 0; all_biases && r < size; r++) m.plan.rank[r].adds_biases = true;
    cpu_kv_cache kv;
    cpu_kv_init(&kv, c);
    float *logits = malloc((size_t)(PROMPT + DECODE) * c->vocab * sizeof(float));
    CHECK(cpu_forward(&m, &kv, tokens, PROMPT, CPU_LOGITS_ALL, logits) == 0, "prompt: %s",
          err_msg());
    for (int d = 0; d < DECODE; d++)
        CHECK(cpu_forward(&m, &kv, tokens + PROMPT + d, 1, CPU_LOGITS_LAST,
                          logits + (size_t)(PROMPT + d) * c->vocab) == 0,
              "decode: %s", err_msg());
    cpu_kv_free(&kv);
    return logits;
}

/* The worst row's max |a - b| relative to that row's largest |logit|, and how many rows' argmax
 * differ where the reference's top two are apart by more than the tolerance. */
static void compare(const float *ref, const float *got, int rows, int V, double tol, double *worst,
                    int *flips) {
    *worst = 0, *flips = 0;
    for (int r = 0; r < rows; r++) {
        const float *a = ref + (size_t)r * V, *b = got + (size_t)r * V;
        double big = 0, diff = 0, m1 = -INFINITY, m2 = -INFINITY;
        int ia = 0, ib = 0;
        for (int i = 0; i < V; i++) {
            big = fmax(big, fabs(a[i]));
            diff = fmax(diff, fabs((double)a[i] - b[i]));
            if (a[i] > m1)
                m2 = m1, m1 = a[i], ia = i;
            else if (a[i] > m2)
                m2 = a[i];
            if (b[i] > b[ib]) ib = i;
        }
        *worst = fmax(*worst, diff / (big > 0 ? big : 1));
        if (ia != ib && m1 - m2 > tol * (big > 0 ? big : 1)) (*flips)++;
    }
}

static void test_emulation(const char *name, const model_config *cfg) {
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/gptoss-test-tp-%s-%d", name, (int)getpid());
    CHECK(synthetic_write(cfg, dir, 5, 1) == 0, "make model: %s", err_msg());
    model_weights w;
    if (weights_load(dir, &w) != 0) {
        CHECK(false, "load: %s", err_msg());
        return;
    }
    const int V = w.cfg.vocab, rows = PROMPT + DECODE;
    int32_t tokens[PROMPT + DECODE];
    for (int i = 0; i < PROMPT + DECODE; i++) tokens[i] = (int32_t)((i * 7919 + 13) % 50000);
    float *ref = run(&w, 1, false, false, tokens);
    const double tol = 1e-4;
    const int sizes[3] = {2, 4, 8};
    for (int ep = 0; ep < 2 && ref; ep++)
        for (int i = 0; i < 3; i++) {
            float *got = run(&w, sizes[i], ep, false, tokens);
            if (!got) continue;
            double worst;
            int flips;
            compare(ref, got, rows, V, tol, &worst, &flips);
            printf("%s %s N=%d: worst row max|diff| %.2e of its largest logit, %d argmax flips\n",
                   name, ep ? "EP" : "TP", sizes[i], worst, flips);
            CHECK(worst <= tol && flips == 0, "%s %s N=%d: max diff %.3e (> %.0e) or %d flips",
                  name, ep ? "EP" : "TP", sizes[i], worst, tol, flips);
            free(got);
        }
    /* Sensitivity: every rank adding the O and down biases must be caught. */
    float *bad = ref ? run(&w, 2, false, true, tokens) : NULL;
    if (bad) {
        double worst;
        int flips;
        compare(ref, bad, rows, V, tol, &worst, &flips);
        printf("%s TP N=2 with the biases added twice: worst %.2e\n", name, worst);
        CHECK(worst > 10 * tol, "%s: biases added by both ranks went unnoticed (%.2e)", name,
              worst);
        free(bad);
    }
    free(ref);
    weights_free(&w);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

/* ---- 3. DEP2 (data-parallel attention, expert-parallel MoE) against the plain pass ---- */

/* Several sequences' contiguous caches as one view (seq indexes caches[]). */
static float *multi_k(void *ctx, int layer, int seq, int64_t pos) {
    cpu_kv_cache **kv = ctx;
    return kv[seq]->k[layer] + (size_t)pos * kv[seq]->kv_dim;
}
static float *multi_v(void *ctx, int layer, int seq, int64_t pos) {
    cpu_kv_cache **kv = ctx;
    return kv[seq]->v[layer] + (size_t)pos * kv[seq]->kv_dim;
}

enum { DEP_SEQS = 3, DEP_STEPS = 5 };

/* The step schedule: sequences 0 and 1 on rank 0, sequence 2 on rank 1 (rank order = batch order,
 * as the engine lays out a DEP step); step 0 their prompts (12, 5, 9 tokens), steps 1-3 one token
 * each, step 4 sequence 0 alone (rank 1 has no rows and still joins the MoE). */
static int dep_new_tokens(int step, int seq) {
    static const int prompt[DEP_SEQS] = {12, 5, 9};
    if (step == 0) return prompt[seq];
    return step < 4 || seq == 0 ? 1 : 0;
}

/* Every row's logits of every step, all sequences in one flat batch: ranks = 0 the plain
 * cpu_forward_batch, else DEP over 2 ranks. double_experts: rank 1 also runs rank 0's experts (a
 * wrong plan the comparison must catch). Returns the logits rows in step and batch order. */
static float *run_dep(const model_weights *w, int ranks, bool double_experts, int *n_out) {
    const model_config *c = &w->cfg;
    cpu_model m;
    cpu_model_init(&m, w);
    if (ranks && cpu_model_set_dep(&m, ranks) != 0) {
        CHECK(false, "DEP plan: %s", err_msg());
        return NULL;
    }
    if (double_experts) m.plan.rank[1].expert0 = 0, m.plan.rank[1].n_experts = c->n_experts;
    cpu_kv_cache kv[DEP_SEQS], *kvp[DEP_SEQS];
    int64_t len[DEP_SEQS] = {0};
    for (int i = 0; i < DEP_SEQS; i++) { /* room for every position the schedule reaches */
        cpu_kv_init(&kv[i], c), kvp[i] = &kv[i];
        kv[i].cap = 32;
        for (int l = 0; l < c->n_layers; l++) {
            kv[i].k[l] = calloc((size_t)kv[i].cap * kv[i].kv_dim, sizeof(float));
            kv[i].v[l] = calloc((size_t)kv[i].cap * kv[i].kv_dim, sizeof(float));
        }
    }
    const int rank_of[DEP_SEQS] = {0, 0, 1};
    cpu_kv_view view = {multi_k, multi_v, kvp};
    float *out = malloc((size_t)DEP_STEPS * 32 * c->vocab * sizeof(float));
    int n = 0;
    for (int st = 0; st < DEP_STEPS; st++) {
        int32_t tokens[32], seq[32], rows[32];
        int64_t pos[32];
        int T = 0, T0 = 0; /* T0: rank 0's rows */
        for (int i = 0; i < DEP_SEQS; i++) {
            const int nn = dep_new_tokens(st, i);
            for (int j = 0; j < nn; j++, T++) {
                tokens[T] = (int32_t)((i * 7919 + (len[i] + j) * 131 + 17) % c->vocab);
                seq[T] = i, pos[T] = len[i] + j, rows[T] = T;
            }
            len[i] += nn;
            if (rank_of[i] == 0) T0 = T;
        }
        int rc;
        if (!ranks) {
            rc = cpu_forward_batch(&m, &view, T, tokens, seq, pos, T, rows,
                                   out + (size_t)n * c->vocab);
        } else {
            int32_t rows1[32];
            for (int t = 0; t < T - T0; t++) rows1[t] = t;
            cpu_dep_part part[2] = {
                {&view, T0, tokens, seq, pos, T0, rows, out + (size_t)n * c->vocab},
                {&view, T - T0, tokens + T0, seq + T0, pos + T0, T - T0, rows1,
                 out + (size_t)(n + T0) * c->vocab}};
            rc = cpu_forward_dep(&m, ranks, part);
        }
        CHECK(rc == 0, "DEP step %d (ranks %d): %s", st, ranks, err_msg());
        n += T;
    }
    for (int i = 0; i < DEP_SEQS; i++) cpu_kv_free(&kv[i]);
    *n_out = n;
    return out;
}

static void test_dep(void) {
    char dir[128];
    snprintf(dir, sizeof dir, "/tmp/gptoss-test-dep-%d", (int)getpid());
    model_config cfg;
    config_preset_tiny(&cfg);
    CHECK(synthetic_write(&cfg, dir, 5, 1) == 0, "make model: %s", err_msg());
    model_weights w;
    if (weights_load(dir, &w) != 0) {
        CHECK(false, "load: %s", err_msg());
        return;
    }
    tp_plan p;
    CHECK(tp_plan_make_dep(&w.cfg, 2, &p) == 0 && p.data_parallel &&
              p.rank[1].expert0 == w.cfg.n_experts / 2,
          "DEP2 plan: %s", err_msg());
    CHECK(tp_plan_make_dep(&w.cfg, 3, &p) < 0 && strstr(err_msg(), "--data-parallel-size 3"),
          "DEP3 must be refused naming the flag: %s", err_msg());
    int n_ref = 0, n_got = 0, n_bad = 0;
    float *ref = run_dep(&w, 0, false, &n_ref), *got = run_dep(&w, 2, false, &n_got);
    float *bad = run_dep(&w, 2, true, &n_bad);
    const double tol = 1e-4;
    if (ref && got && bad && n_ref == n_got && n_ref == n_bad) {
        double worst;
        int flips;
        compare(ref, got, n_ref, w.cfg.vocab, tol, &worst, &flips);
        printf(
            "DEP2 vs plain, %d rows over %d steps (one with rank 1 empty): worst %.2e, %d argmax "
            "flips\n",
            n_ref, DEP_STEPS, worst, flips);
        CHECK(worst <= tol && flips == 0, "DEP2: max diff %.3e (> %.0e) or %d flips", worst, tol,
              flips);
        compare(ref, bad, n_ref, w.cfg.vocab, tol, &worst, &flips);
        printf("DEP2 with rank 1 also running rank 0's experts: worst %.2e\n", worst);
        CHECK(worst > 10 * tol, "DEP2: experts run twice went unnoticed (%.2e)", worst);
    } else {
        CHECK(false, "DEP runs: %d, %d, %d rows", n_ref, n_got, n_bad);
    }
    free(ref), free(got), free(bad);
    weights_free(&w);
    char cmd[200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
    test_plans();
    test_dep();
    model_config c;
    config_preset_tiny(&c);
    test_emulation("tiny", &c);
    /* 96 = 3 units: 2 + 1 over 2 ranks, 1 + 1 + 1 + 0 over 4, some empty at 8 */
    c.intermediate = 96;
    test_emulation("tiny-i96", &c);
    return check_report("test_tp");
}
