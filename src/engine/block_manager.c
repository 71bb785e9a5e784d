/* The paged KV block manager (see block_manager.h for what it promises; block_manager_pool.c keeps
 * each pool's books).
 *
 * Why hits are exact. A chain hash names a prefix only probably: two different prefixes can share
 * one. So every published block also carries identities that cannot collide: `serial`, a number
 * given to each distinct prefix (of whole blocks) the first time it is committed, and `parent`, the
 * serial of the prefix before the block. A lookup of block j accepts a candidate only when its
 * token ids equal block j's and its parent is the serial just matched for block j - 1; by induction
 * the whole prefix is then equal, whatever the hashes did. Serials are never reused, so a block
 * whose parent was evicted and recomputed (under a new serial) can no longer be matched through it:
 * a lost hit at worst, never wrong KV. A commit that finds the very same prefix already published
 * (same parent, same tokens) takes that prefix's serial, so sequences that computed one prefix side
 * by side still chain to the published blocks.
 *
 * The chain of identities runs through the full pool. The sliding pool publishes its blocks under
 * the same hash and serial as the full block of the same logical index, and a sliding block is
 * taken only when its serial is the one the full chain matched. A model with sliding layers only
 * has no full chain: its sliding pool is the chain, and a hit needs every block of the prefix still
 * cached there (though only the blocks inside the window get attached), so exactness holds there
 * too. */
#include "engine/block_manager.h"

#include "base/error.h"
#include "base/xalloc.h"
#include "engine/block_manager_pool.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* Seed of the first block's chain hash ("gptoss\0\1"); any constant would do. */
#define CHAIN_SEED 0x6770746f73730001ull

struct block_manager {
    bm_options opt;
    bm_pool full, swa;
    uint64_t hash_mask;   /* all ones, or fewer bits for collision tests */
    uint64_t next_serial; /* next prefix identity; 0 means "no prefix" */
    uint64_t queries, hits;
    /* DEP (n_ranks > 1): one whole manager per rank, to which every call about a sequence goes
     * (its seq->rank); this one's own pools are then empty. Each rank's prefix identities are its
     * own: a sequence only ever meets its rank's blocks. */
    int n_ranks;
    block_manager *rank[BM_MAX_RANKS];
};

/* The manager of a sequence's rank (itself without DEP). */
static block_manager *of(block_manager *bm, const bm_seq *seq) {
    if (bm->n_ranks < 2) return bm;
    return bm->rank[seq->rank >= 0 && seq->rank < bm->n_ranks ? seq->rank : 0];
}
static const block_manager *of_c(const block_manager *bm, const bm_seq *seq) {
    return of((block_manager *)bm, seq);
}

static int64_t min64(int64_t a, int64_t b) {
    return a < b ? a : b;
}
static int64_t max64(int64_t a, int64_t b) {
    return a > b ? a : b;
}

static bool has_full(const block_manager *bm) {
    return bm->full.n > 0;
}
static bool has_swa(const block_manager *bm) {
    return bm->swa.n > 0;
}

/* Logical blocks that hold positions [0, n_tokens). */
static int64_t blocks_for(const block_manager *bm, int64_t n_tokens) {
    return (n_tokens + bm->opt.block_size - 1) / bm->opt.block_size;
}

/* The first logical block a sliding-layer query at `pos` can see: it sees keys [pos - window + 1,
 * pos], so every block ending before that is of no use to it or to any later query. */
static int64_t swa_keep_from(const block_manager *bm, int64_t pos) {
    int64_t first_key = pos - bm->opt.window + 1;
    return first_key > 0 ? first_key / bm->opt.block_size : 0;
}

static uint64_t chain_hash(const block_manager *bm, uint64_t prev, const int32_t *tokens) {
    size_t len = (size_t)bm->opt.block_size * sizeof *tokens;
    return XXH64(tokens, len, prev) & bm->hash_mask;
}

static void reserve_i32(int32_t **a, int *cap, int64_t need) {
    if (need <= *cap) return;
    int64_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    *a = xrealloc(*a, (size_t)c * sizeof **a);
    *cap = (int)c;
}

