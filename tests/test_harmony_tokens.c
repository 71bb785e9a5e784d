/* Harmony at the token level: the renderer's pieces → token ids, and those ids back through the
 * parser.
 *
 * Expected ids: spec §5.2 (test_simple_convo, 64 ids) and spec §7 (test_does_not_drop_if_ongoing_
 * analysis, 79 ids), computed by the spec's authors with a reference tokenizer.
 *
 * Until src/tokenizer/bpe.c is merged, text is encoded here by a HAND-MADE, TEST-ONLY LOOKUP: each
 * exact text run these two conversations produce is mapped to its ids (cut out of the spec's
 * lists), and each of those ids to its bytes (read from o200k_harmony's tokenizer.json). It is
 * checked for consistency (a run's ids spell the run) and it fails on any text run it does not know
 * — so the test does check where the renderer cuts text runs and where it puts special tokens,
 * which is what decides the ids once the real encoder is used. Build with
 * real_tokenizer_checks below runs the same checks through the real tokenizer (src/tokenizer/bpe.c)
 * when it is installed. */
#include "base/error.h"
#include "base/vec.h"
#include "check.h"
#include "harmony/harmony_parse.h"
#include "harmony/harmony_render.h"
#include "harmony/harmony_special.h"

#include <stdlib.h>
#include <string.h>

#define N(a) (sizeof(a) / sizeof((a)[0]))

/* ---- the hand-made vocabulary (test-only) ------------------------------------------------------
 */

static const struct {
    int32_t id;
    const char *bytes;
} ID_BYTES[] = {
    {2, "#"},
    {11, ","},
    {12, "-"},
    {13, "."},
    {17, "2"},
    {19, "4"},
    {25, ":"},
    {28, "="},
    {30, "?"},
    {220, " "},
    {261, " a"},
    {279, "\n\n"},
    {289, "ing"},
    {290, " the"},
    {306, " in"},
    {316, " to"},
    {382, " is"},
    {392, " \""},
    {395, " for"},
    {413, " be"},
    {455, "20"},
    {553, " are"},
    {558, ".\n"},
    {656, " by"},
    {659, " +"},
    {815, "ary"},
    {966, " \xE2\x80\x9C"},
    {1199, " use"},
    {1243, "\":"},
    {1309, " need"},
    {1323, "202"},
    {1416, " We"},
    {1428, "user"},
    {1721, " final"},
    {1753, " every"},
    {1844, "User"},
    {2359, " model"},
    {2804, " must"},
    {3008, "ny"},
    {3176, " message"},
    {3218, "06"},
    {3575, "You"},
    {4108, "json"},
    {4410, " large"},
    {4584, " tool"},
    {4827, "What"},
    {6439, " language"},
    {7360, " included"},
    {7693, "location"},
    {7788, " Open"},
    {8450, " analysis"},
    {9186, "description"},
    {10848, "{\""},
    {11122, " weather"},
    {12606, "comment"},
    {13888, " Valid"},
    {14093, " medium"},
    {14181, "?\xE2\x80\x9D"},
    {17360, "system"},
    {17527, "AI"},
    {17554, " Chat"},
    {18403, " channels"},
    {18583, "\"}"},
    {18826, " Francisco"},
    {21030, " Channel"},
    {22203, " trained"},
    {28499, "San"},
    {30377, "Reason"},
    {31064, " asks"},
    {35644, "analysis"},
    {37342, " lookup"},
    {38371, " SF"},
    {41133, "sun"},
    {44580, "functions"},
    {49159, " commentary"},
    {54267, "temperature"},
    {76043, ".lookup"},
    {87447, "Knowledge"},
    {100594, " cutoff"},
    {162016, "GPT"},
    {170154, "_weather"},
    {173781, "assistant"},
};

static const char SYSTEM_TEXT[] =
    "You are ChatGPT, a large language model trained by OpenAI.\nKnowledge cutoff: 2024-06\n\n"
    "Reasoning: medium\n\n# Valid channels: analysis, commentary, final. Channel must be included "
    "for every message.";
static const char ANALYSIS_TEXT[] = "User asks: \xE2\x80\x9CWhat is the weather in SF?\xE2\x80\x9D "
                                    "We need to use lookup_weather tool.";
