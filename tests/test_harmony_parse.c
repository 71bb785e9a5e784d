/* The streaming harmony parser: the reference's parsing cases (openai/harmony tests/test_harmony.py
 * and src/tests.rs, golden streams in tests/fixtures/harmony-golden), malformed and truncated
 * output, UTF-8 split across tokens, and a fuzzer that checks the event invariants on random token
 * streams.
 *
 * Ordinary tokens need bytes. Two vocabularies stand in for the tokenizer here:
 *   - REAL_IDS: the bytes of exactly the o200k_harmony ids that the golden id streams use, read
 * once from tokenizer.json (hand-made, test-only; the full tokenizer lives in src/tokenizer/bpe.c);
 *   - a fake vocabulary that gives each distinct byte string an id on the fly, used to "tokenize"
 * the golden texts and made-up streams (special-token spellings become the special ids). Chunking
 * text into 1, 2, 3 ... byte tokens also splits UTF-8 characters across tokens on purpose. */
#include "base/error.h"
#include "base/files.h"
#include "base/rng.h"
#include "base/vec.h"
#include "check.h"
#include "harmony/harmony_parse.h"
#include "harmony/harmony_special.h"
#include "harmony/harmony_utf8.h"

#include <stdlib.h>
#include <string.h>

#define GOLDEN_DIR GPTOSS_SOURCE_DIR "/tests/fixtures/harmony-golden/"
#define N(a)       (sizeof(a) / sizeof((a)[0]))
#define FFFD       "\xEF\xBF\xBD"

/* ---- vocabularies -----------------------------------------------------------------------------
 */

/* Bytes of the ordinary ids in test_simple_reasoning_response.txt, test_simple_tool_call.txt and
 * the tool-call stream of src/tests.rs (o200k_harmony, from tokenizer.json). */
static const struct {
    int32_t id;
    const char *bytes;
} REAL_IDS[] = {
    {13, "."},
    {17, "2"},
    {19, "4"},
    {25, ":"},
    {28, "="},
    {220, " "},
    {290, " the"},
    {306, " in"},
    {314, " ="},
    {316, " to"},
    {382, " is"},
    {392, " \""},
    {659, " +"},
    {1199, " use"},
    {1243, "\":"},
    {1309, " need"},
    {1416, " We"},
    {1844, "User"},
    {3490, " code"},
    {4584, " tool"},
    {4827, "What"},
    {6052, " answer"},
    {7693, "location"},
    {10848, "{\""},
    {11122, " weather"},
    {12295, " Simple"},
    {16842, "?\""},
    {17196, "final"},
    {18583, "\"}"},
    {29712, "lookup"},
    {31064, " asks"},
    {35644, "analysis"},
    {37342, " lookup"},
    {40510, " Tokyo"},
    {51441, " Provide"},
    {81645, " arithmetic"},
    {170154, "_weather"},
    {173781, "assistant"},
    {173844, "Tokyo"},
};

static const char *real_bytes(void *ctx, int32_t id, size_t *len) {
    (void)ctx;
    for (size_t i = 0; i < N(REAL_IDS); i++) {
        if (REAL_IDS[i].id == id) {
            *len = strlen(REAL_IDS[i].bytes);
            return REAL_IDS[i].bytes;
        }
    }
    return NULL;
}

typedef struct {
    char **bytes;
    size_t *lens;
    size_t n, cap;
} fake_vocab;

static int32_t fake_id(fake_vocab *v, const char *b, size_t n) {
    for (size_t i = 0; i < v->n; i++)
        if (v->lens[i] == n && memcmp(v->bytes[i], b, n) == 0) return (int32_t)i;
    if (v->n == v->cap) {
        v->cap = v->cap ? 2 * v->cap : 64;
        v->bytes = xrealloc(v->bytes, v->cap * sizeof *v->bytes);
        v->lens = xrealloc(v->lens, v->cap * sizeof *v->lens);
    }
    v->bytes[v->n] = xstrndup(b, n);
    v->lens[v->n] = n;
    return (int32_t)v->n++;
}

static const char *fake_bytes(void *ctx, int32_t id, size_t *len) {
    fake_vocab *v = ctx;
    if (id < 0 || (size_t)id >= v->n) return NULL;
    *len = v->lens[id];
    return v->bytes[id];
}

static void fake_free(fake_vocab *v) {
    for (size_t i = 0; i < v->n; i++) free(v->bytes[i]);
    free(v->bytes);
    free(v->lens);
    memset(v, 0, sizeof *v);
}

static const int32_t SPECIALS[] = {HARMONY_TOK_START,   HARMONY_TOK_END,       HARMONY_TOK_MESSAGE,
                                   HARMONY_TOK_CHANNEL, HARMONY_TOK_CONSTRAIN, HARMONY_TOK_RETURN,
                                   HARMONY_TOK_CALL};