static void reserve_u64(uint64_t **a, int *cap, int64_t need) {
    if (need <= *cap) return;
    int64_t c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    *a = xrealloc(*a, (size_t)c * sizeof **a);
    *cap = (int)c;
}

/* ---- lifetime ---- */

static int check_options(const bm_options *opt) {
    if (opt->block_size <= 0) return err_set("block manager: block_size %d", opt->block_size);
    if (opt->num_full_blocks < 0 || opt->num_swa_blocks < 0 || opt->num_full_blocks > (1 << 30) ||
        opt->num_swa_blocks > (1 << 30))
        return err_set("block manager: pool sizes %d (full), %d (sliding)", opt->num_full_blocks,
                       opt->num_swa_blocks);
    if (opt->num_swa_blocks > 0 && opt->window <= 0)
        return err_set("block manager: sliding window %d", opt->window);
    if (opt->n_ranks < 0 || opt->n_ranks > BM_MAX_RANKS)
        return err_set("block manager: %d ranks (at most %d)", opt->n_ranks, BM_MAX_RANKS);
    return 0;
}

block_manager *bm_create(const bm_options *opt) {
    if (check_options(opt)) return NULL;
    block_manager *bm = xcalloc(1, sizeof *bm);
    bm->opt = *opt;
    bm->hash_mask = ~opt->test_hash_clear;
    bm->next_serial = 1;
    if (opt->n_ranks > 1) {
        bm_options one = *opt;
        one.n_ranks = 0;
        bm->n_ranks = opt->n_ranks;
        for (int r = 0; r < opt->n_ranks; r++) bm->rank[r] = bm_create(&one);
        bm_pool_init(&bm->full, 0, opt->block_size, false);
        bm_pool_init(&bm->swa, 0, opt->block_size, false);
        return bm;
    }
    bm_pool_init(&bm->full, opt->num_full_blocks, opt->block_size, opt->prefix_caching);
    bm_pool_init(&bm->swa, opt->num_swa_blocks, opt->block_size, opt->prefix_caching);
    return bm;
}

int bm_n_ranks(const block_manager *bm) {
    return bm->n_ranks > 1 ? bm->n_ranks : 1;
}

int bm_pick_rank(const block_manager *bm) {
    int best = 0, best_free = -1;
    for (int r = 0; r < bm->n_ranks; r++) {
        const block_manager *k = bm->rank[r];
        const int avail = has_full(k) ? bm_pool_available(&k->full) : bm_pool_available(&k->swa);
        if (avail > best_free) best = r, best_free = avail;
    }
    return best;
}

void bm_destroy(block_manager *bm) {
    if (!bm) return;
    for (int r = 0; r < bm->n_ranks; r++) bm_destroy(bm->rank[r]);
    bm_pool_destroy(&bm->full);
    bm_pool_destroy(&bm->swa);
    free(bm);
}

int bm_block_size(const block_manager *bm) {
    return bm->opt.block_size;
}

/* ---- prefix lookup ---- */

/* Scratch of one lookup, one entry per candidate logical block. */
typedef struct {
    uint64_t *hash, *serial;
    int32_t *full, *swa; /* matched physical blocks; swa -1 where the sliding pool lacks it */
} match_scratch;

/* Matches blocks 0, 1, ... of `tokens` in the chain pool (see the top of the file); returns how
 * many matched, at most max_k. */
static int64_t walk_chain(const block_manager *bm, const bm_pool *chain, const int32_t *tokens,
                          int64_t max_k, match_scratch *m, int32_t *blocks) {
    uint64_t prev_hash = CHAIN_SEED, prev_serial = 0;
    for (int64_t j = 0; j < max_k; j++) {
        const int32_t *t = tokens + j * bm->opt.block_size;
        uint64_t h = chain_hash(bm, prev_hash, t);
        int32_t b = bm_pool_find(chain, h);
        if (b < 0 || chain->parent[b] != prev_serial || !bm_pool_same_tokens(chain, b, t)) return j;
        m->hash[j] = h;
        m->serial[j] = prev_serial = chain->serial[b];
        blocks[j] = b;
        prev_hash = h;
    }
    return max_k;
}

