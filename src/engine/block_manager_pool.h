/* One pool of KV blocks, internal to the block manager (block_manager.c decides what goes where;
 * this file only keeps the books).
 *
 * Every block is in exactly one of three states:
 *   referenced  ref > 0: in the table of at least one sequence;
 *   cached      ref == 0 and it holds a published prefix: in the LRU list, still findable by hash;
 *   free        ref == 0 and it holds nothing anyone can find: on the free stack.
 * Allocation takes a free block first and evicts the least recently released cached block only when
 * none is left, so a cached prefix survives as long as memory allows.
 *
 * A published block is findable under its chain hash (one block per hash; publishing a different
 * prefix under a hash already taken replaces the old entry). Next to the hash it keeps what makes a
 * match certain rather than probable: its token ids and two identities (see block_manager.c):
 * `serial`, the identity of the prefix it ends, and `parent`, that of the prefix before it. */
#ifndef GPTOSS_ENGINE_BLOCK_MANAGER_POOL_H
#define GPTOSS_ENGINE_BLOCK_MANAGER_POOL_H

#include <stdbool.h>
#include <stdint.h>

typedef struct {
    int n, block_size;
    int32_t *ref;     /* [n] number of sequence tables that hold the block */
    uint8_t *cached;  /* [n] published: findable by hash */
    uint64_t *hash;   /* [n] chain hash, valid when cached */
    uint64_t *serial; /* [n] identity of the prefix the block ends, valid when cached */
    uint64_t *parent; /* [n] identity of the prefix before the block (0: none), valid when cached */
    int32_t *tokens;  /* [n * block_size] the block's token ids; NULL without prefix caching */

    int32_t *free_stack; /* [n] free blocks, the next one to hand out on top */
    int n_free;

    /* Doubly linked LRU list of cached unreferenced blocks: head is evicted first. */
    int32_t *lru_prev, *lru_next;
    int32_t lru_head, lru_tail;
    int n_lru;

    /* Open addressing with linear probing, hash -> block; val -1 marks an empty slot. */
    uint64_t *ht_key;
    int32_t *ht_val;
    uint32_t ht_mask;
    int n_cached;

    uint64_t evictions; /* cached blocks taken back for an allocation */
} bm_pool;

void bm_pool_init(bm_pool *p, int n, int block_size, bool caching);
void bm_pool_destroy(bm_pool *p);

/* Blocks an allocation can get: free ones plus cached unreferenced ones. */
static inline int bm_pool_available(const bm_pool *p) {
    return p->n_free + p->n_lru;
}
/* Blocks held by at least one sequence. */
static inline int bm_pool_referenced(const bm_pool *p) {
    return p->n - p->n_free - p->n_lru;
}

/* A block with one reference and no published prefix, evicting a cached one if need be; -1 when
 * every block is referenced. */
int32_t bm_pool_alloc(bm_pool *p);
/* One more reference to a block that is referenced or cached (a prefix hit). */
void bm_pool_acquire(bm_pool *p, int32_t b);
/* One reference less; at zero the block waits in the LRU list when cached, else becomes free. */
void bm_pool_release(bm_pool *p, int32_t b);

/* The block published under `hash`, or -1. */
int32_t bm_pool_find(const bm_pool *p, uint64_t hash);
bool bm_pool_same_tokens(const bm_pool *p, int32_t b, const int32_t *tokens);
/* Makes block b (referenced, not yet published) findable under `hash`. When another block is
 * published under the same hash: if it ends the same prefix (same serial) b is a duplicate and
 * stays unpublished; otherwise the old entry is stale or a collision and b replaces it. */
void bm_pool_publish(bm_pool *p, int32_t b, uint64_t hash, uint64_t serial, uint64_t parent,
                     const int32_t *tokens);

/* Checks the books against `refs` (the references the caller counted per block); 0 or -1 with
 * err_set naming the pool `name`. */
int bm_pool_check(const bm_pool *p, const int32_t *refs, const char *name);

#endif
