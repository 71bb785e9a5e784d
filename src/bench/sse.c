#include "bench/sse.h"

#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

void sse_init(sse_parser *s) {
    memset(s, 0, sizeof *s);
}

void sse_free(sse_parser *s) {
    free(s->line);
    free(s->data);
    memset(s, 0, sizeof *s);
}

static void grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    *buf = xrealloc(*buf, c);
    *cap = c;
}

static void dispatch(sse_parser *s, sse_event_fn on_event, void *user) {
    if (s->has_data) {
        grow(&s->data, &s->data_cap, s->data_len + 1);
        s->data[s->data_len] = 0;
        on_event(user, s->data, s->data_len);
    }
    s->data_len = 0;
    s->has_data = false;
}

/* One complete line. */
static void on_line(sse_parser *s, sse_event_fn on_event, void *user) {
    const char *l = s->line;
    size_t n = s->line_len;
    s->line_len = 0;
    if (n == 0) {
        dispatch(s, on_event, user);
        return;
    }
    if (l[0] == ':') return; /* comment */
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    if (name_len != 4 || memcmp(l, "data", 4) != 0)
        return; /* event:, id:, retry: mean nothing here */
    const char *v = colon ? colon + 1 : l + n;
    if (v < l + n && *v == ' ') v++;
    size_t vlen = (size_t)(l + n - v);
    /* Several data lines in one event are joined with LF. */
    grow(&s->data, &s->data_cap, s->data_len + vlen + 2);
    if (s->has_data) s->data[s->data_len++] = '\n';
    memcpy(s->data + s->data_len, v, vlen);
    s->data_len += vlen;
    s->has_data = true;
}

void sse_feed(sse_parser *s, const char *data, size_t len, sse_event_fn on_event, void *user) {
    size_t i = 0;
    while (i < len) {
        char c = data[i];
        if (s->after_cr) {
            s->after_cr = false;
            if (c == '\n') {
                i++;
                continue;
            }
        }
        if (c == '\n' || c == '\r') {
            s->after_cr = c == '\r';
            i++;
            on_line(s, on_event, user);
            continue;
        }
        /* Copy the run of ordinary bytes up to the next line end in one go. */
        size_t j = i;
        while (j < len && data[j] != '\n' && data[j] != '\r') j++;
        grow(&s->line, &s->line_cap, s->line_len + (j - i) + 1);
        memcpy(s->line + s->line_len, data + i, j - i);
        s->line_len += j - i;
        i = j;
    }
}

void sse_finish(sse_parser *s, sse_event_fn on_event, void *user) {
    if (s->line_len > 0) on_line(s, on_event, user);
    dispatch(s, on_event, user);
}
