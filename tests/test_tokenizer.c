/* The tokenizer on its own: the spec's test vectors, special tokens, decoding and streaming,
 * ill-formed UTF-8, the merge algorithm against a literal transcription of tiktoken's, the claim
 * that tokenizer.json's merges list is implied by the ranks, and loading errors. The comparison
 * with the reference on a large corpus is tests/test_tokenizer_reference.sh. Skipped (77) without
 * tokenizer.json. */
#include "check.h"

#include "base/error.h"
#include "base/files.h"
#include "base/xalloc.h"
#include "tokenizer/bpe.h"
#include "tokenizer/bpe_internal.h"
#include "tokenizer/tok_utf8.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tokenizer *T;

static int ids_equal(const ivec *v, const int32_t *want, size_t n) {
    if (v->len != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (v->v[i] != want[i]) return 0;
    return 1;
}

static void format_ids(const ivec *v, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < v->len && o + 16 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, i ? ",%d" : "%d", v->v[i]);
}

/* Encodes (ordinary or with specials) and compares with the expected ids. */
static void expect(const char *text, size_t len, int specials, const int32_t *want, size_t n) {
    ivec v = {0};
    int rc = specials ? tokenizer_encode_with_specials(T, text, len, &v)
                      : tokenizer_encode_ordinary(T, text, len, &v);
    char got[512];
    format_ids(&v, got, sizeof got);
    CHECK(rc == 0 && ids_equal(&v, want, n), "encode%s(\"%s\") = [%s]",
          specials ? "_with_specials" : "", text, got);
    ivec_free(&v);
}
#define EXPECT(text, specials, ...)                                                                \
    do {                                                                                           \
        static const int32_t want_[] = {__VA_ARGS__};                                              \
        expect(text, sizeof(text) - 1, specials, want_, sizeof want_ / sizeof want_[0]);           \
    } while (0)

static void test_vectors(void) {
    /* spec §7 */
    EXPECT("Hello world", 0, 13225, 2375);
    EXPECT("What is 2 + 2?", 0, 4827, 382, 220, 17, 659, 220, 17, 30);
    EXPECT("don't", 0, 91418);
    EXPECT("1234567", 0, 7633, 19354, 22);
    /* spec §4 header words */
    EXPECT("assistant", 0, 173781);
    EXPECT("user", 0, 1428);
    EXPECT("system", 0, 17360);
    EXPECT("developer", 0, 77944);
    EXPECT("analysis", 0, 35644);
    EXPECT("final", 0, 17196);
    EXPECT("commentary", 0, 12606, 815);
    EXPECT(" to", 0, 316);
    EXPECT("=", 0, 28);
    EXPECT("functions", 0, 44580);
    EXPECT("json", 0, 4108);
    EXPECT(" ", 0, 220);
    /* From tiktoken (o200k_base + harmony specials), covering contractions with LONG S, white space
     * before a newline, supplementary characters split into byte tokens, and a ZWJ emoji sequence.
     */
    EXPECT("HE'S \xC5\xBF don'\xC5\xBF", 0, 2895, 31233, 20757, 123, 1700, 6, 70067);
    EXPECT("   \n\n  x", 0, 29104, 220, 1215);
    EXPECT("\xF0\xA0\x80\x80", 0, 172, 62313, 222);
    EXPECT("\xF0\x9F\xA7\x91\xF0\x9F\x8F\xBD\xE2\x80\x8D\xF0\x9F\x9A\x80", 0, 4103, 100, 239, 52622,
           121, 2524, 112927, 222);
    ivec cb = {0};
    CHECK(tokenizer_encode_ordinary_cb(T, "Hello world", 11, &cb) == 0 && cb.len == 2 &&
              cb.v[0] == 13225 && cb.v[1] == 2375,
          "callback form");
    ivec_free(&cb);
    ivec empty = {0};
    CHECK(tokenizer_encode_ordinary(T, "", 0, &empty) == 0 && empty.len == 0, "empty text");
    ivec_free(&empty);
}

