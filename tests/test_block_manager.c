/* The paged KV block manager: growth, sliding-window recycling, prefix caching (sharing, limits set
 * by the sliding pool, LRU eviction, hash collisions), exhaustion, and a randomized run that checks
 * every invariant after every operation against a shadow of what each physical block holds. */
#include "check.h"

#include "base/error.h"
#include "base/rng.h"
#include "base/vec.h"
#include "engine/block_manager.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

/* ---- helpers ---- */

static block_manager *make_bm(int bs, int n_full, int n_swa, int window, bool caching) {
    bm_options o = {.block_size = bs,
                    .num_full_blocks = n_full,
                    .num_swa_blocks = n_swa,
                    .window = window,
                    .prefix_caching = caching};
    block_manager *bm = bm_create(&o);
    CHECK(bm != NULL, "bm_create: %s", err_msg());
    return bm;
}

static void expect_ok(const block_manager *bm, const bm_seq *const *seqs, int n,
                      const char *where) {
    int rc = bm_check(bm, seqs, n);
    CHECK(rc == 0, "%s: bm_check: %s", where, err_msg());
}

static void check1(const block_manager *bm, const bm_seq *a, const char *where) {
    const bm_seq *s[] = {a};
    expect_ok(bm, s, 1, where);
}

static void check2(const block_manager *bm, const bm_seq *a, const bm_seq *b, const char *where) {
    const bm_seq *s[] = {a, b};
    expect_ok(bm, s, 2, where);
}

/* Token ids: a distinct run per `salt`, so prompts with different salts share nothing. */
static void fill_tokens(int32_t *t, int n, int salt) {
    for (int i = 0; i < n; i++) t[i] = salt * 100000 + i;
}

/* Prefill n tokens in chunks (0: one chunk), committing after each; 0 or -1. */
static int prefill(block_manager *bm, bm_seq *s, const int32_t *t, int64_t n, int64_t chunk) {
    while (s->num_tokens < n) {
        int64_t start = s->num_tokens, end = chunk ? start + chunk : n;
        if (end > n) end = n;
        if (bm_grow(bm, s, end, start)) return -1;
        bm_commit(bm, s, t, end);
    }
    return 0;
}

static bool all_distinct(const int32_t *a, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (a[i] == a[j]) return false;
    return true;
}

/* ---- options ---- */

static void test_options(void) {
    bm_options o = {.block_size = 0, .num_full_blocks = 4};
    CHECK(bm_create(&o) == NULL, "block_size 0 accepted");
    CHECK_MSG_HAS(err_msg(), "block_size");
    o = (bm_options){.block_size = 16, .num_swa_blocks = 4, .window = 0};
    CHECK(bm_create(&o) == NULL, "sliding pool without a window accepted");
    CHECK_MSG_HAS(err_msg(), "window");
    o = (bm_options){.block_size = 16, .num_full_blocks = -1};
    CHECK(bm_create(&o) == NULL, "negative pool accepted");
    o = (bm_options){.block_size = 16, .prefix_caching = true};
    block_manager *bm = bm_create(&o);
    CHECK(bm != NULL && bm_usage(bm) == 0, "empty pools: %s", err_msg());
    int32_t t[40];
    fill_tokens(t, 40, 0);
    bm_seq s = {0};
    CHECK(bm_match_prefix(bm, &s, t, 40) == 0 && bm_grow(bm, &s, 40, 0) == 0, "no pools");
    bm_commit(bm, &s, t, 40);
    CHECK(s.n_full == 0 && s.n_swa == 0 && s.num_tokens == 40, "no pools: tables stay empty");
    check1(bm, &s, "no pools");
    bm_free(bm, &s);
    bm_destroy(bm);
    bm_destroy(NULL);
}

/* ---- growth and freeing ---- */

static void test_grow_and_free(void) {
    block_manager *bm = make_bm(16, 64, 16, 128, false);
    CHECK(bm_block_size(bm) == 16, "block size");
    bm_seq a = {0}, b = {0};
    CHECK(bm_can_grow(bm, &a, 100, 0), "can grow");
    CHECK(bm_grow(bm, &a, 100, 0) == 0, "grow: %s", err_msg());
    CHECK(a.num_tokens == 100 && a.n_full == 7 && a.n_swa == 7 && a.swa_first == 0,
          "100 tokens: %lld tokens, %d full, %d sliding from %d", (long long)a.num_tokens, a.n_full,
          a.n_swa, a.swa_first);
    CHECK_NEAR(bm_usage(bm), 14.0 / 80.0, 1e-12, "usage");
    CHECK(bm_grow(bm, &a, 101, 100) == 0 && a.n_full == 7, "a token inside the last block");
    CHECK(bm_grow(bm, &a, 113, 112) == 0 && a.n_full == 8 && a.n_swa == 8, "next block");
    CHECK(bm_grow(bm, &a, 50, 112) == 0 && a.num_tokens == 113 && a.n_full == 8, "never shrinks");
    CHECK(bm_grow(bm, &b, 40, 0) == 0 && b.n_full == 3, "second sequence");
    int32_t all[11];
    memcpy(all, a.full, 8 * sizeof *all);
    memcpy(all + 8, b.full, 3 * sizeof *all);
    CHECK(all_distinct(all, 11), "full blocks shared without prefix caching");
    check2(bm, &a, &b, "two sequences");
    bm_stats st = bm_get_stats(bm);
    CHECK(st.free_full == 64 - 11 && st.free_swa == 16 - 11, "free %d %d", st.free_full,
          st.free_swa);
    CHECK(bm_match_prefix(bm, &b, all, 11) == -1, "match into a non-empty sequence");
    bm_free(bm, &a);
    CHECK(a.full == NULL && a.n_full == 0 && a.num_tokens == 0, "freed sequence is empty");
    bm_free(bm, &b);
    check1(bm, &a, "all freed");
    st = bm_get_stats(bm);
    CHECK(st.free_full == 64 && st.free_swa == 16 && bm_usage(bm) == 0, "all blocks back");
    int32_t t[64];
    fill_tokens(t, 64, 1);
    CHECK(bm_match_prefix(bm, &a, t, 64) == 0, "no prefix caching: no hits");
    bm_destroy(bm);
}

