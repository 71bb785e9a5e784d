#define _GNU_SOURCE /* vasprintf */
#include "bench/svg.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    char *p;
    size_t len, cap;
} buf;

static void bput(buf *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        while (b->len + n + 1 > b->cap) b->cap = b->cap ? b->cap * 2 : 8192;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void bprintf(buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bprintf(buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) abort();
    bput(b, s, (size_t)n);
    free(s);
}

/* Text content and attribute values: the five XML specials escaped. */
static void besc(buf *b, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '&':
            bput(b, "&amp;", 5);
            break;
        case '<':
            bput(b, "&lt;", 4);
            break;
        case '>':
            bput(b, "&gt;", 4);
            break;
        case '"':
            bput(b, "&quot;", 6);
            break;
        case '\'':
            bput(b, "&apos;", 6);
            break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t') bput(b, s, 1);
        }
    }
}

typedef struct {
    svg_style st;
    char *text;
    bool line; /* a line sample, not only a marker */
} legend_entry;

struct svg_chart {
    int w, h;
    char *title, *subtitle;
    svg_axis x, y;
    double px0, px1, py0, py1; /* plot area */
    buf body;
    legend_entry *legend;
    int n_legend;
    char **notes;
    int n_notes;
};

enum { LEGEND_W = 330, MARGIN_L = 84, MARGIN_T = 72, MARGIN_B = 64 };

svg_chart *svg_chart_new(int width, int height, const char *title, const char *subtitle, svg_axis x,
                         svg_axis y) {
    svg_chart *c = xcalloc(1, sizeof *c);
    c->w = width, c->h = height;
    c->title = xstrdup(title ? title : "");
    c->subtitle = xstrdup(subtitle ? subtitle : "");
    c->x = x, c->y = y;
    if (c->x.log && c->x.lo <= 0) c->x.lo = c->x.hi > 0 ? c->x.hi / 1000 : 1;
    if (c->y.log && c->y.lo <= 0) c->y.lo = c->y.hi > 0 ? c->y.hi / 1000 : 1;
    if (!(c->x.hi > c->x.lo)) c->x.hi = c->x.lo * 10 + 1;
    if (!(c->y.hi > c->y.lo)) c->y.hi = c->y.lo * 10 + 1;
    c->px0 = MARGIN_L;
    c->px1 = width - LEGEND_W;
    c->py0 = MARGIN_T;
    c->py1 = height - MARGIN_B; /* notes shift the bottom at write time */
    return c;
}

void svg_chart_free(svg_chart *c) {
    if (!c) return;
    free(c->title), free(c->subtitle), free(c->body.p);
    for (int i = 0; i < c->n_legend; i++) free(c->legend[i].text);
    free(c->legend);
    for (int i = 0; i < c->n_notes; i++) free(c->notes[i]);
    free(c->notes);
    free(c);
}

static double frac(const svg_axis *a, double v) {
    if (a->log) {
        if (v <= 0) return -1;
        return (log10(v) - log10(a->lo)) / (log10(a->hi) - log10(a->lo));
    }
    return (v - a->lo) / (a->hi - a->lo);
}
static double sx(const svg_chart *c, double v) {
    return c->px0 + frac(&c->x, v) * (c->px1 - c->px0);
}
static double sy(const svg_chart *c, double v) {
    return c->py1 - frac(&c->y, v) * (c->py1 - c->py0);
}

static double nice125(double v, bool up) {
    if (!(v > 0)) return v;
    double e = pow(10, floor(log10(v))), m = v / e;
    static const double steps[] = {1, 2, 5, 10};
    if (up) {
        for (int i = 0; i < 4; i++)
            if (m <= steps[i] * (1 + 1e-9)) return steps[i] * e;
        return 10 * e;
    }
    for (int i = 3; i >= 0; i--)
        if (m >= steps[i] * (1 - 1e-9)) return steps[i] * e;
    return e;
}
double svg_nice_floor(double v) {
    return nice125(v, false);
}
double svg_nice_ceil(double v) {
    return nice125(v, true);
}