static void test_specials(void) {
    CHECK(tokenizer_vocab_size(T) == 201088, "vocab size %d", tokenizer_vocab_size(T));
    CHECK(tokenizer_bpe_size(T) == 199998, "bpe size %d", tokenizer_bpe_size(T));
    static const struct {
        const char *name;
        int32_t id;
    } named[] = {{"<|startoftext|>", 199998},     {"<|endoftext|>", 199999},
                 {"<|reserved_200000|>", 200000}, {"<|return|>", 200002},
                 {"<|constrain|>", 200003},       {"<|channel|>", 200005},
                 {"<|start|>", 200006},           {"<|end|>", 200007},
                 {"<|message|>", 200008},         {"<|call|>", 200012},
                 {"<|endofprompt|>", 200018},     {"<|reserved_200018|>", 200018},
                 {"<|reserved_200013|>", 200013}, {"<|reserved_201087|>", 201087}};
    for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
        CHECK(tokenizer_special_id(T, named[i].name) == named[i].id, "%s -> %d", named[i].name,
              tokenizer_special_id(T, named[i].name));
    CHECK(tokenizer_special_id(T, "<|reserved_201088|>") == -1, "201088 is outside the vocabulary");
    CHECK(tokenizer_special_id(T, "<|refusal|>") == -1,
          "harmony's <|refusal|> is not in o200k_harmony");
    CHECK(tokenizer_special_id(T, "hello") == -1 && tokenizer_special_id(T, NULL) == -1,
          "non-names");
    CHECK(tokenizer_is_special(T, 199998) && tokenizer_is_special(T, 201087), "special range");
    CHECK(!tokenizer_is_special(T, 199997) && !tokenizer_is_special(T, 201088),
          "special range ends");
    size_t n;
    const char *b = tokenizer_token_bytes(T, 200006, &n);
    CHECK(b && n == 9 && !memcmp(b, "<|start|>", 9), "bytes of 200006");
    b = tokenizer_token_bytes(T, 200018, &n);
    CHECK(b && n == 15 && !memcmp(b, "<|endofprompt|>", 15),
          "200018 decodes to tokenizer.json's name");
    b = tokenizer_token_bytes(T, 200500, &n);
    CHECK(b && n == 19 && !memcmp(b, "<|reserved_200500|>", 19), "reserved names are made up");
    b = tokenizer_token_bytes(T, 0, &n);
    CHECK(b && n == 1 && b[0] == '!', "id 0 is '!'");
    b = tokenizer_token_bytes(T, 199997, &n);
    CHECK(b && n == 6 && !memcmp(b, " cocos", 6), "id 199997 is ' cocos'");
    CHECK(!tokenizer_token_bytes(T, -1, &n) && !tokenizer_token_bytes(T, 201088, &n),
          "out of range");

    /* User text never produces special ids; markup encoded with specials does. */
    EXPECT("<|start|>user<|message|>hi<|end|>", 0, 27, 91, 5236, 91, 29, 1428, 27, 91, 3938, 91, 29,
           3686, 27, 91, 419, 91, 29);
    EXPECT("<|start|>user<|message|>hi<|end|>", 1, 200006, 1428, 200008, 3686, 200007);
    /* Text before a special token is encoded as if it ended there: "  " is one piece, not " " + "
     * <". */
    EXPECT("hello  <|end|>", 1, 24912, 256, 200007);
    EXPECT("hello  <|end|>", 0, 24912, 220, 464, 91, 419, 91, 29);
    EXPECT("x<|reserved_200018|>y<|endofprompt|>", 1, 87, 200018, 88, 200018);
    EXPECT("<|<|end|>|>", 1, 27, 91, 200007, 91, 29);
    EXPECT("<|nope|><|end", 1, 27, 91, 1750, 424, 91, 3784, 91, 419);
}

/* The golden token stream of spec §7 (the tool-call history, 79 tokens): decoding it and encoding
 * the text with specials must give it back. */