/* Text with special-token spellings → ids; ordinary text cut into `chunk`-byte fake tokens (0: one
 * token per run of text). */
static void tokenize(fake_vocab *v, const char *text, size_t chunk, ivec *out) {
    size_t n = strlen(text), i = 0, run = 0;
    while (i <= n) {
        int32_t special = -1;
        size_t slen = 0;
        for (size_t k = 0; i < n && k < N(SPECIALS); k++) {
            const char *name = harmony_special_name(SPECIALS[k]);
            if (strncmp(text + i, name, strlen(name)) == 0)
                special = SPECIALS[k], slen = strlen(name);
        }
        if (special >= 0 || i == n) {
            for (size_t a = run; a < i;) {
                size_t m = chunk && i - a > chunk ? chunk : i - a;
                ivec_push(out, fake_id(v, text + a, m));
                a += m;
            }
            if (special >= 0) ivec_push(out, special);
            i += special >= 0 ? slen : 1;
            run = i;
        } else {
            i++;
        }
    }
}

/* ---- collecting events, checking their invariants ----------------------------------------------
 */

typedef struct {
    harmony_role role;
    char *author, *channel, *recipient, *ctype, *function;
    harmony_kind kind;
    bool malformed;
    hsb content;
    harmony_end_reason end;
    bool ended;
    size_t content_events;
} rec;

typedef struct {
    rec *m;
    size_t n, cap;
    bool open;
    int violations;
} collector;

static char *dup_or_null(const char *s) {
    return s ? xstrdup(s) : NULL;
}
static bool same_str(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

static void violation(collector *c, const char *what) {
    if (c->violations++ < 5) fprintf(stderr, "  event invariant broken: %s\n", what);
}

static void on_event(void *ctx, const harmony_event *ev) {
    collector *c = ctx;
    switch (ev->kind) {
    case HARMONY_EV_MESSAGE_START: {
        if (c->open) violation(c, "START while a message is open");
        if (ev->message != c->n) violation(c, "START with a wrong message index");
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 8;
            c->m = xrealloc(c->m, c->cap * sizeof *c->m);
        }
        const harmony_header *h = ev->header;
        rec *r = &c->m[c->n++];
        memset(r, 0, sizeof *r);
        r->role = h->role, r->kind = h->kind, r->malformed = h->malformed;
        r->author = dup_or_null(h->author), r->channel = dup_or_null(h->channel);
        r->recipient = dup_or_null(h->recipient), r->ctype = dup_or_null(h->content_type);
        r->function = dup_or_null(h->function);
        c->open = true;
        break;
    }
    case HARMONY_EV_CONTENT:
        if (!c->open || ev->message + 1 != c->n) {
            violation(c, "CONTENT outside its message");
            return;
        }
        if (!ev->len) violation(c, "empty CONTENT event");
        if (!harmony_utf8_valid(ev->text, ev->len)) violation(c, "CONTENT is not valid UTF-8");
        hsb_addn(&c->m[c->n - 1].content, ev->text, ev->len);
        c->m[c->n - 1].content_events++;
        break;
    case HARMONY_EV_MESSAGE_END:
        if (!c->open || ev->message + 1 != c->n) {
            violation(c, "END outside its message");
            return;
        }
        /* The header must still be intact at the end (it lives until END returns). */
        if (!same_str(ev->header->channel, c->m[c->n - 1].channel) ||
            !same_str(ev->header->recipient, c->m[c->n - 1].recipient))
            violation(c, "header changed between START and END");
        c->m[c->n - 1].end = ev->end;
        c->m[c->n - 1].ended = true;
        c->open = false;
        break;
    }
}

static void collector_free(collector *c) {
    for (size_t i = 0; i < c->n; i++) {
        rec *r = &c->m[i];
        free(r->author), free(r->channel), free(r->recipient), free(r->ctype), free(r->function);
        hsb_free(&r->content);
    }
    free(c->m);
    memset(c, 0, sizeof *c);
}

/* Parses a token stream to the end (finish included). */
static void parse(const int32_t *toks, size_t n, bool after_start, harmony_token_bytes_fn bytes,
                  void *bytes_ctx, collector *c) {
    harmony_parser p;
    harmony_parser_config cfg = {bytes, bytes_ctx, on_event, c, after_start};
    harmony_parser_init(&p, &cfg);
    for (size_t i = 0; i < n; i++) harmony_parser_feed(&p, toks[i]);
    harmony_parser_finish(&p);
    harmony_parser_feed(&p, HARMONY_TOK_START); /* ignored after finish */
    harmony_parser_free(&p);
    if (c->open) violation(c, "a message is still open after finish");
}

static void parse_text(const char *text, size_t chunk, bool after_start, collector *c) {
    fake_vocab v = {0};
    ivec toks = {0};
    tokenize(&v, text, chunk, &toks);
    parse(toks.v, toks.len, after_start, fake_bytes, &v, c);
    ivec_free(&toks);
    fake_free(&v);
}

