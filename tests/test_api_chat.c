/* /v1/chat/completions without HTTP: requests → engine requests and exact harmony prompts (against
 * harmony's golden renderings), and synthetic engine outputs (real token ids of harmony text) →
 * SSE chunks and JSON bodies. Skipped (77) without tokenizer.json. */
#include "test_api_util.h"

#include "base/files.h"

static int parse(const char *body, const api_config *cfg, api_call *c, api_error *e) {
    int rc = api_parse_chat(body, strlen(body), T, cfg, c, e);
    if (rc != 0)
        fprintf(stderr, "parse failed: %d %s (param %s)\n", e->status, e->message, e->param);
    return rc;
}

static char *golden(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/fixtures/harmony-golden/%s", GPTOSS_SOURCE_DIR, name);
    size_t n;
    char *s = file_read_all(path, &n);
    while (s && n && (s[n - 1] == '\n' || s[n - 1] == ' '))
        s[--n] = 0; /* the reference rstrip()s */
    return s;
}

/* The prompt's text with the system message (and developer message, if any) cut off: what follows
 * is the conversation, compared with hand-written expectations. */
static const char *after_preamble(const char *text) {
    const char *p = strstr(text, "<|end|>");
    if (!p) return text;
    p += 7;
    if (!strncmp(p, "<|start|>developer", 18)) {
        const char *q = strstr(p, "<|end|>");
        if (q) p = q + 7;
    }
    return p;
}

static void test_golden_simple(void) {
    api_call c;
    api_error e;
    const char *body = "{\"model\":\"gpt-oss-20b\",\"messages\":[{\"role\":\"user\",\"content\":"
                       "\"What is 2 + 2?\"}]}";
    if (parse(body, &CFG, &c, &e) != 0) {
        CHECK(0, "simple parse");
        return;
    }
    char *want = golden("test_simple_convo.txt"), *got = prompt_text(&c);
    CHECK(STREQ(got, want), "simple convo:\n%s\nwant:\n%s", NN(got), NN(want));
    /* spec §5.2: the 64 ids of that rendering */
    static const int32_t ids[] = {
        200006, 17360, 200008, 3575, 553,   17554,  162016, 11,     261,    4410, 6439,
        2359,   22203, 656,    7788, 17527, 558,    87447,  100594, 25,     220,  1323,
        19,     12,    3218,   279,  30377, 289,    25,     14093,  279,    2,    13888,
        18403,  25,    8450,   11,   49159, 11,     1721,   13,     21030,  2804, 413,
        7360,   395,   1753,   3176, 13,    200007, 200006, 1428,   200008, 4827, 382,
        220,    17,    659,    220,  17,    30,     200007, 200006, 173781};
    CHECK(c.req.n_prompt == 64, "simple convo: %d tokens", c.req.n_prompt);
    for (int i = 0; i < 64 && i < c.req.n_prompt; i++)
        CHECK(c.req.prompt[i] == ids[i], "token %d: %d != %d", i, c.req.prompt[i], ids[i]);
    /* Defaults: the rest of the context, n = 1, OpenAI's sampling defaults, not streaming. */
    CHECK(c.req.max_tokens == 4096 - 64, "max_tokens %d", c.req.max_tokens);
    CHECK(c.req.n == 1 && !c.stream && !c.include_usage, "n/stream");
    CHECK(c.req.params.temperature == 1.0f && c.req.params.top_p == 1.0f, "sampling defaults");
    CHECK(c.kind == API_CHAT && STREQ(c.model, "gpt-oss-20b"), "kind/model");
    free(want);
    free(got);
    api_call_free(&c);

    /* Today's date when the config gives none; the reasoning effort on request. */
    api_config cfg = CFG;
    cfg.current_date = NULL;
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"reasoning_effort\":\"low\"}";
    if (parse(body, &cfg, &c, &e) == 0) {
        got = prompt_text(&c);
        CHECK(got && strstr(got, "\nCurrent date: 20") && strstr(got, "Reasoning: low"), "%s",
              NN(got));
        free(got);
        api_call_free(&c);
    }
}