static void test_golden_roundtrip(void) {
    static const int32_t golden[] = {
        200006, 1428,   200008, 4827,   382,   290,    11122,  306,    38371,  30,
        200007, 200006, 173781, 200005, 35644, 200008, 1844,   31064,  25,     966,
        4827,   382,    290,    11122,  306,   38371,  14181,  1416,   1309,   316,
        1199,   37342,  170154, 4584,   13,    200007, 200006, 173781, 316,    28,
        44580,  76043,  170154, 200005, 12606, 815,    220,    200003, 4108,   200008,
        10848,  7693,   1243,   392,    28499, 18826,  18583,  200012, 200006, 44580,
        76043,  170154, 200008, 10848,  54267, 1243,   220,    455,    11,     392,
        9186,   1243,   392,    41133,  3008,  18583,  200007, 200006, 173781};
    size_t n = sizeof golden / sizeof golden[0];
    CHECK(n == 79, "golden has %zu tokens", n);
    char *text;
    size_t len;
    CHECK(tokenizer_decode(T, golden, n, &text, &len) == 0, "decode golden: %s", err_msg());
    ivec v = {0};
    CHECK(tokenizer_encode_with_specials(T, text, len, &v) == 0 && ids_equal(&v, golden, n),
          "encode_with_specials(decode(golden)) != golden (%zu tokens): %s", v.len, text);
    ivec_free(&v);
    free(text);
}

static void test_decode(void) {
    static const char *texts[] = {
        "Hello world", "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x99\x82",
        "  \t\r\n\r\n code() {}", "\xF0\xA0\x80\x80\xF0\x9F\xA7\x91\xE2\x80\x8D"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        ivec v = {0};
        tokenizer_encode_ordinary(T, texts[i], strlen(texts[i]), &v);
        char *out;
        size_t len;
        CHECK(tokenizer_decode(T, v.v, v.len, &out, &len) == 0 && len == strlen(texts[i]) &&
                  !memcmp(out, texts[i], len) && out[len] == 0,
              "decode(encode(\"%s\"))", texts[i]);
        free(out);
        ivec_free(&v);
    }
    int32_t bad[] = {13225, 201088};
    char *out = NULL;
    size_t len;
    CHECK(tokenizer_decode(T, bad, 2, &out, &len) == -1 && out == NULL,
          "decode of an id out of range");
    CHECK_MSG_HAS(err_msg(), "201088");
    int32_t neg = -5;
    CHECK(tokenizer_decode(T, &neg, 1, &out, &len) == -1, "decode of a negative id");
    CHECK(tokenizer_decode(T, NULL, 0, &out, &len) == 0 && len == 0 && out[0] == 0,
          "decode of nothing");
    free(out);
}

/* Pushes ids one at a time; checks that every chunk is valid UTF-8 and returns their concatenation.
 */
static char *stream_all(const int32_t *ids, size_t n, size_t *total, int *chunks_ok) {
    tok_stream s;
    tok_stream_init(&s);
    char *all = xmalloc(64 * n + 8);
    size_t o = 0;
    *chunks_ok = 1;
    for (size_t i = 0; i < n; i++) {
        const char *txt;
        size_t len;
        if (tok_stream_push(T, &s, ids[i], &txt, &len) != 0) *chunks_ok = 0;
        if (utf8_valid_prefix((const unsigned char *)txt, len) != len) *chunks_ok = 0;
        memcpy(all + o, txt, len), o += len;
    }
    const char *txt;
    size_t len;
    tok_stream_flush(&s, &txt, &len);
    memcpy(all + o, txt, len), o += len;
    tok_stream_free(&s);
    all[o] = 0;
    *total = o;
    return all;
}

