/* Random (hostile) inputs for the grammar engine, deterministic (fixed seeds), run by ctest and
 * the ASan build:
 *   - 3000 random regexes over an alphabet of metacharacters: each compiles or is refused with a
 *     message, quickly; those that compile read random bytes (and some make masks) without harm;
 *   - 400 random schemas mixing every keyword (supported or not, well formed or not, $ref to
 *     random places, recursion, huge counts): each compiles or is refused quickly; from those that
 *     compile, tokens are drawn uniformly from the mask, and every output that completes is
 *     validated by ajv (tests/node/grammar_validate.js), a differential test of the compiler.
 * The libFuzzer twin is tests/fuzz/fuzz_grammar.c. */
#include "check.h"

#include "base/error.h"
#include "base/rng.h"
#include "base/timeutil.h"
#include "tokenizer/grammar/grammar.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static tokenizer *T;
static grammar_vocab *V;
static rng_t R;
static int n_schemas = 400; /* GRAMMAR_FUZZ_SEED and GRAMMAR_FUZZ_SCHEMAS change the run */

static unsigned pick(unsigned n) {
    return (unsigned)(rng_next(&R) % n);
}

static void random_regexes(void) {
    static const char alpha[] = "ab()|*+?{}[]^$-\\.,:0123dwsDWSbux\xc3\xa9";
    static const char probe[] = "ab01.-:,\xc3\xa9{}";
    uint32_t *mask = V ? malloc(grammar_mask_words(V) * 4) : NULL;
    int compiled = 0;
    double worst = 0;
    for (int i = 0; i < 3000; i++) {
        char p[48];
        size_t n = pick(40);
        for (size_t k = 0; k < n; k++) p[k] = alpha[pick(sizeof alpha - 1)];
        double t0 = now_seconds();
        grammar *g = grammar_compile_regex(p, n);
        double dt = now_seconds() - t0;
        if (dt > worst) worst = dt;
        CHECK(g || strlen(err_msg()) > 0, "refusal without a message: %.*s", (int)n, p);
        if (!g) continue;
        compiled++;
        grammar_matcher *m = grammar_matcher_new(g, V);
        for (int k = 0; k < 64; k++) {
            char c = probe[pick(sizeof probe - 1)];
            grammar_matcher_advance_bytes(m, &c, 1); /* refused bytes leave the state as it was */
            if (V && k % 16 == 0 && i % 10 == 0) grammar_matcher_fill_mask(m, mask);
        }
        (void)grammar_matcher_can_end(m);
        grammar_matcher_free(m);
        grammar_free(g);
    }
    free(mask);
    fprintf(stderr, "random regexes: 3000, %d compiled, slowest compile %.1f ms\n", compiled,
            1e3 * worst);
    CHECK(worst < 2.0, "a regex took %.2f s to compile or refuse", worst);
}

static json_t *random_schema(int depth);

static json_t *random_value(int depth) {
    switch (pick(depth > 2 ? 5 : 7)) {
    case 0:
        return json_integer((json_int_t)pick(2000) - 1000);
    case 1:
        return json_real((double)pick(1000) / 8.0);
    case 2:
        return json_string(pick(2) ? "x\"\\\xc3\xa9" : "ab");
    case 3:
        return json_null();
    case 4:
        return json_boolean(pick(2));
    case 5:
        return json_pack("[o,o]", random_value(depth + 1), random_value(depth + 1));
    default:
        return json_pack("{s:o}", "k", random_value(depth + 1));
    }
}

static const char *const types[] = {"object",  "array",   "string", "number",
                                    "integer", "boolean", "null",   "bogus"};
static const char *const names[] = {"a", "b", "na\xc3\xafve", "q\"t", "c"};
static const char *const refs[] = {"#",          "#/$defs/a",      "#/$defs/b",
                                   "#/$defs/zz", "#/properties/a", "http://x"};
static const char *const patterns[] = {"^[a-c]{1,3}$", "x+", "^(ab|cd)*$", "(a", "^\\d{2}-\\w$"};
static const char *const formats[] = {"date", "time", "date-time", "email", "uuid", "ipv6"};

static json_t *random_schema(int depth) {
    json_t *s = json_object();
    if (depth > 4 || pick(8) == 0) {
        json_object_set_new(s, "type", json_string(types[pick(7)]));
        return s;
    }
    unsigned n = 1 + pick(4);
    for (unsigned i = 0; i < n; i++) {
        switch (pick(16)) {
        case 0:
        case 1:
            json_object_set_new(s, "type", json_string(types[pick(8)]));
            break;
        case 2:
            json_object_set_new(s, "type", json_pack("[s,s]", types[pick(7)], types[pick(7)]));
            break;
        case 3:
        case 4: {
            json_t *p = json_object();
            unsigned k = pick(4);
            for (unsigned j = 0; j < k; j++)
                json_object_set_new(p, names[pick(5)], random_schema(depth + 1));
            json_object_set_new(s, "properties", p);
            json_t *r = json_array();
            for (unsigned j = 0; j < k; j++)
                if (pick(2)) json_array_append_new(r, json_string(names[pick(5)]));
            json_object_set_new(s, "required", r);
            if (pick(3)) json_object_set_new(s, "additionalProperties", json_boolean(pick(4) == 0));
            break;
        }
        case 5: {
            json_t *e = json_array();
            unsigned k = pick(5);
            for (unsigned j = 0; j < k; j++) json_array_append_new(e, random_value(depth));
            json_object_set_new(s, "enum", e);
            break;
        }
        case 6:
            json_object_set_new(s, "const", random_value(depth));
            break;
        case 7: {
            json_t *a = json_array();
            unsigned k = pick(4);
            for (unsigned j = 0; j < k; j++) json_array_append_new(a, random_schema(depth + 1));
            json_object_set_new(s, "anyOf", a);
            break;
        }
        case 8:
            json_object_set_new(s, "$ref", json_string(refs[pick(6)]));
            break;
        case 9:
            json_object_set_new(s, "items", random_schema(depth + 1));
            break;
        case 10:
            json_object_set_new(s, pick(2) ? "minItems" : "maxItems",
                                json_integer(pick(4) == 0 ? 5000 : (json_int_t)pick(4)));
            break;
        case 11:
            json_object_set_new(s, "pattern", json_string(patterns[pick(5)]));
            break;
        case 12:
            json_object_set_new(s, "format", json_string(formats[pick(6)]));
            break;
        case 13:
            json_object_set_new(s, "description", json_string("d"));
            break;
        case 14:
            json_object_set_new(s, pick(2) ? "minLength" : "oneOf", json_integer(1));
            break;
        default:
            json_object_set_new(s, "type", json_string("string"));
            break;
        }
    }
    return s;
}

