/* Stop strings (issue 18): the KMP matchers agree with a naive search on random texts fed in random
 * token-sized pieces (which string wins, the trim, the partial match held back); long strings cost
 * O(new bytes) per token; and the n sequences of a request share one copy of the strings (128
 * samples of a request with 4 × 4 MiB of stop strings stay within 100 MiB, where copies would take
 * 2 GiB). */
#include "check.h"

#include "base/rng.h"
#include "base/timeutil.h"
#include "engine/seq.h"
#include "engine/stop_set.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The naive reference: the first string (in order) with a match ending in text[before..len). */
static int naive_feed(char *const *str, int n, const char *text, size_t before, size_t len,
                      size_t *trim) {
    for (int k = 0; k < n; k++) {
        size_t L = strlen(str[k]);
        if (L > len) continue;
        size_t from = before + 1 > L ? before + 1 - L : 0;
        for (size_t at = from; at + L <= len; at++)
            if (!memcmp(text + at, str[k], L)) {
                *trim = len - at;
                return k;
            }
    }
    return -1;
}

static size_t naive_partial(char *const *str, int n, const char *text, size_t len) {
    size_t longest = 0;
    for (int k = 0; k < n; k++) {
        size_t L = strlen(str[k]);
        for (size_t m = L - 1; m > longest; m--)
            if (m <= len && !memcmp(text + len - m, str[k], m)) {
                longest = m;
                break;
            }
    }
    return longest;
}

static void test_against_naive(void) {
    uint64_t r = 42;
    int mismatches = 0;
    for (int trial = 0; trial < 3000 && mismatches < 5; trial++) {
        int n = 1 + (int)(splitmix64(r++) % 4);
        char *str[4];
        for (int k = 0; k < n; k++) {
            size_t L = 1 + splitmix64(r++) % 6;
            str[k] = malloc(L + 1);
            for (size_t i = 0; i < L; i++) str[k][i] = (char)('a' + splitmix64(r++) % 2);
            str[k][L] = 0;
        }
        stop_set *ss = stop_set_new((const char *const *)str, n);
        uint32_t state[4] = {0};
        char text[256];
        size_t len = 0;
        while (len < 200) {
            size_t piece = 1 + splitmix64(r++) % 4;
            size_t before = len;
            for (size_t i = 0; i < piece; i++) text[len++] = (char)('a' + splitmix64(r++) % 2);
            size_t trim = 0, want_trim = 0;
            int got = stop_set_feed(ss, state, text + before, piece, &trim);
            int want = naive_feed(str, n, text, before, len, &want_trim);
            if (got != want || (got >= 0 && trim != want_trim)) {
                mismatches++;
                CHECK(0, "trial %d: stop %d trim %zu, naive %d trim %zu", trial, got, trim, want,
                      want_trim);
                break;
            }
            if (got >= 0) break;
            size_t p = stop_set_partial(ss, state), want_p = naive_partial(str, n, text, len);
            if (p != want_p) {
                mismatches++;
                CHECK(0, "trial %d: partial %zu, naive %zu", trial, p, want_p);
                break;
            }
        }
        stop_set_unref(ss);
        for (int k = 0; k < n; k++) free(str[k]);
    }
    CHECK(mismatches == 0, "%d mismatches with the naive search", mismatches);
}

/* Four 4 MiB strings of 'a' ending in 'b'..'e', and 1 MiB of 'a' fed a byte at a time: every byte
 * extends a partial match, the worst case for comparing at every position. */
static char *long_string(size_t len, char last) {
    char *s = malloc(len + 1);
    memset(s, 'a', len - 1);
    s[len - 1] = last;
    s[len] = 0;
    return s;
}

static void test_long_strings(void) {
    enum { L = 4 << 20 };
    char *str[4];
    for (int k = 0; k < 4; k++) str[k] = long_string(L, (char)('b' + k));
    stop_set *ss = stop_set_new((const char *const *)str, 4);
    uint32_t state[4] = {0};
    double t0 = now_seconds();
    int hit = -1;
    for (int i = 0; i < (1 << 20) && hit < 0; i++) {
        size_t trim;
        hit = stop_set_feed(ss, state, "a", 1, &trim);
    }
    double dt = now_seconds() - t0;
    fprintf(stderr, "1 MiB against 4 x 4 MiB stop strings in %.3f s\n", dt);
    CHECK(hit < 0, "a match that is not there");
    CHECK(stop_set_partial(ss, state) == 1 << 20, "partial %zu", stop_set_partial(ss, state));
    CHECK(dt < 2.0, "feeding took %.3f s", dt);
    size_t trim = 0;
    /* Then 'd' after 1 MiB of 'a': no match (the string needs 4 MiB - 1 of them). */
    CHECK(stop_set_feed(ss, state, "d", 1, &trim) < 0, "a short run matched");
    stop_set_unref(ss);
    for (int k = 0; k < 4; k++) free(str[k]);
}

static long rss_kb(void) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) break;
    fclose(f);
    return kb;
}

static void test_shared_by_samples(void) {
    enum { L = 4 << 20, N = 128 };
    char *str[4];
    for (int k = 0; k < 4; k++) str[k] = long_string(L, (char)('b' + k));
    int32_t prompt[4] = {1, 2, 3, 4};
    engine_request r = {0};
    r.prompt = prompt;
    r.n_prompt = 4;
    r.n = N;
    r.max_tokens = 8;
    r.stop_strings = (const char *const *)str;
    r.n_stop_strings = 4;
    model_config cfg = {0};
    long before = rss_kb();
    seq *seqs[N];
    for (int i = 0; i < N; i++) seqs[i] = seq_create(&r, i, i ? seqs[0] : NULL, 4096, &cfg);
    long grown_mb = (rss_kb() - before) / 1024;
    fprintf(stderr, "%d samples with 4 x 4 MiB stop strings: RSS +%ld MiB\n", N, grown_mb);
    CHECK(grown_mb < 100, "RSS grew by %ld MiB (bound 100 MiB)", grown_mb);
    int shared = 0;
    for (int i = 1; i < N; i++) shared += seqs[i]->stops == seqs[0]->stops;
    CHECK(shared == N - 1, "%d of %d samples share the stop strings", shared, N - 1);
    /* The first sample may go first: the others keep the strings alive. */
    seq_destroy(seqs[0]);
    CHECK(!strcmp(seqs[1]->stops->str[3] + L - 2, "ae"), "the shared strings outlived sample 0");
    for (int i = 1; i < N; i++) seq_destroy(seqs[i]);
    for (int k = 0; k < 4; k++) free(str[k]);
}

int main(void) {
    test_against_naive();
    test_long_strings();
    test_shared_by_samples();
    return check_report("test_stop_set");
}