static const char CALL_ARGS[] = "{\"location\": \"San Francisco\"}";
static const char TOOL_OUTPUT[] = "{\"temperature\": 20, \"description\": \"sunny\"}";

#define IDS(...) ((const int32_t[]){__VA_ARGS__, -1}) /* -1 ends the list */
static const struct {
    const char *text;
    const int32_t *ids;
} RUNS[] = {
    {"system", IDS(17360)},
    {SYSTEM_TEXT,
     IDS(3575, 553, 17554, 162016, 11, 261, 4410, 6439, 2359, 22203, 656, 7788, 17527, 558, 87447,
         100594, 25, 220, 1323, 19, 12, 3218, 279, 30377, 289, 25, 14093, 279, 2, 13888, 18403, 25,
         8450, 11, 49159, 11, 1721, 13, 21030, 2804, 413, 7360, 395, 1753, 3176, 13)},
    {"user", IDS(1428)},
    {"What is 2 + 2?", IDS(4827, 382, 220, 17, 659, 220, 17, 30)},
    {"assistant", IDS(173781)},
    {"What is the weather in SF?", IDS(4827, 382, 290, 11122, 306, 38371, 30)},
    {"analysis", IDS(35644)},
    {ANALYSIS_TEXT, IDS(1844, 31064, 25, 966, 4827, 382, 290, 11122, 306, 38371, 14181, 1416, 1309,
                        316, 1199, 37342, 170154, 4584, 13)},
    {" to=functions.lookup_weather", IDS(316, 28, 44580, 76043, 170154)},
    {"commentary", IDS(12606, 815)},
    {" ", IDS(220)},
    {"json", IDS(4108)},
    {CALL_ARGS, IDS(10848, 7693, 1243, 392, 28499, 18826, 18583)},
    {"functions.lookup_weather", IDS(44580, 76043, 170154)},
    {TOOL_OUTPUT, IDS(10848, 54267, 1243, 220, 455, 11, 392, 9186, 1243, 392, 41133, 3008, 18583)},
};

static const char *lookup_bytes(void *ctx, int32_t id, size_t *len) {
    (void)ctx;
    for (size_t i = 0; i < N(ID_BYTES); i++) {
        if (ID_BYTES[i].id == id) {
            *len = strlen(ID_BYTES[i].bytes);
            return ID_BYTES[i].bytes;
        }
    }
    return NULL;
}

static int lookup_encode(void *ctx, const char *text, size_t len, ivec *out) {
    (void)ctx;
    for (size_t i = 0; i < N(RUNS); i++) {
        if (strlen(RUNS[i].text) != len || memcmp(RUNS[i].text, text, len) != 0) continue;
        for (const int32_t *id = RUNS[i].ids; *id >= 0; id++) ivec_push(out, *id);
        return 0;
    }
    return err_set("test lookup has no text run '%.*s'", (int)len, text);
}

/* Each run's ids must spell the run: the hand-made table is data, and data can be wrong. */
static void test_lookup_is_consistent(void) {
    for (size_t i = 0; i < N(RUNS); i++) {
        char buf[512] = {0};
        size_t n = 0;
        for (const int32_t *id = RUNS[i].ids; *id >= 0; id++) {
            size_t len = 0;
            const char *b = lookup_bytes(NULL, *id, &len);
            CHECK(b != NULL, "run %zu: id %d has no bytes", i, (int)*id);
            if (b && n + len < sizeof buf) memcpy(buf + n, b, len), n += len;
        }
        CHECK(n == strlen(RUNS[i].text) && memcmp(buf, RUNS[i].text, n) == 0,
              "run %zu: ids spell '%.*s'", i, (int)n, buf);
    }
}

/* ---- the conversations ------------------------------------------------------------------------
 */

static const int32_t SIMPLE_CONVO_IDS[] = {
    200006, 17360, 200008, 3575,  553,   17554,  162016, 11,    261,  4410,   6439,   2359,   22203,
    656,    7788,  17527,  558,   87447, 100594, 25,     220,   1323, 19,     12,     3218,   279,
    30377,  289,   25,     14093, 279,   2,      13888,  18403, 25,   8450,   11,     49159,  11,
    1721,   13,    21030,  2804,  413,   7360,   395,    1753,  3176, 13,     200007, 200006, 1428,
    200008, 4827,  382,    220,   17,    659,    220,    17,    30,   200007, 200006, 173781};