/* 950 → "950", 1500 → "1.5k", 20000 → "20k", 0.5 → "0.5". */
static void fmt_num(char *out, size_t n, double v) {
    if (fabs(v) >= 1e6)
        snprintf(out, n, "%gM", v / 1e6);
    else if (fabs(v) >= 1e3)
        snprintf(out, n, "%gk", v / 1e3);
    else
        snprintf(out, n, "%g", v);
}

static void add_marker(buf *b, svg_marker m, double x, double y, double s, const char *color) {
    switch (m) {
    case SVG_MARK_CIRCLE:
        bprintf(b,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"%.1f\" fill=\"%s\" stroke=\"white\" "
                "stroke-width=\"1\"",
                x, y, s, color);
        break;
    case SVG_MARK_DIAMOND:
        bprintf(
            b,
            "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"white\" "
            "stroke-width=\"1\"",
            x, y - s * 1.3, x + s * 1.3, y, x, y + s * 1.3, x - s * 1.3, y, color);
        break;
    case SVG_MARK_SQUARE:
        bprintf(b,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" "
                "stroke=\"white\" "
                "stroke-width=\"1\"",
                x - s, y - s, 2 * s, 2 * s, color);
        break;
    case SVG_MARK_TRIANGLE:
        bprintf(b,
                "<path d=\"M%.1f %.1fL%.1f %.1fL%.1f %.1fZ\" fill=\"%s\" stroke=\"white\" "
                "stroke-width=\"1\"",
                x, y - s * 1.3, x + s * 1.2, y + s * 0.9, x - s * 1.2, y + s * 0.9, color);
        break;
    default:
        return;
    }
}

static void add_legend(svg_chart *c, const svg_style *st, const char *text, bool line) {
    if (!st->legend && !text) return;
    c->legend = xrealloc(c->legend, (size_t)(c->n_legend + 1) * sizeof *c->legend);
    legend_entry *e = &c->legend[c->n_legend++];
    e->st = *st;
    e->text = xstrdup(text ? text : st->legend);
    e->line = line;
}

void svg_series(svg_chart *c, const double *x, const double *y, int n, const svg_style *st,
                const char *const *titles, const char *const *labels) {
    buf *b = &c->body;
    double op = st->opacity > 0 ? st->opacity : 1;
    if (st->width > 0 && n > 1) {
        bprintf(
            b,
            "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%.1f\" stroke-opacity=\"%.2f\" "
            "stroke-linejoin=\"round\" stroke-linecap=\"round\"",
            st->color, st->width, op);
        if (st->dash) bprintf(b, " stroke-dasharray=\"%s\"", st->dash);
        bput(b, " points=\"", 9);
        for (int i = 0; i < n; i++)
            bprintf(b, "%s%.1f,%.1f", i ? " " : "", sx(c, x[i]), sy(c, y[i]));
        bput(b, "\"/>\n", 4);
    }
    for (int i = 0; i < n && st->marker != SVG_MARK_NONE; i++) {
        add_marker(b, st->marker, sx(c, x[i]), sy(c, y[i]),
                   st->marker_size > 0 ? st->marker_size : 3.5, st->color);
        if (titles && titles[i]) {
            bput(b, "><title>", 8);
            besc(b, titles[i]);
            bput(b, "</title></", 10);
            bput(b,
                 st->marker == SVG_MARK_CIRCLE   ? "circle"
                 : st->marker == SVG_MARK_SQUARE ? "rect"
                                                 : "path",
                 st->marker == SVG_MARK_CIRCLE   ? 6
                 : st->marker == SVG_MARK_SQUARE ? 4
                                                 : 4);
            bput(b, ">\n", 2);
        } else {
            bput(b, "/>\n", 3);
        }
    }
    for (int i = 0; labels && i < n; i++) {
        if (!labels[i]) continue;
        bprintf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"%s\">", sx(c, x[i]) + 5,
                sy(c, y[i]) - 6, st->color);
        besc(b, labels[i]);
        bput(b, "</text>\n", 8);
    }
    add_legend(c, st, NULL, st->width > 0);
}