static void test_stream(void) {
    /* U+20000 is three tokens: F0 A0 | 80 | 80 (byte tokens 172, 62313 = "\xa0\x80"?, 222).
     * Whatever the split, nothing may come out until the character is complete. */
    const char *text = "a\xF0\xA0\x80\x80 "
                       "\xF0\x9F\xA7\x91\xF0\x9F\x8F\xBD\xE2\x80\x8D\xF0\x9F\x9A\x80 \xE4\xB8\xAD!";
    ivec v = {0};
    tokenizer_encode_ordinary(T, text, strlen(text), &v);
    size_t total;
    int ok;
    char *all = stream_all(v.v, v.len, &total, &ok);
    CHECK(ok && total == strlen(text) && !memcmp(all, text, total),
          "stream == decode for valid text");
    free(all);

    tok_stream s;
    tok_stream_init(&s);
    const char *txt;
    size_t len;
    int32_t first = 172; /* the byte F0 alone: the start of a 4-byte character */
    size_t n;
    const char *b = tokenizer_token_bytes(T, first, &n);
    CHECK(n == 1 && (unsigned char)b[0] == 0xF0, "token 172 is the byte F0");
    CHECK(tok_stream_push(T, &s, first, &txt, &len) == 0 && len == 0, "lead byte held back");
    CHECK(s.npend == 1, "one byte pending");
    tok_stream_flush(&s, &txt, &len);
    CHECK(len == 3 && !memcmp(txt, "\xEF\xBF\xBD", 3), "flush of a cut character gives U+FFFD");
    CHECK(s.npend == 0, "flush resets");
    /* A lead byte followed by a token that cannot continue it: U+FFFD, then the token. */
    tok_stream_push(T, &s, first, &txt, &len);
    CHECK(tok_stream_push(T, &s, 13225, &txt, &len) == 0 && len == 8 &&
              !memcmp(txt, "\xEF\xBF\xBDHello", 8),
          "broken sequence then text: %zu bytes", len);
    /* A lone continuation byte token. */
    int32_t cont = -1;
    for (int32_t id = 0; id < 256 && cont < 0; id++) {
        b = tokenizer_token_bytes(T, id, &n);
        if (n == 1 && (unsigned char)b[0] == 0x80) cont = id;
    }
    CHECK(cont >= 0 && tok_stream_push(T, &s, cont, &txt, &len) == 0 && len == 3,
          "lone 0x80 -> U+FFFD");
    CHECK(tok_stream_push(T, &s, 200007, &txt, &len) == 0 && len == 7 && !memcmp(txt, "<|end|>", 7),
          "special ids stream their names");
    CHECK(tok_stream_push(T, &s, 999999, &txt, &len) == -1, "stream rejects ids out of range");
    tok_stream_flush(&s, &txt, &len);
    CHECK(len == 0, "nothing pending");
    tok_stream_free(&s);
    ivec_free(&v);
}

/* Ill-formed input is encoded as its repair (each maximal ill-formed subpart -> U+FFFD). */
static void test_invalid_utf8(void) {
    EXPECT("\xEF\xBF\xBD\xEF\xBF\xBD", 0, 10123);
    EXPECT("\xFF\xFE", 0, 10123);          /* two invalid bytes: two U+FFFD */
    EXPECT("\xED\xA0\x80", 0, 72387);      /* a surrogate: three U+FFFD */
    EXPECT("abc\xE4\xB8", 0, 26682, 3251); /* truncated at the end: one U+FFFD */
    EXPECT("abc\xEF\xBF\xBD", 0, 26682, 3251);
    unsigned char buf[512], fixed[3 * 512];
    uint32_t x = 1;
    for (int round = 0; round < 3000; round++) {
        size_t n = (size_t)(round % 200);
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            unsigned r = x >> 16;
            /* mostly bytes that matter to UTF-8 decoding, some ASCII */
            buf[i] = r % 3 == 0 ? (unsigned char)"a \n'1"[r % 5]
                                : (unsigned char)(0x80 + (r >> 3) % 128);
        }
        ivec a = {0}, b = {0};
        size_t m = utf8_repair(buf, n, fixed);
        int ra = tokenizer_encode_ordinary(T, (const char *)buf, n, &a);
        int rb = tokenizer_encode_ordinary(T, (const char *)fixed, m, &b);
        int same = ra == 0 && rb == 0 && a.len == b.len &&
                   (!a.len || !memcmp(a.v, b.v, a.len * sizeof *a.v));
        CHECK(same, "random bytes round %d: encode(x) != encode(repair(x))", round);
        char *out;
        size_t len;
        tokenizer_decode(T, a.v, a.len, &out, &len);
        CHECK(len == m && !memcmp(out, fixed, m), "decode(encode(x)) == repair(x), round %d",
              round);
        free(out);
        ivec_free(&a);
        ivec_free(&b);
        if (!same) break;
    }
}

