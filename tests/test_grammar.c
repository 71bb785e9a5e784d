/* The grammar engine (src/grammar/): matching bytes, refusals and hostile inputs, and token masks
 * over the real o200k_harmony vocabulary.
 *
 * The mask test is generative: for every schema of test_grammar_cases.h, draw tokens uniformly
 * from the mask at each step (fixed seeds) until the output may end, decode, and have ajv (npm)
 * check that each output parses and validates; regex outputs are checked by PCRE2 and choices by
 * comparison. At a few states the mask is also compared with asking the matcher about every one
 * of the 201,088 tokens.
 *
 * `test_grammar --bench` also prints the cost of one mask (p50, p99, max) over the states those
 * generations visit, cold (tables computed on first use) and warm, as a markdown table. */
#include "check.h"

#include "base/error.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "tokenizer/grammar/grammar.h"
#include "tokenizer/bpe.h"

#include "test_grammar_cases.h"

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NCASES(a) (sizeof(a) / sizeof((a)[0]))

static tokenizer *T;
static grammar_vocab *V;

/* ---- bytes only ---- */

static int match(grammar *g, const char *s) {
    grammar_matcher *m = grammar_matcher_new(g, NULL);
    int ok = grammar_matcher_advance_bytes(m, s, strlen(s)) == 0 && grammar_matcher_can_end(m);
    grammar_matcher_free(m);
    return ok;
}

static grammar *schema(const char *s) {
    grammar *g = grammar_compile_json_schema(s, strlen(s), NULL);
    CHECK(g != NULL, "compile %s: %s", s, err_msg());
    return g;
}

static void test_bytes(void) {
    grammar *g = schema(schema_cases[0]);
    if (g) {
        CHECK(match(g, "{\"name\":\"x\",\"age\":3}"), "compact object");
        CHECK(match(g, "{ \"name\" : \"\\u00e9\\n\\\"\" ,\n  \"age\" : -12 }"), "spaced object");
        CHECK(!match(g, "{\"name\":\"x\"}"), "missing required property");
        CHECK(!match(g, "{\"name\":\"x\",\"age\":3,\"z\":1}"), "additional property");
        CHECK(!match(g, "{\"name\":\"x\",\"age\":03}"), "leading zero");
        CHECK(!match(g, "{\"name\":\"a\x01\",\"age\":3}"), "raw control character");
        CHECK(!match(g, "{\"name\":\"\xc3\",\"age\":3}"), "invalid UTF-8");
        CHECK(match(g, "{\"name\":\"\xe6\xbc\xa2\",\"age\":3}"), "UTF-8 text");
        /* whitespace is bounded: 20 blanks pass, 21 do not */
        char buf[128];
        snprintf(buf, sizeof buf, "{%20s\"name\":\"x\",\"age\":3}", "");
        CHECK(match(g, buf), "20 blanks");
        snprintf(buf, sizeof buf, "{%21s\"name\":\"x\",\"age\":3}", "");
        CHECK(!match(g, buf), "21 blanks");
        grammar_matcher *m = grammar_matcher_new(g, NULL);
        CHECK(grammar_matcher_advance_bytes(m, "{\"nam", 5) == 0, "prefix");
        CHECK(!grammar_matcher_can_end(m), "a prefix cannot end");
        CHECK(grammar_matcher_advance_bytes(m, "x", 1) != 0, "wrong byte refused");
        CHECK_MSG_HAS(err_msg(), "not allowed");
        grammar_matcher *fork = grammar_matcher_clone(m);
        CHECK(grammar_matcher_advance_bytes(m, "e\":\"\",\"age\":7}", 14) == 0, "state kept");
        CHECK(grammar_matcher_advance_bytes(fork, "e\" : \"q\", \"age\": 1 }", 20) == 0 &&
                  grammar_matcher_can_end(fork),
              "a clone goes its own way");
        grammar_matcher_free(fork);
        CHECK(grammar_matcher_can_end(m) && grammar_matcher_is_terminated(m), "complete");
        grammar_matcher_free(m);
        grammar_free(g);
    }
    g = schema(
        "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}");
    if (g) {
        CHECK(!match(g, "[1]") && match(g, "[1,2]") && match(g, "[1, 2 ,3]"), "item counts");
        CHECK(!match(g, "[1,2,3,4]") && !match(g, "[1,2,]"), "item counts (refused)");
        grammar_free(g);
    }
    size_t list = 0; /* the linked list through $ref */
    while (!strstr(schema_cases[list], "#/$defs/list")) list++;
    g = schema(schema_cases[list]);
    if (g) {
        CHECK(match(g, "null") && match(g, "{\"head\":1.5,\"tail\":{\"head\":-2e3,\"tail\":null}}"),
              "recursive list");
        CHECK(!match(g, "{\"head\":1,\"tail\":{}}"), "recursive list (refused)");
        grammar_free(g);
    }
    g = schema("{\"type\":\"string\",\"format\":\"date\"}");
    if (g) {
        CHECK(match(g, "\"2024-01-31\"") && !match(g, "\"2024-02-30\"") &&
                  !match(g, "\"2024-13-01\""),
              "date format");
        grammar_free(g);
    }
    g = schema("{\"type\":\"string\",\"pattern\":\"ab+c\"}");
    if (g) {
        CHECK(match(g, "\"xxabbbcyy\"") && match(g, "\"abc\"") && !match(g, "\"ac\""),
              "unanchored pattern searches");
        grammar_free(g);
    }
    g = grammar_compile_regex("(a|b)*c", 7);
    CHECK(g != NULL, "regex: %s", err_msg());
    if (g) {
        CHECK(match(g, "ababc") && match(g, "c") && !match(g, "abd") && !match(g, "cc"), "regex");
        grammar_free(g);
    }
    const char *choices[] = {"apple", "app", "banana"};
    size_t lens[] = {5, 3, 6};
    g = grammar_compile_choice(choices, lens, 3);
    CHECK(g != NULL, "choice: %s", err_msg());
    if (g) {
        CHECK(match(g, "app") && match(g, "apple") && !match(g, "appl") && !match(g, "bananas"),
              "choice");
        grammar_free(g);
    }
    g = grammar_compile_json_any(NULL);
    if (g) {
        CHECK(match(g, "{\"a\":[1,true,null,{\"b\":\"c\"}],\"d\":-0.5e+10}"), "any JSON");
        CHECK(!match(g, "{\"a\":[1,]}") && !match(g, "[1 2]") && !match(g, "{,}"),
              "any JSON (refused)");
        grammar_free(g);
    }
}

