/* The harmony renderer against the reference's golden renderings (tests/fixtures/harmony-golden,
 * from openai/harmony test-data). Each conversation below is rebuilt from the description of the
 * test of the same name in the reference's tests/test_harmony.py and src/tests.rs; the rendered
 * text form must equal the golden file exactly (after trimming trailing whitespace, as the
 * reference's tests do). */
#include "base/error.h"
#include "base/files.h"
#include "check.h"
#include "harmony/harmony_render.h"
#include "harmony/harmony_special.h"
#include "harmony/harmony_strbuf.h"
#include "harmony/harmony_tools.h"

#include <stdlib.h>
#include <string.h>

#include "tokenizer/bpe.h"
#include "harmony/harmony_parse.h"

#define GOLDEN_DIR GPTOSS_SOURCE_DIR "/tests/fixtures/harmony-golden/"
#define N(a)       (sizeof(a) / sizeof((a)[0]))

static const char IDENTITY[] = "You are ChatGPT, a large language model trained by OpenAI.";

static char *load_golden(const char *name) {
    char *path = xasprintf("%s%s", GOLDEN_DIR, name);
    size_t len = 0;
    char *s = file_read_all(path, &len);
    free(path);
    if (!s) return NULL;
    while (len && (s[len - 1] == '\n' || s[len - 1] == ' ' || s[len - 1] == '\r')) s[--len] = 0;
    return s;
}

/* The real tokenizer, when installed (scripts/setup.sh): the token-level checks below use it. */
static tokenizer *real_tok;

static const char *token_bytes_cb(void *ctx, int32_t id, size_t *len) {
    return tokenizer_token_bytes((const tokenizer *)ctx, id, len);
}

typedef struct {
    int starts, ends;
} event_count;

static void count_event(void *ctx, const harmony_event *ev) {
    event_count *c = ctx;
    if (ev->kind == HARMONY_EV_MESSAGE_START) c->starts++;
    if (ev->kind == HARMONY_EV_MESSAGE_END) c->ends++;
}

/* Token level: the pieces encoded one text run at a time must give the same ids as the whole golden
 * text encoded with special tokens allowed (spec §5.1), and the parser must find every message in
 * those ids. */
static void check_golden_tokens(const char *name, const harmony_pieces *p, const char *want) {
    if (!real_tok) return;
    ivec got = {0}, ref = {0};
    CHECK(harmony_pieces_to_tokens(p, tokenizer_encode_ordinary_cb, real_tok, &got) == 0,
          "%s: to tokens: %s", name, err_msg());
    CHECK(tokenizer_encode_with_specials(real_tok, want, strlen(want), &ref) == 0, "%s: encode",
          name);
    bool same = got.len == ref.len && !memcmp(got.v, ref.v, got.len * sizeof *got.v);
    CHECK(same, "%s: token ids differ from the golden text's (%zu vs %zu ids)", name, got.len,
          ref.len);
    int starts = 0;
    for (const char *q = want; (q = strstr(q, "<|start|>")); q++) starts++;
    /* A completion prompt ends in an open header (<|start|>assistant) that holds no message yet. */
    size_t wl = strlen(want), gl = strlen("<|start|>assistant");
    if (wl >= gl && !strcmp(want + wl - gl, "<|start|>assistant")) starts--;
    event_count c = {0};
    harmony_parser hp;
    harmony_parser_config cfg = {token_bytes_cb, real_tok, count_event, &c, false};
    harmony_parser_init(&hp, &cfg);
    for (size_t i = 0; i < ref.len; i++) harmony_parser_feed(&hp, ref.v[i]);
    harmony_parser_finish(&hp);
    harmony_parser_free(&hp);
    CHECK(c.starts == starts && c.ends == starts,
          "%s: parser found %d starts / %d ends, the text has %d", name, c.starts, c.ends, starts);
    ivec_free(&got), ivec_free(&ref);
}