/* tiktoken's _byte_pair_merge as literally as C allows: parts as start offsets, ranks looked up by
 * the bytes of each adjacent concatenation, the lowest (leftmost on ties) merged until none is a
 * token. */
static void naive_bpe(const unsigned char *p, size_t n, ivec *out) {
    int32_t whole = bytes_map_get(T, p, n);
    if (whole >= 0) {
        ivec_push(out, whole);
        return;
    }
    size_t *start = xmalloc((n + 1) * sizeof *start), m = n;
    for (size_t i = 0; i <= n; i++) start[i] = i;
    for (;;) {
        int32_t best = INT32_MAX;
        size_t bi = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            int32_t r = bytes_map_get(T, p + start[i], start[i + 2] - start[i]);
            if (r >= 0 && r < best) best = r, bi = i;
        }
        if (best == INT32_MAX) break;
        memmove(start + bi + 1, start + bi + 2, (m - bi - 1) * sizeof *start);
        m--;
    }
    for (size_t i = 0; i < m; i++)
        ivec_push(out, bytes_map_get(T, p + start[i], start[i + 1] - start[i]));
    free(start);
}

static void test_merge_vs_naive(void) {
    static const char *const alphabets[] = {"abcdefghijklmnopqrstuvwxyz", "ab", "aeiou",
                                            "thequickbrownfx"};
    char buf[4096];
    uint32_t x = 7;
    for (int round = 0; round < 400; round++) {
        /* Lowercase letters only: the whole string is one piece, of length 2 ... 4095. */
        size_t n = round < 300 ? 2 + (size_t)round / 2 : 200 + (size_t)(round - 300) * 38;
        const char *al = alphabets[round % 4];
        size_t k = strlen(al);
        for (size_t i = 0; i < n; i++) {
            x = x * 1103515245u + 12345u;
            buf[i] = al[(x >> 16) % k];
        }
        ivec a = {0}, b = {0};
        tokenizer_encode_ordinary(T, buf, n, &a);
        naive_bpe((const unsigned char *)buf, n, &b);
        int same = a.len == b.len && !memcmp(a.v, b.v, a.len * sizeof *a.v);
        CHECK(same, "merge of a %zu-byte piece differs from the literal algorithm", n);
        ivec_free(&a);
        ivec_free(&b);
        if (!same) break;
    }
    /* A long piece of one letter (the heap path), against its known shape: runs of eight. */
    size_t n = 100000;
    char *a = xmalloc(n);
    memset(a, 'a', n);
    ivec v = {0};
    tokenizer_encode_ordinary(T, a, n, &v);
    int32_t a8 = bytes_map_get(T, "aaaaaaaa", 8);
    size_t count8 = 0;
    for (size_t i = 0; i < v.len; i++) count8 += v.v[i] == a8;
    CHECK(v.len == n / 8 && count8 == n / 8, "100000 x 'a' -> %zu tokens", v.len);
    ivec_free(&v);
    free(a);
}

/* tokenizer.json's merges list is exactly "every split of every token into two tokens, ordered by
 * the merged token's id": a BPE that merges by merge-list priority makes the same choices as one
 * that merges by rank of the concatenation, which is what we implement (and tiktoken does). */