/* ---- sliding-window recycling ---- */

/* The sliding table must cover every key the step's queries see, and hold nothing older. */
static void check_window(const bm_seq *s, int64_t fqp, int bs, int window, const char *what) {
    int64_t first_key = fqp - window + 1 > 0 ? fqp - window + 1 : 0;
    CHECK(s->swa_first == first_key / bs, "%s at %lld: sliding table starts at block %d, want %lld",
          what, (long long)fqp, s->swa_first, (long long)(first_key / bs));
    CHECK((int64_t)s->swa_first + s->n_swa == (s->num_tokens + bs - 1) / bs,
          "%s at %lld: sliding table ends early", what, (long long)fqp);
}

static void test_sliding_decode(void) {
    enum { BS = 16, W = 128, N = 4096 };
    block_manager *bm = make_bm(BS, N / BS + 1, 12, W, true);
    static int32_t t[N];
    fill_tokens(t, N, 2);
    bm_seq s = {0};
    int most = 0;
    for (int p = 0; p < N; p++) {
        if (bm_grow(bm, &s, p + 1, p)) {
            CHECK(0, "decode at %d: %s", p, err_msg());
            break;
        }
        check_window(&s, p, BS, W, "decode");
        if (s.n_swa > most) most = s.n_swa;
        bm_commit(bm, &s, t, p + 1);
        if (p % 64 == 0 || p == N - 1) check1(bm, &s, "decode");
    }
    CHECK(most <= W / BS + 1, "decode held %d sliding blocks", most);
    CHECK(s.n_full == N / BS && s.n_committed == N / BS, "full table %d, committed %d", s.n_full,
          s.n_committed);
    bm_free(bm, &s);
    check1(bm, &s, "freed");
    bm_destroy(bm);
}

/* Chunked prefill: a chunk's queries reach back a window before the chunk, so the table holds more
 * while the chunk is in flight; decode then brings it back. The pool is exactly as large as the
 * worst chunk needs, which only works if blocks given back by a grow count for that same grow. */
static void test_chunked_prefill(void) {
    enum { BS = 16, W = 128, N = 4096, CHUNK = 512 };
    int worst = CHUNK / BS + (W - 1 + BS - 1) / BS; /* 40 */
    static int32_t t[N + 8];
    fill_tokens(t, N + 8, 3);
    for (int pool = worst - 1; pool <= worst; pool++) {
        block_manager *bm = make_bm(BS, N / BS + 2, pool, W, true);
        bm_seq s = {0};
        int most = 0;
        bool failed = false;
        for (int64_t c = 0; c < N && !failed; c += CHUNK) {
            bool can = bm_can_grow(bm, &s, c + CHUNK, c);
            int rc = bm_grow(bm, &s, c + CHUNK, c);
            CHECK(can == (rc == 0), "can_grow %d but grow %d at %lld", can, rc, (long long)c);
            failed = rc != 0;
            if (failed) break;
            check_window(&s, c, BS, W, "chunk");
            if (s.n_swa > most) most = s.n_swa;
            bm_commit(bm, &s, t, c + CHUNK);
            check1(bm, &s, "chunk");
        }
        if (pool < worst) {
            CHECK(failed && s.num_tokens == CHUNK, "pool of %d: failed %d at %lld tokens", pool,
                  failed, (long long)s.num_tokens);
        } else {
            CHECK(!failed && most == worst, "pool of %d: failed %d, most %d", pool, failed, most);
            for (int64_t p = N; p < N + 4; p++) {
                CHECK(bm_grow(bm, &s, p + 1, p) == 0, "decode after prefill: %s", err_msg());
                CHECK(s.n_swa <= W / BS + 1, "decode after prefill holds %d", s.n_swa);
            }
            CHECK(bm_get_stats(bm).free_swa == pool - s.n_swa, "recycled blocks are free again");
        }
        bm_free(bm, &s);
        check1(bm, &s, "freed");
        bm_destroy(bm);
    }
}

/* ---- prefix caching ---- */

