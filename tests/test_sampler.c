/* The CPU sampler against plain brute-force references written here: sort everything, compute in
 * double, filter by the definitions of sampling_params.h / sampler.h. Then the draws themselves
 * (their empirical distribution, their independence from call order), logprobs, the penalties, the
 * extremes, and the speed on a real-size vocabulary. */
#include "check.h"

#include "base/rng.h"
#include "step/sampler.h"

#include <float.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#define BIG_VOCAB 201088

/* --------------------------------------------------------------------------------------------- */
/* Random logits. */

static double normal(rng_t *r) {
    double u1 = rng_uniform01d(rng_next(r)), u2 = rng_uniform01d(rng_next(r));
    return sqrt(-2.0 * log(1.0 - u1)) * cos(6.283185307179586 * u2);
}

/* kind 0: smooth normal logits; kind 1: small integers (many ties); kind 2: LLM-like (a few strong
 * candidates over a broad low tail). */
static void fill_logits(float *lg, int n, int kind, uint64_t seed) {
    rng_t r;
    rng_seed(&r, seed);
    for (int i = 0; i < n; i++) {
        if (kind == 0)
            lg[i] = (float)(2.0 * normal(&r));
        else if (kind == 1)
            lg[i] = (float)(rng_next(&r) % 6);
        else
            lg[i] = (float)(normal(&r) * 1.5 - 4.0);
    }
    if (kind == 2)
        for (int j = 0; j < 12 && j < n; j++)
            lg[rng_next(&r) % (uint64_t)n] += (float)(6 + 2 * j % 7);
}

/* --------------------------------------------------------------------------------------------- */
/* The brute-force reference of steps 2-4: the filtered, renormalised distribution in double.
 * Returns false when the case sits so close to a top_p or min_p boundary that float rounding in the
 * sampler could legitimately decide it the other way (the caller then picks other logits). */