void svg_hline(svg_chart *c, double y, const svg_style *st, const char *text) {
    buf *b = &c->body;
    double yy = sy(c, y);
    bprintf(
        b,
        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"%.1f\"",
        c->px0, yy, c->px1, yy, st->color, st->width > 0 ? st->width : 1);
    if (st->dash) bprintf(b, " stroke-dasharray=\"%s\"", st->dash);
    bput(b, "/>\n", 3);
    if (text) {
        bprintf(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\" fill=\"%s\">",
                c->px1 - 4, yy - 4, st->color);
        besc(b, text);
        bput(b, "</text>\n", 8);
    }
    add_legend(c, st, NULL, true);
}

void svg_note(svg_chart *c, const char *text) {
    c->notes = xrealloc(c->notes, (size_t)(c->n_notes + 1) * sizeof *c->notes);
    c->notes[c->n_notes++] = xstrdup(text);
}

/* Grid lines and tick labels of one axis. */
static void axis_ticks(svg_chart *c, buf *b, bool is_x) {
    const svg_axis *a = is_x ? &c->x : &c->y;
    double vals[256];
    bool major[256];
    int n = 0;
    if (a->log) {
        double decades = log10(a->hi / a->lo);
        for (int k = (int)floor(log10(a->lo)); k <= (int)ceil(log10(a->hi)) && n < 250; k++)
            for (int m = 1; m <= 9 && n < 250; m++) {
                double v = m * pow(10, k);
                if (v < a->lo * (1 - 1e-9) || v > a->hi * (1 + 1e-9)) continue;
                vals[n] = v;
                major[n++] = m == 1 || ((m == 2 || m == 5) && decades <= 3.5);
            }
    } else {
        double step = nice125((a->hi - a->lo) / 6, true);
        for (double v = ceil(a->lo / step) * step; v <= a->hi * (1 + 1e-12) && n < 250; v += step) {
            vals[n] = fabs(v) < step * 1e-9 ? 0 : v;
            major[n++] = true;
        }
    }
    for (int i = 0; i < n; i++) {
        char t[32];
        fmt_num(t, sizeof t, vals[i]);
        const char *grid = major[i] ? "#d4d4d4" : "#efefef";
        if (is_x) {
            double x = sx(c, vals[i]);
            bprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x,
                    c->py0, x, c->py1, grid);
            if (major[i]) {
                bprintf(b,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                        x, c->py1, x, c->py1 + 5);
                bprintf(b,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
                        "fill=\"#333\">%s</text>\n",
                        x, c->py1 + 19, t);
            }
        } else {
            double y = sy(c, vals[i]);
            bprintf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n",
                    c->px0, y, c->px1, y, grid);
            if (major[i]) {
                bprintf(b,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#444\"/>\n",
                        c->px0 - 5, y, c->px0, y);
                bprintf(b,
                        "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\" "
                        "fill=\"#333\">%s</text>\n",
                        c->px0 - 8, y + 4, t);
            }
        }
    }
}

static void legend_sample(buf *b, const legend_entry *e, double x, double y) {
    if (e->line && e->st.width > 0) {
        bprintf(b,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"%.1f\" "
                "stroke-opacity=\"%.2f\"",
                x, y, x + 28, y, e->st.color, e->st.width, e->st.opacity > 0 ? e->st.opacity : 1);
        if (e->st.dash) bprintf(b, " stroke-dasharray=\"%s\"", e->st.dash);
        bput(b, "/>\n", 3);
    }
    if (e->st.marker != SVG_MARK_NONE) {
        add_marker(b, e->st.marker, x + 14, y, e->st.marker_size > 0 ? e->st.marker_size : 3.5,
                   e->st.color);
        bput(b, "/>\n", 3);
    }
}

