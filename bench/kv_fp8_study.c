/* gptoss_kv_fp8_study — issue 15: why the FP8 (e4m3) KV cache loses top-1 agreement, measured on the
 * CPU reference backend (float32 everywhere, so the only perturbation is the K/V rounding studied).
 *
 * For a checkpoint folder (e.g. `gptoss make-model --preset 20b --layers 4 --out DIR`, the weights of
 * synthetic:20b:layers=4, or a fixture of tests/fixtures/) it runs random-token sequences teacher
 * forced and keeps the logits of the last --rows positions of each, once with the K/V cache unrounded
 * (the fp32 reference) and once per rounding scheme, through cpu_model's kv_hook:
 *   e4m3        e4m3 with scale 1 (what --kv-cache-dtype fp8 stores today, model/kv_scale.h)
 *   e4m3-K/-V   the same on K only / V only
 *   e4m3-p2     e4m3 with per-(layer, K/V, KV head) power-of-two scales from the reference's amax
 *               (amax / 448 rounded up to a power of two; set after the reference run)
 *   mN          round to nearest even keeping N explicit mantissa bits, no exponent limit (m7 = bf16,
 *               m3 = e4m3 without its range): the noise floor ladder
 *   mN-K/-V     the same on K only / V only
 *   fp8flag     the backend's own kv_fp8 flag (a check: must equal e4m3 bit for bit)
 * It prints markdown: the distribution of K (after RoPE) and V per layer and KV head in the reference
 * (RMS, amax, share below 2^-6 — e4m3's subnormals at scale 1 — and above 448, each format's rounding
 * error), the reference's top-1/top-2 margins, and per scheme the K/V rounding error, logits relL2,
 * top-1 agreement (all rows and rows whose reference margin exceeds thresholds) against the fp32
 * reference and, once m7 has run, against the bf16-KV run (the GPU's comparison). Through
 * cpu_model's route_hook it also reports the router's k-th vs (k+1)-th logit gaps in the reference and
 * per scheme the share of (position, layer) whose expert set changed: the MoE's discontinuity.
 *
 * Not a test: a measurement program (bench/results/kv-fp8-cpu-study-*.md). The thread count is
 * OpenMP's (OMP_NUM_THREADS). */
#include "backend/cpu/cpu_model.h"
#include "base/error.h"
#include "base/numfmt.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "model/weights.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum round_kind { R_NONE, R_E4M3, R_MANT };

typedef struct {
    char name[32];
    enum round_kind kind;
    int mant;  /* R_MANT: explicit mantissa bits kept */
    bool pow2; /* R_E4M3: the per-head power-of-two scales instead of 1 */
    bool k, v; /* which of K and V are rounded */
    bool flag; /* the backend's kv_fp8 flag instead of the hook */
} scheme;

/* One (layer, K or V, KV head)'s values as the hook saw them (before rounding) and the rounding's
 * squared error; err_e4m3 / err_m3: what e4m3 at scale 1 / 3 mantissa bits unbounded would do. */
typedef struct {
    long n, sub, sat;
    double ss, amax, err2, err_e4m3, err_m3;
} kv_stat;

#define NG 3
static const double GAP[NG] = {0.01, 0.03, 0.1}; /* router logit gaps counted as small */

typedef struct {
    const scheme *sc;
    int n_layers, n_kv;
    kv_stat *st;  /* [layer][2][head] */
    float *scale; /* [layer][2][head]: the e4m3-p2 scales */
    /* routing (route_hook): the reference run records each (sequence, position, layer)'s expert set
     * (sorted), the others count the positions whose set differs from it */
    bool record;
    int k, ctx, seq;    /* experts per token, tokens per sequence, current sequence */
    int64_t pos0;       /* first position of the current forward call */
    int *sets;          /* [seq][pos][layer][k] */
    long *flips;        /* [layer] */
    long *gap_small;    /* [layer][NG]: reference tokens with k-th - (k+1)-th router logit < GAP */
    double *rsum, *rss; /* [layer]: router logits' sum and sum of squares (reference) */
    long *rn;           /* [layer] */
} hook_ctx;

static float round_mant(float x, int m) {
    if (!isfinite(x) || m >= 23) return x;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    const int drop = 23 - m;
    u += ((1u << (drop - 1)) - 1) + ((u >> drop) & 1u); /* round to nearest, ties to even */
    u &= ~((1u << drop) - 1);
    float r;
    memcpy(&r, &u, sizeof r);
    return r;
}

