#include "engine/step_cost.h"

#include <math.h>
#include <string.h>

enum { MIN_STEPS = 8 };
static const double FORGET = 0.98;
/* Features in units that keep the normal equations well scaled: 64 sequences, 1,024 tokens. */
static const double SEQ_UNIT = 64.0, TOK_UNIT = 1024.0;
/* A small ridge: a direction the steps never varied along (tokens == sequences while only decodes
 * run) is pulled towards 0 instead of making the system singular. */
static const double RIDGE = 1e-9;

void step_cost_init(step_cost *c) {
    memset(c, 0, sizeof *c);
}

static void features(int seqs, int64_t tokens, double x[3]) {
    x[0] = 1.0, x[1] = seqs / SEQ_UNIT, x[2] = (double)tokens / TOK_UNIT;
}

void step_cost_observe(step_cost *c, int seqs, int64_t tokens, double seconds) {
    if (!(seconds > 0) || !isfinite(seconds) || seqs < 1 || tokens < 1) return;
    double x[3];
    features(seqs, tokens, x);
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) c->m[i][j] = FORGET * c->m[i][j] + x[i] * x[j];
        c->v[i] = FORGET * c->v[i] + x[i] * seconds;
    }
    c->n++;
}

/* Solves (m + ridge) p = v by Gaussian elimination with partial pivoting; 0 on success. */
static int solve(const step_cost *c, double p[3]) {
    double a[3][4];
    const double scale = c->m[0][0] > 0 ? c->m[0][0] : 1.0;
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 3; j++) a[i][j] = c->m[i][j] + (i == j ? RIDGE * scale : 0.0);
        a[i][3] = c->v[i];
    }
    for (int k = 0; k < 3; k++) {
        int piv = k;
        for (int i = k + 1; i < 3; i++)
            if (fabs(a[i][k]) > fabs(a[piv][k])) piv = i;
        if (!(fabs(a[piv][k]) > 1e-300)) return -1;
        if (piv != k)
            for (int j = 0; j < 4; j++) {
                double t = a[k][j];
                a[k][j] = a[piv][j], a[piv][j] = t;
            }
        for (int i = k + 1; i < 3; i++) {
            const double f = a[i][k] / a[k][k];
            for (int j = k; j < 4; j++) a[i][j] -= f * a[k][j];
        }
    }
    for (int i = 2; i >= 0; i--) {
        double s = a[i][3];
        for (int j = i + 1; j < 3; j++) s -= a[i][j] * p[j];
        p[i] = s / a[i][i];
    }
    return isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]) ? 0 : -1;
}

double step_cost_predict(const step_cost *c, int seqs, int64_t tokens) {
    double p[3], x[3];
    if (c->n < MIN_STEPS || solve(c, p) != 0) return -1;
    features(seqs, tokens, x);
    const double t = p[0] * x[0] + p[1] * x[1] + p[2] * x[2];
    return t > 0 ? t : 0;
}

int64_t step_cost_prefill_budget(const step_cost *c, int decodes, int prefills, double target,
                                 int64_t floor, int64_t cap) {
    double p[3];
    if (c->n < MIN_STEPS || solve(c, p) != 0 || !(target > 0)) return cap;
    const double per_token = p[2] / TOK_UNIT;
    if (!(per_token > 0)) return cap; /* tokens look free: nothing to trade */
    const double fixed = p[0] + p[1] * (decodes + prefills) / SEQ_UNIT + per_token * decodes;
    const double room = (target - fixed) / per_token;
    int64_t n = room >= (double)cap ? cap : room <= (double)floor ? floor : (int64_t)room;
    if (n > cap) n = cap;
    return n;
}
