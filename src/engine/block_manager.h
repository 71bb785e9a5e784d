/* The paged KV block manager: which physical KV blocks each sequence uses, shared prefixes, and
 * the sliding-window recycling.
 *
 * Two pools of fixed-size blocks (block_size tokens each): one for the full-attention layers, whose
 * tables grow with the sequence, and one for the sliding-window layers, which only ever need the
 * last `window` tokens: blocks that slid out of every future query's window are given back at once,
 * so a long sequence holds about window/block_size + 1 sliding blocks however long it gets (more
 * only transiently, while a long prefill chunk is in flight).
 *
 * Prefix caching. A full block's identity is a chain hash: xxHash64 of its token ids seeded with
 * the previous block's hash, so equal hashes mean equal prefixes (the token ids are kept and
 * compared too, and so is the identity of the prefix before each block, so a hash collision can
 * never hand out the wrong KV; block_manager.c explains). Once a block is completely computed the
 * engine commits it and it becomes findable, in both pools. A new sequence reuses the longest
 * prefix of whole blocks that is cached: all of its full-layer blocks, plus the sliding-layer
 * blocks that its first new token's window reaches. Blocks are reference-counted; a block nobody
 * uses but that holds a cached prefix waits in an LRU list, still findable, until an allocation
 * needs it back.
 *
 * A pool of 0 blocks (a model without full or without sliding layers) is simply not used: that
 * table stays empty. With sliding layers only, a hit also needs the blocks before the window still
 * cached (they are the only proof of what the prefix is), though only the window's are attached.
 *
 * Data parallelism (DEP, --data-parallel-size N > 1): every rank has its own KV memory, so the
 * manager keeps one pair of pools per rank (n_ranks in the options, each rank's pools of the sizes
 * given), behind the same calls: a sequence's blocks all come from the pools of its rank
 * (bm_seq.rank, chosen by the engine before the sequence's first block, bm_pick_rank), prefix hits
 * are found among its rank's blocks only, and the statistics add the ranks up. Block ids are per
 * rank (0 .. its pool's size): the backend reads them in that rank's pools.
 *
 * Single-threaded: the engine thread owns it. */
#ifndef GPTOSS_ENGINE_BLOCK_MANAGER_H
#define GPTOSS_ENGINE_BLOCK_MANAGER_H

#include <stdbool.h>
#include <stdint.h>

/* One sequence's view. Zero-initialise; the block manager owns the arrays inside. */
typedef struct {
    int32_t *full; /* logical block i -> physical block in the full pool, i < n_full */
    int n_full, cap_full;
    int32_t *swa; /* logical block swa_first + j -> physical block in the sliding pool, j < n_swa */
    int n_swa, cap_swa, swa_first;
    uint64_t *hashes; /* chain hash of each committed (completely computed) logical block */
    int n_committed, cap_hashes;
    int64_t num_tokens;   /* tokens that have KV slots */
    uint64_t last_serial; /* identity of the last committed block's prefix (block_manager.c) */
    int rank; /* DEP: the rank whose pools hold its blocks (0 otherwise); bm_free resets it */
} bm_seq;

typedef struct block_manager block_manager;

typedef struct {
    int block_size;
    int num_full_blocks; /* 0 when the model has no full-attention layers */
    int num_swa_blocks;  /* 0 when the model has no sliding-window layers */
    int window;          /* keys a sliding-layer query sees, itself included (128) */
    bool prefix_caching;
    /* Tests only: bits cleared from every chain hash, so that different prefixes collide and the
     * checks that make hits exact get exercised (~0 gives every block the same hash). 0 in use. */
    uint64_t test_hash_clear;
    /* DEP: ranks, each with pools of num_full_blocks and num_swa_blocks (0 or 1: one). */
    int n_ranks;
} bm_options;

enum { BM_MAX_RANKS = 8 };

typedef struct {
    uint64_t prefix_queries_tokens; /* prompt tokens looked up */
    uint64_t prefix_hits_tokens;    /* of those, found cached */
    int free_full, free_swa;        /* blocks not referenced by any sequence (incl. cached ones) */
    int cached_full, cached_swa;    /* of those, blocks still holding a findable prefix */
    uint64_t evictions;             /* cached blocks taken back for allocations, both pools */
} bm_stats;

block_manager *bm_create(const bm_options *opt);
void bm_destroy(block_manager *bm);

/* DEP: the ranks (1 without), and the rank a new sequence should live on: the one with the most
 * blocks available in its full pool (its sliding pool for a model without full layers), the lowest
 * of equals. Set seq->rank to it while the sequence holds no block. */
int bm_n_ranks(const block_manager *bm);
int bm_pick_rank(const block_manager *bm);

/* Looks up the longest cached prefix of `tokens` (whole blocks, always leaving at least the last
 * token to compute) and attaches its blocks to the (empty) sequence. Returns the number of cached
 * tokens (a multiple of block_size), which become seq->num_tokens. Without prefix caching returns
 * 0; -1 (with err_set) when the sequence is not empty. Every call counts in the hit statistics, so
 * call it once per admission (a sequence that cannot be grown after a hit keeps its blocks; bm_free
 * gives them back). */
int64_t bm_match_prefix(block_manager *bm, bm_seq *seq, const int32_t *tokens, int64_t n_tokens);

/* Whether the sequence can grow to `new_num_tokens` KV slots, for a step whose first new query is
 * at position `first_query_pos` (sliding blocks before that query's window are recycled first, and
 * those no other sequence holds count as available). Exact: when it says yes, bm_grow succeeds. */
bool bm_can_grow(const block_manager *bm, const bm_seq *seq, int64_t new_num_tokens,
                 int64_t first_query_pos);
/* Grows the tables so positions < new_num_tokens have blocks; frees sliding blocks that no query at
 * or after first_query_pos can see. Returns -1 (and changes nothing) when blocks run out. */
int bm_grow(block_manager *bm, bm_seq *seq, int64_t new_num_tokens, int64_t first_query_pos);

/* After a step: positions < num_computed now hold valid KV for these tokens; every block that
 * became complete is committed (hashed and made findable). `tokens` are the sequence's real ids
 * from position 0 (prompt then sampled tokens), never STEP_TOKEN_FROM_DEVICE. Blocks commit in
 * order, so a block whose predecessor is not complete waits. */
void bm_commit(block_manager *bm, bm_seq *seq, const int32_t *tokens, int64_t num_computed);

/* Gives all of the sequence's blocks back (finished, cancelled or preempted); seq is left empty. */
void bm_free(block_manager *bm, bm_seq *seq);

/* Fraction of the pools referenced by sequences (vLLM's kv_cache_usage_perc, 0..1). */
double bm_usage(const block_manager *bm);
bm_stats bm_get_stats(const block_manager *bm);
int bm_block_size(const block_manager *bm);

/* Checks internal invariants (reference counts equal table references, free/LRU lists consistent);
 * for tests. Returns 0 or -1 with err_set. */
int bm_check(const block_manager *bm, const bm_seq *const *seqs, int n_seqs);

#endif
