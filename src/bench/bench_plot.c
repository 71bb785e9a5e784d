#include "bench/bench_plot.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"
#include "bench/roofline.h"
#include "bench/svg.h"
#include "model/synthetic.h"

#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void bench_plot_defaults(bench_plot_opts *o) {
    memset(o, 0, sizeof *o);
    o->roofline_tp = 1;
    o->kv_bytes = 2;
    o->bandwidth = ROOFLINE_H200_BANDWIDTH;
    o->flops = ROOFLINE_H200_FLOPS;
    o->anchor_gpu = "H200";
}

typedef struct {
    double x, y;
    int conc;
} point;

typedef struct {
    char *label;
    point *p;
    int n;
    int isl, osl;
    double ratio;
} series;

static int cmp_point_x(const void *a, const void *b) {
    double x = ((const point *)a)->x, y = ((const point *)b)->x;
    return (x > y) - (x < y);
}

int bench_pareto(const double *x, const double *y, int n, int *out) {
    /* Sort indices by x descending (ties: y descending); sweep keeping a strictly rising best y. */
    int *idx = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *idx);
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = 1; i < n; i++) { /* insertion sort: charts have tens of points */
        int k = idx[i], j = i - 1;
        while (j >= 0 && (x[idx[j]] < x[k] || (x[idx[j]] == x[k] && y[idx[j]] < y[k]))) {
            idx[j + 1] = idx[j];
            j--;
        }
        idx[j + 1] = k;
    }
    int m = 0;
    double best = -INFINITY;
    for (int i = 0; i < n; i++)
        if (y[idx[i]] > best) {
            best = y[idx[i]];
            out[m++] = idx[i];
        }
    for (int i = 0; i < m / 2; i++) { /* increasing x */
        int t = out[i];
        out[i] = out[m - 1 - i];
        out[m - 1 - i] = t;
    }
    free(idx);
    return m;
}

static double num(json_t *o, const char *key, double dflt) {
    json_t *v = json_object_get(o, key);
    return json_is_number(v) ? json_number_value(v) : dflt;
}

/* The file's name without folder and ".json". */
static char *base_label(const char *path) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    size_t n = strlen(b);
    if (n > 5 && !strcmp(b + n - 5, ".json")) n -= 5;
    return xstrndup(b, n);
}

/* One results file: an array of level objects, or a single object (vLLM's --save-result). */
static int load_series(const char *path, const char *label, bool output_only, series *s) {
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    if (!root) return err_set("%s: %s (line %d)", path, je.text, je.line);
    json_t *arr = root;
    if (json_is_object(root)) {
        arr = json_array();
        json_array_append(arr, root);
    } else if (!json_is_array(root)) {
        json_decref(root);
        return err_set("%s: expected a JSON array of results (or one result object)", path);
    }
    memset(s, 0, sizeof *s);
    s->p = xcalloc(json_array_size(arr) + 1, sizeof *s->p);
    size_t i;
    json_t *o;
    const char *file_label = NULL;
    json_array_foreach(arr, i, o) {
        if (!json_is_object(o)) continue;
        double tpot = num(o, "median_tpot_ms", 0), gpus = num(o, "num_gpus", 1);
        double y = num(o, output_only ? "output_throughput" : "total_token_throughput", -1);
        if (gpus < 1) gpus = 1;
        if (!file_label) file_label = json_string_value(json_object_get(o, "label"));
        if (!s->isl) s->isl = (int)num(o, "isl", 0), s->osl = (int)num(o, "osl", 0);
        if (s->ratio == 0) s->ratio = num(o, "random_range_ratio", 0);
        if (tpot <= 0 || y <= 0) continue; /* a level with no decode (OSL 1) or nothing completed */
        s->p[s->n++] = (point){1000.0 / tpot, y / gpus, (int)num(o, "max_concurrency", 0)};
    }
    s->label = label ? xstrdup(label) : file_label ? xstrdup(file_label) : base_label(path);
    if (arr != root) json_decref(arr);
    json_decref(root);
    qsort(s->p, (size_t)s->n, sizeof *s->p, cmp_point_x);
    if (s->n == 0) fprintf(stderr, "note: %s has no point with a TPOT and a throughput\n", path);
    return 0;
}

/* ---- anchors ---- */

typedef struct {
    double x, y; /* x < 0: no interactivity (a horizontal reference line) */
    const char *series, *label, *engine, *source;
    bool chart;
} anchor;