/* Expected message, NULL fields mean "absent". */
typedef struct {
    harmony_role role;
    const char *author, *channel, *recipient, *ctype;
    const char *content;
    harmony_kind kind;
    harmony_end_reason end;
} want_msg;

static void check_messages(const char *what, const collector *c, const want_msg *w, size_t n) {
    CHECK(c->violations == 0, "%s: %d event invariant violations", what, c->violations);
    CHECK(c->n == n, "%s: %zu messages, want %zu", what, c->n, n);
    for (size_t i = 0; i < c->n && i < n; i++) {
        const rec *r = &c->m[i];
        CHECK(r->role == w[i].role, "%s[%zu]: role %s", what, i, harmony_role_name(r->role));
        CHECK(same_str(r->author, w[i].author), "%s[%zu]: author %s", what, i, r->author);
        CHECK(same_str(r->channel, w[i].channel), "%s[%zu]: channel %s", what, i, r->channel);
        CHECK(same_str(r->recipient, w[i].recipient), "%s[%zu]: recipient %s", what, i,
              r->recipient);
        CHECK(same_str(r->ctype, w[i].ctype), "%s[%zu]: content type %s", what, i, r->ctype);
        CHECK(same_str(hsb_str(&r->content), w[i].content), "%s[%zu]: content '%s'", what, i,
              hsb_str(&r->content));
        CHECK(r->kind == w[i].kind, "%s[%zu]: kind %s", what, i, harmony_kind_name(r->kind));
        CHECK(r->end == w[i].end, "%s[%zu]: end %s", what, i, harmony_end_name(r->end));
    }
}

#define A HARMONY_ROLE_ASSISTANT

/* ---- the reference's cases ----------------------------------------------------------------------
 */

static int32_t *load_ids(const char *name, size_t *n) {
    char *path = xasprintf("%s%s", GOLDEN_DIR, name);
    char *s = file_read_all(path, NULL);
    free(path);
    CHECK(s != NULL, "%s: %s", name, err_msg());
    ivec v = {0};
    for (char *p = s, *end; s && *p; p = end) {
        long x = strtol(p, &end, 10);
        if (end == p) break;
        ivec_push(&v, (int32_t)x);
    }
    free(s);
    *n = v.len;
    return v.v;
}

static void test_simple_reasoning_response(void) {
    size_t n;
    int32_t *ids = load_ids("test_simple_reasoning_response.txt", &n);
    collector c = {0};
    parse(ids, n, true, real_bytes, NULL, &c);
    const want_msg w[] = {
        {A, NULL, "analysis", NULL, NULL,
         "User asks: \"What is 2 + 2?\" Simple arithmetic. Provide answer.", HARMONY_KIND_REASONING,
         HARMONY_END_RETURN},
        {A, NULL, "final", NULL, NULL, "2 + 2 = 4.", HARMONY_KIND_FINAL, HARMONY_END_TRUNCATED},
    };
    check_messages("simple_reasoning_response", &c, w, N(w));
    collector_free(&c);
    free(ids);
}

static void test_simple_tool_call(void) {
    /* The golden file (recipient before the channel, first message ending in <|return|>) and the
     * stream in src/tests.rs (recipient after the channel, <|end|>) mean the same two messages. */
    static const int32_t rust[] = {200005, 35644,  200008, 1844,   31064, 25,     392,    4827,
                                   382,    290,    11122,  306,    40510, 16842,  1416,   1309,
                                   316,    1199,   37342,  170154, 4584,  13,     200007, 200006,
                                   173781, 200005, 35644,  316,    28,    29712,  170154, 3490,
                                   200008, 10848,  7693,   1243,   392,   173844, 18583};
    size_t n;
    int32_t *ids = load_ids("test_simple_tool_call.txt", &n);
    for (int variant = 0; variant < 2; variant++) {
        collector c = {0};
        if (variant == 0)
            parse(ids, n, true, real_bytes, NULL, &c);
        else
            parse(rust, N(rust), true, real_bytes, NULL, &c);
        const want_msg w[] = {
            {A, NULL, "analysis", NULL, NULL,
             "User asks: \"What is the weather in Tokyo?\" We need to use lookup_weather tool.",
             HARMONY_KIND_REASONING, variant == 0 ? HARMONY_END_RETURN : HARMONY_END_END},
            {A, NULL, "analysis", "lookup_weather", "code", "{\"location\": \"Tokyo\"}",
             HARMONY_KIND_TOOL_CALL, HARMONY_END_TRUNCATED},
        };
        check_messages(variant == 0 ? "simple_tool_call (golden)" : "simple_tool_call (tests.rs)",
                       &c, w, N(w));
        CHECK(c.n == 2 && same_str(c.m[1].function, "lookup_weather"), "tool call function name");
        collector_free(&c);
    }
    free(ids);
}

