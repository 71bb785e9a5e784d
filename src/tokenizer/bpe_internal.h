/* Inside the tokenizer: the loaded tables and the helpers the encode, decode and load files share.
 * Nothing outside src/tokenizer/bpe*.c includes this. */
#ifndef GPTOSS_TOKENIZER_BPE_INTERNAL_H
#define GPTOSS_TOKENIZER_BPE_INTERNAL_H

#include "tokenizer/bpe.h"
#include "tokenizer/pretokenize.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

/* o200k_harmony's special ids run up to the embedding size; ids without a name in tokenizer.json
 * are
 * <|reserved_N|> (tiktoken's o200k_harmony definition), and 200013 ... 201087 also answer to
 * <|reserved_N|> even where tokenizer.json names them otherwise (only 200018 = <|endofprompt|>). */
#define O200K_BPE_SIZE             199998
#define O200K_HARMONY_VOCAB        201088
#define O200K_RESERVED_ALIAS_FIRST 200013

/* Pair ranks and ids fit in 21 bits: a pair-table slot packs (left id, right id, merged id) in 63.
 */
#define BPE_ID_BITS 21
#define BPE_MAX_IDS ((1 << BPE_ID_BITS) - 1)
#define BPE_NO_RANK INT32_MAX

/* Byte string → BPE id: open addressing, linear probing. A slot holds the high 32 bits of the
 * string's hash beside the id, so a probe that meets another string rarely touches that string's
 * bytes. */
typedef struct {
    uint64_t *slot; /* (hash >> 32) << 32 | id; BYTES_EMPTY when free */
    uint64_t mask;
} bytes_map;
#define BYTES_EMPTY UINT64_MAX

/* (left id, right id) → id of the token their concatenation spells. Every rank lookup of the merge
 * loop goes through here: tiktoken asks "is bytes(left)+bytes(right) a token, and of what rank?",
 * and since both parts are always tokens themselves, the answer depends on the two ids alone. The
 * table holds every split of every token into two tokens (446,189 pairs for o200k; tokenizer.json's
 * "merges" list is exactly this set, ordered by the merged token's id, see tests/test_tokenizer.c).
 */
typedef struct {
    uint64_t *slot; /* key << BPE_ID_BITS | merged id, key = left << BPE_ID_BITS | right */
    uint64_t mask;
    int shift;
} pair_map;

/* Special token name → id. Names are few (about 1,100); a plain string hash table. */
typedef struct {
    const char *name;
    size_t len;
    int32_t id;
} special_entry;

struct tokenizer {
    int32_t n_bpe;   /* ids [0, n_bpe) are byte strings */
    int32_t n_vocab; /* ids [n_bpe, n_vocab) are special or reserved */
    uint32_t *off;   /* n_vocab + 1 offsets into bytes: token i is bytes[off[i] .. off[i+1]) */
    char *bytes;     /* BPE token bytes, then special names (what a special id decodes to) */
    int32_t byte_id[256];
    bytes_map bpe;
    pair_map pairs;
    special_entry *special; /* hash table, special_mask + 1 entries; name NULL when free */
    size_t special_mask, special_used;
    char *alias_names; /* storage for names that are aliases (not in bytes) */
    pretok re;
};

static inline uint64_t bpe_hash(const void *p, size_t n) {
    return XXH3_64bits(p, n);
}

static inline const char *tok_bytes(const tokenizer *t, int32_t id, size_t *len) {
    *len = t->off[id + 1] - t->off[id];
    return t->bytes + t->off[id];
}

/* The BPE id of the byte string p[0..n), or -1. */
static inline int32_t bytes_map_get(const tokenizer *t, const void *p, size_t n) {
    uint64_t h = bpe_hash(p, n), tag = h & 0xFFFFFFFF00000000ull;
    for (uint64_t i = h & t->bpe.mask;; i = (i + 1) & t->bpe.mask) {
        uint64_t s = t->bpe.slot[i];
        if (s == BYTES_EMPTY) return -1;
        if ((s & 0xFFFFFFFF00000000ull) == tag) {
            int32_t id = (int32_t)(uint32_t)s;
            if (t->off[id + 1] - t->off[id] == n && !memcmp(t->bytes + t->off[id], p, n)) return id;
        }
    }
}

/* The id of the token spelled by tokens a then b, or BPE_NO_RANK. */
static inline int32_t pair_rank(const pair_map *m, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)a << BPE_ID_BITS | (uint64_t)b;
    for (uint64_t i = (key * 0x9E3779B97F4A7C15ull) >> m->shift;; i = (i + 1) & m->mask) {
        uint64_t s = m->slot[i];
        if (s == BYTES_EMPTY) return BPE_NO_RANK;
        if (s >> BPE_ID_BITS == key) return (int32_t)(s & BPE_MAX_IDS);
    }
}

/* Table construction (bpe_tables.c). */
int bpe_build_tables(tokenizer *t);
int special_insert(tokenizer *t, const char *name, size_t len, int32_t id);
int32_t special_lookup(const tokenizer *t, const char *name, size_t len); /* -1 if none */

/* Appends the ids of one pre-tokenised piece (bpe_merge.c). scratch grows as needed. */
typedef struct {
    int32_t *buf;
    size_t cap;
} merge_scratch;
void bpe_encode_piece(const tokenizer *t, const unsigned char *p, size_t n, ivec *out,
                      merge_scratch *sc);

#endif