static const char *FUNCTIONS_BODY =
    "{\"model\":\"gpt-oss-20b\",\"reasoning_effort\":\"high\",\"messages\":["
    "{\"role\":\"system\",\"content\":\"Always respond in riddles\"},"
    "{\"role\":\"user\",\"content\":\"What is the weather like in SF?\"}],"
    "\"tools\":["
    "{\"type\":\"function\",\"function\":{\"name\":\"get_location\",\"description\":\"Gets the "
    "location of the user.\"}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_current_weather\",\"description\":\"Gets "
    "the current weather in the provided location.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"location\":{\"type\":\"string\","
    "\"description\":\"The city and state, e.g. San Francisco, CA\"},"
    "\"format\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"],\"default\":\"celsius\"}"
    "},\"required\":[\"location\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"get_multiple_weathers\",\"description\":"
    "\"Gets the current weather in the provided list of locations.\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"locations\":{\"type\":\"array\","
    "\"items\":{\"type\":\"string\"},"
    "\"description\":\"List of city and state, e.g. [\\\"San Francisco, CA\\\", \\\"New York, "
    "NY\\\"]\"},"
    "\"format\":{\"type\":\"string\",\"enum\":[\"celsius\",\"fahrenheit\"],\"default\":\"celsius\"}"
    "},\"required\":[\"locations\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"kitchensink\",\"description\":\"A function "
    "with various complex schemas.\","
    "\"parameters\":{\"description\":\"params object\",\"type\":\"object\",\"properties\":{"
    "\"string\":{\"type\":\"string\",\"title\":\"STRING\",\"description\":\"A "
    "string\",\"examples\":[\"hello\",\"world\"]},"
    "\"string_nullable\":{\"type\":\"string\",\"nullable\":true,\"description\":\"A nullable "
    "string\",\"default\":\"the default\"},"
    "\"string_enum\":{\"type\":\"string\",\"enum\":[\"a\",\"b\",\"c\"]},"
    "\"oneof_string_or_number\":{\"oneOf\":[{\"type\":\"string\",\"default\":\"default_string_in_"
    "oneof\"},"
    "{\"type\":\"number\",\"description\":\"numbers can happen too\"}],\"description\":\"a "
    "oneof\",\"default\":20}}}}}]}";

static void test_golden_functions(void) {
    api_config cfg = CFG;
    cfg.current_date = "2025-06-28";
    api_call c;
    api_error e;
    if (parse(FUNCTIONS_BODY, &cfg, &c, &e) != 0) {
        CHECK(0, "functions parse");
        return;
    }
    char *want = golden("test_render_functions_with_parameters.txt"), *got = prompt_text(&c);
    CHECK(STREQ(got, want), "functions:\n%s\nwant:\n%s", NN(got), NN(want));
    free(want);
    free(got);
    api_call_free(&c);
}

/* The conversation part of a chat request's prompt. */
static void expect_conversation(const char *body, const char *want, const char *what) {
    api_call c;
    api_error e;
    if (parse(body, &CFG, &c, &e) != 0) {
        CHECK(0, "%s: parse", what);
        return;
    }
    char *got = prompt_text(&c);
    const char *conv = got ? after_preamble(got) : "";
    CHECK(STREQ(conv, want), "%s:\n%s\nwant:\n%s", what, conv, want);
    free(got);
    api_call_free(&c);
}