/* With both pools: the longest k <= k_full whose needed sliding blocks [swa_keep_from(k * bs), k)
 * are all cached as the same prefixes the full chain matched. run counts, at each j, the sliding
 * blocks present in a row ending at j, so each k is checked in O(1). */
static int64_t limit_by_sliding(const block_manager *bm, int64_t k_full, match_scratch *m) {
    int64_t *run = xmalloc((size_t)max64(k_full, 1) * sizeof *run);
    for (int64_t j = 0; j < k_full; j++) {
        int32_t b = bm_pool_find(&bm->swa, m->hash[j]);
        bool ok = b >= 0 && bm->swa.serial[b] == m->serial[j];
        m->swa[j] = ok ? b : -1;
        run[j] = ok ? (j ? run[j - 1] : 0) + 1 : 0;
    }
    int64_t k = k_full;
    for (; k > 0; k--) {
        int64_t needed = k - swa_keep_from(bm, k * bm->opt.block_size);
        if (run[k - 1] >= needed) break;
    }
    free(run);
    return k;
}

/* Gives the empty sequence the k matched blocks (the sliding ones from the window's start). */
static void attach(block_manager *bm, bm_seq *seq, int64_t k, const match_scratch *m) {
    if (has_full(bm)) {
        reserve_i32(&seq->full, &seq->cap_full, k);
        for (int64_t j = 0; j < k; j++) {
            bm_pool_acquire(&bm->full, m->full[j]);
            seq->full[j] = m->full[j];
        }
        seq->n_full = (int)k;
    }
    if (has_swa(bm)) {
        int64_t lo = swa_keep_from(bm, k * bm->opt.block_size);
        reserve_i32(&seq->swa, &seq->cap_swa, k - lo);
        for (int64_t j = lo; j < k; j++) {
            bm_pool_acquire(&bm->swa, m->swa[j]);
            seq->swa[j - lo] = m->swa[j];
        }
        seq->swa_first = (int)lo;
        seq->n_swa = (int)(k - lo);
    }
    reserve_u64(&seq->hashes, &seq->cap_hashes, k);
    memcpy(seq->hashes, m->hash, (size_t)k * sizeof *seq->hashes);
    seq->n_committed = (int)k;
    seq->last_serial = k ? m->serial[k - 1] : 0;
    seq->num_tokens = k * bm->opt.block_size;
}

static int64_t find_prefix(block_manager *bm, const int32_t *tokens, int64_t max_k,
                           match_scratch *m) {
    if (has_full(bm)) {
        int64_t k = walk_chain(bm, &bm->full, tokens, max_k, m, m->full);
        return has_swa(bm) ? limit_by_sliding(bm, k, m) : k;
    }
    if (has_swa(bm)) return walk_chain(bm, &bm->swa, tokens, max_k, m, m->swa);
    return 0;
}

int64_t bm_match_prefix(block_manager *bm, bm_seq *seq, const int32_t *tokens, int64_t n_tokens) {
    if (bm->n_ranks > 1) return bm_match_prefix(of(bm, seq), seq, tokens, n_tokens);
    if (seq->num_tokens || seq->n_full || seq->n_swa)
        return err_set("bm_match_prefix: the sequence already has %lld tokens",
                       (long long)seq->num_tokens);
    if (!bm->opt.prefix_caching || n_tokens <= 0) return 0;
    bm->queries += (uint64_t)n_tokens;
    /* The last prompt token is always computed: its logits give the first sampled token. */
    int64_t max_k = (n_tokens - 1) / bm->opt.block_size;
    size_t n = (size_t)max64(max_k, 1);
    match_scratch m = {xmalloc(n * sizeof *m.hash), xmalloc(n * sizeof *m.serial),
                       xmalloc(n * sizeof *m.full), xmalloc(n * sizeof *m.swa)};
    int64_t k = find_prefix(bm, tokens, max_k, &m);
    if (k > 0) attach(bm, seq, k, &m);
    free(m.hash);
    free(m.serial);
    free(m.full);
    free(m.swa);
    bm->hits += (uint64_t)(k * bm->opt.block_size);
    return k * bm->opt.block_size;
}

