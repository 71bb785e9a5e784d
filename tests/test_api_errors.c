/* Bad requests to the three endpoints: every refusal has the right status, names the offending
 * field in `param` and the message, and serialises to OpenAI's error shape; malformed, hostile and
 * mutated bodies never crash (run under ASan by `make asan`). Skipped (77) without tokenizer.json.
 */
#include "test_api_util.h"

typedef int (*parse_fn)(const char *, size_t, const tokenizer *, const api_config *, api_call *,
                        api_error *);

static void expect_n(parse_fn fn, const char *body, size_t len, int status, const char *param,
                     const char *frag) {
    api_call c;
    api_error e;
    memset(&e, 0, sizeof e);
    int rc = fn(body, len, T, &CFG, &c, &e);
    CHECK(rc == -1 && e.status == status && STREQ(e.param, param),
          "%.200s: rc %d status %d param '%s' (want %d '%s'): %s", body, rc, e.status, e.param,
          status, param, e.message);
    if (rc == 0) {
        api_call_free(&c);
        return;
    }
    CHECK(e.message[0] != 0, "%.80s: empty message", body);
    if (frag) CHECK_MSG_HAS(e.message, frag);
    if (param[0]) CHECK_MSG_HAS(e.message, param);
    /* The JSON form. */
    char *j = api_error_json(&e);
    json_t *v = j ? json_loads(j, 0, NULL) : NULL;
    CHECK(v && json_object_size(v) == 1 && json_is_object(jpath(v, "error")), "error JSON: %s",
          NN(j));
    CHECK(STREQ(jstr(v, "error.message"), e.message), "message");
    CHECK(jstr(v, "error.type") != NULL, "type");
    if (param[0])
        CHECK(STREQ(jstr(v, "error.param"), param), "param in JSON");
    else
        CHECK(json_is_null(jpath(v, "error.param")), "param null");
    CHECK(jpath(v, "error.code") != NULL, "code present (null or string)");
    json_decref(v);
    free(j);
}

static void expect(parse_fn fn, const char *body, int status, const char *param, const char *frag) {
    expect_n(fn, body, strlen(body), status, param, frag);
}

static void expect_ok(parse_fn fn, const char *body) {
    api_call c;
    api_error e;
    int rc = fn(body, strlen(body), T, &CFG, &c, &e);
    CHECK(rc == 0, "%.200s: %d %s", body, e.status, e.message);
    if (rc == 0) api_call_free(&c);
}

static void test_error_json(void) {
    api_error e;
    api_error_set(&e, 400, NULL, "messages[2].content", "Invalid type for '%s'",
                  "messages[2].content");
    char *j = api_error_json(&e);
    CHECK_STR(j, "{\"error\":{\"message\":\"Invalid type for 'messages[2].content'\",\"type\":"
                 "\"invalid_request_error\",\"param\":\"messages[2].content\",\"code\":null}}");
    free(j);
    api_error_set(&e, 503, NULL, NULL, "busy");
    j = api_error_json(&e);
    CHECK_STR(j, "{\"error\":{\"message\":\"busy\",\"type\":\"service_unavailable_error\","
                 "\"param\":null,\"code\":null}}");
    free(j);
    api_error_set(&e, 401, "", "", "no key");
    j = api_error_json(&e);
    CHECK(j && strstr(j, "\"authentication_error\""), "401 type: %s", NN(j));
    free(j);
    /* A message cut in the middle of a character still serialises. */
    char big[700];
    memset(big, 'a', sizeof big);
    for (int i = 500; i < 699; i += 2) big[i] = (char)0xC3, big[i + 1] = (char)0xA9;
    big[699] = 0;
    api_error_set(&e, 400, NULL, NULL, "%s", big);
    j = api_error_json(&e);
    json_t *v = j ? json_loads(j, 0, NULL) : NULL;
    CHECK(v != NULL, "long message");
    json_decref(v);
    free(j);
}