/* Draws up to max_steps tokens from the masks; the decoded output when it may end, else NULL. */
static char *draw(grammar *g, int max_steps, size_t *len) {
    grammar_matcher *m = grammar_matcher_new(g, V);
    uint32_t *mask = malloc(grammar_mask_words(V) * 4);
    ivec toks = {0};
    char *text = NULL;
    for (int step = 0; step < max_steps && !grammar_matcher_can_end(m); step++) {
        grammar_matcher_fill_mask(m, mask);
        size_t words = grammar_mask_words(V), total = 0;
        for (size_t w = 0; w < words; w++) total += (size_t)__builtin_popcount(mask[w]);
        CHECK(total > 0, "an empty mask before the end");
        if (!total) break;
        size_t k = rng_next(&R) % total, w = 0;
        while (k >= (size_t)__builtin_popcount(mask[w])) k -= (size_t)__builtin_popcount(mask[w++]);
        uint32_t bits = mask[w];
        while (k--) bits &= bits - 1;
        int32_t tok = (int32_t)(w * 32 + (size_t)__builtin_ctz(bits));
        CHECK(grammar_matcher_advance_token(m, tok) == 0, "masked token refused: %s", err_msg());
        ivec_push(&toks, tok);
    }
    if (grammar_matcher_can_end(m)) tokenizer_decode(T, toks.v, toks.len, &text, len);
    ivec_free(&toks);
    free(mask);
    grammar_matcher_free(m);
    return text;
}

static void random_schemas(const char *dir) {
    char path[256];
    snprintf(path, sizeof path, "%s/outputs.jsonl", dir);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "open %s", path);
    if (!f) return;
    int compiled = 0, outputs = 0;
    double worst = 0;
    for (int i = 0; i < n_schemas; i++) {
        json_t *s = random_schema(0);
        if (pick(2))
            json_object_set_new(
                s, "$defs", json_pack("{s:o,s:o}", "a", random_schema(1), "b", random_schema(1)));
        char *txt = json_dumps(s, JSON_COMPACT);
        double t0 = now_seconds();
        grammar *g = grammar_compile_json_schema(txt, strlen(txt), NULL);
        double dt = now_seconds() - t0;
        if (dt > worst) worst = dt;
        CHECK(g || strlen(err_msg()) > 0, "refusal without a message: %s", txt);
        if (g) {
            compiled++;
            size_t len;
            char *out = draw(g, 300, &len);
            if (out) {
                json_t *line =
                    json_pack("{s:i,s:O,s:s%}", "case", i, "schema", s, "output", out, len);
                CHECK(line != NULL, "schema %d: output is not UTF-8", i);
                char *l = line ? json_dumps(line, JSON_COMPACT) : NULL;
                if (l) fprintf(f, "%s\n", l), outputs++;
                free(l);
                json_decref(line);
                free(out);
            }
            grammar_free(g);
        }
        free(txt);
        json_decref(s);
    }
    fclose(f);
    fprintf(stderr, "random schemas: %d, %d compiled, %d outputs, slowest compile %.1f ms\n",
            n_schemas, compiled, outputs, 1e3 * worst);
    CHECK(worst < 2.0, "a schema took %.2f s to compile or refuse", worst);
    CHECK(compiled > 50 && outputs > 20, "too few random schemas compiled (%d) or ended (%d)",
          compiled, outputs);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "node '%s/tests/node/grammar_validate.js' '%s'", GPTOSS_SOURCE_DIR,
             path);
    int rc = system(cmd);
    CHECK(rc == 0, "ajv: some outputs of random schemas do not validate");
    if (rc == 0) unlink(path);
}

int main(void) {
    const char *seed = getenv("GRAMMAR_FUZZ_SEED"), *count = getenv("GRAMMAR_FUZZ_SCHEMAS");
    rng_seed(&R, seed ? strtoull(seed, NULL, 10) : 2026);
    if (count) n_schemas = atoi(count);
    char *path = tokenizer_find_json(NULL);
    if (path) {
        T = tokenizer_load(path);
        free(path);
        V = T ? grammar_vocab_new(T) : NULL;
    }
    random_regexes();
    if (V) {
        char dir[] = "/tmp/gptoss-grammar-fuzz-XXXXXX";
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        random_schemas(dir);
        rmdir(dir);
    } else {
        fprintf(stderr, "SKIP (schemas with masks): no tokenizer\n");
    }
    grammar_vocab_free(V);
    tokenizer_free(T);
    return check_report("test_grammar_fuzz");
}