static const int32_t ONGOING_ANALYSIS_IDS[] = {
    200006, 1428,   200008, 4827,   382,    290,    11122,  306,    38371,  30,     200007, 200006,
    173781, 200005, 35644,  200008, 1844,   31064,  25,     966,    4827,   382,    290,    11122,
    306,    38371,  14181,  1416,   1309,   316,    1199,   37342,  170154, 4584,   13,     200007,
    200006, 173781, 316,    28,     44580,  76043,  170154, 200005, 12606,  815,    220,    200003,
    4108,   200008, 10848,  7693,   1243,   392,    28499,  18826,  18583,  200012, 200006, 44580,
    76043,  170154, 200008, 10848,  54267,  1243,   220,    455,    11,     392,    9186,   1243,
    392,    41133,  3008,   18583,  200007, 200006, 173781};

static harmony_system simple_system;
static harmony_message simple_convo[2];
static harmony_message ongoing[5];

static void build_conversations(void) {
    simple_system = harmony_system_defaults();
    simple_convo[0] = (harmony_message){.role = HARMONY_ROLE_SYSTEM, .system = &simple_system};
    simple_convo[1] = (harmony_message){.role = HARMONY_ROLE_USER, .text = "What is 2 + 2?"};

    ongoing[0] = (harmony_message){.role = HARMONY_ROLE_USER, .text = "What is the weather in SF?"};
    ongoing[1] = (harmony_message){
        .role = HARMONY_ROLE_ASSISTANT, .channel = "analysis", .text = ANALYSIS_TEXT};
    ongoing[2] = (harmony_message){.role = HARMONY_ROLE_ASSISTANT,
                                   .recipient = "functions.lookup_weather",
                                   .channel = "commentary",
                                   .content_type = "<|constrain|>json",
                                   .text = CALL_ARGS};
    ongoing[3] = (harmony_message){
        .role = HARMONY_ROLE_TOOL, .name = "functions.lookup_weather", .text = TOOL_OUTPUT};
}

static void check_ids(const char *what, const harmony_message *msgs, size_t n,
                      harmony_encode_fn enc, void *ctx, const int32_t *want, size_t n_want) {
    harmony_pieces p = {0};
    harmony_conversation conv = {msgs, n};
    CHECK(harmony_render_conversation(&conv, true, true, &p) == 0, "%s: render: %s", what,
          err_msg());
    ivec ids = {0};
    int rc = harmony_pieces_to_tokens(&p, enc, ctx, &ids);
    CHECK(rc == 0, "%s: to tokens: %s", what, err_msg());
    CHECK(ids.len == n_want, "%s: %zu ids, want %zu", what, ids.len, n_want);
    for (size_t i = 0; i < ids.len && i < n_want; i++) {
        if (ids.v[i] != want[i]) {
            CHECK(false, "%s: id %zu is %d, want %d", what, i, (int)ids.v[i], (int)want[i]);
            break;
        }
    }
    ivec_free(&ids);
    harmony_pieces_free(&p);
}

static void test_rendered_ids(void) {
    check_ids("simple_convo", simple_convo, 2, lookup_encode, NULL, SIMPLE_CONVO_IDS,
              N(SIMPLE_CONVO_IDS));
    check_ids("does_not_drop_if_ongoing_analysis", ongoing, 4, lookup_encode, NULL,
              ONGOING_ANALYSIS_IDS, N(ONGOING_ANALYSIS_IDS));
}

/* ---- rendered ids back through the parser -------------------------------------------------------
 */

typedef struct {
    harmony_role role[8];
    harmony_kind kind[8];
    harmony_end_reason end[8];
    char *channel[8], *recipient[8], *ctype[8], *author[8];
    char content[8][256];
    size_t len[8], n;
} round_trip;

static char *dup_or_null(const char *s) {
    return s ? xstrdup(s) : NULL;
}