static char *load_text(const char *name) {
    char *path = xasprintf("%s%s", GOLDEN_DIR, name);
    size_t len = 0;
    char *s = file_read_all(path, &len);
    free(path);
    CHECK(s != NULL, "%s: %s", name, err_msg());
    while (s && len && (s[len - 1] == '\n' || s[len - 1] == ' ')) s[--len] = 0;
    return s;
}

static void test_streamable_parser(void) {
    char *text = load_text("test_streamable_parser.txt");
    if (!text) return;
    const char *start = strstr(text, "<|message|>") + strlen("<|message|>");
    const char *end = strstr(text, "<|end|>");
    char *analysis = xstrndup(start, (size_t)(end - start));
    const want_msg w[] = {
        {A, NULL, "analysis", NULL, NULL, analysis, HARMONY_KIND_REASONING, HARMONY_END_END},
        {A, NULL, "commentary", "browser.search", "code",
         "{\"query\": \"current US president July 2025\", \"topn\": 10, \"source\": \"news\"}",
         HARMONY_KIND_BUILTIN_CALL, HARMONY_END_CALL},
        {HARMONY_ROLE_TOOL, "browser.search", "commentary", "assistant", NULL,
         "{\"result\": \"https://openai.com/\"}", HARMONY_KIND_TOOL_RESULT, HARMONY_END_END},
    };
    static const size_t chunks[] = {0, 1, 2, 3, 5, 16};
    for (size_t k = 0; k < N(chunks); k++) {
        collector c = {0};
        parse_text(text, chunks[k], true, &c);
        char what[64];
        snprintf(what, sizeof what, "streamable_parser (chunk %zu)", chunks[k]);
        check_messages(what, &c, w, N(w));
        collector_free(&c);
    }
    free(analysis);
    free(text);
}

static void test_tool_response_parsing(void) {
    char *text = load_text("test_tool_response_parsing.txt");
    if (!text) return;
    collector c = {0};
    parse_text(text, 3, false, &c);
    const want_msg w[] = {{HARMONY_ROLE_TOOL, "browser.search", "commentary", "assistant", NULL,
                           "{\"result\": \"https://openai.com/\"}", HARMONY_KIND_TOOL_RESULT,
                           HARMONY_END_TRUNCATED}};
    check_messages("tool_response_parsing", &c, w, N(w));
    collector_free(&c);
    free(text);
}

static void test_constrain_forms(void) {
    static const char *const texts[] = {
        "<|start|>assistant<|channel|>commentary "
        "to=functions.get_weather<|constrain|>json<|message|>"
        "{\"latitude\":48.8566,\"longitude\":2.3522}<|call|>",
        "<|start|>assistant "
        "to=functions.get_weather<|channel|>commentary<|constrain|>json<|message|>"
        "{\"latitude\":48.8566,\"longitude\":2.3522}<|call|>",
        "<|start|>assistant to=functions.get_weather<|channel|>commentary "
        "<|constrain|>json<|message|>"
        "{\"latitude\":48.8566,\"longitude\":2.3522}<|call|>",
    };
    const want_msg w[] = {{A, NULL, "commentary", "functions.get_weather", "<|constrain|>json",
                           "{\"latitude\":48.8566,\"longitude\":2.3522}", HARMONY_KIND_TOOL_CALL,
                           HARMONY_END_CALL}};
    for (size_t i = 0; i < N(texts); i++) {
        for (size_t chunk = 0; chunk < 4; chunk++) {
            collector c = {0};
            parse_text(texts[i], chunk, false, &c);
            check_messages("constrain form", &c, w, N(w));
            CHECK(c.n == 1 && same_str(c.m[0].function, "get_weather") && !c.m[0].malformed,
                  "constrain form %zu: function name", i);
            collector_free(&c);
        }
    }
}