static void test_prefix_sharing(void) {
    enum { BS = 16 };
    block_manager *bm = make_bm(BS, 64, 64, 128, true);
    int32_t pa[53], pb[55];
    fill_tokens(pa, 53, 4);
    memcpy(pb, pa, 48 * sizeof *pb);
    fill_tokens(pb + 48, 7, 5);
    bm_seq a = {0}, b = {0}, c = {0};
    CHECK(bm_match_prefix(bm, &a, pa, 53) == 0, "empty cache");
    CHECK(prefill(bm, &a, pa, 53, 0) == 0, "prefill a: %s", err_msg());
    CHECK(a.n_committed == 3, "a committed %d blocks", a.n_committed);
    CHECK(bm_match_prefix(bm, &b, pb, 55) == 48, "b's 3-block prefix");
    CHECK(b.num_tokens == 48 && b.n_full == 3 && b.n_swa == 3 && b.swa_first == 0 &&
              b.n_committed == 3,
          "b after the hit: %lld tokens, %d full, %d sliding", (long long)b.num_tokens, b.n_full,
          b.n_swa);
    for (int j = 0; j < 3; j++) {
        CHECK(a.full[j] == b.full[j] && a.swa[j] == b.swa[j], "block %d not shared", j);
        CHECK(a.hashes[j] == b.hashes[j], "hash %d differs", j);
    }
    check2(bm, &a, &b, "shared");
    const bm_seq *only_a[] = {&a};
    CHECK(bm_check(bm, only_a, 1) == -1, "bm_check missed the references of a sequence left out");
    CHECK_MSG_HAS(err_msg(), "table references");
    CHECK(bm_grow(bm, &b, 55, 48) == 0 && b.full[3] != a.full[3] && b.swa[3] != a.swa[3],
          "b's own block 3");
    bm_commit(bm, &b, pb, 55);
    check2(bm, &a, &b, "b grown");
    bm_stats st = bm_get_stats(bm);
    CHECK(st.prefix_queries_tokens == 53 + 55 && st.prefix_hits_tokens == 48,
          "queries %llu hits %llu", (unsigned long long)st.prefix_queries_tokens,
          (unsigned long long)st.prefix_hits_tokens);

    /* A prompt of exactly 3 blocks: its last token is computed, so only 2 blocks hit. */
    CHECK(bm_match_prefix(bm, &c, pa, 48) == 32, "exact multiple of block_size");
    CHECK(c.full[0] == a.full[0] && c.full[1] == a.full[1], "c shares a's blocks");
    bm_free(bm, &c);
    /* One token more and the whole 3 blocks hit; a's 4th block was never complete. */
    CHECK(bm_match_prefix(bm, &c, pa, 53) == 48, "a's own prompt");
    bm_free(bm, &c);

    /* Freed, the blocks wait in the LRU list and still hit. */
    bm_free(bm, &a);
    bm_free(bm, &b);
    check1(bm, &a, "freed");
    st = bm_get_stats(bm);
    CHECK(st.cached_full == 3 && st.cached_swa == 3 && st.free_full == 64, "cached %d/%d, free %d",
          st.cached_full, st.cached_swa, st.free_full);
    CHECK(bm_match_prefix(bm, &c, pb, 55) == 48, "hit from the LRU list");
    CHECK(bm_get_stats(bm).cached_full == 0, "attached blocks left the LRU list");
    check1(bm, &c, "hit from LRU");
    bm_free(bm, &c);
    bm_destroy(bm);
}

/* Identical block contents at different positions, or under different prefixes, are different
 * prefixes: only the chain decides. */
static void test_prefix_is_a_chain(void) {
    enum { BS = 4 };
    block_manager *bm = make_bm(BS, 32, 32, 8, true);
    int32_t x[9] = {7, 7, 7, 7, 7, 7, 7, 7, 1}, y[9] = {8, 8, 8, 8, 7, 7, 7, 7, 1};
    bm_seq a = {0}, b = {0};
    CHECK(prefill(bm, &a, x, 9, 0) == 0, "prefill");
    CHECK(a.full[0] != a.full[1] && a.hashes[0] != a.hashes[1], "repeated block");
    CHECK(bm_match_prefix(bm, &b, y, 9) == 0, "same second block under another first");
    bm_free(bm, &b);
    int32_t z[13] = {7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 1};
    CHECK(bm_match_prefix(bm, &b, z, 13) == 8, "a third repeat is not the second");
    bm_free(bm, &b);
    bm_free(bm, &a);
    bm_destroy(bm);
}

/* A hit needs the sliding blocks that the first new query's window reaches. */
static void test_hits_need_sliding_blocks(void) {
    enum { BS = 16, W = 32, N = 161 };
    block_manager *bm = make_bm(BS, 128, 64, W, true);
    int32_t t[N], z[56 * BS];
    fill_tokens(t, N, 6);
    fill_tokens(z, 56 * BS, 7);
    bm_seq a = {0}, b = {0};
    CHECK(prefill(bm, &a, t, N, 0) == 0, "prefill");
    bm_free(bm, &a);
    /* 54 sliding blocks are free (53 never used, a's uncommitted last one): taking 56 evicts the
     * two least recently released, a's blocks 9 and 8 (a was freed last block first). */
    CHECK(prefill(bm, &b, z, 56 * BS, 0) == 0, "evicting prefill");
    bm_stats st = bm_get_stats(bm);
    CHECK(st.evictions == 2 && st.cached_full == 10 && st.cached_swa == 8,
          "evictions %llu, cached %d/%d", (unsigned long long)st.evictions, st.cached_full,
          st.cached_swa);
    /* Full blocks 0-9 are all cached, but 160 tokens need sliding blocks 8-9 and 144 need 7-8;
     * 128 tokens need 6-7, which are there. */
    CHECK(bm_match_prefix(bm, &a, t, N) == 128, "hit limited by sliding blocks");
    CHECK(a.n_full == 8 && a.swa_first == 6 && a.n_swa == 2, "tables %d full, sliding [%d, +%d)",
          a.n_full, a.swa_first, a.n_swa);
    check2(bm, &a, &b, "limited hit");
    CHECK(bm_grow(bm, &a, N, 128) == 0, "grow after limited hit: %s", err_msg());
    check_window(&a, 128, BS, W, "after limited hit");
    bm_free(bm, &a);
    bm_free(bm, &b);
    bm_destroy(bm);
}