static float round_one(const hook_ctx *h, float x, int idx) {
    const scheme *sc = h->sc;
    if (sc->kind == R_MANT) return round_mant(x, sc->mant);
    if (sc->kind == R_E4M3) {
        const float s = sc->pow2 ? h->scale[idx] : 1.0f;
        return e4m3_kv_roundtrip(x, s, 1.0f / s); /* s a power of two: 1/s exact */
    }
    return x;
}

static void study_hook(void *ctx, int layer, int kv_head, int64_t pos, float *k, float *v, int D) {
    hook_ctx *h = ctx;
    (void)pos;
    for (int which = 0; which < 2; which++) {
        float *x = which ? v : k;
        const int idx = (layer * 2 + which) * h->n_kv + kv_head;
        kv_stat *s = &h->st[idx];
        const bool on = which ? h->sc->v : h->sc->k;
        for (int i = 0; i < D; i++) {
            const float a = x[i];
            const double d8 = (double)e4m3_kv_roundtrip(a, 1.0f, 1.0f) - a,
                         d3 = (double)round_mant(a, 3) - a;
            s->n++, s->ss += (double)a * a, s->amax = fmax(s->amax, fabs(a));
            s->sub += fabsf(a)<0.015625f, s->sat += fabsf(a)> 448.0f;
            s->err_e4m3 += d8 * d8, s->err_m3 += d3 * d3;
            if (on) {
                x[i] = round_one(h, a, idx);
                const double d = (double)x[i] - a;
                s->err2 += d * d;
            }
        }
    }
}

static void route_hook(void *ctx, int layer, int T, const float *logits, int E, const int *experts,
                       int k) {
    hook_ctx *h = ctx;
    for (int t = 0; t < T; t++) {
        int set[64];
        for (int j = 0; j < k; j++) set[j] = experts[(size_t)t * k + j];
        for (int i = 1; i < k; i++) /* sort: the set, not the order */
            for (int j = i; j > 0 && set[j - 1] > set[j]; j--) {
                const int x = set[j];
                set[j] = set[j - 1], set[j - 1] = x;
            }
        int *ref =
            h->sets +
            (((size_t)h->seq * h->ctx + (size_t)(h->pos0 + t)) * h->n_layers + (size_t)layer) * k;
        if (!h->record) {
            h->flips[layer] += memcmp(ref, set, (size_t)k * sizeof *set) != 0;
            continue;
        }
        memcpy(ref, set, (size_t)k * sizeof *set);
        const float *lg = logits + (size_t)t * E;
        const float kth = lg[experts[(size_t)t * k + k - 1]];
        float next = -INFINITY; /* the largest logit not chosen */
        for (int e = 0; e < E; e++) {
            bool chosen = false;
            for (int j = 0; j < k; j++) chosen |= set[j] == e;
            if (!chosen && lg[e] > next) next = lg[e];
            h->rsum[layer] += lg[e], h->rss[layer] += (double)lg[e] * lg[e];
        }
        h->rn[layer] += E;
        for (int g = 0; g < NG; g++) h->gap_small[layer * NG + g] += kth - next < GAP[g];
    }
}

/* The logits of the last `rows` positions of each sequence, teacher forced (rows * V floats each). */
static int run(cpu_model *m, hook_ctx *h, const model_config *c, int n_seq, int ctx, int rows,
               const int32_t *toks, float *logits) {
    for (int s = 0; s < n_seq; s++) {
        cpu_kv_cache kv;
        cpu_kv_init(&kv, c);
        const int32_t *t = toks + (size_t)s * ctx;
        h->seq = s, h->pos0 = 0;
        int rc = ctx > rows ? cpu_forward(m, &kv, t, ctx - rows, CPU_LOGITS_NONE, NULL) : 0;
        h->pos0 = ctx - rows;
        if (rc == 0)
            rc = cpu_forward(m, &kv, t + ctx - rows, rows, CPU_LOGITS_ALL,
                             logits + (size_t)s * rows * c->vocab);
        cpu_kv_free(&kv);
        if (rc) return rc;
    }
    return 0;
}

static void top2(const float *x, int V, int *arg, double *margin) {
    int a = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[a]) a = i;
    double second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != a && x[i] > second) second = x[i];
    *arg = a, *margin = (double)x[a] - second;
}

