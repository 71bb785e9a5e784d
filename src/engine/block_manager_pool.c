#include "engine/block_manager_pool.h"

#include "base/error.h"
#include "base/rng.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

/* ---- hash table: chain hash -> block ---- */

/* Home slot of a key. The keys are xxHash values already, but tests shrink them to a few bits to
 * force collisions, so they are mixed again rather than masked. */
static uint32_t ht_home(const bm_pool *p, uint64_t key) {
    return (uint32_t)splitmix64(key) & p->ht_mask;
}

static uint32_t ht_slot_of(const bm_pool *p, uint64_t key) {
    uint32_t i = ht_home(p, key);
    while (p->ht_val[i] >= 0 && p->ht_key[i] != key) i = (i + 1) & p->ht_mask;
    return i; /* the key's slot, or the empty slot where it would go */
}

static void ht_insert(bm_pool *p, uint64_t key, int32_t b) {
    uint32_t i = ht_slot_of(p, key);
    p->ht_key[i] = key;
    p->ht_val[i] = b;
}

/* Backward-shift deletion: no tombstones, so lookups never slow down as entries come and go. An
 * entry further along the probe run moves into the hole unless its home lies cyclically in (hole,
 * entry]. */
static void ht_remove(bm_pool *p, uint64_t key) {
    uint32_t i = ht_slot_of(p, key);
    if (p->ht_val[i] < 0) return;
    for (uint32_t j = i;;) {
        j = (j + 1) & p->ht_mask;
        if (p->ht_val[j] < 0) break;
        uint32_t k = ht_home(p, p->ht_key[j]);
        bool stays = i <= j ? (i < k && k <= j) : (i < k || k <= j);
        if (stays) continue;
        p->ht_key[i] = p->ht_key[j];
        p->ht_val[i] = p->ht_val[j];
        i = j;
    }
    p->ht_val[i] = -1;
}

int32_t bm_pool_find(const bm_pool *p, uint64_t hash) {
    return p->ht_val[ht_slot_of(p, hash)];
}

/* ---- LRU list of cached unreferenced blocks ---- */

static void lru_push_tail(bm_pool *p, int32_t b) {
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0)
        p->lru_next[p->lru_tail] = b;
    else
        p->lru_head = b;
    p->lru_tail = b;
    p->n_lru++;
}

static void lru_unlink(bm_pool *p, int32_t b) {
    int32_t prev = p->lru_prev[b], next = p->lru_next[b];
    if (prev >= 0)
        p->lru_next[prev] = next;
    else
        p->lru_head = next;
    if (next >= 0)
        p->lru_prev[next] = prev;
    else
        p->lru_tail = prev;
    p->lru_prev[b] = p->lru_next[b] = -1;
    p->n_lru--;
}

/* ---- lifetime ---- */

void bm_pool_init(bm_pool *p, int n, int block_size, bool caching) {
    memset(p, 0, sizeof *p);
    p->n = n;
    p->block_size = block_size;
    p->ref = xcalloc((size_t)n, sizeof *p->ref);
    p->cached = xcalloc((size_t)n, sizeof *p->cached);
    p->hash = xcalloc((size_t)n, sizeof *p->hash);
    p->serial = xcalloc((size_t)n, sizeof *p->serial);
    p->parent = xcalloc((size_t)n, sizeof *p->parent);
    if (caching) p->tokens = xcalloc((size_t)n * (size_t)block_size, sizeof *p->tokens);
    p->free_stack = xmalloc((size_t)n * sizeof *p->free_stack);
    /* Block 0 on top: blocks are handed out in index order, which keeps tests readable. */
    for (int i = 0; i < n; i++) p->free_stack[i] = n - 1 - i;
    p->n_free = n;
    p->lru_prev = xmalloc((size_t)n * sizeof *p->lru_prev);
    p->lru_next = xmalloc((size_t)n * sizeof *p->lru_next);
    for (int i = 0; i < n; i++) p->lru_prev[i] = p->lru_next[i] = -1;
    p->lru_head = p->lru_tail = -1;
    /* At most one entry per block; a load factor of at most 1/2 keeps probe runs short. */
    uint32_t cap = 4;
    while (cap < 2u * (uint32_t)n) cap *= 2;
    p->ht_mask = cap - 1;
    p->ht_key = xcalloc(cap, sizeof *p->ht_key);
    p->ht_val = xmalloc(cap * sizeof *p->ht_val);
    for (uint32_t i = 0; i < cap; i++) p->ht_val[i] = -1;
}

void bm_pool_destroy(bm_pool *p) {
    free(p->ref);
    free(p->cached);
    free(p->hash);
    free(p->serial);
    free(p->parent);
    free(p->tokens);
    free(p->free_stack);
    free(p->lru_prev);
    free(p->lru_next);
    free(p->ht_key);
    free(p->ht_val);
    memset(p, 0, sizeof *p);
}

/* ---- publishing ---- */

/* Makes b unfindable; an unreferenced b moves from the LRU list to the free stack. */
static void unpublish(bm_pool *p, int32_t b) {
    ht_remove(p, p->hash[b]);
    p->cached[b] = 0;
    p->n_cached--;
    if (p->ref[b] == 0) {
        lru_unlink(p, b);
        p->free_stack[p->n_free++] = b;
    }
}

