/* Knuth–Morris–Pratt over each stop string: the failure table makes every byte of generated text
 * cost amortised O(1) per string, where comparing the strings at every position (as before) cost
 * their length per token and let a request with long stop strings stall the engine. */
#include "engine/stop_set.h"

#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

static uint32_t *failure_table(const char *p, size_t len) {
    uint32_t *f = xmalloc(len * sizeof *f);
    f[0] = 0;
    uint32_t k = 0;
    for (size_t i = 1; i < len; i++) {
        while (k > 0 && p[i] != p[k]) k = f[k - 1];
        if (p[i] == p[k]) k++;
        f[i] = k;
    }
    return f;
}

stop_set *stop_set_new(const char *const *strings, int n) {
    stop_set *ss = xcalloc(1, sizeof *ss);
    atomic_init(&ss->refs, 1);
    ss->n = n;
    ss->str = xcalloc((size_t)n, sizeof *ss->str);
    ss->len = xcalloc((size_t)n, sizeof *ss->len);
    ss->fail = xcalloc((size_t)n, sizeof *ss->fail);
    for (int k = 0; k < n; k++) {
        ss->str[k] = xstrdup(strings[k]);
        ss->len[k] = strlen(strings[k]);
        if (ss->len[k]) ss->fail[k] = failure_table(ss->str[k], ss->len[k]);
    }
    return ss;
}

stop_set *stop_set_ref(stop_set *ss) {
    if (ss) atomic_fetch_add(&ss->refs, 1);
    return ss;
}

void stop_set_unref(stop_set *ss) {
    if (!ss || atomic_fetch_sub(&ss->refs, 1) != 1) return;
    for (int k = 0; k < ss->n; k++) free(ss->str[k]), free(ss->fail[k]);
    free(ss->str), free(ss->len), free(ss->fail);
    free(ss);
}

int stop_set_feed(const stop_set *ss, uint32_t *state, const char *bytes, size_t n, size_t *trim) {
    int found = -1;
    for (int k = 0; k < ss->n; k++) {
        const char *p = ss->str[k];
        size_t len = ss->len[k];
        if (!len) continue;
        uint32_t st = state[k];
        for (size_t i = 0; i < n; i++) {
            while (st > 0 && bytes[i] != p[st]) st = ss->fail[k][st - 1];
            if (bytes[i] == p[st]) st++;
            if (st == len) {
                /* The match ends at byte i: it starts len - 1 bytes earlier. */
                if (found < 0) {
                    found = k;
                    *trim = n - (i + 1) + len;
                }
                st = ss->fail[k][st - 1]; /* the sequence stops here; keep the state valid */
                break;
            }
        }
        state[k] = st;
        if (found >= 0) break;
    }
    return found;
}

size_t stop_set_partial(const stop_set *ss, const uint32_t *state) {
    size_t longest = 0;
    for (int k = 0; k < ss->n; k++)
        if (state[k] > longest) longest = state[k];
    return longest;
}