#define NT 7
static const double THRESH[NT] = {0, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0};

typedef struct {
    double relL2;
    long rows[NT], agree[NT]; /* rows whose reference margin > THRESH[i], and their agreements */
} cmp;

static cmp compare(const float *got, const float *ref, const int *ref_arg, const double *ref_margin,
                   long R, int V) {
    cmp c;
    memset(&c, 0, sizeof c);
    double d2 = 0, r2 = 0;
    for (long r = 0; r < R; r++) {
        const float *g = got + (size_t)r * V, *f = ref + (size_t)r * V;
        for (int i = 0; i < V; i++) {
            const double d = (double)g[i] - f[i];
            d2 += d * d, r2 += (double)f[i] * f[i];
        }
        int ag;
        double mg;
        top2(g, V, &ag, &mg);
        for (int t = 0; t < NT; t++)
            if (ref_margin[r] > THRESH[t]) c.rows[t]++, c.agree[t] += ag == ref_arg[r];
    }
    c.relL2 = r2 > 0 ? sqrt(d2 / r2) : 0;
    return c;
}

static bool parse_scheme(const char *name, scheme *sc) {
    memset(sc, 0, sizeof *sc);
    snprintf(sc->name, sizeof sc->name, "%s", name);
    sc->k = sc->v = true;
    char base[32];
    snprintf(base, sizeof base, "%s", name);
    size_t n = strlen(base);
    if (n > 2 && base[n - 2] == '-' && (base[n - 1] == 'K' || base[n - 1] == 'V')) {
        sc->k = base[n - 1] == 'K', sc->v = base[n - 1] == 'V';
        base[n - 2] = 0;
    }
    if (!strcmp(base, "fp8flag")) return sc->flag = true, sc->kind = R_NONE, sc->k && sc->v;
    if (!strcmp(base, "e4m3")) return sc->kind = R_E4M3, true;
    if (!strcmp(base, "e4m3-p2")) return sc->kind = R_E4M3, sc->pow2 = true, true;
    if (base[0] == 'm') {
        char *end;
        long m = strtol(base + 1, &end, 10);
        if (*end || m < 0 || m > 23) return false;
        return sc->kind = R_MANT, sc->mant = (int)m, true;
    }
    return false;
}

static const char *USAGE =
    "usage: gptoss_kv_fp8_study --model DIR [--ctx N] [--seqs N] [--rows N] [--seed N]\n"
    "                           [--schemes a,b,...] [--no-heads]\n"
    "  schemes: e4m3 e4m3-p2 mN (N mantissa bits) fp8flag, each with -K or -V for one of them\n"
    "  default: m7,e4m3,e4m3-K,e4m3-V,e4m3-p2,m2,m3,m4,m5,m3-K,m3-V\n";