/* ---- growth and sliding-window recycling ---- */

/* What bm_grow would do; bm_can_grow and bm_grow share it so that they cannot disagree. */
typedef struct {
    int64_t full_need; /* full blocks to allocate */
    int64_t swa_first; /* the sliding table's first logical block afterwards */
    int64_t swa_drop;  /* sliding entries given back from the front of the table */
    int64_t swa_freed; /* of those, blocks no other sequence holds: allocatable again at once */
    int64_t swa_need;  /* sliding blocks to allocate at the end of the table */
} grow_plan;

static grow_plan plan_grow(const block_manager *bm, const bm_seq *seq, int64_t new_num_tokens,
                           int64_t first_query_pos) {
    grow_plan g = {0};
    int64_t hi = blocks_for(bm, max64(seq->num_tokens, new_num_tokens));
    if (has_full(bm)) g.full_need = max64(0, hi - seq->n_full);
    if (!has_swa(bm)) return g;
    int64_t end = (int64_t)seq->swa_first + seq->n_swa;
    /* Never past the table's new end (a first_query_pos beyond the tokens would ask for that). */
    g.swa_first = max64(seq->swa_first, min64(swa_keep_from(bm, first_query_pos), hi));
    g.swa_drop = min64(g.swa_first, end) - seq->swa_first;
    for (int64_t j = 0; j < g.swa_drop; j++) g.swa_freed += bm->swa.ref[seq->swa[j]] == 1;
    g.swa_need = max64(0, hi - max64(g.swa_first, end));
    return g;
}

static bool plan_fits(const block_manager *bm, const grow_plan *g) {
    return g->full_need <= bm_pool_available(&bm->full) &&
           g->swa_need <= bm_pool_available(&bm->swa) + g->swa_freed;
}

bool bm_can_grow(const block_manager *bm, const bm_seq *seq, int64_t new_num_tokens,
                 int64_t first_query_pos) {
    bm = of_c(bm, seq);
    grow_plan g = plan_grow(bm, seq, new_num_tokens, first_query_pos);
    return plan_fits(bm, &g);
}

/* Gives back the sliding blocks that slid out of the window, oldest first (so that, when cached,
 * they are also the first to be evicted). */
static void drop_swa_front(block_manager *bm, bm_seq *seq, const grow_plan *g) {
    seq->swa_first = (int)g->swa_first;
    if (g->swa_drop == 0) return; /* the table may still be NULL */
    for (int64_t j = 0; j < g->swa_drop; j++) bm_pool_release(&bm->swa, seq->swa[j]);
    seq->n_swa -= (int)g->swa_drop;
    memmove(seq->swa, seq->swa + g->swa_drop, (size_t)seq->n_swa * sizeof *seq->swa);
}

static void append_blocks(bm_pool *p, int32_t **table, int *n, int *cap, int64_t need) {
    reserve_i32(table, cap, *n + need);
    for (int64_t j = 0; j < need; j++) (*table)[(*n)++] = bm_pool_alloc(p); /* plan_fits: >= 0 */
}

int bm_grow(block_manager *bm, bm_seq *seq, int64_t new_num_tokens, int64_t first_query_pos) {
    bm = of(bm, seq);
    grow_plan g = plan_grow(bm, seq, new_num_tokens, first_query_pos);
    if (!plan_fits(bm, &g))
        return err_set("out of KV blocks: need %lld full and %lld sliding, %d and %d available",
                       (long long)g.full_need, (long long)g.swa_need, bm_pool_available(&bm->full),
                       bm_pool_available(&bm->swa) + (int)g.swa_freed);
    if (has_swa(bm)) {
        drop_swa_front(bm, seq, &g);
        append_blocks(&bm->swa, &seq->swa, &seq->n_swa, &seq->cap_swa, g.swa_need);
    }
    append_blocks(&bm->full, &seq->full, &seq->n_full, &seq->cap_full, g.full_need);
    seq->num_tokens = max64(seq->num_tokens, new_num_tokens);
    return 0;
}

/* ---- commit ---- */

/* The identity of the prefix (parent, tokens): the serial of a block already published with exactly
 * that content in either pool, or a new one. */
