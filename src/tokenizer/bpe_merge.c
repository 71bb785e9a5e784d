/* Byte pair merging within one pre-tokenised piece.
 *
 * The rule (tiktoken's _byte_pair_merge): start from the piece's single bytes; repeatedly find the
 * adjacent pair whose concatenation is the token of lowest rank (the leftmost such pair on ties)
 * and merge it; stop when no adjacent concatenation is a token. Two implementations of that one
 * rule:
 *  - short pieces (almost all of them): flat arrays and a linear scan for the minimum, like
 * tiktoken. Quadratic in the piece length, but for a few dozen bytes nothing beats it.
 *  - long pieces (a megabyte of one letter, base64, minified code): a linked list of parts and a
 * binary heap of candidate pairs keyed (rank, position), so each merge costs O(log n) and the whole
 * piece O(n log n). Heap entries made stale by a neighbour's merge are skipped when they surface:
 * an entry is current iff its left part is alive and still has that pair rank (a part's pair always
 * spells a longer string after any change, so a rank never comes back to the same position). */
#include "tokenizer/bpe_internal.h"

#include "base/xalloc.h"

#define SMALL_PIECE 48

static void merge_small(const tokenizer *t, const unsigned char *p, size_t n, ivec *out) {
    int32_t id[SMALL_PIECE], pr[SMALL_PIECE];
    size_t m = n;
    for (size_t i = 0; i < n; i++) id[i] = t->byte_id[p[i]];
    for (size_t i = 0; i + 1 < n; i++) pr[i] = pair_rank(&t->pairs, id[i], id[i + 1]);
    while (m > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < m; i++)
            if (pr[i] < pr[best]) best = i;
        if (pr[best] == BPE_NO_RANK) break;
        /* Part best absorbs part best+1; the pairs on both sides of the new part change. */
        id[best] = pr[best];
        memmove(id + best + 1, id + best + 2, (m - best - 2) * sizeof *id);
        if (m >= best + 3) memmove(pr + best + 1, pr + best + 2, (m - best - 3) * sizeof *pr);
        m--;
        pr[best] = best + 1 < m ? pair_rank(&t->pairs, id[best], id[best + 1]) : BPE_NO_RANK;
        if (best > 0) pr[best - 1] = pair_rank(&t->pairs, id[best - 1], id[best]);
    }
    ivec_reserve(out, out->len + m);
    memcpy(out->v + out->len, id, m * sizeof *id);
    out->len += m;
}

/* A binary min-heap of (rank << 32 | position). */
static void heap_push(uint64_t *h, size_t *n, uint64_t x) {
    size_t i = (*n)++;
    while (i > 0 && h[(i - 1) / 2] > x) h[i] = h[(i - 1) / 2], i = (i - 1) / 2;
    h[i] = x;
}

static uint64_t heap_pop(uint64_t *h, size_t *n) {
    uint64_t top = h[0], x = h[--*n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n) break;
        if (c + 1 < *n && h[c + 1] < h[c]) c++;
        if (h[c] >= x) break;
        h[i] = h[c], i = c;
    }
    h[i] = x;
    return top;
}

static void merge_long(const tokenizer *t, const unsigned char *p, size_t n, ivec *out,
                       merge_scratch *sc) {
    /* Per byte position: part id (-1 once absorbed), pair rank with the next part, prev and next
     * part starts; plus the heap, which never holds more than 3n entries (n at the start, <= 2 per
     * merge). */
    size_t need = 4 * n + 2 * 3 * n;
    if (sc->cap < need) {
        free(sc->buf);
        sc->cap = need;
        sc->buf = xmalloc(need * sizeof *sc->buf);
    }
    int32_t *id = sc->buf, *pr = id + n, *prev = pr + n, *next = prev + n;
    uint64_t *heap = (uint64_t *)(void *)(next + n);
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        id[i] = t->byte_id[p[i]];
        prev[i] = (int32_t)i - 1;
        next[i] = (int32_t)i + 1;
    }
    for (size_t i = 0; i < n; i++) {
        pr[i] = i + 1 < n ? pair_rank(&t->pairs, id[i], id[i + 1]) : BPE_NO_RANK;
        if (pr[i] != BPE_NO_RANK) heap_push(heap, &hn, (uint64_t)pr[i] << 32 | i);
    }
    while (hn > 0) {
        uint64_t e = heap_pop(heap, &hn);
        int32_t r = (int32_t)(e >> 32);
        size_t i = (uint32_t)e;
        if (id[i] < 0 || pr[i] != r) continue; /* stale */
        int32_t j = next[i], k = next[j];
        id[i] = r;
        id[j] = -1;
        next[i] = k;
        if ((size_t)k < n) prev[k] = (int32_t)i;
        pr[i] = (size_t)k < n ? pair_rank(&t->pairs, r, id[k]) : BPE_NO_RANK;
        if (pr[i] != BPE_NO_RANK) heap_push(heap, &hn, (uint64_t)pr[i] << 32 | i);
        if (i > 0) {
            int32_t h = prev[i];
            pr[h] = pair_rank(&t->pairs, id[h], r);
            if (pr[h] != BPE_NO_RANK) heap_push(heap, &hn, (uint64_t)pr[h] << 32 | (uint32_t)h);
        }
    }
    for (size_t i = 0; i < n; i = (size_t)next[i]) ivec_push(out, id[i]);
}

void bpe_encode_piece(const tokenizer *t, const unsigned char *p, size_t n, ivec *out,
                      merge_scratch *sc) {
    if (n == 1) {
        ivec_push(out, t->byte_id[p[0]]);
        return;
    }
    /* A piece that is itself a token is emitted whole, before any merging: tiktoken does this, and
     * it matters, since merging would not always reach that token. */
    int32_t whole = bytes_map_get(t, p, n);
    if (whole >= 0) {
        ivec_push(out, whole);
        return;
    }
    if (n <= SMALL_PIECE)
        merge_small(t, p, n, out);
    else
        merge_long(t, p, n, out, sc);
}