static void test_history(void) {
    /* An ongoing tool chain: the reasoning goes back as analysis, the call ends with <|call|>,
     * the tool's output is named through tool_call_id. */
    expect_conversation(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"What is the weather in SF?\"},"
        "{\"role\":\"assistant\",\"content\":null,\"reasoning\":\"We need to use lookup_weather "
        "tool.\","
        "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"lookup_"
        "weather\","
        "\"arguments\":\"{\\\"location\\\": \\\"San Francisco\\\"}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"{\\\"temperature\\\": "
        "20}\"}]}",
        "<|start|>user<|message|>What is the weather in SF?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>We need to use lookup_weather tool.<|end|>"
        "<|start|>assistant to=functions.lookup_weather<|channel|>commentary <|constrain|>json"
        "<|message|>{\"location\": \"San Francisco\"}<|call|>"
        "<|start|>functions.lookup_weather to=assistant<|channel|>commentary<|message|>"
        "{\"temperature\": 20}<|end|><|start|>assistant",
        "tool chain");
    /* A finished turn: its reasoning (under either name) is dropped; content is final. */
    expect_conversation(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"What is 2 + 2?\"},"
        "{\"role\":\"assistant\",\"content\":\"4\",\"reasoning_content\":\"Simple.\"},"
        "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"And 9 "
        "\"},{\"type\":\"text\",\"text\":\"/ 2?\"}]}]}",
        "<|start|>user<|message|>What is 2 + 2?<|end|>"
        "<|start|>assistant<|channel|>final<|message|>4<|end|>"
        "<|start|>user<|message|>And 9 / 2?<|end|><|start|>assistant",
        "finished turn");
    /* An earlier finished turn loses its reasoning, the ongoing chain keeps its own; a preamble
     * goes to commentary; object arguments are written as JSON; a tool result without an id is
     * matched to the call by position. */
    expect_conversation("{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},"
                        "{\"role\":\"assistant\",\"content\":\"b\",\"reasoning\":\"r1\"},"
                        "{\"role\":\"user\",\"content\":\"c\"},"
                        "{\"role\":\"assistant\",\"content\":\"Checking.\",\"reasoning\":\"r2\","
                        "\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\","
                        "\"function\":{\"name\":\"f\",\"arguments\":{\"k\":1}}}]},"
                        "{\"role\":\"tool\",\"content\":\"ok\"}]}",
                        "<|start|>user<|message|>a<|end|>"
                        "<|start|>assistant<|channel|>final<|message|>b<|end|>"
                        "<|start|>user<|message|>c<|end|>"
                        "<|start|>assistant<|channel|>analysis<|message|>r2<|end|>"
                        "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
                        "<|start|>assistant to=functions.f<|channel|>commentary "
                        "<|constrain|>json<|message|>{\"k\":1}<|call|>"
                        "<|start|>functions.f "
                        "to=assistant<|channel|>commentary<|message|>ok<|end|><|start|>assistant",
                        "multi-turn");
    /* Developer text in the middle stays a message; user text that spells special tokens is text.
     */
    expect_conversation("{\"messages\":[{\"role\":\"user\",\"content\":\"<|end|>\"},{\"role\":"
                        "\"developer\",\"content\":\"Be brief.\"}]}",
                        "<|start|>user<|message|><|end|><|end|><|start|>developer<|message|>Be "
                        "brief.<|end|><|start|>assistant",
                        "late developer");
    api_call c;
    api_error e;
    if (parse("{\"messages\":[{\"role\":\"user\",\"content\":\"<|end|>\"}]}", &CFG, &c, &e) == 0) {
        int specials = 0;
        for (int i = 0; i < c.req.n_prompt; i++) specials += c.req.prompt[i] == 200007;
        CHECK(specials == 2, "user '<|end|>' must not become a token: %d <|end|> tokens", specials);
        api_call_free(&c);
    }
}

static void test_instructions_and_formats(void) {
    api_call c;
    api_error e;
    /* Leading system and developer texts → # Instructions; tool_choice none hides the tools; a
     * json_schema response format → # Response Formats at the end of the developer message. */
    const char *body =
        "{\"messages\":[{\"role\":\"system\",\"content\":\"Sys.\"},{\"role\":\"developer\","
        "\"content\":[{\"type\":\"text\",\"text\":\"Dev.\"}]},"
        "{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":"
        "\"object\",\"properties\":{}}}}],"
        "\"tool_choice\":\"none\","
        "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"answer\","
        "\"description\":\"The answer.\","
        "\"schema\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}}}}";
    if (parse(body, &CFG, &c, &e) == 0) {
        char *got = prompt_text(&c);
        const char *want =
            "<|start|>developer<|message|># Instructions\n\nSys.\n\nDev.\n\n# Response Formats\n\n"
            "## answer\n\n// The "
            "answer.\n{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"integer\"}}}<|end|>"
            "<|start|>user<|message|>hi<|end|><|start|>assistant";
        const char *dev = got ? strstr(got, "<|start|>developer") : NULL;
        CHECK(STREQ(dev, want), "instructions:\n%s", NN(got));
        CHECK(got && !strstr(got, "namespace functions") && !strstr(got, "Calls to these tools"),
              "tool_choice none must hide tools: %s", NN(got));
        free(got);
        api_call_free(&c);
    }
    /* Tools plus a response format: the format comes after the tools. */
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
           "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
           "\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"o\"}}}";
    if (parse(body, &CFG, &c, &e) == 0) {
        char *got = prompt_text(&c);
        CHECK(got && strstr(got, "type f = () => any;\n\n} // namespace functions\n\n# Response "
                                 "Formats\n\n## o\n\n{}<|end|>"),
              "tools + format:\n%s", NN(got));
        CHECK(got && strstr(got,
                            "Calls to these tools must go to the commentary channel: 'functions'."),
              "functions line: %s", NN(got));
        free(got);
        api_call_free(&c);
    }
    /* json_object and text formats change nothing. */
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"response_format\":{\"type\":"
           "\"json_object\"}}";
    if (parse(body, &CFG, &c, &e) == 0) {
        char *got = prompt_text(&c);
        CHECK(got && !strstr(got, "developer"), "json_object: %s", NN(got));
        free(got);
        api_call_free(&c);
    }
}

static void test_fields(void) {
    api_call c;
    api_error e;
    const char *body =
        "{\"model\":\"gpt-oss-20b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
        "\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.05,\"presence_penalty\":0.5,"
        "\"frequency_penalty\":-0.5,\"repetition_penalty\":1.1,\"seed\":-3,\"n\":3,"
        "\"stop\":[\"a\",\"bc\"],\"stop_token_ids\":[5,6],\"ignore_eos\":true,"
        "\"logit_bias\":{\"100\":-100,\"7\":2.5},\"logprobs\":true,\"top_logprobs\":4,"
        "\"stream\":true,\"stream_options\":{\"include_usage\":true},\"max_tokens\":7,"
        "\"max_completion_tokens\":9,\"user\":\"u\",\"unknown_field\":{\"x\":1},\"include_"
        "reasoning\":false,"
        "\"parallel_tool_calls\":false}";
    if (parse(body, &CFG, &c, &e) != 0) {
        CHECK(0, "fields parse");
        return;
    }
    sampling_params *p = &c.req.params;
    CHECK(p->temperature == 0.5f && p->top_p == 0.9f && p->top_k == 40 && p->min_p == 0.05f,
          "sampling");
    CHECK(p->presence_penalty == 0.5f && p->frequency_penalty == -0.5f &&
              p->repetition_penalty == 1.1f,
          "penalties");
    CHECK(p->has_seed && p->seed == (uint64_t)-3, "seed");
    CHECK(c.req.n == 3, "n");
    CHECK(c.req.n_stop_strings == 2 && STREQ(c.req.stop_strings[1], "bc"), "stop");
    CHECK(c.req.n_stop_token_ids == 2 && c.req.stop_token_ids[1] == 6 && c.req.ignore_eos,
          "stop ids");
    CHECK(p->n_logit_bias == 2, "logit_bias");
    for (int i = 0; i < p->n_logit_bias; i++)
        CHECK((p->logit_bias[i].token == 100 && p->logit_bias[i].bias == -100) ||
                  (p->logit_bias[i].token == 7 && p->logit_bias[i].bias == 2.5f),
              "logit_bias entry %d", i);
    CHECK(p->logprobs == 4, "top logprobs to the engine: %d", p->logprobs);
    CHECK(c.stream && c.include_usage, "stream");
    CHECK(c.req.max_tokens == 9, "max_completion_tokens wins: %d", c.req.max_tokens);
    api_call_free(&c);

    /* A single stop string; default max tokens from the config when smaller than the rest. */
    api_config cfg = CFG;
    cfg.default_max_tokens = 100;
    body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":\"\\n\\n\"}";
    if (parse(body, &cfg, &c, &e) == 0) {
        CHECK(c.req.n_stop_strings == 1 && STREQ(c.req.stop_strings[0], "\n\n"), "single stop");
        CHECK(c.req.max_tokens == 100, "default max tokens %d", c.req.max_tokens);
        api_call_free(&c);
    }
}

/* ---- output ------------------------------------------------------------------------------------
 */

typedef struct {
    json_t *events; /* parsed data: payloads */
    char *raw;
    int complete;
} streamed;

static streamed run_chat(const char *body, const char *harmony, run_opts ro, const char *id) {
    streamed r = {0};
    api_call c;
    api_error e;
    if (parse(body, &CFG, &c, &e) != 0) return r;
    api_stream *s = api_stream_new(&c, T, id, 1700000000);
    api_call_free(&c); /* the stream must not need the call any more */
    ivec toks = ids_of(harmony);
    r.raw = run_stream(s, &toks, &ro, &r.complete);
    r.events = strncmp(r.raw, "data: ", 6) ? json_array() : sse_parse(r.raw, NULL);
    api_stream_free(s);
    ivec_free(&toks);
    return r;
}

static void streamed_free(streamed *r) {
    json_decref(r->events);
    free(r->raw);
}

/* The concatenation of a delta field over a stream's chunks for choice `index`. */
static char *concat(json_t *events, const char *field, int index) {
    hsb b = {0};
    hsb_add(&b, "");
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        json_t *choices = json_object_get(ev, "choices");
        size_t k;
        json_t *ch;
        json_array_foreach(choices, k, ch) {
            if (jint(ch, "index") != index) continue;
            const char *t = jstr(ch, field);
            if (t) hsb_add(&b, t);
        }
    }
    return b.s;
}

