#include "bench/workload.h"

#include "base/rng.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

int bench_len_lower(int len, double range_ratio) {
    int lo = (int)(len * range_ratio); /* Python's int(): truncation, as InferenceMAX computes it */
    if (lo < 1) lo = 1;
    return lo > len ? len : lo;
}

static int uniform_int(rng_t *r, int lo, int hi) {
    return lo + (int)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

void bench_workload(int n, int isl, int osl, double range_ratio, uint64_t seed, bench_item *out) {
    rng_t r;
    rng_seed(&r, seed);
    int ilo = bench_len_lower(isl, range_ratio), olo = bench_len_lower(osl, range_ratio);
    for (int i = 0; i < n; i++) {
        out[i].isl = uniform_int(&r, ilo, isl);
        out[i].osl = uniform_int(&r, olo, osl);
        out[i].seed = rng_hash2(seed, (uint64_t)i);
    }
}

void bench_prompt_ids(const bench_item *it, int32_t *ids) {
    rng_t r;
    rng_seed(&r, it->seed);
    for (int j = 0; j < it->isl; j++) ids[j] = (int32_t)(rng_next(&r) % BENCH_TOKEN_LIMIT);
}

/* Common short words: without a tokenizer each is about one token. */
static const char *const WORDS[] = {
    "the",   "of",    "and",   "to",    "in",    "is",    "that",  "for",   "it",    "as",
    "was",   "with",  "be",    "by",    "on",    "not",   "he",    "this",  "are",   "or",
    "his",   "from",  "at",    "which", "but",   "have",  "an",    "had",   "they",  "you",
    "were",  "their", "one",   "all",   "we",    "can",   "her",   "has",   "there", "been",
    "if",    "more",  "when",  "will",  "would", "who",   "so",    "no",    "time",  "world",
    "water", "light", "house", "river", "stone", "green", "small", "large", "early", "music",
    "paper", "table", "train", "cloud", "field"};

char *bench_prompt_text(const bench_item *it, const tokenizer *tok) {
    size_t cap = 64, len = 0;
    char *out = xmalloc(cap);
    rng_t r;
    rng_seed(&r, it->seed);
    tok_stream ts;
    if (tok) tok_stream_init(&ts);
    for (int j = 0; j < it->isl; j++) {
        const char *piece;
        size_t n;
        if (tok) {
            int32_t id = (int32_t)(rng_next(&r) % BENCH_TOKEN_LIMIT);
            if (tok_stream_push(tok, &ts, id, &piece, &n) != 0) n = 0;
        } else {
            piece = WORDS[rng_next(&r) % (sizeof WORDS / sizeof WORDS[0])];
            n = strlen(piece);
        }
        if (len + n + 2 > cap) {
            while (len + n + 2 > cap) cap *= 2;
            out = xrealloc(out, cap);
        }
        memcpy(out + len, piece, n);
        len += n;
        if (!tok) out[len++] = ' ';
    }
    if (tok) {
        const char *piece;
        size_t n;
        tok_stream_flush(&ts, &piece, &n);
        if (len + n + 1 > cap) out = xrealloc(out, cap = len + n + 1);
        memcpy(out + len, piece, n);
        len += n;
        tok_stream_free(&ts);
    } else if (len > 0) {
        len--; /* the last space */
    }
    out[len] = 0;
    return out;
}