typedef struct {
    json_t **docs;
    int n_docs;
    anchor *a;
    int n;
} anchor_set;

static bool str_ieq(const char *a, const char *b) {
    return a && b && !strcasecmp(a, b);
}

static void anchors_from(anchor_set *as, json_t *doc, const bench_plot_opts *o, int isl, int osl,
                         const char *model_filter) {
    json_t *pts = json_object_get(doc, "points");
    size_t i;
    json_t *p;
    json_array_foreach(pts, i, p) {
        const char *gpu = json_string_value(json_object_get(p, "gpu"));
        const char *model = json_string_value(json_object_get(p, "model"));
        if (!model) model = json_string_value(json_object_get(doc, "model"));
        if (strcmp(o->anchor_gpu, "all") && !str_ieq(gpu, o->anchor_gpu)) continue;
        if (model_filter && model && !strstr(model, model_filter)) continue;
        int ai = (int)num(p, "isl", 0), ao = (int)num(p, "osl", 0);
        if (isl > 0 && ai > 0 && (ai != isl || ao != osl)) continue;
        double y = num(p, o->output_only ? "output_tput_per_gpu" : "tput_per_gpu", -1);
        if (y <= 0) continue;
        double x = num(p, "interactivity", -1);
        /* Without an interactivity only an offline maximum means something on this chart. */
        if (x <= 0 && !json_is_true(json_object_get(p, "ceiling"))) continue;
        anchor a = {x,
                    y,
                    json_string_value(json_object_get(p, "series")),
                    json_string_value(json_object_get(p, "label")),
                    json_string_value(json_object_get(p, "engine")),
                    json_string_value(json_object_get(p, "source")),
                    json_is_true(json_object_get(p, "read_from_chart"))};
        if (!a.label) a.label = "anchor";
        as->a = xrealloc(as->a, (size_t)(as->n + 1) * sizeof *as->a);
        as->a[as->n++] = a;
    }
}

static int load_anchor_file(anchor_set *as, const char *path, const bench_plot_opts *o, int isl,
                            int osl, const char *model_filter) {
    json_error_t je;
    json_t *doc = json_load_file(path, 0, &je);
    if (!doc) return err_set("%s: %s (line %d)", path, je.text, je.line);
    if (!json_is_array(json_object_get(doc, "points"))) {
        json_decref(doc);
        return err_set("%s: expected an object with a \"points\" array", path);
    }
    as->docs = xrealloc(as->docs, (size_t)(as->n_docs + 1) * sizeof *as->docs);
    as->docs[as->n_docs++] = doc; /* the anchors borrow its strings */
    anchors_from(as, doc, o, isl, osl, model_filter);
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int load_anchors(anchor_set *as, const bench_plot_opts *o, int isl, int osl,
                        const char *model_filter) {
    const char *path = o->anchors;
    if (path && !strcmp(path, "none")) return 0;
    if (!path) {
        if (!file_exists("bench/anchors")) return 0;
        path = "bench/anchors";
    }
    DIR *d = opendir(path);
    if (!d) return load_anchor_file(as, path, o, isl, osl, model_filter);
    char **names = NULL;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json")) {
            names = xrealloc(names, (size_t)(n + 1) * sizeof *names);
            names[n++] = path_join(path, e->d_name);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc == 0) rc = load_anchor_file(as, names[i], o, isl, osl, model_filter);
        free(names[i]);
    }
    free(names);
    return rc;
}

static void anchors_free(anchor_set *as) {
    for (int i = 0; i < as->n_docs; i++) json_decref(as->docs[i]);
    free(as->docs);
    free(as->a);
}

/* ---- the chart ---- */