static void test_missing_message_token(void) {
    {
        collector c = {0};
        parse_text(
            "I must refuse<|end|><|start|>assistant<|channel|>analysis<|message|>We must refuse"
            "<|end|><|start|>assistant<|channel|>final<|message|>I'm sorry, but I can't help "
            "with that.<|return|>",
            2, true, &c);
        const want_msg w[] = {
            {A, NULL, NULL, NULL, NULL, "I must refuse", HARMONY_KIND_FINAL, HARMONY_END_END},
            {A, NULL, "analysis", NULL, NULL, "We must refuse", HARMONY_KIND_REASONING,
             HARMONY_END_END},
            {A, NULL, "final", NULL, NULL, "I'm sorry, but I can't help with that.",
             HARMONY_KIND_FINAL, HARMONY_END_RETURN},
        };
        check_messages("missing <|message|>", &c, w, N(w));
        CHECK(c.n == 3 && c.m[0].malformed && !c.m[1].malformed, "salvaged header is flagged");
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("<|channel|>analysis I must refuse<|end|><|start|>assistant<|channel|>analysis"
                   "<|message|>We must refuse<|end|>",
                   1, true, &c);
        const want_msg w[] = {
            {A, NULL, "analysis", NULL, NULL, "I must refuse", HARMONY_KIND_REASONING,
             HARMONY_END_END},
            {A, NULL, "analysis", NULL, NULL, "We must refuse", HARMONY_KIND_REASONING,
             HARMONY_END_END},
        };
        check_messages("missing <|message|> after a channel", &c, w, N(w));
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("... Let's use the tool.<|end|><|start|>assistant to=functions.get_weather"
                   "<|channel|>commentary json<|message|>{\"location\": \"Tokyo\"}<|call|>",
                   0, true, &c);
        const want_msg w[] = {
            {A, NULL, NULL, NULL, NULL, "... Let's use the tool.", HARMONY_KIND_FINAL,
             HARMONY_END_END},
            {A, NULL, "commentary", "functions.get_weather", "json", "{\"location\": \"Tokyo\"}",
             HARMONY_KIND_TOOL_CALL, HARMONY_END_CALL},
        };
        check_messages("missing <|message|> before a tool call", &c, w, N(w));
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("<|channel|>commentary Hello<|end|>", 0, true, &c);
        const want_msg w[] = {
            {A, NULL, "commentary", NULL, NULL, "Hello", HARMONY_KIND_PREAMBLE, HARMONY_END_END}};
        check_messages("commentary without <|message|>", &c, w, N(w));
        collector_free(&c);
    }
}

/* ---- UTF-8 across tokens
 * ------------------------------------------------------------------------- */

/* A stream: the prefix text, then the given raw tokens (fake ids for byte strings), then the
 * suffix. */
static void parse_raw(const char *prefix, const char *const *raw, size_t n_raw, const char *suffix,
                      collector *c) {
    fake_vocab v = {0};
    ivec toks = {0};
    tokenize(&v, prefix, 0, &toks);
    for (size_t i = 0; i < n_raw; i++) {
        if (raw[i] == NULL)
            ivec_push(&toks, 150000); /* an id the fake vocabulary does not know */
        else
            ivec_push(&toks, fake_id(&v, raw[i], strlen(raw[i])));
    }
    tokenize(&v, suffix, 0, &toks);
    parse(toks.v, toks.len, false, fake_bytes, &v, c);
    ivec_free(&toks);
    fake_free(&v);
}

static void check_content(const char *what, const collector *c, const char *want) {
    CHECK(c->violations == 0, "%s: invariant violations", what);
    CHECK(c->n >= 1 && strcmp(hsb_str(&c->m[0].content), want) == 0, "%s: content '%s'", what,
          c->n ? hsb_str(&c->m[0].content) : "(no message)");
}

static void test_utf8(void) {
    const char *pre = "<|start|>assistant<|message|>";
    const char *tok9552 = " \xF0\x9F"; /* o200k id 9552: a space and the first half of an emoji */
    {
        const char *raw[] = {tok9552, tok9552, "worked"};
        collector c = {0};
        parse_raw(pre, raw, N(raw), "<|end|>", &c);
        check_content("invalid sequences", &c, " " FFFD " " FFFD "worked");
        collector_free(&c);
    }
    {
        const char *raw[] = {tok9552, "X", "Y"};
        collector c = {0};
        parse_raw(pre, raw, N(raw), "<|end|>", &c);
        check_content("invalid then valid", &c, " " FFFD "XY");
        collector_free(&c);
    }
    {
        const char *raw[] = {tok9552, "Hi"};
        collector c = {0};
        parse_raw(pre, raw, N(raw), "", &c);
        check_content("flush at finish", &c, " " FFFD "Hi");
        CHECK(c.n == 1 && c.m[0].end == HARMONY_END_TRUNCATED, "cut output is truncated");
        collector_free(&c);
    }
    {
        const char *raw[] = {tok9552, " interesting", " story"};
        collector c = {0};
        parse_raw(pre, raw, N(raw), "", &c);
        check_content("no EOS marker", &c, " " FFFD " interesting story");
        collector_free(&c);
    }
    {
        /* 💖 = F0 9F 92 96 split over two tokens: nothing goes out until it is whole. */
        const char *raw[] = {"\xF0\x9F", "\x92\x96"};
        collector c = {0};
        parse_raw(pre, raw, N(raw), "<|end|>", &c);
        check_content("emoji over two tokens", &c, "\xF0\x9F\x92\x96");
        CHECK(c.n == 1 && c.m[0].content_events == 1, "one delta for the whole emoji");
        collector_free(&c);
    }
    {
        /* Held-back bytes of one message never leak into the next. */
        const char *raw[] = {tok9552, tok9552};
        collector c = {0};
        parse_raw(pre, raw, N(raw), "<|end|><|start|>assistant<|message|>Hi<|end|>", &c);
        CHECK(c.n == 2 && strcmp(hsb_str(&c.m[1].content), "Hi") == 0, "second message is clean");
        CHECK(c.n == 2 && strcmp(hsb_str(&c.m[0].content), " " FFFD " " FFFD) == 0,
              "first message: '%s'", c.n ? hsb_str(&c.m[0].content) : "");
        collector_free(&c);
    }
    {
        const char *raw[] = {"Practice invalid token handling.", NULL};
        collector c = {0};
        parse_raw("<|start|>assistant<|channel|>analysis<|message|>", raw, N(raw), "", &c);
        check_content("unknown id", &c, "Practice invalid token handling." FFFD);
        collector_free(&c);
    }
    {
        const char *tricky =
            "Hello M\xC3\xBCller, \xCE\x93\xCE\xB5\xCE\xB9\xCE\xAC \xCF\x83\xCE\xBF\xCF\x85, "
            "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD7\xA9\xD7\x9C\xD7\x95\xD7\x9D, "
            "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87, "
            "\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF, "
            "\xE4\xBD\xA0\xE5\xA5\xBD. "
            "na\xC3\xAFve vs. nai\xCC\x88ve. Emojis: "
            "\xF0\x9F\x98\x8A\xF0\x9F\x91\x8B\xF0\x9F\x8F\xBE"
            "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7"
            "\xF0\x9F\x87\xBA\xF0\x9F\x87\xB8.";
        char *text = xasprintf("<|start|>assistant<|message|>%s<|end|>", tricky);
        for (size_t chunk = 1; chunk <= 5; chunk++) {
            collector c = {0};
            parse_text(text, chunk, false, &c);
            check_content("tricky UTF-8", &c, tricky);
            collector_free(&c);
        }
        free(text);
    }
}