/* Compares the rendering of conv with the golden file; on a mismatch, shows where they part. */
static void check_golden(const char *name, const harmony_message *msgs, size_t n,
                         bool for_completion, bool auto_drop) {
    char *want = load_golden(name);
    CHECK(want != NULL, "%s: cannot read golden file: %s", name, err_msg());
    if (!want) return;
    harmony_pieces p = {0};
    harmony_conversation conv = {msgs, n};
    int rc = harmony_render_conversation(&conv, for_completion, auto_drop, &p);
    CHECK(rc == 0, "%s: render failed: %s", name, err_msg());
    char *got = harmony_pieces_to_text(&p, NULL);
    bool same = strcmp(got, want) == 0;
    CHECK(same, "%s: rendering differs from golden", name);
    if (!same) {
        size_t i = 0;
        while (got[i] && got[i] == want[i]) i++;
        size_t from = i > 60 ? i - 60 : 0;
        fprintf(stderr, "  first difference at byte %zu\n  want: ...%.120s\n  got:  ...%.120s\n", i,
                want + from, got + from);
    }
    free(got);
    check_golden_tokens(name, &p, want);
    free(want);
    harmony_pieces_free(&p);
}

static harmony_message sys_msg(const harmony_system *s) {
    return (harmony_message){.role = HARMONY_ROLE_SYSTEM, .system = s};
}
static harmony_message dev_msg(const harmony_developer *d) {
    return (harmony_message){.role = HARMONY_ROLE_DEVELOPER, .developer = d};
}
static harmony_message user(const char *text) {
    return (harmony_message){.role = HARMONY_ROLE_USER, .text = text};
}
static harmony_message assistant(const char *channel, const char *text) {
    return (harmony_message){.role = HARMONY_ROLE_ASSISTANT, .channel = channel, .text = text};
}

static void test_simple_convo(void) {
    harmony_system sys = harmony_system_defaults();
    sys.model_identity = IDENTITY;
    harmony_message m[] = {sys_msg(&sys), user("What is 2 + 2?")};
    check_golden("test_simple_convo.txt", m, N(m), true, false);
}

static void test_simple_convo_with_effort(void) {
    static const struct {
        harmony_effort effort;
        const char *file;
        bool instructions;
    } cases[] = {
        {HARMONY_EFFORT_LOW, "test_simple_convo_low_effort.txt", true},
        {HARMONY_EFFORT_MEDIUM, "test_simple_convo_medium_effort.txt", true},
        {HARMONY_EFFORT_HIGH, "test_simple_convo_high_effort.txt", true},
        {HARMONY_EFFORT_LOW, "test_simple_convo_low_effort_no_instruction.txt", false},
        {HARMONY_EFFORT_MEDIUM, "test_simple_convo_medium_effort_no_instruction.txt", false},
        {HARMONY_EFFORT_HIGH, "test_simple_convo_high_effort_no_instruction.txt", false},
    };
    for (size_t i = 0; i < N(cases); i++) {
        harmony_system sys = harmony_system_defaults();
        sys.model_identity = IDENTITY;
        sys.effort = cases[i].effort;
        harmony_developer dev = {.instructions = "Answer the user's questions like a robot."};
        const char *q = "What is the capital of the largest country in the world?";
        if (cases[i].instructions) {
            harmony_message m[] = {sys_msg(&sys), dev_msg(&dev), user(q)};
            check_golden(cases[i].file, m, N(m), true, false);
        } else {
            harmony_message m[] = {sys_msg(&sys), user(q)};
            check_golden(cases[i].file, m, N(m), true, false);
        }
    }
}

static const char *const ANALYSIS_FINAL[] = {"analysis", "final"};