static const char *const PALETTE[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd",
                                      "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
static const char *const ANCHOR_COLORS[] = {"#6b7280", "#b45309", "#0f766e", "#7c3aed", "#be185d"};

typedef struct {
    double xlo, xhi, ylo, yhi;
} bounds;

static void grow(bounds *b, double x, double y) {
    if (x > 0 && x < b->xlo) b->xlo = x;
    if (x > b->xhi) b->xhi = x;
    if (y > 0 && y < b->ylo) b->ylo = y;
    if (y > b->yhi) b->yhi = y;
}

/* The roofline frontier: one point per batch size B. In steady state every step gives each of the
 * B sequences one token, and for each output token the server must also prefill mean ISL / mean OSL
 * prompt tokens. So a step takes at least max(the decode step's bytes / bandwidth, (its FLOPs + the
 * prefill FLOPs of B · ISL/OSL prompt tokens) / matrix rate), where decode runs at the mean context
 * (mean ISL + mean OSL / 2) and a prompt token attends to half the prompt on average. Prefill's own
 * memory traffic is left out (it shares the step's weight reads): a ceiling, never a prediction.
 * x = 1 / step time (tokens/s per sequence), y = B · x per GPU (times (ISL + OSL) / OSL on the
 * total-throughput chart). */
static int roofline_points(const bench_plot_opts *o, const model_config *cfg, int isl, int osl,
                           double ratio, double *x, double *y, int *batch) {
    double mi = 0.5 * (isl + (int)(isl * ratio)), mo = 0.5 * (osl + (int)(osl * ratio));
    if (mi < 1) mi = isl;
    if (mo < 1) mo = osl;
    int ctx = (int)(mi + mo / 2);
    double scale = o->output_only ? 1.0 : (mi + mo) / mo;
    roofline_in pin = {1, (int)(mi / 2), o->kv_bytes, o->roofline_tp, o->bandwidth, o->flops};
    roofline_out pre;
    roofline_decode(cfg, &pin, &pre); /* flops_per_step of B = 1: one prompt token, per GPU */
    int n = 0;
    for (int b = 1; b <= 4096; b *= 2) {
        roofline_in in = {b, ctx, o->kv_bytes, o->roofline_tp, o->bandwidth, o->flops};
        roofline_out r;
        roofline_decode(cfg, &in, &r);
        double t_mem = r.bytes_per_step / o->bandwidth;
        double t_flop = (r.flops_per_step + b * (mi / mo) * pre.flops_per_step) / o->flops;
        double t = t_mem > t_flop ? t_mem : t_flop;
        x[n] = 1.0 / t;
        y[n] = b / t / o->roofline_tp * scale;
        batch[n++] = b;
    }
    return n;
}

int bench_plot(const bench_plot_opts *o) {
    if (o->n_files == 0 && !o->roofline_model)
        return err_set("nothing to plot: give results files (or a roofline)");
    series *ss = xcalloc((size_t)o->n_files + 1, sizeof *ss);
    char *labels = o->labels ? xstrdup(o->labels) : NULL, *save = NULL;
    char *lab = labels ? strtok_r(labels, ",", &save) : NULL;
    int rc = 0, total = 0;
    for (int i = 0; i < o->n_files && rc == 0; i++) {
        rc = load_series(o->files[i], lab, o->output_only, &ss[i]);
        total += ss[i].n;
        if (lab) lab = strtok_r(NULL, ",", &save);
    }
    free(labels);
    int isl = o->isl, osl = o->osl;
    double ratio = 0.8;
    for (int i = 0; i < o->n_files && (!isl || !osl); i++)
        if (ss[i].isl > 0) isl = isl ? isl : ss[i].isl, osl = osl ? osl : ss[i].osl;
    for (int i = 0; i < o->n_files; i++)
        if (ss[i].ratio > 0) {
            ratio = ss[i].ratio;
            break;
        }
    if (!isl) isl = 1024;
    if (!osl) osl = 1024;

    model_config cfg;
    bool have_roof = false;
    const char *model_filter = NULL;
    if (rc == 0 && o->roofline_model) {
        bool preset = !strcmp(o->roofline_model, "120b") || !strcmp(o->roofline_model, "20b");
        rc = preset ? config_preset(o->roofline_model, &cfg) : config_load(o->roofline_model, &cfg);
        have_roof = rc == 0;
        if (preset) model_filter = o->roofline_model;
    }
    anchor_set as = {0};
    if (rc == 0) rc = load_anchors(&as, o, isl, osl, model_filter);
    if (rc != 0) goto out;

    double rx[16], ry[16];
    int rb[16], nr = have_roof ? roofline_points(o, &cfg, isl, osl, ratio, rx, ry, rb) : 0;

    /* Axis ranges: everything drawn, rounded outward to 1-2-5 values. */
    bounds bd = {INFINITY, 0, INFINITY, 0};
    for (int i = 0; i < o->n_files; i++)
        for (int k = 0; k < ss[i].n; k++) grow(&bd, ss[i].p[k].x, ss[i].p[k].y);
    for (int k = 0; k < nr; k++) grow(&bd, rx[k], ry[k]);
    for (int k = 0; k < as.n; k++) grow(&bd, as.a[k].x, as.a[k].y);
    if (bd.xhi <= 0) bd.xlo = 1, bd.xhi = 1000;
    if (bd.yhi <= 0) bd.ylo = 1, bd.yhi = 1000;
    svg_axis ax = {svg_nice_floor(bd.xlo / 1.15), svg_nice_ceil(bd.xhi * 1.15), !o->linear,
                   "Interactivity: tokens/s per user (1000 / median TPOT)"};
    svg_axis ay = {svg_nice_floor(bd.ylo / 1.2), svg_nice_ceil(bd.yhi * 1.2), !o->linear,
                   o->output_only ? "Output token throughput per GPU (tokens/s)"
                                  : "Token throughput per GPU (input + output tokens/s)"};
    if (o->linear) ax.lo = 0, ay.lo = 0;
    char sub[320];
    char count[64] = "no measurement";
    if (o->n_files > 0) snprintf(count, sizeof count, "%d points from %d files", total, o->n_files);
    snprintf(sub, sizeof sub,
             "ISL %d / OSL %d, each uniform in [%.0f%%, 100%%]; random prompts, ignore_eos; %s",
             isl, osl, ratio * 100, count);
    svg_chart *c =
        svg_chart_new(1180, 700, o->title ? o->title : "Throughput vs interactivity", sub, ax, ay);

    /* Roofline first (underneath), then the anchors, the envelope and the measured lines on top. */
    if (nr > 0) {
        char leg[160], *lbl[16], *ttl[16];
        snprintf(leg, sizeof leg, "Roofline %s TP%d (%.1f TB/s, %.0f TFLOP/s)", o->roofline_model,
                 o->roofline_tp, o->bandwidth / 1e12, o->flops / 1e12);
        for (int k = 0; k < nr; k++) {
            lbl[k] = (rb[k] == 1 || rb[k] == 8 || rb[k] == 64 || rb[k] == 512 || rb[k] == 4096)
                         ? xasprintf("B=%d", rb[k])
                         : NULL;
            ttl[k] =
                xasprintf("roofline B=%d: %.0f tok/s/user, %.0f tok/s/GPU", rb[k], rx[k], ry[k]);
        }
        svg_style st = {"#111111", 1.6, "7 4", 0.9, SVG_MARK_CIRCLE, 2.2, leg};
        svg_series(c, rx, ry, nr, &st, (const char *const *)ttl, (const char *const *)lbl);
        for (int k = 0; k < nr; k++) free(lbl[k]), free(ttl[k]);
        char note[400];
        snprintf(
            note, sizeof note,
            "Roofline (bench/roofline.h): per batch size B, a decode step at the mean context "
            "(%d tokens) plus the prefill FLOPs of the ISL/OSL prompt tokens each output token "
            "brings; x = tokens/s per sequence, y = B x per GPU%s.",
            (int)(0.5 * (isl + (int)(isl * ratio)) + 0.25 * (osl + (int)(osl * ratio))),
            o->output_only ? "" : " x (ISL + OSL) / OSL");
        svg_note(c, note);
    }
    /* Anchors: grouped by their "series" (one published frontier = one dotted line). */
    int color_i = 0;
    bool *used = xcalloc((size_t)as.n + 1, sizeof *used);
    for (int k = 0; k < as.n; k++) {
        if (used[k]) continue;
        const char *color =
            ANCHOR_COLORS[color_i++ % (sizeof ANCHOR_COLORS / sizeof ANCHOR_COLORS[0])];
        if (as.a[k].x < 0) { /* no interactivity: a throughput ceiling line */
            used[k] = true;
            svg_style st = {color, 1.2, "2 3", 1, SVG_MARK_NONE, 0, as.a[k].label};
            svg_hline(c, as.a[k].y, &st, as.a[k].label);
            continue;
        }
        double x[64], y[64];
        char *ttl[64];
        int m = 0;
        for (int j = k; j < as.n && m < 64; j++) {
            bool same = j == k || (as.a[k].series && as.a[j].series &&
                                   !strcmp(as.a[k].series, as.a[j].series));
            if (used[j] || as.a[j].x < 0 || !same) continue;
            used[j] = true;
            x[m] = as.a[j].x, y[m] = as.a[j].y;
            ttl[m++] =
                xasprintf("%s: %.0f tok/s/GPU at %.1f tok/s/user%s. Source: %s", as.a[j].label,
                          as.a[j].y, as.a[j].x, as.a[j].chart ? " (read from a chart)" : "",
                          as.a[j].source ? as.a[j].source : "?");
        }
        for (int i = 1; i < m; i++) /* by x, for the line */
            for (int j = i; j > 0 && x[j - 1] > x[j]; j--) {
                double tx = x[j], ty = y[j];
                char *tt = ttl[j];
                x[j] = x[j - 1], y[j] = y[j - 1], ttl[j] = ttl[j - 1];
                x[j - 1] = tx, y[j - 1] = ty, ttl[j - 1] = tt;
            }
        svg_style st = {color,
                        m > 1 ? 1.2 : 0,
                        "1 3",
                        1,
                        SVG_MARK_DIAMOND,
                        4.2,
                        as.a[k].series ? as.a[k].series : as.a[k].label};
        svg_series(c, x, y, m, &st, (const char *const *)ttl, NULL);
        for (int i = 0; i < m; i++) free(ttl[i]);
    }
    free(used);
    if (as.n > 0)
        svg_note(c, "Anchors: published points (bench/anchors, each with its source); hover a "
                    "marker for the value. Chart readings carry about 2% error.");

    /* The Pareto envelope over every measured point. */
    if (total > 1) {
        double *px = xmalloc((size_t)total * sizeof *px), *py = xmalloc((size_t)total * sizeof *py);
        int *idx = xmalloc((size_t)total * sizeof *idx), n = 0;
        for (int i = 0; i < o->n_files; i++)
            for (int k = 0; k < ss[i].n; k++) px[n] = ss[i].p[k].x, py[n++] = ss[i].p[k].y;
        int m = bench_pareto(px, py, n, idx);
        double *ex = xmalloc((size_t)m * sizeof *ex), *ey = xmalloc((size_t)m * sizeof *ey);
        for (int k = 0; k < m; k++) ex[k] = px[idx[k]], ey[k] = py[idx[k]];
        svg_style st = {
            "#ff7f0e", 9, NULL, 0.28, SVG_MARK_NONE, 0, "Pareto envelope (all results)"};
        svg_series(c, ex, ey, m, &st, NULL, NULL);
        free(px), free(py), free(idx), free(ex), free(ey);
    }
    for (int i = 0; i < o->n_files; i++) {
        series *s = &ss[i];
        double *x = xmalloc((size_t)(s->n + 1) * sizeof *x),
               *y = xmalloc((size_t)(s->n + 1) * sizeof *y);
        char **ttl = xcalloc((size_t)s->n + 1, sizeof *ttl),
             **lbl = xcalloc((size_t)s->n + 1, sizeof *lbl);
        for (int k = 0; k < s->n; k++) {
            x[k] = s->p[k].x, y[k] = s->p[k].y;
            ttl[k] = xasprintf("%s, concurrency %d: %.0f tok/s/GPU at %.1f tok/s/user", s->label,
                               s->p[k].conc, s->p[k].y, s->p[k].x);
            lbl[k] = s->p[k].conc > 0 ? xasprintf("%d", s->p[k].conc) : NULL;
        }
        svg_style st = {PALETTE[i % (sizeof PALETTE / sizeof PALETTE[0])],
                        2.2,
                        NULL,
                        1,
                        SVG_MARK_CIRCLE,
                        4,
                        s->label};
        svg_series(c, x, y, s->n, &st, (const char *const *)ttl, (const char *const *)lbl);
        for (int k = 0; k < s->n; k++) free(ttl[k]), free(lbl[k]);
        free(ttl), free(lbl), free(x), free(y);
    }
    if (o->n_files > 0)
        svg_note(c, "Measured: gptoss bench serve|sweep (vLLM's metric definitions, InferenceMAX's "
                    "workload); labels on markers are the concurrency.");
    rc = svg_chart_write(c, o->out);
    svg_chart_free(c);
    if (rc == 0)
        fprintf(stderr, "wrote %s: %d series, %d points, %d anchors%s\n", o->out, o->n_files, total,
                as.n, nr ? ", roofline" : "");
out:
    anchors_free(&as);
    for (int i = 0; i < o->n_files; i++) free(ss[i].label), free(ss[i].p);
    free(ss);
    return rc;
}