static void test_json(void) {
    parse_fn fns[3] = {api_parse_chat, api_parse_completions, api_parse_responses};
    for (int k = 0; k < 3; k++) {
        parse_fn fn = fns[k];
        expect(fn, "", 400, "", "empty");
        expect(fn, "{", 400, "", "line 1");
        expect(fn, "{\"messages\": [}", 400, "", "Invalid JSON");
        expect(fn, "[]", 400, "", "JSON object");
        expect(fn, "null", 400, "", NULL);
        expect(fn, "123", 400, "", NULL);
        expect(fn, "\"str\"", 400, "", NULL);
        expect(fn, "{\"a\":1} trailing", 400, "", NULL);
        expect(fn, "{\"model\":\"x\xff\"}", 400, "", NULL);     /* invalid UTF-8 */
        expect(fn, "{\"model\":\"a\\u0000b\"}", 400, "", NULL); /* NUL in a string */
        expect(fn, "{\"temperature\":1e400}", 400, "", NULL);
        expect(fn, "{\"max_tokens\":99999999999999999999999}", 400, "", NULL);
        expect(fn, "{\"model\":\"gpt-4o\"}", 404, "model", "gpt-4o");
        expect(fn, "{\"model\":5}", 400, "model", NULL);
        /* Nesting: beyond our limit, and far beyond jansson's. */
        hsb deep = {0};
        hsb_add(&deep, "{\"x\":");
        for (int i = 0; i < 100; i++) hsb_addc(&deep, '[');
        for (int i = 0; i < 100; i++) hsb_addc(&deep, ']');
        hsb_addc(&deep, '}');
        expect(fn, deep.s, 400, "", "nested");
        hsb_clear(&deep);
        hsb_add(&deep, "{\"x\":");
        for (int i = 0; i < 100000; i++) hsb_add(&deep, "{\"a\":[");
        expect(fn, deep.s, 400, "", NULL);
        hsb_free(&deep);
        /* Binary garbage. */
        char junk[256];
        for (int i = 0; i < 256; i++) junk[i] = (char)(i * 37 + 11);
        expect_n(fn, junk, sizeof junk, 400, "", NULL);
    }
    /* The 404 is OpenAI's model_not_found. */
    api_call c;
    api_error e;
    api_parse_chat("{\"model\":\"nope\",\"messages\":[]}", 30, T, &CFG, &c, &e);
    CHECK(e.status == 404 && STREQ(e.code, "model_not_found") &&
              STREQ(e.type, "invalid_request_error"),
          "404: %d %s %s", e.status, e.code, e.type);
}

#define CHAT(extra) "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" extra "}"