/* Decode recycles sliding blocks after committing them; while cached they still serve hits. */
static void test_hits_after_decode(void) {
    enum { BS = 16, W = 32, N = 200 };
    int32_t t[N + 1];
    fill_tokens(t, N + 1, 8);
    for (int only_swa = 0; only_swa <= 1; only_swa++) {
        block_manager *bm = make_bm(BS, only_swa ? 0 : 64, 16, W, true);
        bm_seq a = {0}, z = {0};
        for (int p = 0; p < N; p++) {
            CHECK(bm_grow(bm, &a, p + 1, p) == 0, "decode: %s", err_msg());
            bm_commit(bm, &a, t, p + 1);
        }
        CHECK(a.n_swa <= 3 && a.n_full == (only_swa ? 0 : 13), "tables %d / %d", a.n_swa, a.n_full);
        bm_free(bm, &a);
        CHECK(bm_match_prefix(bm, &a, t, N + 1) == 192, "hit after decode (only sliding %d)",
              only_swa);
        CHECK(a.swa_first == 10 && a.n_swa == 2 && a.n_full == (only_swa ? 0 : 12),
              "tables after the hit: sliding [%d, +%d), %d full", a.swa_first, a.n_swa, a.n_full);
        check1(bm, &a, "hit after decode");
        bm_free(bm, &a);
        /* Take one block more than the free ones: the least recently released sliding block goes,
         * block 0, which recycling gave back first. With sliding layers only, that block was the
         * only proof of what the prefix before the window is, so the hit is lost; with full layers
         * the full chain proves it and the hit stays. */
        int free_now = bm_get_stats(bm).free_swa - bm_get_stats(bm).cached_swa;
        int32_t zt[16 * BS];
        fill_tokens(zt, 16 * BS, 9);
        CHECK(prefill(bm, &z, zt, (free_now + 1) * BS, 0) == 0, "evict: %s", err_msg());
        bm_free(bm, &z);
        CHECK(bm_match_prefix(bm, &a, t, N + 1) == (only_swa ? 0 : 192),
              "after evicting block 0 (only sliding %d)", only_swa);
        check1(bm, &a, "after eviction");
        bm_free(bm, &a);
        bm_destroy(bm);
    }
}

static void test_lru_eviction(void) {
    enum { BS = 4 };
    block_manager *bm = make_bm(BS, 8, 8, 8, true);
    int32_t pa[17], pz[32];
    fill_tokens(pa, 17, 10);
    fill_tokens(pz, 32, 11);
    bm_seq a = {0}, z = {0}, c = {0}, d = {0};
    CHECK(prefill(bm, &a, pa, 17, 0) == 0, "prefill a");
    int32_t a_full[5];
    memcpy(a_full, a.full, sizeof a_full);
    bm_free(bm, &a);
    bm_stats st = bm_get_stats(bm);
    CHECK(st.cached_full == 4 && st.free_full == 8, "cached %d free %d", st.cached_full,
          st.free_full);

    /* 4 free blocks + 1: evicts a's block 3, the tail of its prefix, first. */
    CHECK(prefill(bm, &z, pz, 20, 0) == 0, "z takes 5 blocks: %s", err_msg());
    CHECK(bm_get_stats(bm).evictions == 2, "one eviction per pool");
    bool reused = false;
    for (int j = 0; j < z.n_full; j++) reused |= z.full[j] == a_full[3];
    CHECK(reused, "a's block 3 reused by z");
    CHECK(bm_match_prefix(bm, &c, pa, 17) == 12, "a's first 3 blocks still hit");
    check2(bm, &z, &c, "partial eviction");
    bm_free(bm, &c);

    /* z takes everything: a's blocks are all reused, and a's prompt no longer hits. */
    CHECK(prefill(bm, &z, pz, 32, 0) == 0, "z takes all blocks: %s", err_msg());
    CHECK(bm_get_stats(bm).cached_full == 0 && bm_get_stats(bm).free_full == 0,
          "full pool taken by z");
    bm_free(bm, &z);
    CHECK(bm_match_prefix(bm, &c, pa, 17) == 0, "evicted prefix still hits");

    /* Computed again, the prefix is cached again and shared again. */
    CHECK(prefill(bm, &c, pa, 17, 0) == 0, "recompute a's prompt: %s", err_msg());
    CHECK(bm_match_prefix(bm, &d, pa, 17) == 16, "hit after recomputation");
    for (int j = 0; j < 4; j++) CHECK(c.full[j] == d.full[j], "block %d not shared", j);
    check2(bm, &c, &d, "after recomputation");
    /* z's prompt: its cached blocks were the LRU victims of c's prefill; whatever is left of it
     * must be z's own prefix. */
    bm_seq e = {0};
    int64_t hit = bm_match_prefix(bm, &e, pz, 32);
    for (int64_t j = 0; j < hit / BS; j++)
        for (int k = 0; k < 4; k++) CHECK(e.full[j] != c.full[k], "z's hit shares a's blocks");
    bm_free(bm, &e);
    bm_free(bm, &c);
    bm_free(bm, &d);
    bm_destroy(bm);
}

/* Every chain hash forced equal: only the token and identity comparisons keep hits right. */
static void test_hash_collisions(void) {
    enum { BS = 4 };
    bm_options o = {.block_size = BS,
                    .num_full_blocks = 32,
                    .num_swa_blocks = 32,
                    .window = 8,
                    .prefix_caching = true,
                    .test_hash_clear = ~0ull};
    block_manager *bm = bm_create(&o);
    int32_t p[5], q[5], r[9];
    fill_tokens(p, 5, 12);
    fill_tokens(q, 5, 13);
    fill_tokens(r, 9, 14);
    bm_seq a = {0}, b = {0};
    CHECK(prefill(bm, &a, p, 5, 0) == 0, "prefill p");
    CHECK(a.hashes[0] == 0, "hash not forced");
    CHECK(bm_match_prefix(bm, &b, q, 5) == 0, "q hit p's block through a collision");
    check2(bm, &a, &b, "after q");
    bm_free(bm, &b);
    CHECK(bm_match_prefix(bm, &b, p, 5) == 4, "p misses its own block");
    bm_free(bm, &b);
    /* r's two blocks share one hash: the second replaces the first, and neither hits r's prefix
     * wrongly (block 1's parent is block 0, not "no prefix"). */
    CHECK(prefill(bm, &b, r, 9, 0) == 0, "prefill r");
    check2(bm, &a, &b, "after r");
    bm_seq c = {0};
    CHECK(bm_match_prefix(bm, &c, p, 5) == 0, "p's entry was replaced, yet it hit");
    CHECK(bm_match_prefix(bm, &c, r, 9) == 0, "r's block 0 is no longer findable, yet it hit");
    int32_t r1[9];
    memcpy(r1, r + 4, 4 * sizeof *r1); /* r's block 1 content as a first block */
    r1[4] = 0;
    CHECK(bm_match_prefix(bm, &c, r1, 5) == 0, "block 1 content matched as block 0");
    check2(bm, &a, &b, "collisions");
    bm_free(bm, &a);
    bm_free(bm, &b);
    bm_destroy(bm);
}