static void test_reasoning_system_messages(void) {
    harmony_system sys = harmony_system_defaults();
    sys.model_identity = IDENTITY;
    sys.valid_channels = ANALYSIS_FINAL;
    sys.n_valid_channels = 2;
    {
        harmony_message m[] = {sys_msg(&sys), user("What is 2 + 2?")};
        check_golden("test_reasoning_system_message.txt", m, N(m), true, false);
    }
    {
        harmony_system s = sys;
        s.effort = HARMONY_EFFORT_HIGH;
        harmony_message m[] = {sys_msg(&s),
                               user("What is the best place to eat candy in the world?")};
        check_golden("test_reasoning_system_message_no_instruction.txt", m, N(m), true, false);
    }
    {
        harmony_system s = sys;
        s.current_date = "2021-01-01";
        s.knowledge_cutoff = "2021-01";
        harmony_message m[] = {sys_msg(&s), user("What is 42 * pi?")};
        check_golden("test_reasoning_system_message_with_dates.txt", m, N(m), true, false);
    }
}

static json_t *schema(const char *text) {
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    CHECK(j != NULL, "test schema does not parse: %s (line %d)", e.text, e.line);
    return j;
}

static void test_render_functions_with_parameters(void) {
    harmony_system sys = harmony_system_defaults();
    sys.effort = HARMONY_EFFORT_HIGH;
    sys.current_date = "2025-06-28";
    json_t *weather =
        schema("{\"type\": \"object\", \"properties\": {"
               "  \"location\": {\"type\": \"string\","
               "    \"description\": \"The city and state, e.g. San Francisco, CA\"},"
               "  \"format\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"],"
               "    \"default\": \"celsius\"}},"
               " \"required\": [\"location\"]}");
    json_t *multi =
        schema("{\"type\": \"object\", \"properties\": {"
               "  \"locations\": {\"type\": \"array\", \"items\": {\"type\": \"string\"},"
               "    \"description\": \"List of city and state, e.g. [\\\"San Francisco, CA\\\", "
               "\\\"New York, NY\\\"]\"},"
               "  \"format\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"],"
               "    \"default\": \"celsius\"}},"
               " \"required\": [\"locations\"]}");
    json_t *kitchen = schema(
        "{\"description\": \"params object\", \"type\": \"object\", \"properties\": {"
        "  \"string\": {\"type\": \"string\", \"title\": \"STRING\", \"description\": \"A string\","
        "    \"examples\": [\"hello\", \"world\"]},"
        "  \"string_nullable\": {\"type\": \"string\", \"nullable\": true,"
        "    \"description\": \"A nullable string\", \"default\": \"the default\"},"
        "  \"string_enum\": {\"type\": \"string\", \"enum\": [\"a\", \"b\", \"c\"]},"
        "  \"oneof_string_or_number\": {\"oneOf\": ["
        "      {\"type\": \"string\", \"default\": \"default_string_in_oneof\"},"
        "      {\"type\": \"number\", \"description\": \"numbers can happen too\"}],"
        "    \"description\": \"a oneof\", \"default\": 20}}}");
    harmony_tool tools[] = {
        {"get_location", "Gets the location of the user.", NULL},
        {"get_current_weather", "Gets the current weather in the provided location.", weather},
        {"get_multiple_weathers", "Gets the current weather in the provided list of locations.",
         multi},
        {"kitchensink", "A function with various complex schemas.", kitchen},
    };
    harmony_developer dev = {"Always respond in riddles", tools, N(tools)};
    harmony_message m[] = {sys_msg(&sys), dev_msg(&dev), user("What is the weather like in SF?")};
    check_golden("test_render_functions_with_parameters.txt", m, N(m), true, false);
    json_decref(weather);
    json_decref(multi);
    json_decref(kitchen);
}