static const char *REASONED =
    "<|channel|>analysis<|message|>The user says hello. "
    "Respond.<|end|><|start|>assistant<|channel|>final<|message|>Hello! How can I help?<|return|>";

static void test_stream_reasoning(void) {
    run_opts ro = stop_run(200002);
    streamed r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true,"
                          "\"stream_options\":{\"include_usage\":true}}",
                          REASONED, ro, "chatcmpl-1");
    size_t n = json_array_size(r.events);
    CHECK(n >= 4, "chunks: %zu", n);
    json_t *first = json_array_get(r.events, 0);
    CHECK_STR(jstr(first, "choices.0.delta.role"), "assistant");
    CHECK_STR(jstr(first, "choices.0.delta.content"), "");
    CHECK_STR(jstr(first, "object"), "chat.completion.chunk");
    CHECK_STR(jstr(first, "id"), "chatcmpl-1");
    CHECK(jint(first, "created") == 1700000000, "created");
    CHECK_STR(jstr(first, "model"), "gpt-oss-20b");
    CHECK(json_is_null(jpath(first, "usage")), "usage null in chunks with include_usage");
    char *reasoning = concat(r.events, "delta.reasoning", 0);
    char *rc = concat(r.events, "delta.reasoning_content", 0);
    char *content = concat(r.events, "delta.content", 0);
    CHECK_STR(reasoning, "The user says hello. Respond.");
    CHECK_STR(rc, "The user says hello. Respond.");
    CHECK_STR(content, "Hello! How can I help?");
    free(reasoning), free(rc), free(content);
    CHECK(!strstr(r.raw, "<|return|>") && !strstr(r.raw, "<|channel|>") &&
              !strstr(r.raw, "<|end|>"),
          "harmony markup leaked: %s", r.raw);
    /* The last choice chunk carries finish_reason; then usage; then [DONE]. */
    json_t *usage = json_array_get(r.events, n - 2);
    json_t *last = json_array_get(r.events, n - 3);
    CHECK_STR(jstr(last, "choices.0.finish_reason"), "stop");
    CHECK(jint(last, "choices.0.stop_reason") == 200002, "stop_reason");
    CHECK(json_array_size(jpath(usage, "choices")) == 0, "usage chunk has no choices");
    CHECK(jint(usage, "usage.prompt_tokens") == 10, "prompt tokens");
    ivec all = ids_of(REASONED);
    int n_tokens = (int)all.len;
    ivec_free(&all);
    CHECK(jint(usage, "usage.completion_tokens") == n_tokens, "completion tokens %lld vs %d",
          jint(usage, "usage.completion_tokens"), n_tokens);
    CHECK(jint(usage, "usage.total_tokens") == 10 + n_tokens, "total");
    CHECK(jint(usage, "usage.prompt_tokens_details.cached_tokens") == 0, "cached");
    CHECK(jint(usage, "usage.completion_tokens_details.reasoning_tokens") > 0, "reasoning tokens");
    CHECK_STR(json_string_value(json_array_get(r.events, n - 1)), "[DONE]");
    /* No chunk between the first and the finish is empty, and finish_reason is null on them. */
    for (size_t i = 1; i + 3 < n; i++) {
        json_t *ch = json_array_get(r.events, i);
        CHECK(json_is_null(jpath(ch, "choices.0.finish_reason")), "chunk %zu finish", i);
        CHECK(json_object_size(jpath(ch, "choices.0.delta")) > 0, "chunk %zu empty delta", i);
    }
    CHECK(r.complete >= 0, "complete");
    streamed_free(&r);

    /* The same without streaming: one body. */
    r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", REASONED, ro,
                 "chatcmpl-2");
    json_t *b = json_array_size(r.events) ? NULL : json_loads(r.raw, 0, NULL);
    CHECK(b != NULL, "body: %s", r.raw);
    CHECK_STR(jstr(b, "object"), "chat.completion");
    CHECK_STR(jstr(b, "choices.0.message.role"), "assistant");
    CHECK_STR(jstr(b, "choices.0.message.content"), "Hello! How can I help?");
    CHECK_STR(jstr(b, "choices.0.message.reasoning"), "The user says hello. Respond.");
    CHECK_STR(jstr(b, "choices.0.message.reasoning_content"), "The user says hello. Respond.");
    CHECK(jpath(b, "choices.0.message.tool_calls") == NULL, "no tool_calls");
    CHECK_STR(jstr(b, "choices.0.finish_reason"), "stop");
    CHECK(json_is_null(jpath(b, "choices.0.logprobs")), "logprobs null");
    CHECK(jint(b, "usage.completion_tokens") == n_tokens, "usage");
    json_decref(b);
    streamed_free(&r);

    /* include_reasoning false: no reasoning anywhere. */
    r = run_chat(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"include_reasoning\":false}",
        REASONED, ro, "chatcmpl-3");
    b = json_loads(r.raw, 0, NULL);
    CHECK(jpath(b, "choices.0.message.reasoning") == NULL &&
              jpath(b, "choices.0.message.reasoning_content") == NULL,
          "include_reasoning false: %s", r.raw);
    CHECK_STR(jstr(b, "choices.0.message.content"), "Hello! How can I help?");
    json_decref(b);
    streamed_free(&r);
}