/* ---- refusals and hostile inputs ---- */

static void refused(const char *s, const char *frag1, const char *frag2) {
    double t0 = now_seconds();
    grammar *g = grammar_compile_json_schema(s, strlen(s), NULL);
    double dt = now_seconds() - t0;
    CHECK(g == NULL, "should be refused: %.80s", s);
    grammar_free(g);
    if (frag1) CHECK_MSG_HAS(err_msg(), frag1);
    if (frag2) CHECK_MSG_HAS(err_msg(), frag2);
    CHECK(dt < 2.0, "refusal took %.2f s: %.80s", dt, s);
}

static void regex_refused(const char *p, const char *frag) {
    double t0 = now_seconds();
    grammar *g = grammar_compile_regex(p, strlen(p));
    CHECK(g == NULL, "regex should be refused: %.80s", p);
    grammar_free(g);
    CHECK_MSG_HAS(err_msg(), frag);
    CHECK(now_seconds() - t0 < 2.0, "regex refusal too slow: %.80s", p);
}

static char *repeat_str(const char *a, int n, const char *mid, const char *b) {
    size_t la = strlen(a), lb = strlen(b), lm = strlen(mid);
    char *s = malloc(n * (la + lb) + lm + 1), *p = s;
    for (int i = 0; i < n; i++) p = memcpy(p, a, la), p += la;
    p = memcpy(p, mid, lm), p += lm;
    for (int i = 0; i < n; i++) p = memcpy(p, b, lb), p += lb;
    *p = 0;
    return s;
}