static const float *sort_base;
static int by_logit_desc(const void *a, const void *b) {
    float x = sort_base[*(const int *)a], y = sort_base[*(const int *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int *)a - *(const int *)b;
}

static float clean(float v) {
    return v != v ? -INFINITY : v;
}

static bool ref_probs(const float *raw, int n, const sampling_params *p, double *probs) {
    float *lg = malloc((size_t)n * sizeof *lg);
    int *order = malloc((size_t)n * sizeof *order);
    double *w = malloc((size_t)n * sizeof *w);
    bool *keep = malloc((size_t)n * sizeof *keep);
    bool clear_case = true, top_p_close = false;
    double bound_w = 0;
    for (int i = 0; i < n; i++) lg[i] = clean(raw[i]), order[i] = i, probs[i] = 0;
    sort_base = lg;
    qsort(order, (size_t)n, sizeof *order, by_logit_desc);
    if (!(p->temperature > 0)) {
        probs[order[0]] = 1;
        goto done;
    }
    double m = lg[order[0]], T = p->temperature;
    for (int i = 0; i < n; i++) w[i] = exp(((double)lg[i] - m) / T), keep[i] = true;
    if (p->top_k > 0 && p->top_k < n) {
        float kth = lg[order[p->top_k - 1]];
        for (int i = 0; i < n; i++) keep[i] = lg[i] >= kth;
    }
    if (p->top_p < 1) {
        double zk = 0, cum = 0, target;
        for (int i = 0; i < n; i++)
            if (keep[i]) zk += w[i];
        target = (p->top_p > 0 ? p->top_p : 0) * zk;
        /* Walk token by token; the decision only depends on the cumulative sums at tie-group edges
         * (inside a group nothing is decided), so those are the ones checked for closeness. */
        float bound = lg[order[0]];
        double group_start = 0;
        for (int j = 0; j < n; j++) {
            int i = order[j];
            if (!keep[i]) continue;
            if (j == 0 || lg[i] != lg[order[j - 1]]) group_start = cum;
            cum += w[i];
            if (cum >= target) {
                bound = lg[i];
                double group_end = cum;
                for (int g = j + 1; g < n && lg[order[g]] == lg[i]; g++) group_end += w[order[g]];
                const double tol = 2e-6 * zk; /* float weights vs double: see sampler.c */
                bound_w = w[i];
                top_p_close = target > 0 && (fabs(group_end - target) < tol ||
                                             (group_start > 0 && fabs(group_start - target) < tol));
                break;
            }
        }
        for (int i = 0; i < n; i++) keep[i] = keep[i] && lg[i] >= bound;
    }
    /* A close top_p call matters only if the groups on either side of it survive min_p. */
    double mp = p->min_p > 0 ? (p->min_p < 1 ? p->min_p : 1) : 0;
    if (top_p_close && bound_w >= mp * (1 - 1e-5)) clear_case = false;
    if (mp > 0) {
        for (int i = 0; i < n; i++) {
            if (mp < 1 && fabs(w[i] - mp) < 1e-5 * mp) clear_case = false;
            keep[i] = keep[i] && w[i] >= mp;
        }
    }
    double z = 0;
    for (int i = 0; i < n; i++)
        if (keep[i]) z += w[i];
    for (int i = 0; i < n; i++) probs[i] = keep[i] ? w[i] / z : 0;
done:
    free(lg), free(order), free(w), free(keep);
    return clear_case;
}

/* The reference of step 1: counts by scanning the whole history for every token (O(vocab x
 * history)), the float operations in the documented order. */
static void ref_penalties(float *lg, int n, const sampling_params *p, const int32_t *hist, int hlen,
                          int plen) {
    for (int j = 0; j < p->n_logit_bias; j++)
        if (p->logit_bias[j].token >= 0 && p->logit_bias[j].token < n)
            lg[p->logit_bias[j].token] += p->logit_bias[j].bias;
    for (int t = 0; t < n; t++) {
        int in_prompt = 0, out = 0;
        for (int j = 0; j < hlen; j++)
            if (hist[j] == t) (j < plen ? in_prompt++ : out++);
        if ((in_prompt || out) && p->repetition_penalty != 1.0f)
            lg[t] = lg[t] > 0 ? lg[t] / p->repetition_penalty : lg[t] * p->repetition_penalty;
        if (out) {
            lg[t] -= p->frequency_penalty * (float)out;
            lg[t] -= p->presence_penalty;
        }
    }
}

/* --------------------------------------------------------------------------------------------- */

static sampling_params params(float t, int k, float top_p, float min_p) {
    sampling_params p = sampling_params_default();
    p.temperature = t, p.top_k = k, p.top_p = top_p, p.min_p = min_p;
    return p;
}

/* Compare sampler_filtered_probs with the reference: the same kept set exactly, probabilities
 * within float rounding. */
static int compare_case(const float *lg, int n, const sampling_params *p, const char *what) {
    double *ref = malloc((size_t)n * sizeof *ref), *got = malloc((size_t)n * sizeof *got);
    bool clear_case = ref_probs(lg, n, p, ref);
    sampler_filtered_probs(lg, n, p, got);
    if (clear_case) {
        int set_diff = 0, kept = 0;
        double max_rel = 0, sum = 0;
        for (int i = 0; i < n; i++) {
            if ((ref[i] > 0) != (got[i] > 0)) set_diff++;
            if (ref[i] > 0) kept++, max_rel = fmax(max_rel, fabs(got[i] - ref[i]) / ref[i]);
            sum += got[i];
        }
        CHECK(set_diff == 0, "%s (T=%g k=%d p=%g min_p=%g n=%d): %d tokens differ in the kept set",
              what, p->temperature, p->top_k, p->top_p, p->min_p, n, set_diff);
        CHECK(max_rel < 2e-5, "%s: max relative probability error %.3g", what, max_rel);
        CHECK_NEAR(sum, 1.0, 1e-9, what);
    }
    free(ref), free(got);
    return clear_case ? 1 : 0;
}

static void test_filters_vs_reference(void) {
    const float temps[] = {0, 0.3f, 1, 2.5f};
    const int ks[] = {0, -1, 1, 3, 50, -2, -3, -4}; /* -2: n - 1, -3: n, -4: 5n */
    const float tps[] = {1, 0.9f, 0.5f, 0.05f, 0, 1e-9f};
    const float mps[] = {0, 0.05f, 0.3f, 1};
    /* 1000 tokens run the sampler's narrow radix plan (4 x 8 bits), 6000 the wide one (11+11+10).
     */
    const int sizes[2] = {1000, 6000};
    float *lg = malloc(6000 * sizeof *lg);
    int cases = 0, clear = 0;
    for (int kind = 0; kind < 3; kind++)
        for (int a = 0; a < 4; a++)
            for (int b = 0; b < 8; b++)
                for (int c = 0; c < 6; c++)
                    for (int d = 0; d < 4; d++)
                        for (int s = 0; s < 2; s++) {
                            if (s == 1 && (a + b + c + d) % 3) continue; /* a third of them */
                            int n = sizes[s];
                            fill_logits(lg, n, kind, (uint64_t)(cases * 7 + 1));
                            int k = ks[b] == -2   ? n - 1
                                    : ks[b] == -3 ? n
                                    : ks[b] == -4 ? 5 * n
                                                  : ks[b];
                            sampling_params p = params(temps[a], k, tps[c], mps[d]);
                            clear += compare_case(lg, n, &p, kind == 1 ? "ties" : "random");
                            cases++;
                        }
    fprintf(stderr, "filters vs reference: %d cases, %d clear of rounding boundaries\n", cases,
            clear);
    CHECK(clear > cases * 9 / 10, "too many borderline cases skipped: %d of %d", cases - clear,
          cases);

    /* A few at the real vocabulary size, including the LLM-like shape. Individual tokens near a
     * top_p boundary carry little mass there, so a case may be too close to call: then try other
     * logits. */
    float *big = malloc(BIG_VOCAB * sizeof *big);
    const sampling_params bigp[3] = {params(0.7f, 50, 0.9f, 0), params(1, 0, 0.95f, 0.02f),
                                     params(1.3f, 2000, 1, 0.1f)};
    for (int kind = 0; kind < 3; kind++)
        for (int c = 0; c < 3; c++) {
            int tries = 0;
            while (tries < 8) {
                fill_logits(big, BIG_VOCAB, kind, 99 + 10 * kind + 100 * c + tries++);
                if (compare_case(big, BIG_VOCAB, &bigp[c], "big vocabulary")) break;
            }
            CHECK(tries < 8, "big vocabulary kind %d case %d: always borderline", kind, c);
            if (tries > 1)
                fprintf(stderr, "big vocabulary kind %d case %d: %d tries\n", kind, c, tries);
        }
    free(big), free(lg);
}

/* Hand-made ties: the documented rule, spelt out. */
static void test_ties(void) {
    const float lg[8] = {1, 3, 3, 2, 3, 0, 2, -1};
    double probs[8];
    sampling_params p = params(1, 2, 1, 0); /* top_k 2: the k-th value is 3, all three 3s stay */
    sampler_filtered_probs(lg, 8, &p, probs);
    CHECK(probs[1] > 0 && probs[2] > 0 && probs[4] > 0, "top_k keeps the whole tie group");
    CHECK(probs[0] == 0 && probs[3] == 0 && probs[6] == 0, "top_k drops below the k-th value");
    CHECK_NEAR(probs[1], 1.0 / 3, 1e-7, "tied tokens share equally");
    p = params(1, 4, 1, 0); /* the 4th value is 2: both 2s stay (5 tokens) */
    sampler_filtered_probs(lg, 8, &p, probs);
    int kept = 0;
    for (int i = 0; i < 8; i++) kept += probs[i] > 0;
    CHECK(kept == 5 && probs[3] > 0 && probs[6] > 0, "top_k 4 keeps 5 (tie at the boundary): %d",
          kept);
    p = params(1, 0, 0.01f, 0); /* top_p tiny: the top group, all three */
    sampler_filtered_probs(lg, 8, &p, probs);
    kept = 0;
    for (int i = 0; i < 8; i++) kept += probs[i] > 0;
    CHECK(kept == 3, "top_p keeps the whole top tie group: %d", kept);
    /* Greedy: lowest id among equal maxima. */
    CHECK(sampler_pick(lg, 8, 0, 1, 2) == 1, "greedy tie -> lowest id");
    const float flat[5] = {7, 7, 7, 7, 7};
    CHECK(sampler_pick(flat, 5, 0, 0, 0) == 0, "greedy on equal logits -> 0");
    const float signed_zero[3] = {-0.0f, 0.0f, -1};
    CHECK(sampler_pick(signed_zero, 3, 0, 0, 0) == 0, "-0 ties with +0");
    /* Top logprobs: by logit, lowest id first among ties. */
    int32_t ids[4];
    float lps[4];
    sampler_top_logprobs(lg, 8, 1, 4, ids, lps);
    CHECK(ids[0] == 1 && ids[1] == 2 && ids[2] == 4 && ids[3] == 3,
          "top logprob order: %d %d %d %d", ids[0], ids[1], ids[2], ids[3]);
    CHECK(lps[0] == lps[1] && lps[1] == lps[2] && lps[2] > lps[3], "tied logprobs equal");
}

/* --------------------------------------------------------------------------------------------- */
/* The draws. */

static void test_empirical_distribution(void) {
    const int n = 64, draws = 200000;
    float lg[64];
    const sampling_params cases[] = {params(1, 0, 1, 0), params(0.8f, 20, 0.9f, 0.01f),
                                     params(1.7f, 0, 0.8f, 0), params(1, 10, 1, 0.2f)};
    for (int c = 0; c < 8; c++) {
        /* Two shapes: LLM-like (a few strong tokens) and smooth (many survive the filters). */
        fill_logits(lg, n, c < 4 ? 2 : 0, 1234);
        for (int i = 0; i < n; i++) lg[i] += (float)(0.05 * i); /* no exact ties */
        const sampling_params *p = &cases[c % 4];
        double ref[64];
        sampler_filtered_probs(lg, n, p, ref);
        double expect_ref[64];
        ref_probs(lg, n, p, expect_ref);
        int hist[64] = {0}, outside = 0, kept = 0;
        for (int d = 0; d < draws; d++) {
            int32_t t = sampler_draw(lg, n, p, 0xC0FFEEull + (uint64_t)c, d, NULL);
            if (t < 0 || t >= n || ref[t] == 0)
                outside++;
            else
                hist[t]++;
        }
        /* Pearson's chi-square over the kept tokens; with df degrees of freedom the statistic has
         * mean df and sd sqrt(2 df): 6 sd above is far beyond chance, and the seeds are fixed. */
        double chi2 = 0;
        for (int i = 0; i < n; i++) {
            if (ref[i] == 0) continue;
            kept++;
            double e = ref[i] * draws;
            chi2 += (hist[i] - e) * (hist[i] - e) / e;
        }
        int df = kept - 1;
        double bound = df + 6 * sqrt(2.0 * (df > 0 ? df : 1)) + 10;
        fprintf(stderr, "empirical case %d: %d kept, chi2 %.1f (df %d, bound %.1f)\n", c, kept,
                chi2, df, bound);
        CHECK(outside == 0, "case %d: %d draws outside the kept set", c, outside);
        CHECK(chi2 < bound, "case %d: chi2 %.1f >= %.1f", c, chi2, bound);
        double max_diff = 0;
        for (int i = 0; i < n; i++) max_diff = fmax(max_diff, fabs(ref[i] - expect_ref[i]));
        CHECK(max_diff < 1e-6, "case %d: sampler distribution vs reference %.3g", c, max_diff);
    }
}

static void test_call_order(void) {
    const int n = 5000, N = 200;
    float *lg = malloc(n * sizeof *lg);
    fill_logits(lg, n, 0, 77);
    sampling_params p = params(1.1f, 300, 0.95f, 0.001f);
    int32_t fwd[200], back[200], mixed[200];
    for (int i = 0; i < N; i++) fwd[i] = sampler_draw(lg, n, &p, 42, i, NULL);
    for (int i = N - 1; i >= 0; i--) back[i] = sampler_draw(lg, n, &p, 42, i, NULL);
    for (int i = 0; i < N; i++) {
        int pos = (i * 37) % N; /* a permutation, interleaved with another request's draws */
        (void)sampler_draw(lg, n, &p, 43, pos, NULL);
        mixed[pos] = sampler_draw(lg, n, &p, 42, pos, NULL);
    }
    int same = 1, differs_seed = 0, distinct = 0;
    for (int i = 0; i < N; i++) {
        same &= fwd[i] == back[i] && fwd[i] == mixed[i];
        differs_seed += sampler_draw(lg, n, &p, 4242, i, NULL) != fwd[i];
        distinct += i > 0 && fwd[i] != fwd[i - 1];
    }
    CHECK(same, "the token depends only on (seed, position)");
    CHECK(differs_seed > N / 2, "another seed gives other tokens (%d of %d differ)", differs_seed,
          N);
    CHECK(distinct > N / 2, "positions give different draws (%d changes)", distinct);
    /* sampler_sample with no history and no bias is sampler_draw; sampler_pick is the default
     * params. */
    float *copy = malloc(n * sizeof *copy);
    memcpy(copy, lg, n * sizeof *copy);
    CHECK(sampler_sample(copy, n, &p, NULL, 0, 0, 42, 7, NULL) == fwd[7], "sample == draw");
    sampling_params d = params(0.9f, 0, 1, 0);
    CHECK(sampler_pick(lg, n, 0.9f, 5, 11) == sampler_draw(lg, n, &d, 5, 11, NULL), "pick == draw");
    free(lg), free(copy);
}

/* --------------------------------------------------------------------------------------------- */

static void test_logprobs(void) {
    const int n = 3000;
    float *lg = malloc(n * sizeof *lg);
    double *ref = malloc(n * sizeof *ref);
    fill_logits(lg, n, 2, 5);
    lg[17] = NAN;
    const float temps[] = {0, 0.5f, 1, 2};
    for (int c = 0; c < 4; c++) {
        /* The reference: log_softmax(l / T) in double (T = 1 when greedy), NaN as -inf. */
        double T = temps[c] > 0 ? temps[c] : 1, m = -INFINITY, z = 0;
        for (int i = 0; i < n; i++) m = fmax(m, clean(lg[i]) / T);
        for (int i = 0; i < n; i++) z += exp(clean(lg[i]) / T - m);
        for (int i = 0; i < n; i++) ref[i] = clean(lg[i]) / T - m - log(z);
        /* Filters on: logprobs must still be the unfiltered ones. */
        sampling_params p = params(temps[c], 5, 0.5f, 0.1f);
        p.logprobs = 20;
        int32_t ids[20];
        float lps[20];
        sample_out out = {.top_ids = ids, .top_logprobs = lps};
        int32_t tok = sampler_draw(lg, n, &p, 9, 3, &out);
        CHECK(out.token == tok && out.n_top == 20, "out filled (n_top %d)", out.n_top);
        CHECK_NEAR(out.logprob, ref[tok], 1e-5, "chosen token logprob");
        sort_base = lg;
        int order[3000];
        for (int i = 0; i < n; i++) order[i] = i;
        float *cl = malloc(n * sizeof *cl);
        for (int i = 0; i < n; i++) cl[i] = clean(lg[i]);
        sort_base = cl;
        qsort(order, n, sizeof *order, by_logit_desc);
        for (int j = 0; j < 20; j++) {
            CHECK(ids[j] == order[j], "T=%g top %d: id %d, expected %d", temps[c], j, ids[j],
                  order[j]);
            CHECK_NEAR(lps[j], ref[order[j]], 1e-5, "top logprob");
        }
        free(cl);
        if (temps[c] == 0) CHECK(tok == order[0], "greedy picks the top");
    }
    /* K beyond the vocabulary: n entries; no buffers: none. */
    const float small[3] = {0, 1, 2};
    int32_t ids[8];
    float lps[8];
    sampling_params p = params(1, 0, 1, 0);
    p.logprobs = 8;
    sample_out out = {.top_ids = ids, .top_logprobs = lps};
    sampler_draw(small, 3, &p, 1, 1, &out);
    CHECK(out.n_top == 3 && ids[0] == 2 && ids[2] == 0, "K > vocab: %d entries", out.n_top);
    double s = 0;
    for (int j = 0; j < 3; j++) s += exp(lps[j]);
    CHECK_NEAR(s, 1.0, 1e-6, "logprobs of the whole vocabulary sum to 1");
    sample_out none = {0};
    sampler_draw(small, 3, &p, 1, 1, &none);
    CHECK(none.n_top == 0, "no buffers, no top entries");
    /* The old interface agrees. */
    sampler_top_logprobs(small, 3, 2, 2, ids, lps);
    CHECK(ids[0] == 2 && ids[1] == 1, "sampler_top_logprobs order");
    CHECK_NEAR(lps[0], -log(1 + exp(-0.5) + exp(-1.0)), 1e-6, "sampler_top_logprobs value");
    CHECK_NEAR(sampler_logsumexp(small, 3, 0), log(1 + exp(1) + exp(2)), 1e-6, "logsumexp");
    free(lg), free(ref);
}

/* --------------------------------------------------------------------------------------------- */

static void test_penalties(void) {
    /* Hand-checked: token 5 three times in the output, 6 only in the prompt, 7 in both, 8 never. */
    float lg[10] = {0, 0, 0, 0, 0, 2.0f, 2.0f, -1.0f, 2.0f, 0};
    const int32_t hist[] = {6, 7, 1, /* prompt */ 5, 7, 5, 5};
    sampling_params p = sampling_params_default();
    p.repetition_penalty = 2.0f, p.frequency_penalty = 0.25f, p.presence_penalty = 0.5f;
    sampler_apply_penalties(lg, 10, &p, hist, 7, 3);
    CHECK(lg[5] == 2.0f / 2 - 0.75f - 0.5f, "token 5: /2 once, 3 x freq, presence once: %g", lg[5]);
    CHECK(lg[6] == 1.0f, "token 6 (prompt only): repetition only: %g", lg[6]);
    CHECK(lg[7] == -2.0f - 0.25f - 0.5f, "token 7 (negative): x2, one output: %g", lg[7]);
    CHECK(lg[8] == 2.0f && lg[9] == 0, "unseen tokens untouched");
    CHECK(lg[1] == 0, "0 stays 0 under the repetition penalty");

    /* Against the O(vocab x history) reference, with a history big enough for the heap table, ids
     * outside the vocabulary, bias entries (one token twice, one outside). */
    const int n = 700, H = 3000;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    int32_t *h = malloc(H * sizeof *h);
    rng_t r;
    rng_seed(&r, 3);
    for (int trial = 0; trial < 4; trial++) {
        fill_logits(a, n, 0, 500 + trial);
        memcpy(b, a, n * sizeof *a);
        int hlen = trial == 0 ? 40 : H;
        for (int j = 0; j < hlen; j++)
            h[j] = (int32_t)(rng_next(&r) % 400) - (j % 97 == 0 ? 1000 : 0);
        h[5] = n + 3;
        logit_bias_entry bias[4] = {{3, 1.5f}, {3, 2.0f}, {n + 1, 9}, {11, -100}};
        sampling_params q = sampling_params_default();
        q.repetition_penalty = trial == 3 ? 1.0f : 1.3f;
        q.frequency_penalty = trial == 2 ? 0 : 0.1f;
        q.presence_penalty = trial == 1 ? -0.4f : 0.3f;
        q.logit_bias = bias, q.n_logit_bias = 4;
        int plen = hlen / 3;
        ref_penalties(a, n, &q, h, hlen, plen);
        sampler_apply_penalties(b, n, &q, h, hlen, plen);
        int diff = 0;
        for (int i = 0; i < n; i++) diff += a[i] != b[i];
        CHECK(diff == 0, "penalties trial %d: %d logits differ from the reference", trial, diff);
    }
    free(a), free(b), free(h);

    /* Logprobs are of the penalised distribution (then the temperature). */
    {
        float x[6] = {1, 2, 3, 0.5f, -1, 2.5f}, y[6];
        memcpy(y, x, sizeof x);
        const int32_t hh[] = {2, 5, 5, 1};
        logit_bias_entry lb = {4, 1.0f};
        sampling_params q = params(0.7f, 0, 1, 0);
        q.repetition_penalty = 1.5f, q.frequency_penalty = 0.3f, q.presence_penalty = 0.2f;
        q.logit_bias = &lb, q.n_logit_bias = 1, q.logprobs = 6;
        ref_penalties(y, 6, &q, hh, 4, 1);
        int32_t ids[6];
        float lps[6];
        sample_out o = {.top_ids = ids, .top_logprobs = lps};
        int32_t t = sampler_sample(x, 6, &q, hh, 4, 1, 3, 0, &o);
        double m = -INFINITY, z = 0;
        for (int i = 0; i < 6; i++) m = fmax(m, y[i] / 0.7);
        for (int i = 0; i < 6; i++) z += exp(y[i] / 0.7 - m);
        CHECK_NEAR(o.logprob, y[t] / 0.7 - m - log(z), 1e-5, "logprob after penalties");
        for (int j = 0; j < 6; j++)
            CHECK_NEAR(lps[j], y[ids[j]] / 0.7 - m - log(z), 1e-5, "top logprob after penalties");
        for (int j = 1; j < 6; j++) CHECK(y[ids[j - 1]] >= y[ids[j]], "ordered by penalised logit");
    }

    /* Through sampler_sample: a strong frequency penalty stops a greedy repeat. */
    float g[4] = {1, 3, 2.5f, 0};
    const int32_t out_hist[] = {0, 1, 1};
    sampling_params q = params(0, 0, 1, 0);
    q.frequency_penalty = 0.5f;
    CHECK(sampler_sample(g, 4, &q, out_hist, 3, 1, 0, 0, NULL) == 2,
          "frequency penalty moves greedy");
    /* Penalties off: history is not even looked at (NULL is fine). */
    float g2[4] = {1, 3, 2.5f, 0};
    q.frequency_penalty = 0;
    CHECK(sampler_sample(g2, 4, &q, NULL, 5, 2, 0, 0, NULL) == 1, "no penalties, NULL history");
}

static void test_logit_bias(void) {
    const int n = 5000;
    float *lg = malloc(n * sizeof *lg);
    logit_bias_entry force = {4242, 100};
    for (int t = 0; t < 3; t++) {
        fill_logits(lg, n, 2, 8 + t);
        sampling_params p = params(t == 0 ? 0 : 1.0f, t == 2 ? 40 : 0, t == 2 ? 0.9f : 1, 0);
        p.logit_bias = &force, p.n_logit_bias = 1;
        int hits = 0;
        for (int pos = 0; pos < 50; pos++) {
            float *copy = malloc(n * sizeof *copy);
            memcpy(copy, lg, n * sizeof *copy);
            hits += sampler_sample(copy, n, &p, NULL, 0, 0, 1, pos, NULL) == 4242;
            free(copy);
        }
        CHECK(hits == 50, "bias +100 forces the token (mode %d): %d of 50", t, hits);
    }
    /* -100 on the argmax removes it from greedy. */
    fill_logits(lg, n, 2, 8);
    int top = sampler_pick(lg, n, 0, 0, 0);
    logit_bias_entry ban = {top, -100};
    sampling_params p = params(0, 0, 1, 0);
    p.logit_bias = &ban, p.n_logit_bias = 1;
    CHECK(sampler_sample(lg, n, &p, NULL, 0, 0, 0, 0, NULL) != top, "bias -100 bans the argmax");
    free(lg);
}

/* --------------------------------------------------------------------------------------------- */

static void test_extremes(void) {
    const int n = 1000;
    float *lg = malloc(n * sizeof *lg);
    fill_logits(lg, n, 0, 21);
    int top = sampler_pick(lg, n, 0, 0, 0);
    double *probs = malloc(n * sizeof *probs);

    /* top_p = 0 and min_p >= 1 keep only the top; top_k beyond the vocabulary or negative is off.
     */
    const sampling_params only_top[] = {params(1, 0, 0, 0), params(1, 0, -3, 0), params(1, 0, 1, 1),
                                        params(1, 0, 1, 7), params(1, 1, 1, 0)};
    for (int c = 0; c < 5; c++)
        for (int pos = 0; pos < 20; pos++)
            CHECK(sampler_draw(lg, n, &only_top[c], 3, pos, NULL) == top,
                  "case %d keeps only the top", c);
    const sampling_params off[] = {params(1, n + 5, 1, 0), params(1, -1, 1, 0),
                                   params(1, 0, 1.5f, 0), params(1, 0, NAN, NAN),
                                   params(1, n, 1, -1)};
    for (int c = 0; c < 5; c++) {
        sampler_filtered_probs(lg, n, &off[c], probs);
        int kept = 0;
        for (int i = 0; i < n; i++) kept += probs[i] > 0;
        CHECK(kept == n, "case %d: filters off keep everything (%d)", c, kept);
    }

    /* Tiny, subnormal and infinite temperatures: finite, in range, and sensible. */
    const float temps[] = {1e-6f, 1e-30f, 1e-45f, 1e30f, INFINITY, NAN, -1};
    for (int c = 0; c < 7; c++) {
        sampling_params p = params(temps[c], 0, 1, 0);
        p.logprobs = 3;
        int32_t ids[3];
        float lps[3];
        sample_out out = {.top_ids = ids, .top_logprobs = lps};
        int32_t t = sampler_draw(lg, n, &p, 1, 2, &out);
        CHECK(t >= 0 && t < n, "T=%g: token %d", temps[c], t);
        CHECK(!isnan(out.logprob) && out.logprob <= 1e-6, "T=%g: logprob %g", temps[c],
              out.logprob);
        for (int j = 0; j < 3; j++) CHECK(!isnan(lps[j]), "T=%g: top logprob NaN", temps[c]);
        if (temps[c] < 1e-5f || !(temps[c] > 0)) CHECK(t == top, "T=%g is (near) greedy", temps[c]);
        if (temps[c] > 0 && temps[c] < 1e-5f)
            CHECK_NEAR(out.logprob, 0, 1e-6, "tiny T: top has it all");
        if (temps[c] >= 1e30f) CHECK_NEAR(out.logprob, -log(n), 1e-3, "huge T: uniform");
    }

    /* NaN logits never drawn; +inf logits take everything; all -inf: uniform. */
    float v[6] = {NAN, 1, NAN, 0.5f, NAN, 0};
    for (int pos = 0; pos < 200; pos++) {
        int32_t t = sampler_draw(v, 6, &only_top[0] + 0, 5, pos, NULL); /* top_p 0: the top */
        CHECK(t == 1, "NaN never wins");
        sampling_params p = params(3, 0, 1, 0);
        t = sampler_draw(v, 6, &p, 5, pos, NULL);
        CHECK(t == 1 || t == 3 || t == 5, "NaN never drawn: %d", t);
    }
    float inf[5] = {1, INFINITY, 3, INFINITY, NAN};
    int count[5] = {0};
    sampling_params p = params(1, 0, 1, 0);
    p.logprobs = 2;
    int32_t ids[2];
    float lps[2];
    for (int pos = 0; pos < 2000; pos++) {
        sample_out out = {.top_ids = ids, .top_logprobs = lps};
        int32_t t = sampler_draw(inf, 5, &p, 8, pos, &out);
        count[t]++;
        CHECK_NEAR(out.logprob, -log(2), 1e-6, "+inf tokens share");
    }
    CHECK(count[1] + count[3] == 2000 && count[1] > 900 && count[3] > 900, "+inf: %d / %d",
          count[1], count[3]);
    CHECK(ids[0] == 1 && ids[1] == 3, "+inf top entries");
    CHECK(sampler_pick(inf, 5, 0, 0, 0) == 1, "greedy +inf: lowest id");
    float none[4] = {-INFINITY, NAN, -INFINITY, -INFINITY};
    CHECK(sampler_pick(none, 4, 0, 0, 0) == 0, "nothing possible, greedy: 0");
    int seen[4] = {0};
    for (int pos = 0; pos < 400; pos++) seen[sampler_pick(none, 4, 1, 0, pos)]++;
    CHECK(seen[0] > 50 && seen[1] > 50 && seen[2] > 50 && seen[3] > 50,
          "nothing possible: uniform");
    sample_out out = {.top_ids = ids, .top_logprobs = lps};
    sampler_draw(none, 4, &p, 0, 0, &out);
    CHECK_NEAR(out.logprob, -log(4), 1e-6, "nothing possible: logprob -log V");

    /* Degenerate arguments. */
    CHECK(sampler_draw(lg, 0, &p, 0, 0, NULL) == -1, "vocab 0");
    CHECK(sampler_sample(NULL, 5, &p, NULL, 0, 0, 0, 0, NULL) == -1, "NULL logits");
    CHECK(sampler_draw(lg, 5, NULL, 0, 0, NULL) == -1, "NULL params");
    const float one[1] = {3};
    CHECK(sampler_draw(one, 1, &only_top[0], 0, 0, NULL) == 0, "vocab 1");
    CHECK(sampler_pick(one, 1, 1, 0, 0) == 0, "vocab 1 sampled");
    free(lg), free(probs);
}

/* --------------------------------------------------------------------------------------------- */

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_speed(void) {
    float *lg = malloc(BIG_VOCAB * sizeof *lg), *work = malloc(BIG_VOCAB * sizeof *lg);
    fill_logits(lg, BIG_VOCAB, 2, 2024);
    int32_t hist[2000];
    for (int j = 0; j < 2000; j++) hist[j] = (j * 7919) % BIG_VOCAB;
    struct {
        const char *name;
        sampling_params p;
        bool penalties;
    } cases[] = {
        {"greedy", params(0, 0, 1, 0), false},
        {"temperature only", params(1, 0, 1, 0), false},
        {"top_k 50 + top_p 0.9", params(1, 50, 0.9f, 0), false},
        {"top_p 0.9", params(0.8f, 0, 0.9f, 0), false},
        {"top_k 50 + top_p 0.9 + logprobs 5 + penalties", params(1, 50, 0.9f, 0.05f), true},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sampling_params p = cases[c].p;
        if (cases[c].penalties) {
            p.logprobs = 5;
            p.repetition_penalty = 1.1f, p.presence_penalty = 0.2f, p.frequency_penalty = 0.1f;
        }
        int32_t ids[5];
        float lps[5];
        const int reps = 30;
        double total = 0, best = 1e9;
        for (int r = 0; r < reps; r++) {
            memcpy(work, lg, BIG_VOCAB * sizeof *lg);
            sample_out out = {.top_ids = ids, .top_logprobs = lps};
            double t0 = now_ms();
            sampler_sample(work, BIG_VOCAB, &p, hist, 2000, 1000, 17, r, &out);
            double ms = now_ms() - t0;
            total += ms, best = fmin(best, ms);
        }
        double ms = total / reps;
        fprintf(stderr, "speed, vocab %d, %-48s %.3f ms per call (best %.3f)\n", BIG_VOCAB,
                cases[c].name, ms, best);
        CHECK(ms < 200, "%s: %.1f ms per call", cases[c].name, ms);
    }
    free(lg), free(work);
}

int main(void) {
    test_filters_vs_reference();
    test_ties();
    test_empirical_distribution();
    test_call_order();
    test_logprobs();
    test_penalties();
    test_logit_bias();
    test_extremes();
    test_speed();
    return check_report("test_sampler");
}