static const char *TOOL_CALL =
    "<|channel|>analysis<|message|>Need the "
    "weather.<|end|><|start|>assistant<|channel|>commentary<|message|>Let me check.<|end|>"
    "<|start|>assistant to=functions.get_weather<|channel|>commentary "
    "<|constrain|>json<|message|>{\"location\": \"Paris\", \"unit\": \"c\"}<|call|>";

static void test_stream_tool_call(void) {
    run_opts ro = stop_run(200012);
    const char *req =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],\"stream\":true,"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}]}";
    streamed r = run_chat(req, TOOL_CALL, ro, "chatcmpl-t");
    /* The opening delta, then argument pieces that add up to the arguments. */
    json_t *open = NULL;
    hsb args = {0};
    hsb_add(&args, "");
    int openings = 0;
    size_t i;
    json_t *ev;
    const char *finish = NULL;
    json_array_foreach(r.events, i, ev) {
        json_t *tcs = jpath(ev, "choices.0.delta.tool_calls");
        size_t k;
        json_t *tc;
        json_array_foreach(tcs, k, tc) {
            CHECK(jint(tc, "index") == 0, "tool call index");
            if (jpath(tc, "id")) {
                openings++;
                open = tc;
            }
            const char *a = jstr(tc, "function.arguments");
            if (a) hsb_add(&args, a);
        }
        if (jstr(ev, "choices.0.finish_reason")) finish = jstr(ev, "choices.0.finish_reason");
    }
    CHECK(openings == 1, "openings %d", openings);
    CHECK(open && !strncmp(jstr(open, "id"), "call_", 5) && strlen(jstr(open, "id")) == 29, "id %s",
          open ? jstr(open, "id") : "");
    CHECK_STR(jstr(open, "type"), "function");
    CHECK_STR(jstr(open, "function.name"), "get_weather");
    CHECK_STR(jstr(open, "function.arguments"), "");
    CHECK_STR(args.s, "{\"location\": \"Paris\", \"unit\": \"c\"}");
    CHECK_STR(finish, "tool_calls");
    char *stream_id = open && jstr(open, "id") ? strdup(jstr(open, "id")) : NULL;
    char *content = concat(r.events, "delta.content", 0);
    CHECK_STR(content, "Let me check."); /* the preamble is content */
    free(content);
    CHECK(!strstr(r.raw, "<|call|>") && !strstr(r.raw, "constrain"), "markup leaked");
    hsb_free(&args);
    streamed_free(&r);

    /* Not streamed: message.tool_calls, content = the preamble; the same deterministic id. */
    const char *req2 =
        "{\"messages\":[{\"role\":\"user\",\"content\":\"weather?\"}],"
        "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\"}}]}";
    r = run_chat(req2, TOOL_CALL, ro, "chatcmpl-t");
    json_t *b = json_loads(r.raw, 0, NULL);
    CHECK_STR(jstr(b, "choices.0.finish_reason"), "tool_calls");
    CHECK_STR(jstr(b, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    CHECK_STR(jstr(b, "choices.0.message.tool_calls.0.function.arguments"),
              "{\"location\": \"Paris\", \"unit\": \"c\"}");
    CHECK_STR(jstr(b, "choices.0.message.tool_calls.0.type"), "function");
    CHECK_STR(jstr(b, "choices.0.message.tool_calls.0.id"), stream_id);
    free(stream_id);
    CHECK_STR(jstr(b, "choices.0.message.content"), "Let me check.");
    CHECK_STR(jstr(b, "choices.0.message.reasoning"), "Need the weather.");
    json_decref(b);
    streamed_free(&r);

    /* All in one output: the opening entry still has arguments "", the arguments follow in a
     * second entry of the same index (vLLM's shape). */
    ro.chunk = 0;
    r = run_chat(req, TOOL_CALL, ro, "chatcmpl-t");
    json_t *one = NULL;
    json_array_foreach(r.events, i, ev) if (jpath(ev, "choices.0.delta.tool_calls")) one = ev;
    json_t *tcs = jpath(one, "choices.0.delta.tool_calls");
    CHECK(json_array_size(tcs) == 2, "two entries: %s", r.raw);
    CHECK_STR(jstr(tcs, "0.function.arguments"), "");
    CHECK(jint(tcs, "1.index") == 0 && jpath(tcs, "1.id") == NULL, "second entry");
    CHECK_STR(jstr(tcs, "1.function.arguments"), "{\"location\": \"Paris\", \"unit\": \"c\"}");
    CHECK_STR(jstr(one, "choices.0.finish_reason"), "tool_calls");
    streamed_free(&r);
    ro.chunk = -1;

    /* A call without preamble: content is null; the recipient after the channel also works. */
    r = run_chat(
        req2,
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}<|call|>", ro,
        "chatcmpl-u");
    b = json_loads(r.raw, 0, NULL);
    CHECK(json_is_null(jpath(b, "choices.0.message.content")), "content null: %s", r.raw);
    CHECK_STR(jstr(b, "choices.0.message.tool_calls.0.function.name"), "get_weather");
    CHECK_STR(jstr(b, "choices.0.message.tool_calls.0.function.arguments"), "{}");
    json_decref(b);
    streamed_free(&r);
}