/* The full chain matches, but the sliding entry under that (forced) hash holds another prefix: its
 * own sliding block slid out before it was committed, as when the engine grows the next step before
 * committing this one. The hit must stop there rather than take the other prefix's sliding KV. */
static void test_sliding_entry_of_another_prefix(void) {
    enum { BS = 4 };
    bm_options o = {.block_size = BS,
                    .num_full_blocks = 16,
                    .num_swa_blocks = 16,
                    .window = 8,
                    .prefix_caching = true,
                    .test_hash_clear = ~0ull};
    block_manager *bm = bm_create(&o);
    int32_t p[13], q[5];
    fill_tokens(p, 13, 17);
    fill_tokens(q, 5, 18);
    bm_seq a = {0}, b = {0}, c = {0};
    CHECK(prefill(bm, &a, q, 5, 0) == 0, "prefill q");
    CHECK(bm_grow(bm, &b, 5, 0) == 0 && bm_grow(bm, &b, 13, 12) == 0 && b.swa_first == 1,
          "p's sliding block 0 slides out before its commit");
    bm_commit(bm, &b, p, 4); /* full pool: p's block 0 replaces q's; sliding pool: still q's */
    CHECK(bm_match_prefix(bm, &c, p, 5) == 0, "took q's sliding block for p's");
    check2(bm, &a, &b, "sliding entry of another prefix");
    bm_free(bm, &a);
    bm_free(bm, &b);
    bm_free(bm, &c);
    bm_destroy(bm);
}

/* Two sequences admitted together with one prompt both miss and both compute it. Whichever commits
 * a block first publishes it; the other's copy is a duplicate that takes the same identity, so
 * later blocks chain to the published ones whoever committed them. */
static void test_concurrent_identical_prompts(void) {
    enum { BS = 4 };
    block_manager *bm = make_bm(BS, 32, 32, 8, true);
    int32_t t[13];
    fill_tokens(t, 13, 19);
    bm_seq a = {0}, b = {0}, c = {0};
    CHECK(bm_match_prefix(bm, &a, t, 13) == 0 && bm_match_prefix(bm, &b, t, 13) == 0, "misses");
    CHECK(prefill(bm, &a, t, 13, 0) == 0 && prefill(bm, &b, t, 4, 0) == 0, "a all, b block 0");
    CHECK(a.full[0] != b.full[0], "b computed its own copy");
    bm_free(bm, &b);
    CHECK(bm_match_prefix(bm, &c, t, 13) == 12, "b's copy of block 0 broke a's chain");
    for (int j = 0; j < 3; j++) CHECK(c.full[j] == a.full[j], "block %d is not a's", j);
    check2(bm, &a, &c, "identical prompts");
    bm_free(bm, &a);
    bm_free(bm, &c);
    bm_destroy(bm);
}

/* ---- exhaustion ---- */

/* Field by field (a struct copy need not copy padding); equal pointers mean no reallocation. */
static bool same_seq(const bm_seq *x, const bm_seq *y) {
    return x->full == y->full && x->n_full == y->n_full && x->cap_full == y->cap_full &&
           x->swa == y->swa && x->n_swa == y->n_swa && x->cap_swa == y->cap_swa &&
           x->swa_first == y->swa_first && x->hashes == y->hashes &&
           x->n_committed == y->n_committed && x->cap_hashes == y->cap_hashes &&
           x->num_tokens == y->num_tokens && x->last_serial == y->last_serial;
}

static void test_exhaustion(void) {
    enum { BS = 4 };
    block_manager *bm = make_bm(BS, 8, 4, 100, true);
    bm_seq a = {0}, b = {0};
    CHECK(bm_grow(bm, &a, 16, 0) == 0, "take every sliding block");
    int32_t full_before[4], swa_before[4];
    memcpy(full_before, a.full, sizeof full_before);
    memcpy(swa_before, a.swa, sizeof swa_before);
    bm_seq snap = a;
    CHECK(!bm_can_grow(bm, &a, 17, 16), "can_grow with no sliding block left");
    CHECK(bm_grow(bm, &a, 17, 16) == -1, "grow with no sliding block left");
    CHECK_MSG_HAS(err_msg(), "out of KV blocks");
    CHECK(same_seq(&a, &snap) && !memcmp(full_before, a.full, sizeof full_before) &&
              !memcmp(swa_before, a.swa, sizeof swa_before),
          "failed grow changed the sequence");
    CHECK(bm_get_stats(bm).free_full == 4, "failed grow took full blocks");
    CHECK(!bm_can_grow(bm, &b, 1, 0) && bm_grow(bm, &b, 1, 0) == -1 && b.full == NULL &&
              b.n_full == 0,
          "empty sequence grew");
    CHECK(bm_can_grow(bm, &a, 16, 16), "no new block needed");
    check2(bm, &a, &b, "exhausted");
    bm_free(bm, &a);
    CHECK(bm_grow(bm, &b, 1, 0) == 0, "grow after free");
    bm_free(bm, &b);
    bm_destroy(bm);

    /* Full pool exhausted while the sliding one has room: all or nothing. */
    bm = make_bm(BS, 2, 8, 100, false);
    CHECK(bm_grow(bm, &a, 8, 0) == 0, "take every full block");
    CHECK(!bm_can_grow(bm, &a, 9, 8) && bm_grow(bm, &a, 9, 8) == -1 && a.n_swa == 2,
          "sliding blocks taken by a failed grow");
    CHECK(bm_get_stats(bm).free_swa == 6, "free sliding %d", bm_get_stats(bm).free_swa);
    bm_free(bm, &a);
    bm_destroy(bm);
}