static void test_merges_are_ranks(const char *path) {
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    CHECK(root != NULL, "%s: %s", path, jerr.text);
    if (!root) return;
    json_t *merges = json_object_get(json_object_get(root, "model"), "merges");
    CHECK(json_is_array(merges), "model.merges is a list");
    int16_t byte_of_cp[324];
    for (int i = 0; i < 324; i++) byte_of_cp[i] = -1;
    for (int b = 0, next = 256; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        byte_of_cp[printable ? b : next++] = (int16_t)b;
    }
    int32_t *count = xcalloc((size_t)tokenizer_bpe_size(T), sizeof *count);
    int32_t prev = -1;
    size_t i, bad = 0, unordered = 0;
    json_t *m;
    json_array_foreach(merges, i, m) {
        unsigned char buf[2][512];
        size_t len[2] = {0, 0};
        for (int side = 0; side < 2; side++) {
            /* a merge is ["left", "right"] (or "left right" in older files) */
            const char *s =
                json_is_array(m) ? json_string_value(json_array_get(m, (size_t)side)) : NULL;
            const unsigned char *u = (const unsigned char *)(s ? s : "");
            for (size_t k = 0; u[k] && len[side] < sizeof buf[0];) {
                unsigned cp = u[k] < 0x80 ? u[k] : (u[k] & 0x1Fu) << 6 | (u[k + 1] & 0x3Fu);
                k += u[k] < 0x80 ? 1 : 2;
                buf[side][len[side]++] = (unsigned char)(cp < 324 ? byte_of_cp[cp] : 0);
            }
        }
        unsigned char cat[1024];
        memcpy(cat, buf[0], len[0]);
        memcpy(cat + len[0], buf[1], len[1]);
        int32_t a = bytes_map_get(T, buf[0], len[0]), b = bytes_map_get(T, buf[1], len[1]);
        int32_t c = bytes_map_get(T, cat, len[0] + len[1]);
        if (a < 0 || b < 0 || c < 0) {
            bad++;
            continue;
        }
        if (c < prev) unordered++;
        prev = c;
        count[c]++;
    }
    CHECK(bad == 0, "%zu merges whose parts or product are not tokens", bad);
    CHECK(unordered == 0, "%zu merges out of product-rank order", unordered);
    /* and each token has as many merges as ways to split it into two tokens */
    size_t wrong = 0, splits_total = 0;
    for (int32_t id = 0; id < tokenizer_bpe_size(T); id++) {
        size_t n;
        const char *p = tokenizer_token_bytes(T, id, &n);
        int32_t splits = 0;
        for (size_t k = 1; k < n; k++)
            splits += bytes_map_get(T, p, k) >= 0 && bytes_map_get(T, p + k, n - k) >= 0;
        wrong += splits != count[id];
        splits_total += (size_t)splits;
    }
    CHECK(wrong == 0, "%zu tokens whose merges are not exactly their two-token splits", wrong);
    CHECK(splits_total == json_array_size(merges), "%zu splits vs %zu merges", splits_total,
          json_array_size(merges));
    free(count);
    json_decref(root);
}

/* One tokenizer, several threads encoding at once. */
typedef struct {
    const char *text;
    size_t len;
    ivec ids;
} job;

static void *encode_job(void *arg) {
    job *j = arg;
    for (int r = 0; r < 20; r++) {
        j->ids.len = 0;
        tokenizer_encode_ordinary(T, j->text, j->len, &j->ids);
    }
    return NULL;
}

