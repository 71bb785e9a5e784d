/* The structured-output request fields (api_structured.c) → the engine's constraint: which fields
 * make one, which make none, and refusals that name their field. The constraint's behaviour is
 * test_constraint.c's; end to end with ajv it is test_server_structured.sh's. */
#include "test_api_util.h"

#include "engine/constraint.h"

typedef int (*parse_fn)(const char *, size_t, const tokenizer *, const api_config *, api_call *,
                        api_error *);

/* Parses body; returns 1 with a constraint, 0 without, -1 refused (err->param filled). */
static int parse(parse_fn fn, const char *body, api_error *err) {
    api_call c;
    memset(err, 0, sizeof *err);
    if (fn(body, strlen(body), T, &CFG, &c, err) != 0) return -1;
    int has = c.req.constraint != NULL;
    api_call_free(&c);
    return has;
}

#define CHAT(extra)                                                                                \
    "{\"model\":\"gpt-oss-20b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]" extra "}"
#define RESP(extra) "{\"model\":\"gpt-oss-20b\",\"input\":\"hi\"" extra "}"
#define COMP(extra) "{\"model\":\"gpt-oss-20b\",\"prompt\":\"hi\"" extra "}"

static void expect(parse_fn fn, const char *body, int want, const char *param) {
    api_error err;
    int got = parse(fn, body, &err);
    CHECK(got == want, "%s: got %d, want %d (%s)", body, got, want, err.message);
    if (want < 0 && got < 0) {
        CHECK(!strcmp(err.param, param), "%s: param '%s', want '%s'", body, err.param, param);
        CHECK(err.status == 400, "%s: status %d", body, err.status);
    }
}

static const char SCHEMA[] = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                             "\"required\":[\"a\"],\"additionalProperties\":false}";

int main(void) {
    api_test_load_tokenizer();
    char b[8192];
    /* nothing to enforce */
    expect(api_parse_chat, CHAT(""), 0, NULL);
    expect(api_parse_chat, CHAT(",\"response_format\":{\"type\":\"text\"}"), 0, NULL);
    expect(api_parse_completions, COMP(""), 0, NULL);
    expect(api_parse_chat,
           CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]"), 0, NULL);
    /* answer formats */
    snprintf(b, sizeof b,
             CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
                  "\"schema\":%s}}"),
             SCHEMA);
    expect(api_parse_chat, b, 1, NULL);
    expect(api_parse_chat, CHAT(",\"response_format\":{\"type\":\"json_object\"}"), 1, NULL);
    snprintf(b, sizeof b,
             RESP(",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":%s}}"),
             SCHEMA);
    expect(api_parse_responses, b, 1, NULL);
    expect(api_parse_chat, CHAT(",\"structured_outputs\":{\"regex\":\"[a-z]+\"}"), 1, NULL);
    expect(api_parse_chat, CHAT(",\"guided_choice\":[\"a\",\"b\"]"), 1, NULL);
    expect(api_parse_completions, COMP(",\"guided_json\":\"{\\\"type\\\":\\\"integer\\\"}\""), 1,
           NULL);
    expect(api_parse_completions, COMP(",\"structured_outputs\":{\"json_object\":true}"), 1, NULL);
    expect(api_parse_completions, COMP(",\"guided_regex\":\"[0-9]{3}\""), 1, NULL);
    /* tools and reasoning */
    expect(api_parse_chat, CHAT(",\"thinking_token_budget\":0"), 1, NULL);
    expect(api_parse_responses, RESP(",\"thinking_token_budget\":100"), 1, NULL);
    expect(api_parse_chat,
           CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],"
                "\"tool_choice\":\"required\""),
           1, NULL);
    snprintf(b, sizeof b,
             CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,"
                  "\"parameters\":%s}}]"),
             SCHEMA);
    expect(api_parse_chat, b, 1, NULL);
    snprintf(b, sizeof b,
             CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,"
                  "\"parameters\":%s}}],\"tool_choice\":\"none\""),
             SCHEMA);
    expect(api_parse_chat, b, 0, NULL);
    /* a forced non-strict tool whose schema the grammar cannot express: any object */
    expect(api_parse_chat,
           CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                "{\"type\":\"object\",\"properties\":{\"s\":{\"type\":\"string\",\"maxLength\":3}}"
                "}}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"f\"}}"),
           1, NULL);
    /* refusals name the field */
    expect(api_parse_chat,
           CHAT(",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\","
                "\"schema\":{\"type\":\"string\",\"maxLength\":3}}}"),
           -1, "response_format.json_schema.schema");
    expect(api_parse_responses,
           RESP(",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"x\",\"schema\":{"
                "\"$ref\":\"#/$defs/a\",\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}}}}}"),
           -1, "text.format.schema");
    expect(api_parse_chat,
           CHAT(",\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"strict\":true,"
                "\"parameters\":{\"type\":\"object\",\"patternProperties\":{}}}}]"),
           -1, "tools[0].function.parameters");
    expect(api_parse_completions, COMP(",\"guided_regex\":\"(a\""), -1, "guided_regex");
    expect(api_parse_completions, COMP(",\"guided_regex\":5"), -1, "guided_regex");
    expect(api_parse_completions, COMP(",\"guided_choice\":[]"), -1, "guided_choice");
    expect(api_parse_completions, COMP(",\"guided_choice\":[\"a\",1]"), -1, "guided_choice");
    expect(api_parse_completions, COMP(",\"structured_outputs\":{\"grammar\":\"root ::= x\"}"), -1,
           "structured_outputs.grammar");
    expect(api_parse_completions, COMP(",\"structured_outputs\":7"), -1, "structured_outputs");
    expect(api_parse_completions,
           COMP(",\"structured_outputs\":{\"regex\":\"a\"},\"guided_choice\":[\"b\"]"), -1,
           "guided_choice");
    expect(api_parse_chat,
           CHAT(",\"response_format\":{\"type\":\"json_object\"},\"guided_regex\":\"a\""), -1,
           "guided_regex");
    expect(api_parse_chat, CHAT(",\"thinking_token_budget\":-1"), -1, "thinking_token_budget");
    expect(api_parse_chat, CHAT(",\"thinking_token_budget\":\"x\""), -1, "thinking_token_budget");
    expect(api_parse_completions, COMP(",\"thinking_token_budget\":1"), -1,
           "thinking_token_budget");
    expect(api_parse_responses,
           RESP(",\"tools\":[{\"type\":\"function\",\"name\":\"f\"}],\"tool_choice\":{\"type\":"
                "\"function\",\"name\":\"g\"}"),
           -1, "tool_choice");
    /* a hostile schema: nesting past the grammar's depth is refused, not a crash */
    char deep[4096] = "";
    size_t n = 0;
    for (int i = 0; i < 70; i++) n += (size_t)snprintf(deep + n, sizeof deep - n, "{\"items\":");
    n += (size_t)snprintf(deep + n, sizeof deep - n, "{}");
    for (int i = 0; i < 70; i++) deep[n++] = '}';
    deep[n] = 0;
    snprintf(b, sizeof b, COMP(",\"guided_json\":%s"), deep);
    api_error err;
    CHECK(parse(api_parse_completions, b, &err) == -1 && err.status == 400,
          "deep schema refused (%s)", err.message);
    tokenizer_free(T);
    return check_report("test_api_structured");
}