/* Growing needs a block while the pool is empty, but the step's recycling frees one: can_grow
 * counts it, unless another sequence still holds that block. */
static void test_exact_can_grow(void) {
    enum { BS = 4, W = 5 };
    block_manager *bm = make_bm(BS, 64, 2, W, false);
    bm_seq a = {0};
    int boundary_full = 0;
    for (int p = 0; p < 100; p++) {
        if (bm_get_stats(bm).free_swa == 0) boundary_full++;
        CHECK(bm_can_grow(bm, &a, p + 1, p), "can_grow at %d", p);
        CHECK(bm_grow(bm, &a, p + 1, p) == 0, "decode with 2 sliding blocks at %d: %s", p,
              err_msg());
    }
    CHECK(boundary_full > 20, "pool was full before %d steps only", boundary_full);
    bm_free(bm, &a);
    bm_destroy(bm);

    bm = make_bm(BS, 64, 3, W, true);
    int32_t t[16];
    fill_tokens(t, 16, 15);
    bm_seq b = {0};
    CHECK(prefill(bm, &a, t, 9, 0) == 0, "a's prompt takes the 3 sliding blocks");
    CHECK(bm_match_prefix(bm, &b, t, 9) == 8 && b.swa_first == 1 && b.swa[0] == a.swa[1],
          "b shares a's sliding block 1");
    CHECK(bm_grow(bm, &a, 10, 9) == 0 && a.swa_first == 1, "a drops block 0");
    CHECK(bm_grow(bm, &b, 9, 8) == 0 && bm_get_stats(bm).free_swa == 0, "b takes the last block");
    /* a at 12 drops block 1, but b holds it: nothing to allocate from. */
    CHECK(bm_grow(bm, &a, 12, 11) == 0, "a within its block");
    CHECK(!bm_can_grow(bm, &a, 13, 12), "can_grow counted a block another sequence holds");
    bm_seq snap = a;
    CHECK(bm_grow(bm, &a, 13, 12) == -1 && same_seq(&a, &snap), "failed grow changed a");
    check2(bm, &a, &b, "shared drop");
    bm_free(bm, &b);
    CHECK(bm_can_grow(bm, &a, 13, 12) && bm_grow(bm, &a, 13, 12) == 0, "after b is gone");
    check1(bm, &a, "after b is gone");
    bm_free(bm, &a);
    bm_destroy(bm);
}

/* A model with full-attention layers only, or sliding ones only: the missing pool stays unused. */
static void test_single_pool(void) {
    int32_t t[41];
    fill_tokens(t, 41, 16);
    block_manager *bm = make_bm(4, 32, 0, 0, true);
    bm_seq a = {0}, b = {0};
    CHECK(prefill(bm, &a, t, 41, 8) == 0 && a.n_full == 11 && a.n_swa == 0 && a.swa == NULL,
          "full only: %d full, %d sliding", a.n_full, a.n_swa);
    CHECK(bm_match_prefix(bm, &b, t, 41) == 40 && b.n_swa == 0 && b.swa_first == 0,
          "full only hit");
    check2(bm, &a, &b, "full only");
    CHECK_NEAR(bm_usage(bm), 11.0 / 32.0, 1e-12, "usage, full only");
    bm_free(bm, &a);
    bm_free(bm, &b);
    bm_destroy(bm);

    bm = make_bm(4, 0, 8, 6, true);
    CHECK(prefill(bm, &a, t, 41, 1) == 0 && a.n_full == 0 && a.full == NULL && a.n_swa <= 3,
          "sliding only: %d full, %d sliding: %s", a.n_full, a.n_swa, err_msg());
    CHECK(bm_match_prefix(bm, &b, t, 41) == 0, "sliding only: chain recycled and evicted, yet hit");
    check2(bm, &a, &b, "sliding only");
    bm_free(bm, &a);
    bm_free(bm, &b);
    bm_destroy(bm);
}

/* ---- randomized ---- */

enum { R_SLOTS = 6, R_BASES = 4, R_BASE_LEN = 60, R_MAX_LEN = 160 };

typedef struct {
    bool active;
    bm_seq seq;
    ivec tokens; /* prompt, then sampled tokens */
    int64_t prompt_len;
    int64_t computed; /* positions whose KV has been written */
} rseq;

/* What each physical block really holds: the token prefix whose KV was written into it. */
typedef struct {
    ivec *full, *swa;
} shadow;

typedef struct {
    block_manager *bm;
    bm_options opt;
    rng_t rng;
    rseq s[R_SLOTS];
    shadow sh;
    int32_t bases[R_BASES][R_BASE_LEN];
    int n_hits, n_grow_fail, n_ops;
} rworld;

static uint32_t rnd(rworld *w, uint32_t n) {
    return (uint32_t)(rng_next(&w->rng) % n);
}