static void test_threads(void) {
    const char *text =
        "The quick brown fox \xE4\xB8\xAD\xE6\x96\x87 jumps over 12345 lazy dogs' tails.\n";
    size_t len = strlen(text) * 200;
    char *big = xmalloc(len);
    for (size_t o = 0; o < len; o += strlen(text)) memcpy(big + o, text, strlen(text));
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (job){big, len, {0}};
        pthread_create(&th[i], NULL, encode_job, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    for (int i = 1; i < 4; i++)
        CHECK(jobs[i].ids.len == jobs[0].ids.len &&
                  !memcmp(jobs[i].ids.v, jobs[0].ids.v, jobs[0].ids.len * sizeof(int32_t)),
              "thread %d disagrees", i);
    for (int i = 0; i < 4; i++) ivec_free(&jobs[i].ids);
    free(big);
}

/* A hand-made byte-level tokenizer.json: 256 byte tokens, "ab" and "abc", one special. */
static char *write_tiny(const char *dir, const char *regex_override) {
    char *path = path_join(dir, "tokenizer.json");
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"added_tokens\": [{\"id\": 258, \"content\": \"<|x|>\"}],\n");
    if (regex_override)
        fprintf(f, "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"%s\"}},\n",
                regex_override);
    else {
        json_t *re = json_string(O200K_PAT_STR);
        char *s = json_dumps(re, JSON_ENCODE_ANY);
        fprintf(
            f,
            "\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", "
            "\"pattern\": {\"Regex\": %s}}, {\"type\": \"ByteLevel\"}]},\n",
            s);
        free(s);
        json_decref(re);
    }
    fprintf(f, "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0, next = 256; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        unsigned cp = printable ? (unsigned)b : (unsigned)next++;
        fprintf(f, "\"");
        if (cp == '"' || cp == '\\')
            fprintf(f, "\\%c", cp);
        else if (cp < 0x80)
            fputc((int)cp, f);
        else
            fprintf(f, "%c%c", 0xC0 | cp >> 6, 0x80 | (cp & 0x3F));
        fprintf(f, "\": %d, ", b);
    }
    fprintf(f, "\"ab\": 256, \"abc\": 257}, \"merges\": [[\"a\", \"b\"], [\"ab\", \"c\"]]}}\n");
    fclose(f);
    return path;
}

static void test_loading(void) {
    char dir[] = "/tmp/gptoss-tok-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char *path = write_tiny(dir, NULL);
    tokenizer *t = tokenizer_load(path);
    CHECK(t != NULL, "tiny tokenizer: %s", err_msg());
    if (t) {
        ivec v = {0};
        tokenizer_encode_ordinary(t, "abcab", 5, &v);
        CHECK(v.len == 2 && v.v[0] == 257 && v.v[1] == 256, "tiny: abcab");
        v.len = 0;
        tokenizer_encode_with_specials(t, "a<|x|> \"", 8, &v);
        CHECK(v.len == 4 && v.v[0] == 'a' && v.v[1] == 258 && v.v[2] == ' ' && v.v[3] == '"',
              "tiny: specials");
        CHECK(tokenizer_vocab_size(t) == 259 && tokenizer_special_id(t, "<|x|>") == 258,
              "tiny: sizes");
        ivec_free(&v);
        tokenizer_free(t);
    }
    /* load_for_model prefers the model folder's tokenizer.json */
    t = tokenizer_load_for_model(dir);
    CHECK(t && tokenizer_vocab_size(t) == 259, "load_for_model(dir) uses dir/tokenizer.json");
    tokenizer_free(t);
    unlink(path);
    free(path);

    path = write_tiny(dir, "\\\\s+");
    t = tokenizer_load(path);
    CHECK(t == NULL, "a tokenizer with another regex is refused");
    CHECK_MSG_HAS(err_msg(), "o200k");
    CHECK_MSG_HAS(err_msg(), path);
    unlink(path);
    free(path);

    CHECK(tokenizer_load("/nonexistent/tokenizer.json") == NULL, "missing file");
    CHECK_MSG_HAS(err_msg(), "/nonexistent/tokenizer.json");
    path = path_join(dir, "bad.json");
    file_write_all(path, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0}}}", 52);
    CHECK(tokenizer_load(path) == NULL, "broken vocab refused");
    unlink(path);
    free(path);
    rmdir(dir);
}

int main(void) {
    char *path = tokenizer_find_json(NULL);
    if (!path) {
        fprintf(stderr, "SKIP: %s\n", err_msg());
        return 77;
    }
    T = tokenizer_load(path);
    CHECK(T != NULL, "load: %s", err_msg());
    if (!T) return check_report("test_tokenizer");
    test_vectors();
    test_specials();
    test_golden_roundtrip();
    test_decode();
    test_stream();
    test_invalid_utf8();
    test_merge_vs_naive();
    test_threads();
    test_loading();
    test_merges_are_ranks(path);
    tokenizer_free(T);
    free(path);
    return check_report("test_tokenizer");
}