int main(int argc, char **argv) {
    const char *dir = NULL, *schemes_arg = "m7,e4m3,e4m3-K,e4m3-V,e4m3-p2,m2,m3,m4,m5,m3-K,m3-V";
    int ctx = 512, n_seq = 2, rows = 64;
    unsigned long long seed = 1;
    bool heads = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--no-heads")) {
            heads = false;
            continue;
        }
        if (!v) {
            fputs(USAGE, stderr);
            return 2;
        }
        if (!strcmp(a, "--model"))
            dir = v;
        else if (!strcmp(a, "--ctx"))
            ctx = atoi(v);
        else if (!strcmp(a, "--seqs"))
            n_seq = atoi(v);
        else if (!strcmp(a, "--rows"))
            rows = atoi(v);
        else if (!strcmp(a, "--seed"))
            seed = strtoull(v, NULL, 10);
        else if (!strcmp(a, "--schemes"))
            schemes_arg = v;
        else {
            fputs(USAGE, stderr);
            return 2;
        }
        i++;
    }
    if (!dir || ctx < 1 || n_seq < 1 || rows < 1 || rows > ctx) {
        fputs(USAGE, stderr);
        return 2;
    }
    scheme schemes[64];
    int n_sc = 0;
    char *list = xstrdup(schemes_arg);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok && n_sc < 64;
         tok = strtok_r(NULL, ",", &save))
        if (!parse_scheme(tok, &schemes[n_sc++])) {
            fprintf(stderr, "unknown scheme '%s'\n%s", tok, USAGE);
            return 2;
        }
    free(list);

    model_weights w;
    if (weights_load(dir, &w) != 0) {
        fprintf(stderr, "%s: %s\n", dir, err_msg());
        return 1;
    }
    const model_config *c = &w.cfg;
    if (c->experts_per_tok > 64) {
        fprintf(stderr, "%s: more than 64 experts per token\n", dir);
        return 1;
    }
    const int V = c->vocab, L = c->n_layers, NKV = c->n_kv_heads;
    const long R = (long)n_seq * rows;
    rng_t rng;
    rng_seed(&rng, seed);
    int32_t *toks = xmalloc((size_t)n_seq * ctx * sizeof *toks);
    for (size_t i = 0; i < (size_t)n_seq * ctx; i++) toks[i] = (int32_t)(rng_next(&rng) % V);

    printf("# KV rounding study: %s\n\n", dir);
    printf("%d layers, hidden %d, %d heads, %d KV heads x %d, vocab %d, window %d; %d random-token "
           "sequences of %d tokens (seed %llu), logits of the last %d positions each (%ld rows); "
           "reference: fp32 K/V.\n\n",
           L, c->hidden, c->n_heads, NKV, c->head_dim, V, c->sliding_window, n_seq, ctx, seed, rows,
           R);
    fflush(stdout);

    cpu_model m;
    cpu_model_init(&m, &w);
    const size_t n_st = (size_t)L * 2 * NKV;
    hook_ctx h = {.n_layers = L, .n_kv = NKV};
    h.st = xcalloc(n_st, sizeof *h.st);
    h.scale = xmalloc(n_st * sizeof *h.scale);
    m.kv_hook = study_hook, m.kv_hook_ctx = &h;
    h.k = c->experts_per_tok, h.ctx = ctx, h.record = true;
    h.sets = xmalloc((size_t)n_seq * ctx * L * h.k * sizeof *h.sets);
    h.flips = xcalloc((size_t)L, sizeof *h.flips);
    h.gap_small = xcalloc((size_t)L * NG, sizeof *h.gap_small);
    h.rsum = xcalloc((size_t)L, sizeof *h.rsum), h.rss = xcalloc((size_t)L, sizeof *h.rss);
    h.rn = xcalloc((size_t)L, sizeof *h.rn);
    m.route_hook = route_hook, m.route_hook_ctx = &h;

    /* the reference, with the statistics of the unrounded K and V */
    scheme none;
    parse_scheme("ref", &none);
    none.kind = R_NONE, none.k = none.v = false;
    h.sc = &none;
    float *ref = xmalloc((size_t)R * V * sizeof *ref), *got = xmalloc((size_t)R * V * sizeof *got);
    float *bf16 = NULL;
    double t0 = now_seconds();
    if (run(&m, &h, c, n_seq, ctx, rows, toks, ref) != 0) {
        fprintf(stderr, "reference: %s\n", err_msg());
        return 1;
    }
    fprintf(stderr, "reference: %.1f s\n", now_seconds() - t0);
    h.record = false;

    /* K / V distribution */
    printf("## K (after RoPE) and V in the reference, per layer%s\n\n",
           heads ? " and KV head" : "");
    printf(
        "e4m3 err / m3 err: relative L2 error of rounding these values to e4m3 at scale 1 / to 3 "
        "mantissa bits with no exponent limit (the difference is e4m3's subnormals and "
        "saturation). p2 scale: amax / 448 rounded up to a power of two (scheme e4m3-p2).\n\n");
    printf("| layer | kind | head | RMS | amax | share abs < 2^-6 | share abs > 448 | e4m3 err | "
           "m3 err | p2 scale |\n| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | "
           "---: |\n");
    for (int l = 0; l < L; l++)
        for (int which = 0; which < 2; which++) {
            kv_stat all;
            memset(&all, 0, sizeof all);
            for (int kh = 0; kh < NKV; kh++) {
                const int idx = (l * 2 + which) * NKV + kh;
                const kv_stat *s = &h.st[idx];
                int e; /* amax / 448 = f 2^e, f in [0.5, 1): the power of two at or above is 2^e,
                        * or 2^(e-1) when f = 0.5 exactly */
                const double f = frexp(s->amax / 448.0, &e);
                h.scale[idx] = s->amax > 0 ? ldexpf(1.0f, f == 0.5 ? e - 1 : e) : 1.0f;
                all.n += s->n, all.sub += s->sub, all.sat += s->sat, all.ss += s->ss;
                all.amax = fmax(all.amax, s->amax), all.err_e4m3 += s->err_e4m3;
                all.err_m3 += s->err_m3;
                if (heads)
                    printf("| %d | %s | %d | %.3g | %.3g | %.4f | %.4f | %.4f | %.4f | 2^%d |\n", l,
                           which ? "V" : "K", kh, sqrt(s->ss / s->n), s->amax,
                           (double)s->sub / s->n, (double)s->sat / s->n, sqrt(s->err_e4m3 / s->ss),
                           sqrt(s->err_m3 / s->ss), (int)lrintf(log2f(h.scale[idx])));
            }
            printf("| %d | %s | all | %.3g | %.3g | %.4f | %.4f | %.4f | %.4f | |\n", l,
                   which ? "V" : "K", sqrt(all.ss / all.n), all.amax, (double)all.sub / all.n,
                   (double)all.sat / all.n, sqrt(all.err_e4m3 / all.ss), sqrt(all.err_m3 / all.ss));
        }
    printf("\n");

    printf("## The router in the reference\n\n");
    printf("gap: the k-th largest router logit (the last expert chosen, k = %d of %d) minus the "
           "(k+1)-th, per (token, layer), all %d positions of every sequence.\n\n",
           h.k, c->n_experts, ctx);
    printf("| layer | router logit std | gap < %.2f | gap < %.2f | gap < %.2f |\n| ---: | ---: | "
           "---: | ---: | ---: |\n",
           GAP[0], GAP[1], GAP[2]);
    for (int l = 0; l < L; l++) {
        const double mean = h.rsum[l] / h.rn[l], n_tok = (double)n_seq * ctx;
        printf("| %d | %.3f | %.4f | %.4f | %.4f |\n", l, sqrt(h.rss[l] / h.rn[l] - mean * mean),
               h.gap_small[l * NG] / n_tok, h.gap_small[l * NG + 1] / n_tok,
               h.gap_small[l * NG + 2] / n_tok);
    }
    printf("\n");

    /* the reference's margins */
    int *ref_arg = xmalloc((size_t)R * sizeof *ref_arg), *bf_arg = NULL;
    double *ref_margin = xmalloc((size_t)R * sizeof *ref_margin), *bf_margin = NULL;
    double lsum = 0, lss = 0;
    for (long r = 0; r < R; r++) {
        top2(ref + (size_t)r * V, V, &ref_arg[r], &ref_margin[r]);
        for (int i = 0; i < V; i++) {
            const double x = ref[(size_t)r * V + i];
            lsum += x, lss += x * x;
        }
    }
    const double lmean = lsum / ((double)R * V), lstd = sqrt(lss / ((double)R * V) - lmean * lmean);
    double *sorted = xmalloc((size_t)R * sizeof *sorted);
    memcpy(sorted, ref_margin, (size_t)R * sizeof *sorted);
    for (long i = 1; i < R; i++) /* insertion sort: R is small */
        for (long j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            const double t = sorted[j];
            sorted[j] = sorted[j - 1], sorted[j - 1] = t;
        }
    printf("## The reference's top-1 - top-2 logit margin\n\n");
    printf("logits: std %.3f over the vocabulary; margin median %.3f, p10 %.3f, p90 %.3f\n\n", lstd,
           sorted[R / 2], sorted[R / 10], sorted[(R * 9) / 10]);
    printf("| margin <= | share of rows |\n| ---: | ---: |\n");
    for (int t = 1; t < NT; t++) {
        long n = 0;
        for (long r = 0; r < R; r++) n += ref_margin[r] <= THRESH[t];
        printf("| %.2f | %.4f |\n", THRESH[t], (double)n / R);
    }
    printf("\n## Schemes against the fp32-KV reference\n\n");
    printf(
        "K err / V err: relative L2 of the rounding applied to K / V in that run. Agreement: "
        "top-1 equal to the reference's, over all rows and over the rows whose reference "
        "margin exceeds the threshold (row counts in the header). Expert sets changed: the share "
        "of positions (all of every sequence) whose top-k expert set differs from the "
        "reference's, layer 0 / 1 / ...\n\n");
    printf("| scheme | K err | V err | logits relL2 | top-1 all");
    for (int t = 1; t < NT; t++) {
        long n = 0;
        for (long r = 0; r < R; r++) n += ref_margin[r] > THRESH[t];
        printf(" | margin > %.2f (%ld)", THRESH[t], n);
    }
    printf(
        " | top-1 vs bf16-KV | relL2 vs bf16-KV | expert sets changed (per layer) | s |\n| --- | "
        "---: | ---: | ---: | ---:");
    for (int t = 1; t < NT; t++) printf(" | ---:");
    printf(" | ---: | ---: | ---: | ---: |\n");
    fflush(stdout);

    float *e4m3_logits = NULL;
    const char *flag_check = "";
    for (int si = 0; si < n_sc; si++) {
        const scheme *sc = &schemes[si];
        memset(h.st, 0, n_st * sizeof *h.st);
        h.sc = sc->flag ? &none : sc;
        m.kv_fp8 = sc->flag;
        t0 = now_seconds();
        memset(h.flips, 0, (size_t)L * sizeof *h.flips);
        if (run(&m, &h, c, n_seq, ctx, rows, toks, got) != 0) {
            fprintf(stderr, "%s: %s\n", sc->name, err_msg());
            return 1;
        }
        m.kv_fp8 = 0;
        const double secs = now_seconds() - t0;
        fprintf(stderr, "%s: %.1f s\n", sc->name, secs);
        double kerr = 0, kss = 0, verr = 0, vss = 0;
        for (size_t i = 0; i < n_st; i++) {
            const bool is_v = (i / NKV) % 2;
            *(is_v ? &verr : &kerr) += h.st[i].err2;
            *(is_v ? &vss : &kss) += h.st[i].ss;
        }
        const cmp cr = compare(got, ref, ref_arg, ref_margin, R, V);
        if (sc->flag) /* rounded before the hook saw them: the errors of e4m3 */
            printf("| %s | (e4m3) | (e4m3) | %.2e | %.4f", sc->name, cr.relL2,
                   (double)cr.agree[0] / cr.rows[0]);
        else
            printf("| %s | %.2e | %.2e | %.2e | %.4f", sc->name, sqrt(kerr / kss), sqrt(verr / vss),
                   cr.relL2, (double)cr.agree[0] / cr.rows[0]);
        for (int t = 1; t < NT; t++)
            printf(" | %.4f", cr.rows[t] ? (double)cr.agree[t] / cr.rows[t] : NAN);
        if (bf16 && !(sc->kind == R_MANT && sc->mant == 7 && sc->k && sc->v)) {
            const cmp cb = compare(got, bf16, bf_arg, bf_margin, R, V);
            printf(" | %.4f | %.2e", (double)cb.agree[0] / cb.rows[0], cb.relL2);
        } else {
            printf(" | | ");
        }
        printf(" | ");
        for (int l = 0; l < L; l++)
            printf("%s%.4f", l ? " / " : "", (double)h.flips[l] / ((double)n_seq * ctx));
        printf(" | %.0f |\n", secs);
        fflush(stdout);
        if (sc->kind == R_MANT && sc->mant == 7 && sc->k && sc->v && !bf16) {
            bf16 = got, got = xmalloc((size_t)R * V * sizeof *got);
            bf_arg = xmalloc((size_t)R * sizeof *bf_arg);
            bf_margin = xmalloc((size_t)R * sizeof *bf_margin);
            for (long r = 0; r < R; r++) top2(bf16 + (size_t)r * V, V, &bf_arg[r], &bf_margin[r]);
        }
        /* the backend's flag and the hook's e4m3 must store the same values */
        if (sc->kind == R_E4M3 && !sc->pow2 && sc->k && sc->v && !e4m3_logits) {
            e4m3_logits = got, got = xmalloc((size_t)R * V * sizeof *got);
        }
        if (sc->flag && e4m3_logits)
            flag_check =
                memcmp(got, e4m3_logits, (size_t)R * V * sizeof *got)
                    ? "the backend's kv_fp8 flag and the hook's e4m3: DIFFERENT logits"
                    : "the backend's kv_fp8 flag and the hook's e4m3: bit-identical logits";
    }
    printf("\n%s%s", flag_check, *flag_check ? "\n\n" : "");
    free(toks), free(ref), free(got), free(bf16), free(e4m3_logits), free(sorted);
    free(ref_arg), free(ref_margin), free(bf_arg), free(bf_margin), free(h.st), free(h.scale);
    free(h.sets), free(h.flips), free(h.gap_small), free(h.rsum), free(h.rss), free(h.rn);
    weights_free(&w);
    return 0;
}
