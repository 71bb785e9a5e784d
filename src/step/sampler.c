/* Steps 2-5 of sampling (see sampler.h): clean, greedy or temperature, top_k / top_p / min_p, draw,
 * and the logprobs.
 *
 * The one idea that keeps this fast on a 201,088-entry vocabulary: every filter keeps "the tokens
 * whose logit is at least some threshold", and a threshold can be found without sorting. A float
 * maps to a 32-bit integer with the same order (order_key), so "the k-th largest" or "where the
 * probability mass reaches top_p" is found by a radix select: one pass builds a histogram of the
 * top 11 bits (count and probability mass per bin), a walk down the bins finds the bin where the
 * target is reached, and only that bin is refined with the next 11 bits, then the last 10. Three
 * passes at most, each a cheap loop (short spans use four levels of 8 bits, for small histograms),
 * and the result is exact — at the last level a bin is a single float value, which is also why
 * ties at the boundary are kept whole. Nothing of vocabulary size is ever sorted; only the few top
 * logprob entries are. */
#include "step/sampler.h"

#include "base/rng.h"
#include "base/xalloc.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------------
 * Floats as ordered integers. For IEEE-754 floats, flipping the sign bit of positives and all bits
 * of negatives gives unsigned integers in the same order as the values. NaN is first turned into
 * -inf (it can never be drawn) and -0 into +0 (they are equal, so they must tie). */