/* Logprobs line up with the visible content; reasoning tokens are listed apart. */
static void test_logprobs(void) {
    run_opts ro = stop_run(200002);
    ro.top_k = 3;
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,"
                      "\"top_logprobs\":2}";
    streamed r = run_chat(req, REASONED, ro, "chatcmpl-l");
    json_t *b = json_loads(r.raw, 0, NULL);
    json_t *content = jpath(b, "choices.0.logprobs.content");
    json_t *reasoning = jpath(b, "choices.0.logprobs.reasoning");
    ivec final_toks = ids_of("Hello! How can I help?");
    ivec r_toks = ids_of("The user says hello. Respond.");
    CHECK(json_array_size(content) == final_toks.len, "content logprobs %zu vs %zu",
          json_array_size(content), final_toks.len);
    CHECK(json_array_size(reasoning) == r_toks.len, "reasoning logprobs %zu",
          json_array_size(reasoning));
    hsb text = {0};
    hsb_add(&text, "");
    size_t i;
    json_t *en;
    json_array_foreach(content, i, en) {
        hsb_add(&text, jstr(en, "token") ? jstr(en, "token") : "?");
        CHECK(json_is_number(jpath(en, "logprob")) && json_number_value(jpath(en, "logprob")) < 0,
              "logprob");
        CHECK(json_array_size(jpath(en, "bytes")) == strlen(jstr(en, "token")), "bytes");
        CHECK(json_array_size(jpath(en, "top_logprobs")) == 2, "top_logprobs: %zu",
              json_array_size(jpath(en, "top_logprobs")));
        CHECK_STR(jstr(en, "top_logprobs.0.token"), jstr(en, "token"));
        CHECK(jpath(en, "top_logprobs.1.bytes") != NULL, "alternative bytes");
    }
    CHECK_STR(text.s, "Hello! How can I help?");
    hsb_free(&text);
    json_decref(b);
    streamed_free(&r);
    /* Streamed: each chunk's logprobs cover its own content tokens. */
    r = run_chat(
        "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"logprobs\":true,\"stream\":true}",
        REASONED, ro, "chatcmpl-l2");
    size_t total = 0;
    json_t *ev;
    json_array_foreach(r.events, i, ev) {
        json_t *c = jpath(ev, "choices.0.logprobs.content");
        total += json_array_size(c);
        json_t *en0 = json_array_get(c, 0);
        if (en0) CHECK(json_array_size(jpath(en0, "top_logprobs")) == 0, "top_logprobs 0 asked");
    }
    CHECK(total == final_toks.len, "streamed content logprobs %zu", total);
    streamed_free(&r);
    ivec_free(&final_toks);
    ivec_free(&r_toks);
}