/* ---- malformed and truncated streams ------------------------------------------------------------
 */

static void test_malformed(void) {
    {
        collector c = {0};
        parse_text("hello there<|end|>", 0, false, &c);
        const want_msg w[] = {
            {A, NULL, NULL, NULL, NULL, "hello there", HARMONY_KIND_FINAL, HARMONY_END_END}};
        check_messages("text before any <|start|>", &c, w, N(w));
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("<|channel|>final<|message|>hi<|return|>", 0, false, &c);
        const want_msg w[] = {
            {A, NULL, "final", NULL, NULL, "hi", HARMONY_KIND_FINAL, HARMONY_END_RETURN}};
        check_messages("<|channel|> without <|start|>", &c, w, N(w));
        CHECK(c.n == 1 && c.m[0].malformed, "implicit start is flagged");
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("<|start|>assistant<|message|>no channel<|end|>", 0, false, &c);
        const want_msg w[] = {
            {A, NULL, NULL, NULL, NULL, "no channel", HARMONY_KIND_FINAL, HARMONY_END_END}};
        check_messages("missing channel", &c, w, N(w));
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("<|start|>assistant<|channel|><|message|>x<|end|>", 0, false, &c);
        const want_msg w[] = {
            {A, NULL, NULL, NULL, NULL, "x", HARMONY_KIND_FINAL, HARMONY_END_END}};
        check_messages("empty channel", &c, w, N(w));
        CHECK(c.n == 1 && c.m[0].malformed, "empty channel is flagged");
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("<|channel|>final<|message|>The answer is 4", 1, true, &c);
        const want_msg w[] = {{A, NULL, "final", NULL, NULL, "The answer is 4", HARMONY_KIND_FINAL,
                               HARMONY_END_TRUNCATED}};
        check_messages("cut by max_tokens in content", &c, w, N(w));
        collector_free(&c);
    }
    {
        collector c = {0};
        parse_text("<|channel|>analysis<|message|>done<|end|><|start|>assistant<|channel|>fi", 1,
                   true, &c);
        const want_msg w[] = {
            {A, NULL, "analysis", NULL, NULL, "done", HARMONY_KIND_REASONING, HARMONY_END_END}};
        check_messages("cut by max_tokens in a header", &c, w, N(w));
        collector_free(&c);
    }
    {
        /* <|start|> and <|channel|> inside content: the model skipped a terminator. */
        collector c = {0};
        parse_text("<|channel|>analysis<|message|>think<|channel|>final<|message|>four"
                   "<|start|>assistant<|channel|>final<|message|>4<|return|>",
                   0, true, &c);
        const want_msg w[] = {
            {A, NULL, "analysis", NULL, NULL, "think", HARMONY_KIND_REASONING,
             HARMONY_END_IMPLICIT},
            {A, NULL, "final", NULL, NULL, "four", HARMONY_KIND_FINAL, HARMONY_END_IMPLICIT},
            {A, NULL, "final", NULL, NULL, "4", HARMONY_KIND_FINAL, HARMONY_END_RETURN},
        };
        check_messages("missing terminators", &c, w, N(w));
        collector_free(&c);
    }
    {
        /* Reserved and other specials are ignored wherever they appear; a stray terminator too. */
        fake_vocab v = {0};
        ivec t = {0};
        tokenize(&v, "<|end|><|start|>assistant", 0, &t);
        ivec_push(&t, 200013);
        tokenize(&v, "<|channel|>final<|message|>a", 0, &t);
        ivec_push(&t, 199999);
        ivec_push(&t, 200000);
        ivec_push(&t, HARMONY_TOK_CONSTRAIN);
        ivec_push(&t, HARMONY_TOK_MESSAGE);
        tokenize(&v, "b<|end|>", 0, &t);
        collector c = {0};
        parse(t.v, t.len, false, fake_bytes, &v, &c);
        const want_msg w[] = {
            {A, NULL, "final", NULL, NULL, "ab", HARMONY_KIND_FINAL, HARMONY_END_END}};
        check_messages("reserved specials", &c, w, N(w));
        collector_free(&c);
        ivec_free(&t);
        fake_free(&v);
    }
    {
        /* A header that never ends streams as content once it is too long to be a header. */
        hsb text = {0};
        hsb_add(&text, "<|start|>assistant<|channel|>final ");
        for (int i = 0; i < 400; i++) hsb_add(&text, "word ");
        hsb_add(&text, "end<|end|>");
        collector c = {0};
        parse_text(text.s, 7, false, &c);
        CHECK(c.violations == 0 && c.n == 1, "endless header: %zu messages", c.n);
        if (c.n == 1) {
            CHECK(same_str(c.m[0].channel, "final") && c.m[0].malformed, "endless header fields");
            CHECK(c.m[0].content.len == 400 * 5 + 3, "endless header content length %zu",
                  c.m[0].content.len);
            CHECK(c.m[0].content_events > 1, "endless header content is streamed");
        }
        collector_free(&c);
        hsb_free(&text);
    }
    {
        collector c = {0};
        parse_text(
            "<|start|>user:alice<|message|>hi<|end|><|start|>functions.get_weather<|message|>"
            "{}<|end|><|start|>assistant<|channel|>commentary <|constrain|>json<|message|>{}"
            "<|end|><|start|>assistant<|channel|>analysis to=python code<|message|>1+1<|call|>",
            0, false, &c);
        const want_msg w[] = {
            {HARMONY_ROLE_USER, "alice", NULL, NULL, NULL, "hi", HARMONY_KIND_OTHER,
             HARMONY_END_END},
            {HARMONY_ROLE_TOOL, "functions.get_weather", NULL, NULL, NULL, "{}",
             HARMONY_KIND_TOOL_RESULT, HARMONY_END_END},
            {A, NULL, "commentary", NULL, "<|constrain|>json", "{}", HARMONY_KIND_PREAMBLE,
             HARMONY_END_END},
            {A, NULL, "analysis", "python", "code", "1+1", HARMONY_KIND_BUILTIN_CALL,
             HARMONY_END_CALL},
        };
        check_messages("header forms", &c, w, N(w));
        collector_free(&c);
    }
}