static void test_params(void) {
    parse_fn chat = api_parse_chat;
    expect(chat, CHAT(",\"temperature\":\"hot\""), 400, "temperature", "number");
    expect(chat, CHAT(",\"temperature\":2.5"), 400, "temperature", NULL);
    expect(chat, CHAT(",\"temperature\":-0.1"), 400, "temperature", NULL);
    expect(chat, CHAT(",\"top_p\":0"), 400, "top_p", NULL);
    expect(chat, CHAT(",\"top_p\":1.5"), 400, "top_p", NULL);
    expect(chat, CHAT(",\"top_k\":-2"), 400, "top_k", NULL);
    expect(chat, CHAT(",\"top_k\":1.5"), 400, "top_k", NULL);
    expect(chat, CHAT(",\"min_p\":2"), 400, "min_p", NULL);
    expect(chat, CHAT(",\"presence_penalty\":3"), 400, "presence_penalty", NULL);
    expect(chat, CHAT(",\"frequency_penalty\":-2.5"), 400, "frequency_penalty", NULL);
    expect(chat, CHAT(",\"repetition_penalty\":0"), 400, "repetition_penalty", NULL);
    expect(chat, CHAT(",\"n\":0"), 400, "n", NULL);
    expect(chat, CHAT(",\"n\":129"), 400, "n", NULL);
    expect(chat, CHAT(",\"n\":\"2\""), 400, "n", "integer");
    expect(chat, CHAT(",\"seed\":\"x\""), 400, "seed", NULL);
    expect(chat, CHAT(",\"seed\":1.5"), 400, "seed", NULL);
    expect(chat, CHAT(",\"max_tokens\":-5"), 400, "max_tokens", NULL);
    expect(chat, CHAT(",\"max_tokens\":0"), 400, "max_tokens", NULL);
    expect(chat, CHAT(",\"max_tokens\":1.5"), 400, "max_tokens", NULL);
    expect(chat, CHAT(",\"max_tokens\":1e30"), 400, "max_tokens", NULL);
    expect(chat, CHAT(",\"max_tokens\":5000"), 400, "max_tokens", "maximum context length");
    expect(chat, CHAT(",\"max_completion_tokens\":\"9\""), 400, "max_completion_tokens", NULL);
    expect(chat, CHAT(",\"stop\":5"), 400, "stop", NULL);
    expect(chat, CHAT(",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]"), 400, "stop", "at most 4");
    expect(chat, CHAT(",\"stop\":[\"\"]"), 400, "stop[0]", NULL);
    expect(chat, CHAT(",\"stop\":\"\""), 400, "stop", NULL);
    expect(chat, CHAT(",\"stop\":[\"a\",1]"), 400, "stop[1]", NULL);
    expect(chat, CHAT(",\"stop_token_ids\":[-1]"), 400, "stop_token_ids[0]", NULL);
    expect(chat, CHAT(",\"stop_token_ids\":[1,201088]"), 400, "stop_token_ids[1]", NULL);
    expect(chat, CHAT(",\"stop_token_ids\":7"), 400, "stop_token_ids", NULL);
    expect(chat, CHAT(",\"logit_bias\":{\"abc\":1}"), 400, "logit_bias", "abc");
    expect(chat, CHAT(",\"logit_bias\":{\"-3\":1}"), 400, "logit_bias", NULL);
    expect(chat, CHAT(",\"logit_bias\":{\"5\":200}"), 400, "logit_bias.5", NULL);
    expect(chat, CHAT(",\"logit_bias\":{\"5\":\"x\"}"), 400, "logit_bias.5", NULL);
    expect(chat, CHAT(",\"logit_bias\":[]"), 400, "logit_bias", NULL);
    /* Issue 18: only the canonical spelling of a token id is a key; integers are JSON integers. */
    expect(chat, CHAT(",\"logit_bias\":{\" 5\":1}"), 400, "logit_bias", " 5");
    expect(chat, CHAT(",\"logit_bias\":{\"+5\":1}"), 400, "logit_bias", "+5");
    expect(chat, CHAT(",\"logit_bias\":{\"05\":1}"), 400, "logit_bias", "05");
    expect(chat, CHAT(",\"logit_bias\":{\"5 \":1}"), 400, "logit_bias", NULL);
    expect(chat, CHAT(",\"logit_bias\":{\"\":1}"), 400, "logit_bias", NULL);
    expect_ok(chat, CHAT(",\"logit_bias\":{\"0\":1,\"5\":-1,\"200000\":2}"));
    expect(chat, CHAT(",\"n\":3.0"), 400, "n", "integer");
    expect(chat, CHAT(",\"max_tokens\":8.0"), 400, "max_tokens", NULL);
    expect(api_parse_completions, "{\"prompt\":[1,2.0]}", 400, "prompt[1]", NULL);
    expect(chat, CHAT(",\"ignore_eos\":\"true\""), 400, "ignore_eos", "boolean");
    expect(chat, CHAT(",\"stream\":\"yes\""), 400, "stream", "boolean");
    expect(chat, CHAT(",\"stream_options\":\"x\""), 400, "stream_options", NULL);
    expect(chat, CHAT(",\"stream_options\":{\"include_usage\":1}"), 400,
           "stream_options.include_usage", NULL);
    expect(chat, CHAT(",\"logprobs\":3"), 400, "logprobs", "boolean");
    expect(chat, CHAT(",\"logprobs\":true,\"top_logprobs\":21"), 400, "top_logprobs", NULL);
    expect(chat, CHAT(",\"top_logprobs\":2"), 400, "top_logprobs", "logprobs");
    expect(chat, CHAT(",\"include_reasoning\":0"), 400, "include_reasoning", NULL);
    expect(chat, CHAT(",\"reasoning_effort\":\"extreme\""), 400, "reasoning_effort", "extreme");
    expect(chat, CHAT(",\"reasoning_effort\":\"none\""), 400, "reasoning_effort", NULL);
    expect(chat, CHAT(",\"reasoning_effort\":1"), 400, "reasoning_effort", NULL);
    expect(chat, CHAT(",\"response_format\":{\"type\":\"xml\"}"), 400, "response_format.type",
           NULL);
    expect(chat, CHAT(",\"response_format\":{}"), 400, "response_format.type", NULL);
    expect(chat, CHAT(",\"response_format\":\"json\""), 400, "response_format", NULL);
    expect(chat, CHAT(",\"response_format\":{\"type\":\"json_schema\"}"), 400,
           "response_format.json_schema", NULL);
    expect(chat,
           CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
                "\"schema\":[]}}"),
           400, "response_format.json_schema.schema", NULL);
    expect(chat,
           CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":5}}"),
           400, "response_format.json_schema.name", NULL);
    expect(
        chat,
        CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"description\":1}}"),
        400, "response_format.json_schema.description", NULL);
    /* Accepted: nulls, unknown fields, the limits themselves. */
    expect_ok(chat, CHAT(",\"temperature\":null,\"top_p\":1,\"n\":128,\"seed\":0,\"stop\":null,"
                         "\"foo\":{\"bar\":[1,2]}"));
    expect_ok(chat, CHAT(",\"temperature\":2,\"presence_penalty\":-2,\"top_k\":-1,\"max_tokens\":"
                         "4000,\"logprobs\":true,\"top_logprobs\":20"));
    expect_ok(chat, CHAT(",\"reasoning_effort\":\"minimal\",\"tool_choice\":\"required\","
                         "\"response_format\":{\"type\":\"text\"}"));
}