static int count_refs(const rworld *w, int32_t b, bool swa) {
    int n = 0;
    for (int i = 0; i < R_SLOTS; i++) {
        if (!w->s[i].active) continue;
        const bm_seq *q = &w->s[i].seq;
        const int32_t *tab = swa ? q->swa : q->full;
        int m = swa ? q->n_swa : q->n_full;
        for (int j = 0; j < m; j++) n += tab[j] == b;
    }
    return n;
}

/* The KV of positions [a, b) is written: each block written must be this sequence's alone. */
static void shadow_write(rworld *w, rseq *r, int64_t a, int64_t b) {
    int bs = w->opt.block_size;
    for (int64_t j = a / bs; j <= (b - 1) / bs; j++) {
        size_t end = (size_t)((j + 1) * bs < b ? (j + 1) * bs : b);
        int32_t phys[2] = {-1, -1};
        if (r->seq.n_full) phys[0] = r->seq.full[j];
        if (w->opt.num_swa_blocks) {
            CHECK(j >= r->seq.swa_first && j < r->seq.swa_first + r->seq.n_swa,
                  "written block %lld not in the sliding table", (long long)j);
            phys[1] = r->seq.swa[j - r->seq.swa_first];
        }
        for (int k = 0; k < 2; k++) {
            if (phys[k] < 0) continue;
            CHECK(count_refs(w, phys[k], k) == 1, "writing into a shared block %d", phys[k]);
            ivec *v = k ? &w->sh.swa[phys[k]] : &w->sh.full[phys[k]];
            v->len = 0;
            ivec_reserve(v, end);
            memcpy(v->v, r->tokens.v, end * sizeof *v->v);
            v->len = end;
        }
    }
}

static bool holds_prefix(const ivec *v, const int32_t *t, int64_t end) {
    return v->len == (size_t)end && memcmp(v->v, t, (size_t)end * sizeof *t) == 0;
}

/* Every block a hit attached holds exactly the prompt's prefix up to its end. */
static void verify_hit(rworld *w, rseq *r) {
    int bs = w->opt.block_size;
    const bm_seq *q = &r->seq;
    for (int64_t j = 0; j < q->n_full; j++)
        CHECK(holds_prefix(&w->sh.full[q->full[j]], r->tokens.v, (j + 1) * bs),
              "hit block %lld (full %d) holds another prefix", (long long)j, q->full[j]);
    for (int64_t j = q->swa_first; j < q->swa_first + q->n_swa; j++)
        CHECK(holds_prefix(&w->sh.swa[q->swa[j - q->swa_first]], r->tokens.v, (j + 1) * bs),
              "hit block %lld (sliding %d) holds another prefix", (long long)j,
              q->swa[j - q->swa_first]);
}

static void r_match(rworld *w, rseq *r) {
    int64_t hit = bm_match_prefix(w->bm, &r->seq, r->tokens.v, (int64_t)r->tokens.len);
    CHECK(hit >= 0 && hit % w->opt.block_size == 0 && hit < (int64_t)r->tokens.len &&
              hit == r->seq.num_tokens,
          "hit %lld of %zu tokens", (long long)hit, r->tokens.len);
    if (hit > 0) w->n_hits++;
    verify_hit(w, r);
    r->computed = hit;
}

/* A prompt from one of a few shared prefixes cut anywhere, then a tail from a 3-token vocabulary
 * (so that identical blocks turn up under different prefixes). */
static void r_admit(rworld *w, rseq *r) {
    const int32_t *base = w->bases[rnd(w, R_BASES)];
    uint32_t cut = rnd(w, R_BASE_LEN + 1), tail = 1 + rnd(w, 24);
    r->tokens.len = 0;
    for (uint32_t i = 0; i < cut; i++) ivec_push(&r->tokens, base[i]);
    for (uint32_t i = 0; i < tail; i++) ivec_push(&r->tokens, (int32_t)rnd(w, 3));
    r->prompt_len = (int64_t)r->tokens.len;
    r->active = true;
    r_match(w, r);
}

static void r_step(rworld *w, rseq *r) {
    int bs = w->opt.block_size, win = w->opt.window;
    int64_t fqp = r->computed, n_new = 1;
    if (fqp < r->prompt_len) {
        n_new = 1 + rnd(w, (uint32_t)(3 * bs));
        if (n_new > r->prompt_len - fqp) n_new = r->prompt_len - fqp;
    } else if ((int64_t)r->tokens.len == fqp) {
        ivec_push(&r->tokens, (int32_t)rnd(w, 3)); /* the token sampled by the previous step */
    }
    bm_seq snap = r->seq;
    bool can = bm_can_grow(w->bm, &r->seq, fqp + n_new, fqp);
    int rc = bm_grow(w->bm, &r->seq, fqp + n_new, fqp);
    CHECK(can == (rc == 0), "can_grow %d but grow %d", can, rc);
    if (rc) {
        CHECK(same_seq(&r->seq, &snap), "failed grow changed the sequence");
        w->n_grow_fail++;
        return;
    }
    if (w->opt.num_swa_blocks) {
        int64_t first_key = fqp - win + 1 > 0 ? fqp - win + 1 : 0;
        int64_t want = first_key / bs > snap.swa_first ? first_key / bs : snap.swa_first;
        CHECK(r->seq.swa_first == want, "sliding table from %d, want %lld", r->seq.swa_first,
              (long long)want);
    }
    shadow_write(w, r, fqp, fqp + n_new);
    r->computed = fqp + n_new;
    /* Usually committed at once; sometimes later, after the next grow, as with async scheduling. */
    if (rnd(w, 10) < 7) bm_commit(w->bm, &r->seq, r->tokens.v, r->computed);
}