/* ---- fuzzing ----------------------------------------------------------------------------------
 */

static const char *const WORDS[] = {"assistant",
                                    "user",
                                    "tool",
                                    "analysis",
                                    "final",
                                    "commentary",
                                    " to=functions.f",
                                    " to=",
                                    "to=browser.search",
                                    " json",
                                    " code",
                                    " ",
                                    "\n",
                                    "  ",
                                    "functions.f",
                                    ":x",
                                    "{\"a\": 1}",
                                    "hello"};

/* Random token streams made of harmony specials, reserved ids, unknown ids, header words and random
 * bytes (biased towards UTF-8 lead and continuation bytes). Whatever comes in, the events must pair
 * up and the content must be valid UTF-8. */
static void test_fuzz_invariants(void) {
    int bad_streams = 0;
    for (uint64_t seed = 1; seed <= 3000; seed++) {
        rng_t r;
        rng_seed(&r, seed);
        fake_vocab v = {0};
        ivec t = {0};
        size_t n = rng_next(&r) % 120;
        for (size_t i = 0; i < n; i++) {
            uint64_t x = rng_next(&r) % 100;
            if (x < 25) {
                ivec_push(&t, SPECIALS[rng_next(&r) % N(SPECIALS)]);
            } else if (x < 28) {
                static const int32_t odd[] = {199998, 199999, 200000, 200013,
                                              201087, 201088, -5,     150000};
                ivec_push(&t, odd[rng_next(&r) % N(odd)]);
            } else if (x < 60) {
                const char *w = WORDS[rng_next(&r) % N(WORDS)];
                ivec_push(&t, fake_id(&v, w, strlen(w)));
            } else {
                char b[4];
                size_t m = 1 + rng_next(&r) % 4;
                for (size_t k = 0; k < m; k++) {
                    uint64_t y = rng_next(&r) % 6;
                    b[k] = (char)(y == 0   ? 0x80 + rng_next(&r) % 0x40
                                  : y == 1 ? 0xC0 + rng_next(&r) % 0x40
                                  : y == 2 ? rng_next(&r) % 256
                                           : 0x20 + rng_next(&r) % 0x5F);
                }
                ivec_push(&t, fake_id(&v, b, m));
            }
        }
        collector c = {0};
        parse(t.v, t.len, rng_next(&r) % 2, fake_bytes, &v, &c);
        for (size_t i = 0; i < c.n; i++) {
            if (!c.m[i].ended) c.violations++;
            if (!harmony_utf8_valid(c.m[i].content.s ? c.m[i].content.s : "", c.m[i].content.len))
                c.violations++;
        }
        if (c.violations && bad_streams++ < 3)
            fprintf(stderr, "  fuzz seed %llu failed\n", (unsigned long long)seed);
        collector_free(&c);
        ivec_free(&t);
        fake_free(&v);
    }
    CHECK(bad_streams == 0, "fuzz: %d of 3000 streams broke an invariant", bad_streams);
}