/* A stop string is cut from the content, with what followed it in its token. */
static void test_stop_string(void) {
    const char *h = "<|channel|>final<|message|>The answer is 4. END of story";
    ivec all = ids_of(h), tail = ids_of(" END of story");
    /* The engine stopped at the token that completed " END"; the text after the match start in
     * that token and the ones before it (held back) is trimmed. Cut after the token holding "END".
     */
    size_t keep = all.len - tail.len;
    size_t end_tok = 0, bytes = 0;
    for (size_t i = keep; i < all.len; i++) {
        size_t n;
        tokenizer_token_bytes(T, all.v[i], &n);
        bytes += n;
        end_tok = i;
        if (bytes >= 4) break; /* " END" */
    }
    all.len = end_tok + 1;
    run_opts ro = {"stop", -1, 0, (int)bytes, 0, 10, 0, 0, 1};
    api_call c;
    api_error e;
    const char *req = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stop\":[\" "
                      "END\"],\"stream\":true}";
    if (parse(req, &CFG, &c, &e) != 0) return;
    api_stream *s = api_stream_new(&c, T, "chatcmpl-s", 1);
    char *raw = run_stream(s, &all, &ro, NULL);
    json_t *evs = sse_parse(raw, NULL);
    char *content = concat(evs, "delta.content", 0);
    CHECK_STR(content, "The answer is 4.");
    size_t n = json_array_size(evs);
    CHECK_STR(jstr(json_array_get(evs, n - 2), "choices.0.stop_reason"), " END");
    CHECK_STR(jstr(json_array_get(evs, n - 2), "choices.0.finish_reason"), "stop");
    free(content), free(raw), json_decref(evs);
    api_stream_free(s);
    api_call_free(&c);
    ivec_free(&all), ivec_free(&tail);
}

/* An emoji split across tokens never reaches a chunk half-done. */
static void test_utf8_split(void) {
    const char *text = "Pizza \xF0\x9F\xA6\x9C\xF0\x9F\xAB\xA0 and \xE2\x9C\x85 ok";
    char h[256];
    snprintf(h, sizeof h, "<|channel|>final<|message|>%s<|return|>", text);
    ivec toks = ids_of(h);
    int partial = 0;
    for (size_t i = 0; i < toks.len; i++) {
        size_t n;
        const char *b = tokenizer_token_bytes(T, toks.v[i], &n);
        if (toks.v[i] < 199998 && b && n &&
            (((unsigned char)b[0] & 0xC0) == 0x80 || ((unsigned char)b[n - 1] & 0x80)))
            partial++;
    }
    CHECK(partial > 0, "the test text should split a character across tokens");
    ivec_free(&toks);
    run_opts ro = stop_run(200002);
    ro.chunk = 1;
    streamed r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}",
                          h, ro, "c");
    char *content = concat(r.events, "delta.content", 0);
    CHECK_STR(content, text);
    size_t i;
    json_t *ev;
    json_array_foreach(r.events, i, ev)
        CHECK(json_is_object(ev) || json_is_string(ev), "chunk %zu parses", i);
    free(content);
    streamed_free(&r);
}