static void test_messages(void) {
    parse_fn chat = api_parse_chat;
    expect(chat, "{}", 400, "messages", "Missing");
    expect(chat, "{\"messages\":{}}", 400, "messages", "array");
    expect(chat, "{\"messages\":[]}", 400, "messages", "empty");
    expect(chat, "{\"messages\":[1]}", 400, "messages[0]", NULL);
    expect(chat, "{\"messages\":[{\"content\":\"x\"}]}", 400, "messages[0].role", "Missing");
    expect(chat, "{\"messages\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "messages[0].role",
           "robot");
    expect(chat, "{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", 400, "messages[0].role", NULL);
    expect(
        chat,
        "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":5}]}",
        400, "messages[1].content", NULL);
    expect(chat,
           "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{"
           "\"url\":\"x\"}}]}]}",
           400, "messages[0].content[0].type", "image_url");
    expect(chat, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}", 400,
           "messages[0].content[0].text", NULL);
    expect(chat,
           "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":5}]}]}", 400,
           "messages[0].content[0].text", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"user\",\"content\":[5]}]}", 400,
           "messages[0].content[0]", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", 400,
           "messages[0].content[0].type", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", 400,
           "messages[0].tool_call_id", NULL);
    expect(chat,
           "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\",\"type\":"
           "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
           "{\"role\":\"tool\",\"tool_call_id\":\"zzz\",\"content\":\"x\"}]}",
           400, "messages[1].tool_call_id", "zzz");
    expect(chat, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":5}]}", 400,
           "messages[0].tool_calls", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[5]}]}", 400,
           "messages[0].tool_calls[0]", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"a\"}]}]}", 400,
           "messages[0].tool_calls[0].function", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{}}]}]}",
           400, "messages[0].tool_calls[0].function.name", NULL);
    expect(chat,
           "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"function\":{\"name\":\"bad "
           "name<|end|>\"}}]}]}",
           400, "messages[0].tool_calls[0].function.name", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"x\",\"reasoning\":5}]}", 400,
           "messages[0].reasoning", NULL);
    expect(chat, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", 400,
           "messages[0].name", NULL);
    /* tools */
    expect(chat, CHAT(",\"tools\":{}"), 400, "tools", NULL);
    expect(chat, CHAT(",\"tools\":[5]"), 400, "tools[0]", NULL);
    expect(chat, CHAT(",\"tools\":[{\"type\":\"retrieval\"}]"), 400, "tools[0].type", "retrieval");
    expect(chat, CHAT(",\"tools\":[{\"type\":\"function\"}]"), 400, "tools[0].function", "Missing");
    expect(chat, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":[]}]"), 400,
           "tools[0].function", "object");
    expect(chat, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{}}]"), 400,
           "tools[0].function.name", NULL);
    expect(chat, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"\"}}]"), 400,
           "tools[0].function.name", NULL);
    expect(chat,
           CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                "\"x\"}}]"),
           400, "tools[0].function.parameters", NULL);
    expect(
        chat,
        CHAT(
            ",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"description\":5}}]"),
        400, "tools[0].function.description", NULL);
    expect(chat, CHAT(",\"tool_choice\":\"sometimes\""), 400, "tool_choice", NULL);
    expect(chat, CHAT(",\"tool_choice\":5"), 400, "tool_choice", NULL);
    expect(chat, CHAT(",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"),
           400, "tool_choice", NULL);
    expect(chat,
           CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_"
                "choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}"),
           400, "tool_choice", "'g'");
    expect_ok(chat, CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                         "\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"));
    expect_ok(chat, "{\"messages\":[{\"role\":\"user\",\"content\":null},{\"role\":\"assistant\","
                    "\"content\":null},"
                    "{\"role\":\"function\",\"name\":\"f\",\"content\":\"r\"}]}");
    /* A prompt over the context: 400 with the counts, named after `messages`. */
    hsb big = {0};
    hsb_add(&big, "{\"messages\":[{\"role\":\"user\",\"content\":\"");
    for (int i = 0; i < 5000; i++) hsb_add(&big, "word ");
    hsb_add(&big, "\"}]}");
    expect(chat, big.s, 400, "messages", "maximum context length");
    hsb_free(&big);
}