static void r_op(rworld *w) {
    rseq *r = &w->s[rnd(w, R_SLOTS)];
    if (!r->active) {
        r_admit(w, r);
        return;
    }
    uint32_t op = rnd(w, 20);
    if (op < 13 && (int64_t)r->tokens.len < R_MAX_LEN) {
        r_step(w, r);
    } else if (op < 15) {
        bm_commit(w->bm, &r->seq, r->tokens.v, r->computed);
    } else if (op < 17) { /* preempted: everything so far becomes the new prompt */
        bm_free(w->bm, &r->seq);
        r->prompt_len = (int64_t)r->tokens.len;
        r_match(w, r);
    } else { /* finished or cancelled, maybe committed first */
        if (op == 19) bm_commit(w->bm, &r->seq, r->tokens.v, r->computed);
        bm_free(w->bm, &r->seq);
        r->active = false;
    }
}

static void r_check(rworld *w) {
    const bm_seq *seqs[R_SLOTS];
    int n = 0;
    for (int i = 0; i < R_SLOTS; i++)
        if (w->s[i].active) seqs[n++] = &w->s[i].seq;
    if (bm_check(w->bm, seqs, n)) {
        CHECK(0, "op %d: bm_check: %s", w->n_ops, err_msg());
        return;
    }
    bm_stats st = bm_get_stats(w->bm);
    CHECK(st.prefix_hits_tokens <= st.prefix_queries_tokens, "more hits than queries");
    int total = w->opt.num_full_blocks + w->opt.num_swa_blocks;
    double used = total ? (double)(total - st.free_full - st.free_swa) / total : 0;
    CHECK_NEAR(bm_usage(w->bm), used, 1e-12, "usage");
}

static void random_run(const char *name, bm_options opt, int n_ops, uint64_t seed) {
    rworld w = {0};
    w.opt = opt;
    w.bm = bm_create(&opt);
    rng_seed(&w.rng, seed);
    for (int b = 0; b < R_BASES; b++)
        for (int i = 0; i < R_BASE_LEN; i++) w.bases[b][i] = (int32_t)(rng_next(&w.rng) % 5);
    w.sh.full = calloc((size_t)opt.num_full_blocks + 1, sizeof *w.sh.full);
    w.sh.swa = calloc((size_t)opt.num_swa_blocks + 1, sizeof *w.sh.swa);
    int failures_before = check_failures;
    for (w.n_ops = 0; w.n_ops < n_ops && check_failures == failures_before; w.n_ops++) {
        r_op(&w);
        r_check(&w);
    }
    bm_stats st = bm_get_stats(w.bm);
    fprintf(stderr, "%s: %d ops, %d hits (%llu of %llu tokens), %d failed grows, %llu evictions\n",
            name, w.n_ops, w.n_hits, (unsigned long long)st.prefix_hits_tokens,
            (unsigned long long)st.prefix_queries_tokens, w.n_grow_fail,
            (unsigned long long)st.evictions);
    CHECK(w.n_grow_fail > 0, "%s: never ran out of blocks", name);
    if (opt.prefix_caching && !opt.test_hash_clear) CHECK(w.n_hits > 50, "%s: few hits", name);
    if (opt.prefix_caching) CHECK(st.evictions > 0, "%s: nothing evicted", name);
    for (int i = 0; i < R_SLOTS; i++) {
        bm_free(w.bm, &w.s[i].seq);
        ivec_free(&w.s[i].tokens);
    }
    expect_ok(w.bm, NULL, 0, name);
    CHECK(bm_usage(w.bm) == 0, "%s: blocks left referenced", name);
    for (int b = 0; b <= opt.num_full_blocks; b++) ivec_free(&w.sh.full[b]);
    for (int b = 0; b <= opt.num_swa_blocks; b++) ivec_free(&w.sh.swa[b]);
    free(w.sh.full);
    free(w.sh.swa);
    bm_destroy(w.bm);
}

static void test_random(void) {
    bm_options base = {.block_size = 4,
                       .num_full_blocks = 48,
                       .num_swa_blocks = 20,
                       .window = 10,
                       .prefix_caching = true};
    enum { OPS = 6000 };
    random_run("hybrid", base, OPS, 1);
    bm_options o = base;
    o.test_hash_clear = ~0ull;
    random_run("hybrid, one hash", o, OPS, 2);
    o.test_hash_clear = ~3ull;
    random_run("hybrid, 4 hashes", o, OPS, 3);
    o = base;
    o.num_swa_blocks = 0;
    random_run("full only", o, OPS, 4);
    o = base;
    o.num_full_blocks = 0;
    o.num_swa_blocks = 24;
    random_run("sliding only", o, OPS, 5);
    o.test_hash_clear = ~1ull;
    random_run("sliding only, 2 hashes", o, OPS, 6);
    o = base;
    o.prefix_caching = false;
    random_run("no prefix caching", o, OPS, 7);
    o = base;
    o.block_size = 16;
    o.window = 32;
    o.num_full_blocks = 24;
    o.num_swa_blocks = 12;
    random_run("block 16, window 32", o, OPS, 8);
}

int main(void) {
    test_options();
    test_grow_and_free();
    test_sliding_decode();
    test_chunked_prefill();
    test_prefix_sharing();
    test_prefix_is_a_chain();
    test_hits_need_sliding_blocks();
    test_hits_after_decode();
    test_lru_eviction();
    test_hash_collisions();
    test_sliding_entry_of_another_prefix();
    test_concurrent_identical_prompts();
    test_exhaustion();
    test_exact_can_grow();
    test_single_pool();
    test_random();
    return check_report("test_block_manager");
}