static void test_builtin_tools(void) {
    harmony_system sys = harmony_system_defaults();
    sys.current_date = "2025-06-28";
    {
        harmony_message m[] = {sys_msg(&sys)};
        check_golden("test_no_tools.txt", m, N(m), true, false);
    }
    sys.browser_tool = true;
    {
        harmony_message m[] = {sys_msg(&sys)};
        check_golden("test_browser_tool_only.txt", m, N(m), true, false);
    }
    {
        json_t *params = schema("{\"type\": \"object\", \"properties\": {\"location\": "
                                "{\"type\": \"string\"}}, \"required\": [\"location\"]}");
        harmony_tool fn = {
            "lookup_weather",
            "Use this tool to lookup the weather in a given location. Call it with "
            "the parameter 'location', can be any textual description of a location.",
            params};
        harmony_developer dev = {.functions = &fn, .n_functions = 1};
        harmony_message m[] = {sys_msg(&sys), dev_msg(&dev)};
        check_golden("test_browser_and_function_tool.txt", m, N(m), true, false);
        json_decref(params);
    }
    sys.python_tool = true;
    {
        harmony_message m[] = {sys_msg(&sys)};
        check_golden("test_browser_and_python_tool.txt", m, N(m), true, false);
    }
}

static void test_cot_handling(void) {
    {
        harmony_message m[] = {
            user("What is 2 + 2?"),
            assistant("analysis", "User asks: \xE2\x80\x9CWhat is 2 + 2?\xE2\x80\x9D Simple "
                                  "arithmetic. Provide answer."),
            assistant("final", "2 + 2 equals 4."),
            user("What about 9 / 2?"),
        };
        check_golden("test_dropping_cot_by_default.txt", m, N(m), true, true);
    }
    {
        harmony_message m[] = {
            user("What is 2 + 2?"),
            assistant("analysis", "User asks a simple question: \"What is 2 + 2?\" The answer: 4."),
            assistant("final", "2 + 2 equals 4."),
            user("What about 9 / 2?"),
        };
        check_golden("test_preserve_cot.txt", m, N(m), true, false);
    }
    {
        harmony_message m[] = {
            user("What is the weather in SF?"),
            assistant("analysis",
                      "User asks: \xE2\x80\x9CWhat is the weather in SF?\xE2\x80\x9D We "
                      "need to use lookup_weather tool."),
            {.role = HARMONY_ROLE_ASSISTANT,
             .channel = "commentary",
             .recipient = "functions.lookup_weather",
             .content_type = "<|constrain|>json",
             .text = "{\"location\": \"San Francisco\"}"},
            {.role = HARMONY_ROLE_TOOL,
             .name = "functions.lookup_weather",
             .text = "{\"temperature\": 20, \"description\": \"sunny\"}"},
        };
        check_golden("test_does_not_drop_if_ongoing_analysis.txt", m, N(m), true, true);
    }
    {
        harmony_message m[] = {
            user("What is 2 + 2?"), assistant("analysis", "thinking 2+2"), assistant("final", "4"),
            user("What is 3 + 5?"), assistant("analysis", "thinking 3+5"), assistant("final", "8"),
        };
        check_golden("test_keep_analysis_between_finals.txt", m, N(m), false, true);
    }
}

/* test_tool_response_parsing.txt is the rendering of one tool message without its <|end|>. */
static void test_tool_response_rendering(void) {
    harmony_message m = {.role = HARMONY_ROLE_TOOL,
                         .name = "browser.search",
                         .recipient = "assistant",
                         .channel = "commentary",
                         .text = "{\"result\": \"https://openai.com/\"}"};
    harmony_pieces p = {0};
    CHECK(harmony_render_message(&m, false, &p) == 0, "render: %s", err_msg());
    CHECK(p.len > 0 && p.v[p.len - 1].special == HARMONY_TOK_END, "tool message ends with <|end|>");
    if (p.len) p.len--; /* drop <|end|> as the reference's test does */
    char *got = harmony_pieces_to_text(&p, NULL);
    char *want = load_golden("test_tool_response_parsing.txt");
    CHECK(want && strcmp(got, want) == 0, "tool response: got '%s'", got);
    free(got);
    free(want);
    harmony_pieces_free(&p);
}

/* Piece structure: text runs stay separate, <|constrain|> is a token, tool calls end with <|call|>.
 */