static inline uint32_t order_key(float x) {
    if (x != x) x = -INFINITY;
    x += 0.0f; /* -0 + +0 = +0 under round-to-nearest */
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* ------------------------------------------------------------------------------------------------
 * The distribution: its maximum, temperature and mode. Weights are relative to the maximum, so the
 * top token weighs exactly 1, the sum is >= 1, and no exp() ever overflows. */
enum { MODE_FINITE, MODE_POSINF, MODE_NONE };

typedef struct {
    const float *x;
    int n;
    float max, temp;
    int mode;
    int32_t argmax; /* lowest id among the maxima */
} dist;

static dist dist_scan(const float *x, int n, float temp) {
    uint32_t best = 0; /* below every key a cleaned float can have */
    int32_t arg = 0;
    for (int i = 0; i < n; i++) {
        uint32_t k = order_key(x[i]);
        if (k > best) best = k, arg = i; /* strict: the first (lowest id) maximum stays */
    }
    dist d = {x, n, x[arg], temp, MODE_FINITE, arg};
    if (d.max != d.max || d.max == -INFINITY)
        d.mode = MODE_NONE;
    else if (d.max == INFINITY)
        d.mode = MODE_POSINF;
    if (!(d.temp > 0)) d.temp = 1.0f;
    if (d.temp == INFINITY)
        d.temp = FLT_MAX; /* inf / inf would be NaN; FLT_MAX is as flat as it gets */
    return d;
}

/* (x - max) / T, <= 0, or -inf for a token that cannot be drawn. Subtracting before dividing is
 * what makes a tiny T safe: the top token gives 0 / T = 0 and the others go to -inf at worst. */
static inline float scaled(const dist *d, float x) {
    switch (d->mode) {
    case MODE_FINITE:
        return x != x ? -INFINITY : (x - d->max) / d->temp;
    case MODE_POSINF:
        return x == INFINITY ? 0.0f : -INFINITY;
    default:
        return 0.0f; /* nothing is possible, so everything is equally (im)possible */
    }
}

/* expf of the scaled logit. Below -104 expf is exactly 0 in float (e^-104 is under half the
 * smallest subnormal), so skipping the call there gives the same value for less work. */
static inline float weight(const dist *d, float x) {
    float s = scaled(d, x);
    return s < -104.0f ? 0.0f : expf(s);
}

/* The sum of all weights in double: the normaliser of the logprobs and of an unfiltered draw. */
static double weight_sum(const dist *d) {
    double z = 0;
    for (int i = 0; i < d->n; i++) z += weight(d, d->x[i]);
    return z;
}

/* ------------------------------------------------------------------------------------------------
 * The tokens still in play: all of them (ids NULL) or a list in increasing id order. */
typedef struct {
    const int32_t *ids;
    int n;
} span;

static inline int span_at(const span *s, int j) {
    return s->ids ? s->ids[j] : j;
}

/* ------------------------------------------------------------------------------------------------
 * Radix select. Among the tokens of `c`, walking down from the highest logit, find the first place
 * where the accumulated amount (1 per token, or its weight when by_mass) reaches `target`, and
 * return the threshold key: keeping every token with key >= threshold keeps that shortest run, tie
 * group of the last token included. When the target is never reached (rounding with top_p near 1)
 * everything in play is kept. */
typedef struct {
    uint32_t threshold; /* keep key >= threshold */
    int kept;           /* tokens of the span that this keeps */
    double total;       /* the amount of the whole span (its weight sum when by_mass) */
} selection;

/* How the 32 key bits are split into levels. Large spans (the vocabulary) want few passes: 11+11+10
 * bits, at most three passes. Small spans (the survivors of top_k, tiny vocabularies) want small
 * histograms, since clearing and walking 2048 bins would cost more than the tokens: 4 x 8 bits. */
typedef struct {
    int levels;
    int shift[4], bits[4];
} radix_plan;
static const radix_plan RADIX_WIDE = {3, {21, 10, 0}, {11, 11, 10}};
static const radix_plan RADIX_NARROW = {4, {24, 16, 8, 0}, {8, 8, 8, 8}};
#define RADIX_MAX_BINS     (1 << 11)
#define RADIX_NARROW_BELOW 4096 /* spans shorter than this use the narrow plan */

/* target_fraction: the target is a fraction of the span's total (top_p); else absolute (k). */
static selection select_top(const dist *d, const span *c, bool by_mass, double target,
                            bool target_fraction) {
    const radix_plan *rp = c->n < RADIX_NARROW_BELOW ? &RADIX_NARROW : &RADIX_WIDE;
    int32_t count[RADIX_MAX_BINS];
    double amount[RADIX_MAX_BINS];
    uint32_t prefix = 0, prefix_mask = 0; /* the key bits fixed by the levels above */
    double above = 0;                     /* amount of the tokens surely kept (higher bins) */
    int above_n = 0;
    selection sel = {0, c->n, 0};
    for (int lv = 0; lv < rp->levels; lv++) {
        const int shift = rp->shift[lv], nb = 1 << rp->bits[lv];
        memset(count, 0, (size_t)nb * sizeof count[0]);
        if (by_mass) memset(amount, 0, (size_t)nb * sizeof amount[0]);
        for (int j = 0; j < c->n; j++) {
            float v = d->x[span_at(c, j)];
            uint32_t k = order_key(v);
            if ((k & prefix_mask) != prefix) continue; /* outside the bin being refined */
            uint32_t b = (k >> shift) & (uint32_t)(nb - 1);
            count[b]++;
            if (by_mass) amount[b] += weight(d, v);
        }
        if (lv == 0) {
            if (by_mass)
                for (int b = 0; b < nb; b++) sel.total += amount[b];
            else
                sel.total = c->n;
            if (target_fraction) target *= sel.total;
        }
        int b = nb - 1;
        double a = 0;
        for (; b >= 0; b--) {
            if (!count[b]) continue; /* an empty bin never ends the run (matters for target <= 0) */
            a = by_mass ? amount[b] : count[b];
            if (above + a >= target) break;
            above += a, above_n += count[b];
        }
        if (b < 0) { /* not reached: keep all that was still in play at this level */
            sel.threshold = prefix, sel.kept = above_n;
            return sel;
        }
        prefix |= (uint32_t)b << shift;
        prefix_mask |= (uint32_t)(nb - 1) << shift;
        /* Done when the bin is one value (last level), one token, or, counting, exactly fills the
         * target. The threshold is the bin's lowest key: nothing in play lies between it and the
         * bin. */
        if (lv == rp->levels - 1 || count[b] == 1 || (!by_mass && above + a == target)) {
            sel.threshold = prefix, sel.kept = above_n + count[b];
            return sel;
        }
    }
    return sel; /* not reached: the last level always returns */
}

/* ------------------------------------------------------------------------------------------------
 * A plan: everything decided before the draw. */
typedef struct {
    dist d;
    bool greedy;
    bool filtered;      /* any of top_k, top_p, min_p is on */
    span cand;          /* tokens left after top_k (all of them when top_k is off) */
    int32_t *cand_ids;  /* owned storage of cand.ids */
    uint32_t threshold; /* keep key >= threshold ... */
    float min_p;        /* ... and weight >= min_p (0 = off) */
    double z_all;       /* sum of all weights, or -1 while not computed */
} plan;

static void plan_build(plan *pl, const float *x, int n, const sampling_params *p) {
    memset(pl, 0, sizeof *pl);
    pl->greedy = !(p->temperature > 0);
    pl->d = dist_scan(x, n, pl->greedy ? 1.0f : p->temperature);
    pl->cand = (span){NULL, n};
    pl->z_all = -1;
    if (pl->greedy) return;

    if (p->top_k > 0 && p->top_k < n) {
        selection s = select_top(&pl->d, &pl->cand, false, p->top_k, false);
        pl->threshold = s.threshold;
        /* Gather the survivors once, so top_p and the draw walk ~k tokens instead of the
         * vocabulary. */
        pl->cand_ids = xmalloc((size_t)s.kept * sizeof *pl->cand_ids);
        int m = 0;
        for (int i = 0; i < n && m < s.kept; i++)
            if (order_key(x[i]) >= s.threshold) pl->cand_ids[m++] = i;
        pl->cand = (span){pl->cand_ids, m};
        pl->filtered = true;
    }
    /* top_p < 1 filters; NaN fails the comparison and means off. top_p <= 0 gives target 0: the
     * first (top) tie group. */
    if (p->top_p < 1.0f) {
        double top_p = p->top_p > 0 ? p->top_p : 0.0;
        selection s = select_top(&pl->d, &pl->cand, true, top_p, true);
        if (s.threshold > pl->threshold) pl->threshold = s.threshold;
        /* Over the whole vocabulary the histogram's total is the logprobs' normaliser too (summed
         * in another order, which the logprobs do not mind; the draw sums its own). */
        if (!pl->cand_ids) pl->z_all = s.total;
        pl->filtered = true;
    }
    if (p->min_p > 0) {
        pl->min_p = p->min_p < 1.0f ? p->min_p : 1.0f; /* the top weighs exactly 1: kept */
        pl->filtered = true;
    }
}

static void plan_free(plan *pl) {
    free(pl->cand_ids);
}

static double plan_z_all(plan *pl) {
    if (pl->z_all < 0) pl->z_all = weight_sum(&pl->d);
    return pl->z_all;
}

/* Whether token i survives the filters, and its weight. */
static inline bool plan_keeps(const plan *pl, int i, float *w) {
    float v = pl->d.x[i];
    if (order_key(v) < pl->threshold) return false;
    *w = weight(&pl->d, v);
    return *w >= pl->min_p;
}

static double kept_sum(const plan *pl) {
    double z = 0;
    float w;
    for (int j = 0; j < pl->cand.n; j++)
        if (plan_keeps(pl, span_at(&pl->cand, j), &w)) z += w;
    return z;
}

/* The normaliser of the draw. With no filter at all it is the sum of all weights, which the
 * logprobs want too: weight_sum adds the same numbers in the same (id) order as kept_sum would, so
 * computing it once serves both, bit for bit. */
static double plan_kept_sum(plan *pl) {
    return pl->filtered ? kept_sum(pl) : plan_z_all(pl);
}

/* Inverse CDF in id order. The running sum repeats the normaliser's additions in the same order, so
 * it ends exactly at z; u * z < z unless rounding says otherwise, hence the fallback. A weight-0
 * token can never be the first to pass the target. */
static int32_t plan_draw(plan *pl, double u) {
    double target = u * plan_kept_sum(pl), run = 0;
    int32_t last = pl->d.argmax;
    float w;
    for (int j = 0; j < pl->cand.n; j++) {
        int i = span_at(&pl->cand, j);
        if (!plan_keeps(pl, i, &w)) continue;
        run += w;
        if (w > 0) last = i;
        if (run > target) return i;
    }
    return last;
}

/* ------------------------------------------------------------------------------------------------
 * Top logprob entries: the K largest logits, highest first, lowest id on ties. The radix select
 * gives the K-th value; the tokens above it (fewer than K) plus the first tokens equal to it (in id
 * order) are exactly the K wanted, and only those K get sorted. */
typedef struct {
    uint32_t key;
    int32_t id;
} keyed;

static int keyed_cmp(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static int top_entries(const dist *d, double log_z, int k, int32_t *ids, float *logprobs) {
    if (k > d->n) k = d->n;
    if (k <= 0 || !ids) return 0;
    span all = {NULL, d->n};
    uint32_t t = select_top(d, &all, false, k, false).threshold;
    keyed *buf = xmalloc((size_t)2 * (size_t)k * sizeof *buf), *ties = buf + k;
    int n_above = 0, n_ties = 0;
    for (int i = 0; i < d->n; i++) {
        uint32_t key = order_key(d->x[i]);
        if (key < t) continue;
        if (key > t)
            buf[n_above++] = (keyed){key, i}; /* < k of them by construction */
        else if (n_ties < k)
            ties[n_ties++] = (keyed){key, i};
    }
    int n = n_above;
    for (int j = 0; j < n_ties && n < k; j++) buf[n++] = ties[j];
    qsort(buf, (size_t)n, sizeof *buf, keyed_cmp);
    for (int j = 0; j < n; j++) {
        ids[j] = buf[j].id;
        if (logprobs) logprobs[j] = (float)((double)scaled(d, d->x[buf[j].id]) - log_z);
    }
    free(buf);
    return n;
}

/* ------------------------------------------------------------------------------------------------
 * Public entry points. */
int32_t sampler_draw(const float *logits, int vocab, const sampling_params *p, uint64_t seed,
                     int64_t output_pos, sample_out *out) {
    if (!logits || !p || vocab <= 0) return -1;
    plan pl;
    plan_build(&pl, logits, vocab, p);
    int32_t tok = pl.greedy ? pl.d.argmax
                            : plan_draw(&pl, rng_uniform01d(rng_hash2(seed, (uint64_t)output_pos)));
    if (out) {
        double log_z = log(plan_z_all(&pl));
        out->token = tok;
        out->logprob = (float)((double)scaled(&pl.d, logits[tok]) - log_z);
        out->n_top = p->logprobs > 0 && out->top_ids
                         ? top_entries(&pl.d, log_z, p->logprobs, out->top_ids, out->top_logprobs)
                         : 0;
    }
    plan_free(&pl);
    return tok;
}

int32_t sampler_sample(float *logits, int vocab, const sampling_params *p, const int32_t *history,
                       int history_len, int prompt_len, uint64_t seed, int64_t output_pos,
                       sample_out *out) {
    if (!logits || !p || vocab <= 0) return -1;
    sampler_apply_penalties(logits, vocab, p, history, history_len, prompt_len);
    return sampler_draw(logits, vocab, p, seed, output_pos, out);
}

void sampler_filtered_probs(const float *logits, int vocab, const sampling_params *p,
                            double *probs) {
    if (!logits || !p || vocab <= 0 || !probs) return;
    plan pl;
    plan_build(&pl, logits, vocab, p);
    memset(probs, 0, (size_t)vocab * sizeof *probs);
    if (pl.greedy) {
        probs[pl.d.argmax] = 1;
    } else {
        double z = plan_kept_sum(&pl);
        float w;
        for (int j = 0; j < pl.cand.n; j++) {
            int i = span_at(&pl.cand, j);
            if (plan_keeps(&pl, i, &w)) probs[i] = w / z;
        }
    }
    plan_free(&pl);
}

double sampler_logsumexp(const float *logits, int n, float temperature) {
    if (n <= 0) return -INFINITY;
    dist d = dist_scan(logits, n, temperature);
    if (d.mode == MODE_POSINF) return INFINITY;
    if (d.mode == MODE_NONE) return -INFINITY;
    return (double)d.max / d.temp + log(weight_sum(&d));
}

void sampler_top_logprobs(const float *logits, int n, float temperature, int k, int32_t *ids,
                          float *logprobs) {
    if (n <= 0) return;
    dist d = dist_scan(logits, n, temperature);
    top_entries(&d, log(weight_sum(&d)), k, ids, logprobs);
}

float sampler_logprob_of(const float *logits, int n, float temperature, int32_t id) {
    if (n <= 0 || id < 0 || id >= n) return NAN;
    dist d = dist_scan(logits, n, temperature);
    return (float)((double)scaled(&d, logits[id]) - log(weight_sum(&d)));
}

int32_t sampler_pick(const float *logits, int n, float temperature, uint64_t seed, uint64_t step) {
    sampling_params p = sampling_params_default();
    p.temperature = temperature;
    return sampler_draw(logits, n, &p, seed, (int64_t)step, NULL);
}