/* Mutated and truncated versions of valid bodies: anything may be refused, nothing may crash, and
 * every refusal is a 4xx with a message. */
static void fuzz(parse_fn fn, const char *body) {
    size_t len = strlen(body);
    char *buf = malloc(len + 8);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int ok = 0, refused = 0;
    for (int iter = 0; iter < 3000; iter++) {
        size_t n = len;
        memcpy(buf, body, len);
        int edits = 1 + iter % 4;
        for (int k = 0; k < edits && n > 1; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            size_t at = (size_t)(x % n);
            static const char alphabet[] = "{}[]\":,0-9.eE+tfn\\ u\xff\xc3";
            switch ((x >> 32) % 4) {
            case 0:
                buf[at] = alphabet[(x >> 40) % (sizeof alphabet - 1)];
                break;
            case 1:
                memmove(buf + at, buf + at + 1, n - at - 1), n--;
                break;
            case 2:
                n = at + 1;
                break; /* truncate */
            default:
                buf[at] = (char)(x >> 48);
                break;
            }
        }
        api_call c;
        api_error e;
        memset(&e, 0, sizeof e);
        if (fn(buf, n, T, &CFG, &c, &e) == 0) {
            ok++;
            api_call_free(&c);
        } else {
            refused++;
            CHECK(e.status >= 400 && e.status < 500 && e.message[0], "fuzz: status %d", e.status);
            char *j = api_error_json(&e);
            CHECK(j != NULL, "fuzz: error json");
            free(j);
        }
    }
    CHECK(ok + refused == 3000 && refused > 0, "fuzz %d/%d", ok, refused);
    free(buf);
}

static void test_fuzz(void) {
    fuzz(api_parse_chat,
         "{\"model\":\"gpt-oss-20b\",\"messages\":[{\"role\":\"system\",\"content\":\"S\"},{"
         "\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]},"
         "{\"role\":\"assistant\",\"reasoning\":\"r\",\"tool_calls\":[{\"id\":\"c1\",\"type\":"
         "\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]},"
         "{\"role\":\"tool\",\"tool_call_id\":\"c1\",\"content\":\"ok\"}],\"tools\":[{\"type\":"
         "\"function\",\"function\":{\"name\":\"f\","
         "\"parameters\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"array\",\"items\":{"
         "\"enum\":[1,2]}}}}}}],"
         "\"temperature\":0.7,\"stop\":[\"x\"],\"logit_bias\":{\"5\":1},\"n\":2,\"logprobs\":true,"
         "\"top_logprobs\":3,\"max_tokens\":10}");
    fuzz(api_parse_completions, "{\"model\":\"gpt-oss-20b\",\"prompt\":[1,2,3],\"echo\":true,"
                                "\"logprobs\":2,\"stop\":\"\\n\",\"max_tokens\":5}");
    fuzz(api_parse_responses,
         "{\"model\":\"gpt-oss-20b\",\"instructions\":\"I\",\"input\":[{\"role\":\"user\","
         "\"content\":\"q\"},"
         "{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"f\",\"arguments\":\"{}\"},{"
         "\"type\":\"function_call_output\",\"call_id\":\"c\",\"output\":\"o\"}],"
         "\"tools\":[{\"type\":\"function\",\"name\":\"f\",\"parameters\":{\"type\":\"object\"}}],"
         "\"reasoning\":{\"effort\":\"low\"},"
         "\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"n\",\"schema\":{\"type\":"
         "\"object\"}}}}");
}

int main(void) {
    api_test_load_tokenizer();
    test_error_json();
    test_json();
    test_params();
    test_messages();
    test_fuzz();
    tokenizer_free(T);
    return check_report("test_api_errors");
}