static void test_piece_structure(void) {
    harmony_message m = {.role = HARMONY_ROLE_ASSISTANT,
                         .recipient = "functions.get_weather",
                         .channel = "commentary",
                         .content_type = "<|constrain|>json",
                         .text = "{\"location\": \"Tokyo\"}"};
    harmony_pieces p = {0};
    CHECK(harmony_render_message(&m, false, &p) == 0, "render: %s", err_msg());
    static const struct {
        int32_t special;
        const char *text;
    } want[] = {
        {HARMONY_TOK_START, NULL},
        {-1, "assistant"},
        {-1, " to=functions.get_weather"},
        {HARMONY_TOK_CHANNEL, NULL},
        {-1, "commentary"},
        {-1, " "},
        {HARMONY_TOK_CONSTRAIN, NULL},
        {-1, "json"},
        {HARMONY_TOK_MESSAGE, NULL},
        {-1, "{\"location\": \"Tokyo\"}"},
        {HARMONY_TOK_CALL, NULL},
    };
    CHECK(p.len == N(want), "piece count %zu, want %zu", p.len, N(want));
    for (size_t i = 0; i < p.len && i < N(want); i++) {
        CHECK(p.v[i].special == want[i].special, "piece %zu: special %d", i, p.v[i].special);
        if (want[i].text)
            CHECK(p.v[i].len == strlen(want[i].text) &&
                      memcmp(p.text + p.v[i].off, want[i].text, p.v[i].len) == 0,
                  "piece %zu: text '%.*s'", i, (int)p.v[i].len, p.text + p.v[i].off);
    }
    harmony_pieces_free(&p);

    /* A user typing a special token's spelling gets text, not the token. */
    harmony_message u = {.role = HARMONY_ROLE_USER, .name = "bob", .text = "hi <|end|>"};
    CHECK(harmony_render_message(&u, false, &p) == 0, "render: %s", err_msg());
    char *t = harmony_pieces_to_text(&p, NULL);
    CHECK(strcmp(t, "<|start|>user:bob<|message|>hi <|end|><|end|>") == 0, "user text: %s", t);
    CHECK(p.len == 6 && p.v[4].special == -1, "typed <|end|> stays inside the text run");
    free(t);
    harmony_pieces_free(&p);

    /* recipient "all" is not written; an assistant message with it still ends in <|call|>, as the
     * reference does (a recipient is set). */
    harmony_message a = {.role = HARMONY_ROLE_ASSISTANT, .recipient = "all", .text = "x"};
    CHECK(harmony_render_message(&a, false, &p) == 0, "render: %s", err_msg());
    t = harmony_pieces_to_text(&p, NULL);
    CHECK(strcmp(t, "<|start|>assistant<|message|>x<|call|>") == 0, "recipient all: %s", t);
    free(t);
    harmony_pieces_free(&p);

    /* A plain content type is text with a leading space. */
    harmony_message c = {.role = HARMONY_ROLE_ASSISTANT,
                         .channel = "analysis",
                         .recipient = "python",
                         .content_type = "code",
                         .text = "print(1)"};
    CHECK(harmony_render_message(&c, false, &p) == 0, "render: %s", err_msg());
    t = harmony_pieces_to_text(&p, NULL);
    CHECK(
        strcmp(t,
               "<|start|>assistant to=python<|channel|>analysis code<|message|>print(1)<|call|>") ==
            0,
        "code content type: %s", t);
    free(t);
    harmony_pieces_free(&p);
}

static void test_errors(void) {
    harmony_pieces p = {0};
    harmony_message tool = {.role = HARMONY_ROLE_TOOL, .text = "{}"};
    harmony_conversation conv = {&tool, 1};
    CHECK(harmony_render_conversation(&conv, true, true, &p) == -1, "tool without name fails");
    CHECK_MSG_HAS(err_msg(), "messages[0]");
    CHECK_MSG_HAS(err_msg(), "author name");
    harmony_pieces_free(&p);

    harmony_system sys = harmony_system_defaults();
    harmony_message bad = {.role = HARMONY_ROLE_USER, .system = &sys};
    conv = (harmony_conversation){&bad, 1};
    CHECK(harmony_render_conversation(&conv, false, false, &p) == -1, "system content in user msg");
    CHECK_MSG_HAS(err_msg(), "system content");
    harmony_pieces_free(&p);

    harmony_tool unnamed = {NULL, "d", NULL};
    harmony_developer dev = {.functions = &unnamed, .n_functions = 1};
    harmony_message d = dev_msg(&dev);
    conv = (harmony_conversation){&d, 1};
    CHECK(harmony_render_conversation(&conv, false, false, &p) == -1, "unnamed function fails");
    CHECK_MSG_HAS(err_msg(), "functions[0].name");
    harmony_pieces_free(&p);
}