static void on_event(void *ctx, const harmony_event *ev) {
    round_trip *r = ctx;
    size_t i = ev->message;
    if (i >= 8) return;
    if (ev->kind == HARMONY_EV_MESSAGE_START) {
        r->n = i + 1;
        r->role[i] = ev->header->role, r->kind[i] = ev->header->kind;
        r->channel[i] = dup_or_null(ev->header->channel);
        r->recipient[i] = dup_or_null(ev->header->recipient);
        r->ctype[i] = dup_or_null(ev->header->content_type);
        r->author[i] = dup_or_null(ev->header->author);
    } else if (ev->kind == HARMONY_EV_CONTENT && r->len[i] + ev->len < sizeof r->content[i]) {
        memcpy(r->content[i] + r->len[i], ev->text, ev->len);
        r->len[i] += ev->len;
    } else if (ev->kind == HARMONY_EV_MESSAGE_END) {
        r->end[i] = ev->end;
    }
}

static bool same(const char *a, const char *b) {
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* Parsing what the renderer produced gives back the messages (the trailing <|start|>assistant, a
 * header cut off by the end of the stream, gives none). */
static void test_round_trip(void) {
    round_trip r = {0};
    harmony_parser p;
    harmony_parser_config cfg = {lookup_bytes, NULL, on_event, &r, false};
    harmony_parser_init(&p, &cfg);
    for (size_t i = 0; i < N(ONGOING_ANALYSIS_IDS); i++)
        harmony_parser_feed(&p, ONGOING_ANALYSIS_IDS[i]);
    harmony_parser_finish(&p);
    harmony_parser_free(&p);
    CHECK(r.n == 4, "round trip: %zu messages", r.n);
    static const harmony_kind kinds[] = {HARMONY_KIND_OTHER, HARMONY_KIND_REASONING,
                                         HARMONY_KIND_TOOL_CALL, HARMONY_KIND_TOOL_RESULT};
    static const harmony_end_reason ends[] = {HARMONY_END_END, HARMONY_END_END, HARMONY_END_CALL,
                                              HARMONY_END_END};
    for (size_t i = 0; i < r.n && i < 4; i++) {
        const harmony_message *m = &ongoing[i];
        CHECK(r.role[i] == m->role, "round trip %zu: role", i);
        CHECK(r.kind[i] == kinds[i], "round trip %zu: kind %s", i, harmony_kind_name(r.kind[i]));
        CHECK(r.end[i] == ends[i], "round trip %zu: end %s", i, harmony_end_name(r.end[i]));
        CHECK(same(r.channel[i], m->channel), "round trip %zu: channel", i);
        CHECK(same(r.recipient[i], m->recipient), "round trip %zu: recipient", i);
        CHECK(same(r.ctype[i], m->content_type), "round trip %zu: content type", i);
        CHECK(same(r.author[i], m->name), "round trip %zu: author", i);
        CHECK(r.len[i] == strlen(m->text) && memcmp(r.content[i], m->text, r.len[i]) == 0,
              "round trip %zu: content '%.*s'", i, (int)r.len[i], r.content[i]);
    }
    for (size_t i = 0; i < 8; i++)
        free(r.channel[i]), free(r.recipient[i]), free(r.ctype[i]), free(r.author[i]);
}

/* ---- with the real tokenizer (after the merge with src/tokenizer/bpe.c) -------------------------
 */

#include "base/files.h"
#include "tokenizer/bpe.h"

static int real_encode(void *ctx, const char *text, size_t len, ivec *out) {
    return tokenizer_encode_ordinary((const tokenizer *)ctx, text, len, out);
}

static void real_tokenizer_checks(void) {
    tokenizer *t = tokenizer_load_for_model(NULL);
    if (!t) {
        fprintf(stderr, "test_harmony_tokens: no tokenizer (%s); real-tokenizer checks skipped\n",
                err_msg());
        return;
    }
    check_ids("simple_convo (real tokenizer)", simple_convo, 2, real_encode, t, SIMPLE_CONVO_IDS,
              N(SIMPLE_CONVO_IDS));
    check_ids("does_not_drop_if_ongoing_analysis (real tokenizer)", ongoing, 4, real_encode, t,
              ONGOING_ANALYSIS_IDS, N(ONGOING_ANALYSIS_IDS));
    tokenizer_free(t);
}

int main(void) {
    build_conversations();
    test_lookup_is_consistent();
    test_rendered_ids();
    test_round_trip();
    real_tokenizer_checks();
    return check_report("test_harmony_tokens");
}