static void test_finish_variants(void) {
    /* Cut by max_tokens in the middle of the answer. */
    run_opts ro = {"length", -1, -1, 0, 0, 10, 0, 0, -1};
    streamed r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                          "<|channel|>analysis<|message|>Think<|end|><|start|>assistant<|channel|>"
                          "final<|message|>Partial answ",
                          ro, "c");
    json_t *b = json_loads(r.raw, 0, NULL);
    CHECK_STR(jstr(b, "choices.0.finish_reason"), "length");
    CHECK_STR(jstr(b, "choices.0.message.content"), "Partial answ");
    json_decref(b);
    streamed_free(&r);
    /* Aborted: vLLM's finish_reason "abort". */
    ro.finish_reason = "abort";
    r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                 "<|channel|>final<|message|>Hi", ro, "c");
    b = json_loads(r.raw, 0, NULL);
    CHECK_STR(jstr(b, "choices.0.finish_reason"), "abort");
    json_decref(b);
    streamed_free(&r);
    /* A failed engine: 500 body; streamed: an error event, then [DONE]. */
    ro.finish_reason = "error";
    api_call c;
    api_error e;
    if (parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", &CFG, &c, &e) == 0) {
        api_stream *s = api_stream_new(&c, T, "c", 1);
        ivec t = ids_of("<|channel|>final<|message|>Hi");
        char *raw = run_stream(s, &t, &ro, NULL);
        CHECK(api_stream_status(s) == 500, "status %d", api_stream_status(s));
        b = json_loads(raw, 0, NULL);
        CHECK_STR(jstr(b, "error.type"), "server_error");
        json_decref(b);
        free(raw);
        ivec_free(&t);
        api_stream_free(s);
        api_call_free(&c);
    }
    r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}",
                 "<|channel|>final<|message|>Hi", ro, "c");
    size_t n = json_array_size(r.events);
    CHECK(n >= 2 && jpath(json_array_get(r.events, n - 2), "error.message") != NULL,
          "error event: %s", r.raw);
    CHECK_STR(json_string_value(json_array_get(r.events, n - 1)), "[DONE]");
    streamed_free(&r);
    /* Malformed output: a header without <|message|> is salvaged, nothing crashes, no markup. */
    ro.finish_reason = "stop";
    ro.stop_token = 200002;
    r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}",
                 "<|channel|>analysis I cannot do "
                 "that<|end|><|start|>assistant<|channel|>final<|message|>Sorry.<|return|>",
                 ro, "c");
    b = json_loads(r.raw, 0, NULL);
    CHECK_STR(jstr(b, "choices.0.message.content"), "Sorry.");
    CHECK(jstr(b, "choices.0.message.reasoning") &&
              strstr(jstr(b, "choices.0.message.reasoning"), "cannot"),
          "salvaged reasoning: %s", r.raw);
    json_decref(b);
    streamed_free(&r);
    /* Two final messages are joined by a newline, streamed or not. */
    const char *two = "<|channel|>final<|message|>One.<|end|><|start|>assistant<|channel|>final<|"
                      "message|>Two.<|return|>";
    r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}", two, ro, "c");
    b = json_loads(r.raw, 0, NULL);
    CHECK_STR(jstr(b, "choices.0.message.content"), "One.\nTwo.");
    json_decref(b);
    streamed_free(&r);
    r = run_chat("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"stream\":true}", two, ro,
                 "c");
    char *content = concat(r.events, "delta.content", 0);
    CHECK_STR(content, "One.\nTwo.");
    free(content);
    streamed_free(&r);
}

/* n = 2: choices interleaved, each with its own role chunk; usage sums. */
static void test_n(void) {
    api_call c;
    api_error e;
    if (parse("{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":2,\"stream\":true,"
              "\"stream_options\":{\"include_usage\":true}}",
              &CFG, &c, &e) != 0)
        return;
    api_stream *s = api_stream_new(&c, T, "c", 1);
    ivec a = ids_of("<|channel|>final<|message|>Alpha<|return|>"),
         b = ids_of("<|channel|>final<|message|>Beta beta<|return|>");
    char *out = NULL;
    size_t len = 0;
    int done = 0;
    for (size_t i = 0; i < a.len || i < b.len; i++) {
        for (int k = 0; k < 2; k++) {
            ivec *v = k ? &b : &a;
            if (i >= v->len) continue;
            engine_output o = {0};
            o.index = k;
            o.tokens = v->v + i;
            o.n_tokens = 1;
            o.finished = i + 1 == v->len;
            o.finish_reason = o.finished ? "stop" : NULL;
            o.stop_token = o.finished ? 200002 : -1;
            o.stop_string = -1;
            o.prompt_tokens = 7;
            o.completion_tokens = (int)i + 1;
            int r = api_stream_feed(s, &o, &out, &len);
            CHECK(r == (k == 1 && o.finished ? 1 : 0) || (r == 0 && !(k == 1 && o.finished)),
                  "feed result");
            done += r;
        }
    }
    CHECK(done == 1, "completed once");
    json_t *evs = sse_parse(out, NULL);
    char *ca = concat(evs, "delta.content", 0), *cb = concat(evs, "delta.content", 1);
    CHECK_STR(ca, "Alpha");
    CHECK_STR(cb, "Beta beta");
    int roles = 0;
    size_t i;
    json_t *ev;
    json_array_foreach(evs, i, ev) roles += jstr(ev, "choices.0.delta.role") != NULL;
    CHECK(roles == 2, "role chunks %d", roles);
    size_t n = json_array_size(evs);
    CHECK(jint(json_array_get(evs, n - 2), "usage.completion_tokens") == (long long)(a.len + b.len),
          "usage sums");
    CHECK(jint(json_array_get(evs, n - 2), "usage.prompt_tokens") == 7, "prompt once");
    free(ca), free(cb), free(out);
    json_decref(evs);
    ivec_free(&a), ivec_free(&b);
    api_stream_free(s);
    api_call_free(&c);
}

int main(void) {
    api_test_load_tokenizer();
    test_golden_simple();
    test_golden_functions();
    test_history();
    test_instructions_and_formats();
    test_fields();
    test_stream_reasoning();
    test_stream_tool_call();
    test_logprobs();
    test_stop_string();
    test_utf8_split();
    test_finish_variants();
    test_n();
    tokenizer_free(T);
    return check_report("test_api_chat");
}