/* Things beyond the golden files: the TypeScript conversion of other schema shapes, and default
 * values printed the way the reference (serde_json) prints them. */
static void check_ts(const char *schema_text, const char *want) {
    json_t *s = schema(schema_text);
    hsb out = {0};
    harmony_schema_to_ts(&out, s, "");
    CHECK(strcmp(hsb_str(&out), want) == 0, "schema %s\n  got:  %s\n  want: %s", schema_text,
          hsb_str(&out), want);
    hsb_free(&out);
    json_decref(s);
}

static void test_schema_shapes(void) {
    check_ts("{\"type\": \"integer\"}", "number");
    check_ts("{\"type\": \"array\"}", "Array<any>");
    check_ts("{\"type\": \"array\", \"items\": {\"type\": \"integer\"}}", "number[]");
    check_ts("{\"type\": [\"integer\", \"null\"]}", "number | null");
    check_ts("{\"type\": \"null\"}", "any");
    check_ts("{}", "any");
    check_ts("{\"type\": \"object\"}", "{\n}");
    check_ts(
        "{\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"object\", \"properties\": "
        "{\"b\": {\"type\": \"boolean\", \"default\": true}}, \"required\": [\"b\"]}}}",
        "{\na?: {\n    b: boolean, // default: true\n    },\n}");
    check_ts(
        "{\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"number\", \"default\": 0.1},"
        " \"y\": {\"type\": \"number\", \"default\": 2.0}, \"z\": {\"type\": \"array\","
        " \"default\": [1, \"a\\n\"]}}}",
        "{\nx?: number, // default: 0.1\ny?: number, // default: 2.0\n"
        "z?: Array<any>, // default: [1,\"a\\n\"]\n}");
    check_ts("{\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"integer\", \"nullable\": true}]}",
             "\n | string\n | number | null");

    static const struct {
        const char *json;
        const char *want;
    } nums[] = {{"[1e21]", "[1e21]"},
                {"[1.5e-7]", "[1.5e-7]"},
                {"[123456.0]", "[123456.0]"},
                {"[0.001]", "[0.001]"},
                {"[-0.0]", "[-0.0]"},
                {"[1e16]", "[1e16]"},
                {"[1234.5678]", "[1234.5678]"},
                {"[{\"k\": null, \"b\": false}]", "[{\"k\":null,\"b\":false}]"}};
    for (size_t i = 0; i < N(nums); i++) {
        json_t *j = schema(nums[i].json);
        hsb out = {0};
        harmony_json_compact(&out, j);
        CHECK(strcmp(hsb_str(&out), nums[i].want) == 0, "json %s → %s", nums[i].json,
              hsb_str(&out));
        hsb_free(&out);
        json_decref(j);
    }
}

int main(void) {
    real_tok = tokenizer_load_for_model(NULL);
    if (!real_tok)
        fprintf(stderr, "test_harmony_render: no tokenizer (%s): token-level checks skipped\n",
                err_msg());
    test_simple_convo();
    test_simple_convo_with_effort();
    test_reasoning_system_messages();
    test_render_functions_with_parameters();
    test_builtin_tools();
    test_cot_handling();
    test_tool_response_rendering();
    test_piece_structure();
    test_errors();
    test_schema_shapes();
    tokenizer_free(real_tok);
    return check_report("test_harmony_render");
}