/* Appends one random code point (1 to 4 bytes) as UTF-8. */
static void random_char(rng_t *r, hsb *out) {
    static const uint32_t lo[] = {0x20, 0x80, 0x800, 0xE000, 0x10000};
    static const uint32_t hi[] = {0x7E, 0x7FF, 0xD7FF, 0xFFFD, 0x10FFFF};
    int k = (int)(rng_next(r) % 5);
    uint32_t cp = lo[k] + (uint32_t)(rng_next(r) % (hi[k] - lo[k] + 1));
    char b[4];
    size_t n;
    if (cp < 0x80)
        b[0] = (char)cp, n = 1;
    else if (cp < 0x800)
        b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 63)), n = 2;
    else if (cp < 0x10000)
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 63)),
        b[2] = (char)(0x80 | (cp & 63)), n = 3;
    else
        b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 63)),
        b[2] = (char)(0x80 | ((cp >> 6) & 63)), b[3] = (char)(0x80 | (cp & 63)), n = 4;
    hsb_addn(out, b, n);
}

/* Well-formed messages whose valid UTF-8 content is cut into random byte tokens (splitting
 * characters) with reserved specials sprinkled in: every content byte must come out, unchanged and
 * in order. */
static void test_fuzz_content_preserved(void) {
    int bad = 0;
    for (uint64_t seed = 1; seed <= 500; seed++) {
        rng_t r;
        rng_seed(&r, seed * 7919);
        fake_vocab v = {0};
        ivec t = {0};
        size_t n_msgs = 1 + rng_next(&r) % 4;
        hsb *want = xcalloc(n_msgs, sizeof *want);
        for (size_t m = 0; m < n_msgs; m++) {
            tokenize(&v,
                     m % 2 ? "<|start|>assistant<|channel|>final<|message|>"
                           : "<|start|>assistant<|channel|>analysis<|message|>",
                     0, &t);
            size_t chars = rng_next(&r) % 60;
            for (size_t k = 0; k < chars; k++) random_char(&r, &want[m]);
            for (size_t a = 0; a < want[m].len;) {
                size_t len = 1 + rng_next(&r) % 6;
                if (len > want[m].len - a) len = want[m].len - a;
                ivec_push(&t, fake_id(&v, want[m].s + a, len));
                if (rng_next(&r) % 10 == 0) ivec_push(&t, 200013 + (int32_t)(rng_next(&r) % 100));
                a += len;
            }
            ivec_push(&t, m + 1 == n_msgs ? HARMONY_TOK_RETURN : HARMONY_TOK_END);
        }
        collector c = {0};
        parse(t.v, t.len, false, fake_bytes, &v, &c);
        bool ok = c.violations == 0 && c.n == n_msgs;
        for (size_t m = 0; ok && m < n_msgs; m++)
            ok = c.m[m].content.len == want[m].len &&
                 memcmp(hsb_str(&c.m[m].content), hsb_str(&want[m]), want[m].len) == 0;
        if (!ok && bad++ < 3)
            fprintf(stderr, "  content fuzz seed %llu failed\n", (unsigned long long)seed);
        for (size_t m = 0; m < n_msgs; m++) hsb_free(&want[m]);
        free(want);
        collector_free(&c);
        ivec_free(&t);
        fake_free(&v);
    }
    CHECK(bad == 0, "content fuzz: %d of 500 streams lost or changed content", bad);
}

int main(void) {
    test_simple_reasoning_response();
    test_simple_tool_call();
    test_streamable_parser();
    test_tool_response_parsing();
    test_constrain_forms();
    test_missing_message_token();
    test_utf8();
    test_malformed();
    test_fuzz_invariants();
    test_fuzz_content_preserved();
    return check_report("test_harmony_parse");
}