static uint64_t prefix_identity(block_manager *bm, uint64_t hash, uint64_t parent,
                                const int32_t *tokens) {
    const bm_pool *pools[2] = {&bm->full, &bm->swa};
    for (int i = 0; i < 2; i++) {
        int32_t b = bm_pool_find(pools[i], hash);
        if (b >= 0 && pools[i]->parent[b] == parent && bm_pool_same_tokens(pools[i], b, tokens))
            return pools[i]->serial[b];
    }
    return bm->next_serial++;
}

static void commit_block(block_manager *bm, bm_seq *seq, int64_t j, const int32_t *t) {
    uint64_t prev_hash = j ? seq->hashes[j - 1] : CHAIN_SEED;
    uint64_t h = chain_hash(bm, prev_hash, t);
    uint64_t parent = seq->last_serial;
    uint64_t serial = prefix_identity(bm, h, parent, t);
    if (has_full(bm)) bm_pool_publish(&bm->full, seq->full[j], h, serial, parent, t);
    /* A sliding block may already have slid out (and been given back uncommitted) when the engine
     * grew the next step before committing this one: then only the full block is published. */
    int64_t s = j - seq->swa_first;
    if (has_swa(bm) && s >= 0 && s < seq->n_swa)
        bm_pool_publish(&bm->swa, seq->swa[s], h, serial, parent, t);
    reserve_u64(&seq->hashes, &seq->cap_hashes, j + 1);
    seq->hashes[j] = h;
    seq->n_committed = (int)(j + 1);
    seq->last_serial = serial;
}

void bm_commit(block_manager *bm, bm_seq *seq, const int32_t *tokens, int64_t num_computed) {
    bm = of(bm, seq);
    if (!bm->opt.prefix_caching) return;
    int64_t complete = min64(num_computed, seq->num_tokens) / bm->opt.block_size;
    for (int64_t j = seq->n_committed; j < complete; j++)
        commit_block(bm, seq, j, tokens + j * bm->opt.block_size);
}

/* ---- release ---- */

void bm_free(block_manager *bm, bm_seq *seq) {
    bm = of(bm, seq);
    /* Last block first: the LRU list then evicts a prefix's tail before its head, so the part other
     * prompts are likeliest to share stays cached longest. */
    for (int j = seq->n_full - 1; j >= 0; j--) bm_pool_release(&bm->full, seq->full[j]);
    for (int j = seq->n_swa - 1; j >= 0; j--) bm_pool_release(&bm->swa, seq->swa[j]);
    free(seq->full);
    free(seq->swa);
    free(seq->hashes);
    memset(seq, 0, sizeof *seq);
}

/* ---- statistics ---- */

double bm_usage(const block_manager *bm) {
    int total = bm->full.n + bm->swa.n;
    int used = bm_pool_referenced(&bm->full) + bm_pool_referenced(&bm->swa);
    for (int r = 0; r < bm->n_ranks; r++) { /* DEP: every rank's pools together */
        const block_manager *k = bm->rank[r];
        total += k->full.n + k->swa.n;
        used += bm_pool_referenced(&k->full) + bm_pool_referenced(&k->swa);
    }
    if (total == 0) return 0;
    return (double)used / total;
}

bm_stats bm_get_stats(const block_manager *bm) {
    bm_stats s = {0};
    s.prefix_queries_tokens = bm->queries;
    s.prefix_hits_tokens = bm->hits;
    s.free_full = bm_pool_available(&bm->full);
    s.free_swa = bm_pool_available(&bm->swa);
    s.cached_full = bm->full.n_lru;
    s.cached_swa = bm->swa.n_lru;
    s.evictions = bm->full.evictions + bm->swa.evictions;
    for (int r = 0; r < bm->n_ranks; r++) { /* DEP: the ranks added up */
        const bm_stats k = bm_get_stats(bm->rank[r]);
        s.prefix_queries_tokens += k.prefix_queries_tokens;
        s.prefix_hits_tokens += k.prefix_hits_tokens;
        s.free_full += k.free_full, s.free_swa += k.free_swa;
        s.cached_full += k.cached_full, s.cached_swa += k.cached_swa;
        s.evictions += k.evictions;
    }
    return s;
}