static void test_refusals(void) {
    refused("{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf'", "at #");
    refused("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"minLength\":3}}}",
            "'minLength'", "#/properties/a");
    refused("{\"type\":\"string\",\"format\":\"ipv6\"}", "format 'ipv6'", NULL);
    refused("{\"type\":\"object\",\"properties\":{\"a\":{}},\"additionalProperties\":true}",
            "additionalProperties", NULL);
    refused("{\"$ref\":\"http://example.com/s.json\"}", "local $ref", NULL);
    refused("{\"$ref\":\"#/$defs/missing\"}", "points at nothing", NULL);
    refused("{\"type\":\"object\",\"properties\":{\"a\":{}},\"required\":[\"b\"]}", "'b'", NULL);
    refused("{\"type\":\"array\",\"maxItems\":100000}", "maxItems", "limit");
    refused("{\"type\":\"object\",\"required\":[\"a\"]}", "'a' is not in properties", NULL);
    refused("{\"type\":\"string\",\"enum\":[\"a\"],\"pattern\":\"b\"}", "'pattern' beside 'enum'",
            NULL);
    refused("{\"type\":\"string\",\"enum\":[1,2]}", "schema's type", NULL);
    /* malformed parts that the output would not use are refused too (json_schema_lint.c) */
    refused("{\"type\":\"integer\",\"pattern\":\"(a\"}", "missing ')'", "pattern at #");
    refused("{\"type\":\"null\",\"$defs\":{\"x\":{\"type\":\"strin\"}}}", "'strin'", "#/$defs/x");
    refused("{\"type\":\"null\",\"$defs\":{\"x\":{\"$ref\":\"#/$defs/y\"}}}", "points at nothing",
            NULL);
    refused("{\"enum\":[1,{\"a\":1,\"b\":2},{\"b\":2,\"a\":1}]}", "twice", NULL);
    refused("{\"type\":[\"string\",\"string\"]}", "twice", NULL);
    refused("{\"enum\":[1],\"const\":1}", "'const' beside 'enum'", NULL);
    refused("not json", "not JSON", NULL);
    /* $ref loops that never read a byte */
    refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "$ref loop",
            NULL);
    refused("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"anyOf\":[{\"$ref\":\"#/$defs/a\"},"
            "{\"type\":\"null\"}]}},\"$ref\":\"#/$defs/a\"}",
            "$ref loop", NULL);
    refused("{\"anyOf\":[{\"$ref\":\"#\"},{\"type\":\"null\"}]}", "$ref loop", NULL);
    /* recursion with no way out */
    refused("{\"type\":\"object\",\"properties\":{\"x\":{\"$ref\":\"#\"}},\"required\":[\"x\"],"
            "\"additionalProperties\":false}",
            "no finite instance", NULL);
    /* deep nesting: as written, and beyond the JSON parser's own limit */
    char *deep = repeat_str("{\"type\":\"array\",\"items\":", 100, "{\"type\":\"null\"}", "}");
    refused(deep, "deeper than", NULL);
    free(deep);
    deep = repeat_str("[", 5000, "", "]");
    refused(deep, "not JSON", NULL);
    free(deep);
    /* a huge enum, and many literals in all */
    size_t cap = 5000 * 12 + 64, n = 0;
    char *big = malloc(cap);
    n += (size_t)sprintf(big + n, "{\"enum\":[");
    for (int i = 0; i < 5000; i++) n += (size_t)sprintf(big + n, "%s\"v%d\"", i ? "," : "", i);
    sprintf(big + n, "]}");
    refused(big, "enum", "limit");
    free(big);
    /* an oversized schema text */
    size_t huge = (1 << 20) + 10;
    char *hs = malloc(huge + 1);
    memset(hs, ' ', huge);
    hs[huge] = 0;
    hs[0] = '{';
    hs[huge - 1] = '}';
    refused(hs, "limit", NULL);
    free(hs);
    /* regexes */
    regex_refused("(a|b", "missing ')'");
    regex_refused("a{2000}", "limit");
    regex_refused("((a{1000}){1000}){1000}", "too large");
    regex_refused("(?=a)b", "lookaround");
    regex_refused("(a)\\1", "backreferences");
    regex_refused("\\bword", "word boundaries");
    regex_refused("a^b", "anchors");
    char *nest = repeat_str("(", 200, "a", ")");
    regex_refused(nest, "nested too deeply");
    free(nest);
    /* catastrophic for a backtracking engine, linear here */
    grammar *g = grammar_compile_regex("(a+)+b", 6);
    CHECK(g != NULL, "(a+)+b: %s", err_msg());
    if (g) {
        double t0 = now_seconds();
        CHECK(!match(g, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaac"), "(a+)+b on a...c");
        CHECK(match(g, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaab"), "(a+)+b on a...b");
        CHECK(now_seconds() - t0 < 0.5, "(a+)+b is linear");
        grammar_free(g);
    }
    g = grammar_compile_regex("(a?){500}a{500}", 15);
    CHECK(g != NULL, "(a?){500}a{500}: %s", err_msg());
    grammar_free(g);
    /* a deep output: 100,000 nested arrays stay within the matcher's bounds */
    g = grammar_compile_json_any(NULL);
    if (g) {
        grammar_matcher *m = grammar_matcher_new(g, NULL);
        char *open = repeat_str("[", 100000, "", "");
        CHECK(grammar_matcher_advance_bytes(m, open, strlen(open)) == 0, "deep: %s", err_msg());
        char *close = repeat_str("]", 100000, "", "");
        CHECK(grammar_matcher_advance_bytes(m, close, strlen(close)) == 0 &&
                  grammar_matcher_can_end(m),
              "deep output closes");
        free(open);
        free(close);
        grammar_matcher_free(m);
        grammar_free(g);
    }
    /* a long output: a 4 MB string, fed in 1 KB pieces, keeps the matcher small */
    g = grammar_compile_json_schema("{\"type\":\"string\"}", 17, NULL);
    if (g) {
        grammar_matcher *m = grammar_matcher_new(g, NULL);
        char piece[1024];
        memset(piece, 'a', sizeof piece);
        int ok = grammar_matcher_advance_bytes(m, "\"", 1) == 0;
        for (int i = 0; i < 4096 && ok; i++)
            ok = grammar_matcher_advance_bytes(m, piece, sizeof piece) == 0;
        ok = ok && grammar_matcher_advance_bytes(m, "\"", 1) == 0 && grammar_matcher_can_end(m);
        CHECK(ok, "a 4 MB string: %s", err_msg());
        CHECK(grammar_matcher_memory(m) < (8u << 20), "a 4 MB string holds %zu bytes",
              grammar_matcher_memory(m));
        grammar_matcher_free(m);
        grammar_free(g);
    }
}

/* ---- token masks ---- */

typedef struct {
    double *v;
    size_t n, cap;
} samples;

static void sample_add(samples *s, double x) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 4096;
        s->v = realloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n++] = x;
}

static int bench_mode, brute_left = 12, brute_many;
static samples cold, warm;
static int cur_case, slow_case = -1, slow_step;
static double slow_time;

/* Compares the mask with asking the matcher about every token. */
static void brute_check(grammar_matcher *m, const uint32_t *mask, const char *what) {
    int bad = 0, n = grammar_vocab_size(V);
    for (int32_t t = 0; t < n && bad < 5; t++) {
        int bit = (mask[t >> 5] >> (t & 31)) & 1;
        int want = grammar_matcher_accepts_token(m, t) == 1;
        if (bit != want) {
            bad++;
            size_t len;
            const char *b = tokenizer_token_bytes(T, t, &len);
            CHECK(0, "%s: token %d '%.*s': mask %d, matcher %d", what, t, (int)len, b, bit, want);
        }
    }
}

/* Draws tokens uniformly from the mask until the output may end; returns the decoded text (or
 * NULL when a mask came out empty before the end or the step limit was reached). */
static char *generate(grammar *g, uint64_t seed, int max_steps, samples *times, int brute,
                      size_t *out_len, int *steps) {
    grammar_matcher *m = grammar_matcher_new(g, V);
    uint32_t *mask = malloc(grammar_mask_words(V) * sizeof *mask);
    ivec toks = {0};
    rng_t r;
    rng_seed(&r, seed);
    char *text = NULL;
    for (int step = 0; step < max_steps; step++) {
        if (grammar_matcher_can_end(m)) break;
        double t0 = now_seconds();
        grammar_matcher_fill_mask(m, mask);
        double dt = now_seconds() - t0;
        if (times) sample_add(times, dt);
        if (times == &warm && dt > slow_time) {
            slow_time = dt;
            slow_case = cur_case;
            slow_step = step;
        }
        if (brute && (step == 0 || step == 2 || step == 7 || (brute_many && step % 7 == 0)) &&
            brute_left > 0) {
            brute_left--;
            brute_check(m, mask, "mask vs matcher");
        }
        size_t words = grammar_mask_words(V), total = 0;
        for (size_t w = 0; w < words; w++) total += (size_t)__builtin_popcount(mask[w]);
        if (total == 0) break;
        size_t k = rng_next(&r) % total;
        int32_t tok = -1;
        for (size_t w = 0; w < words && tok < 0; w++) {
            size_t c = (size_t)__builtin_popcount(mask[w]);
            if (k >= c) {
                k -= c;
                continue;
            }
            uint32_t bits = mask[w];
            while (k--) bits &= bits - 1;
            tok = (int32_t)(w * 32 + (size_t)__builtin_ctz(bits));
        }
        CHECK(!tokenizer_is_special(T, tok), "a special token in the mask");
        if (grammar_matcher_advance_token(m, tok) != 0) {
            CHECK(0, "masked token %d refused: %s", tok, err_msg());
            break;
        }
        ivec_push(&toks, tok);
    }
    *steps = (int)toks.len;
    if (grammar_matcher_can_end(m)) tokenizer_decode(T, toks.v, toks.len, &text, out_len);
    ivec_free(&toks);
    free(mask);
    grammar_matcher_free(m);
    return text;
}

#define GENS      3
#define MAX_STEPS 8000

static void test_schemas(const char *dir) {
    char *path = malloc(strlen(dir) + 32);
    sprintf(path, "%s/outputs.jsonl", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    int total_steps = 0, outputs = 0;
    for (size_t i = 0; i < NCASES(schema_cases); i++) {
        grammar *g = schema(schema_cases[i]);
        if (!g) continue;
        json_t *js = json_loads(schema_cases[i], 0, NULL);
        cur_case = (int)i;
        for (int pass = 0; pass < (bench_mode ? 2 : 1); pass++) {
            for (int k = 0; k < GENS; k++) {
                size_t len = 0;
                int steps = 0;
                char *out =
                    generate(g, 1000 * i + (uint64_t)k, MAX_STEPS, pass ? &warm : &cold,
                             pass == 0 && k == 0 && (i % 4 == 0 || brute_many), &len, &steps);
                total_steps += steps;
                CHECK(out != NULL, "schema %zu seed %d: no complete output in %d steps", i, k,
                      steps);
                if (!out || pass) {
                    free(out);
                    continue;
                }
                json_t *o = json_stringn(out, len);
                CHECK(o != NULL, "schema %zu: output is not UTF-8: %s", i, out);
                json_t *line =
                    json_pack("{s:i, s:O, s:o*}", "case", (int)i, "schema", js, "output", o);
                char *txt = json_dumps(line, JSON_COMPACT);
                fprintf(f, "%s\n", txt);
                outputs++;
                free(txt);
                json_decref(line);
                free(out);
            }
        }
        json_decref(js);
        grammar_free(g);
    }
    fclose(f);
    fprintf(stderr, "schemas: %zu, outputs: %d, tokens drawn: %d\n", NCASES(schema_cases), outputs,
            total_steps);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "node '%s/tests/node/grammar_validate.js' '%s'", GPTOSS_SOURCE_DIR,
             path);
    int rc = system(cmd);
    CHECK(rc == 0, "ajv: some outputs do not validate (or node/ajv is missing: npm ci in "
                   "tests/node)");
    if (rc == 0 && !getenv("GRAMMAR_KEEP")) unlink(path);
    free(path);
}

/* Hostile grammars that compile: a large enum, a very ambiguous anyOf, an ambiguous regex. Their
 * masks must stay bounded in time and right. */
static void test_hostile_masks(void) {
    brute_left = 6;
    /* 4000 values sharing prefixes, with non-ASCII text (written raw, as json_dumps writes it) */
    size_t cap = 4000 * 40 + 64, n = 0;
    char *big = malloc(cap);
    n += (size_t)sprintf(big + n, "{\"enum\":[");
    for (int i = 0; i < 4000; i++)
        n += (size_t)sprintf(big + n, "%s\"item_%d_\xc3\xa9\"", i ? "," : "", i * 7919 % 100000);
    sprintf(big + n, "]}");
    grammar *g = grammar_compile_json_schema(big, strlen(big), NULL);
    CHECK(g != NULL, "4000-value enum: %s", err_msg());
    for (int k = 0; g && k < 3; k++) {
        size_t len;
        int steps;
        char *out = generate(g, 900 + (uint64_t)k, 200, &cold, k == 0, &len, &steps);
        CHECK(out && strstr(big, out), "enum output '%s' is one of the values", out ? out : "");
        free(out);
    }
    grammar_free(g);
    free(big);

    /* 300 identical alternatives: 300 parses in parallel, capped at GRAMMAR_MAX_STACKS */
    n = 0;
    big = malloc(300 * 24 + 64);
    n += (size_t)sprintf(big + n, "{\"anyOf\":[");
    for (int i = 0; i < 300; i++)
        n += (size_t)sprintf(big + n, "%s{\"type\":\"string\"}", i ? "," : "");
    sprintf(big + n, "]}");
    g = grammar_compile_json_schema(big, strlen(big), NULL);
    CHECK(g != NULL, "300 alternatives: %s", err_msg());
    if (g) {
        double t0 = now_seconds();
        size_t len;
        int steps;
        char *out = generate(g, 31, 50, NULL, 0, &len, &steps);
        double per = (now_seconds() - t0) / (steps ? steps : 1);
        fprintf(stderr, "300 alternatives: %d steps, %.0f us per step\n", steps, 1e6 * per);
        CHECK(per < 0.05, "300 alternatives: %.0f us per step", 1e6 * per);
        free(out);
        grammar_free(g);
    }
    free(big);

    const char *amb = "(a|ab|.)*(a.*){8}";
    g = grammar_compile_regex(amb, strlen(amb));
    CHECK(g != NULL, "ambiguous regex: %s", err_msg());
    if (g) {
        size_t len;
        int steps;
        char *out = generate(g, 5, 400, NULL, 1, &len, &steps);
        free(out);
        grammar_free(g);
    }
}

/* Two grammars with the same string rule share its token tables through the vocab's cache. */
static void test_shared_tables(void) {
    const char *a = "{\"type\":\"string\"}";
    const char *b = "{\"type\":\"array\",\"items\":{\"type\":\"string\"}}";
    grammar *ga = schema(a), *gb = schema(b);
    if (!ga || !gb) return;
    uint32_t *ma = malloc(grammar_mask_words(V) * 4), *mb = malloc(grammar_mask_words(V) * 4);
    grammar_matcher *xa = grammar_matcher_new(ga, V), *xb = grammar_matcher_new(gb, V);
    CHECK(grammar_matcher_advance_bytes(xa, "\"ab", 3) == 0, "string prefix");
    CHECK(grammar_matcher_advance_bytes(xb, "[\"ab", 4) == 0, "array prefix");
    grammar_matcher_fill_mask(xa, ma);
    size_t before = grammar_vocab_cached_tables(V);
    grammar_matcher_fill_mask(xb, mb);
    size_t after = grammar_vocab_cached_tables(V);
    /* Inside the string both allow the same tokens, except those that close it and go on. */
    size_t same = 0, words = grammar_mask_words(V);
    for (size_t w = 0; w < words; w++) same += (size_t)__builtin_popcount(ma[w] & mb[w]);
    CHECK(same > 150000, "string masks agree on most tokens (%zu)", same);
    CHECK(after - before <= 3, "the array grammar reused the string tables (%zu new)",
          after - before);
    grammar_matcher_free(xa);
    grammar_matcher_free(xb);
    free(ma);
    free(mb);
    grammar_free(ga);
    grammar_free(gb);
}

static void test_regex_and_choice(void) {
    for (size_t i = 0; i < NCASES(regex_cases); i++) {
        grammar *g = grammar_compile_regex(regex_cases_ecma[i], strlen(regex_cases_ecma[i]));
        CHECK(g != NULL, "regex %s: %s", regex_cases_ecma[i], err_msg());
        if (!g) continue;
        int errc;
        PCRE2_SIZE erroff;
        pcre2_code *re =
            pcre2_compile((PCRE2_SPTR)regex_cases[i], PCRE2_ZERO_TERMINATED,
                          PCRE2_UTF | PCRE2_ANCHORED | PCRE2_ENDANCHORED, &errc, &erroff, NULL);
        CHECK(re != NULL, "pcre2 %s", regex_cases[i]);
        pcre2_match_data *md = re ? pcre2_match_data_create_from_pattern(re, NULL) : NULL;
        for (int k = 0; k < GENS && re; k++) {
            size_t len;
            int steps;
            char *out = generate(g, 77 * i + (uint64_t)k, MAX_STEPS, &cold, 0, &len, &steps);
            CHECK(out != NULL, "regex %s: no output", regex_cases_ecma[i]);
            if (out)
                CHECK(pcre2_match(re, (PCRE2_SPTR)out, len, 0, 0, md, NULL) >= 0,
                      "regex %s: output '%s' does not match", regex_cases[i], out);
            free(out);
        }
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        grammar_free(g);
    }
    const char *choices[] = {"positive", "negative", "neutral", "n/a", "\xe4\xb8\xad\xe7\xab\x8b"};
    size_t lens[5];
    for (int i = 0; i < 5; i++) lens[i] = strlen(choices[i]);
    grammar *g = grammar_compile_choice(choices, lens, 5);
    CHECK(g != NULL, "choice: %s", err_msg());
    for (int k = 0; g && k < 10; k++) {
        size_t len;
        int steps, found = 0;
        char *out = generate(g, 5 + (uint64_t)k, 100, &cold, k == 0, &len, &steps);
        for (int i = 0; out && i < 5; i++) found |= strcmp(out, choices[i]) == 0;
        CHECK(found, "choice output '%s'", out ? out : "(none)");
        free(out);
    }
    grammar_free(g);
}

static int dcmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void print_row(const char *name, samples *s) {
    if (!s->n) return;
    qsort(s->v, s->n, sizeof *s->v, dcmp);
    printf("| %s | %zu | %.1f | %.1f | %.1f |\n", name, s->n, 1e6 * s->v[s->n / 2],
           1e6 * s->v[(size_t)(0.99 * (double)(s->n - 1))], 1e6 * s->v[s->n - 1]);
}

int main(int argc, char **argv) {
    bench_mode = argc > 1 && strcmp(argv[1], "--bench") == 0;
    if (getenv("GRAMMAR_BRUTE")) { /* GRAMMAR_BRUTE=n: n states checked token by token */
        brute_left = atoi(getenv("GRAMMAR_BRUTE"));
        brute_many = 1;
    }
    test_bytes();
    test_refusals();
    char *path = tokenizer_find_json(NULL);
    if (!path) {
        fprintf(stderr, "SKIP (masks): %s\n", err_msg());
        return check_report("test_grammar");
    }
    T = tokenizer_load(path);
    free(path);
    CHECK(T != NULL, "tokenizer: %s", err_msg());
    if (!T) return check_report("test_grammar");
    double t0 = now_seconds();
    V = grammar_vocab_new(T);
    fprintf(stderr, "vocab trie: %.0f ms\n", 1e3 * (now_seconds() - t0));
    CHECK(grammar_vocab_size(V) == 201088 && grammar_mask_words(V) == 6284, "vocab size");
    char dir[] = "/tmp/gptoss-grammar-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    test_schemas(dir);
    test_regex_and_choice();
    test_hostile_masks();
    test_shared_tables();
    rmdir(dir);
    if (bench_mode) {
        printf("| masks | n | p50 µs | p99 µs | max µs |\n| --- | --- | --- | --- | --- |\n");
        print_row("cold (tables built on first use)", &cold);
        print_row("warm (tables cached)", &warm);
        printf("\nslowest warm mask: schema case %d, step %d: %.1f µs\n", slow_case, slow_step,
               1e6 * slow_time);
    }
    free(cold.v);
    free(warm.v);
    grammar_vocab_free(V);
    tokenizer_free(T);
    return check_report("test_grammar");
}
