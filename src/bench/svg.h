/* A small hand-written SVG chart: one plot area with a logarithmic or linear x and y axis, ticks
 * and grid lines, polylines with markers (each marker with a hover title and an optional small
 * label), horizontal reference lines, and a legend beside the plot. Enough for the Pareto chart,
 * with no dependency, and it renders the same in every browser. */
#ifndef GPTOSS_BENCH_SVG_H
#define GPTOSS_BENCH_SVG_H

#include <stdbool.h>

typedef struct {
    double lo, hi;
    bool log;
    const char *label;
} svg_axis;

typedef enum {
    SVG_MARK_NONE,
    SVG_MARK_CIRCLE,
    SVG_MARK_DIAMOND,
    SVG_MARK_SQUARE,
    SVG_MARK_TRIANGLE
} svg_marker;

typedef struct {
    const char *color;
    double width;     /* stroke width of the line; 0: markers only */
    const char *dash; /* stroke-dasharray or NULL */
    double opacity;   /* of the line (markers are opaque); 0 means 1 */
    svg_marker marker;
    double marker_size;
    const char *legend; /* NULL: not in the legend */
} svg_style;

typedef struct svg_chart svg_chart;

svg_chart *svg_chart_new(int width, int height, const char *title, const char *subtitle, svg_axis x,
                         svg_axis y);
void svg_chart_free(svg_chart *c);

/* A line through n points (in data units) with the style's markers. titles[i] (hover text) and
 * labels[i] (a small text next to the marker) may be NULL, as may the arrays. */
void svg_series(svg_chart *c, const double *x, const double *y, int n, const svg_style *st,
                const char *const *titles, const char *const *labels);

/* A horizontal reference line across the plot at y, with text at its right end. */
void svg_hline(svg_chart *c, double y, const svg_style *st, const char *text);

/* A note in the bottom margin (sources, method). Several notes stack. */
void svg_note(svg_chart *c, const char *text);

/* Writes the document; -1 + err_set() on failure. */
int svg_chart_write(svg_chart *c, const char *path);

/* Round outward to a 1-2-5 value (for axis ranges). */
double svg_nice_floor(double v);
double svg_nice_ceil(double v);

#endif