int svg_chart_write(svg_chart *c, const char *path) {
    /* Notes take room under the x label. */
    double shift = 15.0 * c->n_notes;
    c->h += (int)shift;
    buf out = {0};
    bprintf(&out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
            "%d\" "
            "font-family=\"Helvetica, Arial, sans-serif\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            c->w, c->h, c->w, c->h, c->w, c->h);
    bprintf(&out, "<text x=\"%.1f\" y=\"28\" font-size=\"18\" font-weight=\"bold\" fill=\"#111\">",
            c->px0);
    besc(&out, c->title);
    bput(&out, "</text>\n", 8);
    bprintf(&out, "<text x=\"%.1f\" y=\"48\" font-size=\"12\" fill=\"#555\">", c->px0);
    besc(&out, c->subtitle);
    bput(&out, "</text>\n", 8);
    bprintf(&out,
            "<defs><clipPath id=\"plot-area\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" "
            "height=\"%.1f\"/></clipPath>"
            "</defs>\n",
            c->px0, c->py0, c->px1 - c->px0, c->py1 - c->py0);
    axis_ticks(c, &out, true);
    axis_ticks(c, &out, false);
    bput(&out, "<g clip-path=\"url(#plot-area)\">\n", 32);
    if (c->body.p) bput(&out, c->body.p, c->body.len);
    bput(&out, "</g>\n", 5);
    bprintf(&out,
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#444\"/>\n",
            c->px0, c->py0, c->px1 - c->px0, c->py1 - c->py0);
    bprintf(&out,
            "<text x=\"%.1f\" y=\"%.1f\" font-size=\"14\" text-anchor=\"middle\" fill=\"#111\">",
            (c->px0 + c->px1) / 2, c->py1 + 42);
    besc(&out, c->x.label);
    bput(&out, "</text>\n", 8);
    bprintf(&out,
            "<text transform=\"translate(%.1f %.1f) rotate(-90)\" font-size=\"14\" "
            "text-anchor=\"middle\" "
            "fill=\"#111\">",
            22.0, (c->py0 + c->py1) / 2);
    besc(&out, c->y.label);
    bput(&out, "</text>\n", 8);
    /* Legend: right of the plot, one row per entry. */
    double lx = c->px1 + 18, ly = c->py0 + 6;
    for (int i = 0; i < c->n_legend; i++, ly += 19) {
        legend_sample(&out, &c->legend[i], lx, ly);
        /* Long names wrap once at a space (the legend is narrow); anything longer is cut. */
        const char *t = c->legend[i].text;
        size_t len = strlen(t), cut = len;
        enum { LINE = 44 };
        if (len > LINE) {
            cut = LINE;
            while (cut > 0 && t[cut] != ' ') cut--;
            if (cut == 0) cut = LINE;
        }
        char line[LINE * 2 + 8];
        snprintf(line, sizeof line, "%.*s", (int)cut, t);
        bprintf(&out, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">", lx + 36,
                ly + 4);
        besc(&out, line);
        bput(&out, "</text>\n", 8);
        if (cut < len) {
            const char *rest = t + cut + (t[cut] == ' ');
            snprintf(line, sizeof line, "%.*s%s", LINE + 4, rest,
                     strlen(rest) > LINE + 4 ? "..." : "");
            ly += 15;
            bprintf(&out, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#222\">", lx + 44,
                    ly + 4);
            besc(&out, line);
            bput(&out, "</text>\n", 8);
        }
    }
    for (int i = 0; i < c->n_notes; i++) {
        bprintf(&out, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#666\">", 12.0,
                c->py1 + 62 + 15.0 * i);
        besc(&out, c->notes[i]);
        bput(&out, "</text>\n", 8);
    }
    bput(&out, "</svg>\n", 7);
    int rc = file_write_all(path, out.p, out.len);
    free(out.p);
    return rc ? err_prefix("writing %s", path) : 0;
}