/* ---- invariants ---- */

/* One table's shape and entries; counts its references into refs. Blocks past the committed ones
 * are being written by this sequence alone, so they must be unshared and unpublished. */
static int check_table(const bm_pool *p, const int32_t *table, int n, int64_t first,
                       const bm_seq *seq, int32_t *refs, const char *name) {
    for (int i = 0; i < n; i++) {
        int32_t b = table[i];
        int64_t j = first + i;
        if (b < 0 || b >= p->n) return err_set("%s table: entry %lld is %d", name, (long long)j, b);
        refs[b]++;
        if (j >= seq->n_committed && (p->ref[b] != 1 || p->cached[b]))
            return err_set("%s table: uncommitted block %lld (%d) has ref %d, cached %d", name,
                           (long long)j, b, p->ref[b], p->cached[b]);
        if (j < seq->n_committed && p->cached[b] && p->hash[b] != seq->hashes[j])
            return err_set("%s table: block %lld (%d) is cached under another hash", name,
                           (long long)j, b);
    }
    return 0;
}

static int check_seq(const block_manager *bm, const bm_seq *seq, int32_t *full_refs,
                     int32_t *swa_refs) {
    int64_t hi = blocks_for(bm, seq->num_tokens);
    int64_t want_full = has_full(bm) ? hi : 0;
    if (seq->n_full != want_full)
        return err_set("full table has %d blocks for %lld tokens", seq->n_full,
                       (long long)seq->num_tokens);
    bool swa_ok = has_swa(bm) ? seq->swa_first >= 0 && (int64_t)seq->swa_first + seq->n_swa == hi
                              : seq->swa_first == 0 && seq->n_swa == 0;
    if (!swa_ok)
        return err_set("sliding table covers blocks [%d, %d) for %lld tokens", seq->swa_first,
                       seq->swa_first + seq->n_swa, (long long)seq->num_tokens);
    if (seq->n_committed < 0 || seq->n_committed > seq->num_tokens / bm->opt.block_size)
        return err_set("%d blocks committed of %lld tokens", seq->n_committed,
                       (long long)seq->num_tokens);
    if (check_table(&bm->full, seq->full, seq->n_full, 0, seq, full_refs, "full")) return -1;
    return check_table(&bm->swa, seq->swa, seq->n_swa, seq->swa_first, seq, swa_refs, "sliding");
}

int bm_check(const block_manager *bm, const bm_seq *const *seqs, int n_seqs) {
    if (bm->n_ranks > 1) { /* DEP: each rank's books against its sequences */
        const bm_seq **mine = xmalloc((size_t)(n_seqs > 0 ? n_seqs : 1) * sizeof *mine);
        int rc = 0;
        for (int r = 0; r < bm->n_ranks && rc == 0; r++) {
            int n = 0;
            for (int i = 0; i < n_seqs; i++)
                if (seqs[i]->rank == r) mine[n++] = seqs[i];
            if (bm_check(bm->rank[r], mine, n)) rc = err_prefix("rank %d", r);
        }
        for (int i = 0; i < n_seqs && rc == 0; i++)
            if (seqs[i]->rank < 0 || seqs[i]->rank >= bm->n_ranks)
                rc = err_set("sequence %d: rank %d of %d", i, seqs[i]->rank, bm->n_ranks);
        free(mine);
        return rc;
    }
    int32_t *full_refs = xcalloc((size_t)bm->full.n, sizeof *full_refs);
    int32_t *swa_refs = xcalloc((size_t)bm->swa.n, sizeof *swa_refs);
    int rc = 0;
    for (int i = 0; i < n_seqs && rc == 0; i++)
        if (check_seq(bm, seqs[i], full_refs, swa_refs)) rc = err_prefix("sequence %d", i);
    if (rc == 0) rc = bm_pool_check(&bm->full, full_refs, "full");
    if (rc == 0) rc = bm_pool_check(&bm->swa, swa_refs, "sliding");
    free(full_refs);
    free(swa_refs);
    return rc;
}