bool bm_pool_same_tokens(const bm_pool *p, int32_t b, const int32_t *tokens) {
    size_t bs = (size_t)p->block_size;
    return memcmp(p->tokens + (size_t)b * bs, tokens, bs * sizeof *tokens) == 0;
}

void bm_pool_publish(bm_pool *p, int32_t b, uint64_t hash, uint64_t serial, uint64_t parent,
                     const int32_t *tokens) {
    if (p->cached[b]) return;
    int32_t old = bm_pool_find(p, hash);
    if (old >= 0 && p->serial[old] == serial) return; /* a duplicate of a block already findable */
    if (old >= 0) unpublish(p, old);
    p->cached[b] = 1;
    p->hash[b] = hash;
    p->serial[b] = serial;
    p->parent[b] = parent;
    size_t bs = (size_t)p->block_size;
    memcpy(p->tokens + (size_t)b * bs, tokens, bs * sizeof *tokens);
    ht_insert(p, hash, b);
    p->n_cached++;
}

/* ---- references ---- */

int32_t bm_pool_alloc(bm_pool *p) {
    int32_t b;
    if (p->n_free > 0) {
        b = p->free_stack[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        unpublish(p, b); /* moves it to the free stack... */
        p->n_free--;     /* ...from which it is taken at once */
        p->evictions++;
    } else {
        return -1;
    }
    p->ref[b] = 1;
    return b;
}

void bm_pool_acquire(bm_pool *p, int32_t b) {
    if (p->ref[b]++ == 0) lru_unlink(p, b);
}

void bm_pool_release(bm_pool *p, int32_t b) {
    if (--p->ref[b] > 0) return;
    if (p->cached[b])
        lru_push_tail(p, b);
    else
        p->free_stack[p->n_free++] = b;
}

/* ---- invariants ---- */

static int check_lists(const bm_pool *p, uint8_t *seen, const char *name) {
    for (int i = 0; i < p->n_free; i++) {
        int32_t b = p->free_stack[i];
        if (b < 0 || b >= p->n || seen[b]++)
            return err_set("%s pool: free stack entry %d (block %d) repeated or out of range", name,
                           i, b);
        if (p->ref[b] != 0 || p->cached[b])
            return err_set("%s pool: free block %d has ref %d, cached %d", name, b, p->ref[b],
                           p->cached[b]);
    }
    int count = 0;
    for (int32_t b = p->lru_head, prev = -1; b >= 0; prev = b, b = p->lru_next[b]) {
        if (b >= p->n || seen[b]++ || count++ > p->n)
            return err_set("%s pool: LRU list repeats block %d or is out of range", name, b);
        if (p->lru_prev[b] != prev)
            return err_set("%s pool: LRU block %d has prev %d, expected %d", name, b,
                           p->lru_prev[b], prev);
        if (p->ref[b] != 0 || !p->cached[b])
            return err_set("%s pool: LRU block %d has ref %d, cached %d", name, b, p->ref[b],
                           p->cached[b]);
        if (p->lru_next[b] < 0 && p->lru_tail != b)
            return err_set("%s pool: LRU list ends at %d, tail is %d", name, b, p->lru_tail);
    }
    if (count != p->n_lru)
        return err_set("%s pool: LRU list holds %d blocks, count says %d", name, count, p->n_lru);
    return 0;
}

static int check_hash_table(const bm_pool *p, const char *name) {
    int entries = 0;
    for (uint32_t i = 0; i <= p->ht_mask; i++) {
        int32_t b = p->ht_val[i];
        if (b < 0) continue;
        entries++;
        if (b >= p->n || !p->cached[b] || p->hash[b] != p->ht_key[i])
            return err_set("%s pool: hash slot %u points at block %d that is not cached under it",
                           name, i, b);
    }
    int cached = 0;
    for (int b = 0; b < p->n; b++) {
        if (!p->cached[b]) continue;
        cached++;
        if (bm_pool_find(p, p->hash[b]) != b)
            return err_set("%s pool: cached block %d is not found under its hash", name, b);
    }
    if (entries != cached || cached != p->n_cached)
        return err_set("%s pool: %d hash entries, %d cached blocks, count says %d", name, entries,
                       cached, p->n_cached);
    return 0;
}

int bm_pool_check(const bm_pool *p, const int32_t *refs, const char *name) {
    int referenced = 0;
    for (int b = 0; b < p->n; b++) {
        if (p->ref[b] != refs[b])
            return err_set("%s pool: block %d has ref %d but %d table references", name, b,
                           p->ref[b], refs[b]);
        referenced += p->ref[b] > 0;
    }
    uint8_t *seen = xcalloc((size_t)p->n, 1);
    int rc = check_lists(p, seen, name);
    free(seen);
    if (rc) return rc;
    if (p->n_free + p->n_lru + referenced != p->n)
        return err_set("%s pool: %d free + %d LRU + %d referenced != %d blocks", name, p->n_free,
                       p->n_lru, referenced, p->n);
    return check_hash_table(p, name);
}
