/* Building the lookup tables of a loaded tokenizer: byte strings → ids, pairs of ids → merged id,
 * and special token names → ids. */
#include "tokenizer/bpe_internal.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdlib.h>

/* Smallest power of two holding n entries at a load factor of at most one half. */
static uint64_t table_size(size_t n, int *bits) {
    uint64_t size = 1024;
    int b = 10;
    while (size < 2 * (uint64_t)n) size <<= 1, b++;
    if (bits) *bits = b;
    return size;
}

static int build_bytes_map(tokenizer *t) {
    uint64_t size = table_size((size_t)t->n_bpe, NULL);
    t->bpe.slot = xmalloc(size * sizeof *t->bpe.slot);
    memset(t->bpe.slot, 0xFF, size * sizeof *t->bpe.slot);
    t->bpe.mask = size - 1;
    for (int32_t id = 0; id < t->n_bpe; id++) {
        size_t n;
        const char *p = tok_bytes(t, id, &n);
        if (n == 0) return err_set("token %d is empty", id);
        int32_t dup = bytes_map_get(t, p, n);
        if (dup >= 0) return err_set("tokens %d and %d have the same bytes", dup, id);
        uint64_t h = bpe_hash(p, n), i = h & t->bpe.mask;
        while (t->bpe.slot[i] != BYTES_EMPTY) i = (i + 1) & t->bpe.mask;
        t->bpe.slot[i] = (h & 0xFFFFFFFF00000000ull) | (uint32_t)id;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        t->byte_id[b] = bytes_map_get(t, &c, 1);
        /* Byte-level BPE can spell any byte string only if every single byte is a token. */
        if (t->byte_id[b] < 0) return err_set("byte 0x%02x has no token", b);
    }
    return 0;
}

static void pair_put(pair_map *m, int32_t a, int32_t b, int32_t merged) {
    uint64_t key = (uint64_t)a << BPE_ID_BITS | (uint64_t)b;
    uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> m->shift;
    while (m->slot[i] != BYTES_EMPTY) {
        if (m->slot[i] >> BPE_ID_BITS == key) return; /* one product per pair: bytes decide it */
        i = (i + 1) & m->mask;
    }
    m->slot[i] = key << BPE_ID_BITS | (uint64_t)merged;
}

/* Every way to split every token into two tokens. Counting first sizes the table once. */
static void build_pair_map(tokenizer *t) {
    size_t npairs = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) {
            int bits;
            uint64_t size = table_size(npairs, &bits);
            t->pairs.slot = xmalloc(size * sizeof *t->pairs.slot);
            memset(t->pairs.slot, 0xFF, size * sizeof *t->pairs.slot);
            t->pairs.mask = size - 1;
            t->pairs.shift = 64 - bits;
        }
        for (int32_t id = 0; id < t->n_bpe; id++) {
            size_t n;
            const char *p = tok_bytes(t, id, &n);
            for (size_t k = 1; k < n; k++) {
                int32_t a = bytes_map_get(t, p, k);
                if (a < 0) continue;
                int32_t b = bytes_map_get(t, p + k, n - k);
                if (b < 0) continue;
                if (pass == 0)
                    npairs++;
                else
                    pair_put(&t->pairs, a, b, id);
            }
        }
    }
}

int bpe_build_tables(tokenizer *t) {
    if (t->n_bpe < 256 || t->n_bpe > BPE_MAX_IDS - 1)
        return err_set("%d BPE tokens: expected between 256 and %d", t->n_bpe, BPE_MAX_IDS - 1);
    if (build_bytes_map(t) != 0) return -1;
    build_pair_map(t);
    return 0;
}

/* Special names: a small table that doubles (rehashing) to stay at most half full. */
static uint64_t name_hash(const char *s, size_t n) {
    return bpe_hash(s, n);
}

static void special_grow(tokenizer *t) {
    size_t old = t->special ? t->special_mask + 1 : 0, size = old ? old * 2 : 4096;
    special_entry *e = xcalloc(size, sizeof *e);
    for (size_t i = 0; i < old; i++) {
        if (!t->special[i].name) continue;
        size_t j = name_hash(t->special[i].name, t->special[i].len) & (size - 1);
        while (e[j].name) j = (j + 1) & (size - 1);
        e[j] = t->special[i];
    }
    free(t->special);
    t->special = e;
    t->special_mask = size - 1;
}

int special_insert(tokenizer *t, const char *name, size_t len, int32_t id) {
    if (!t->special || 2 * (t->special_used + 1) > t->special_mask + 1) special_grow(t);
    size_t j = name_hash(name, len) & t->special_mask;
    while (t->special[j].name) {
        if (t->special[j].len == len && !memcmp(t->special[j].name, name, len)) {
            if (t->special[j].id == id) return 0;
            return err_set("special token %.*s has two ids, %d and %d", (int)len, name,
                           t->special[j].id, id);
        }
        j = (j + 1) & t->special_mask;
    }
    t->special[j] = (special_entry){name, len, id};
    t->special_used++;
    return 0;
}

int32_t special_lookup(const tokenizer *t, const char *name, size_t len) {
    if (!t->special) return -1;
    for (size_t j = name_hash(name, len) & t->special_mask; t->special[j].name;
         j = (j + 1) & t->special_mask)
        if (t->special[j].len == len && !memcmp(t->special[j].name, name, len))
            return t->special[j].id;
    return -1;
}

int32_t tokenizer_special_id(const tokenizer *t, const char *name) {
    return name ? special_lookup(t, name, strlen(name)) : -1;
}
