/* /v1/responses without HTTP: input items → harmony prompts, and synthetic engine outputs → the
 * response object and its typed streaming events (names, order, sequence numbers, item ids, the
 * invariants the openai SDK's accumulator checks). Skipped (77) without tokenizer.json. */
#include "test_api_util.h"

static int parse(const char *body, api_call *c, api_error *e) {
    int rc = api_parse_responses(body, strlen(body), T, &CFG, c, e);
    if (rc != 0)
        fprintf(stderr, "parse failed: %d %s (param %s)\n", e->status, e->message, e->param);
    return rc;
}

static void expect_prompt(const char *body, const char *want, const char *what) {
    api_call c;
    api_error e;
    if (parse(body, &c, &e) != 0) {
        CHECK(0, "%s: parse", what);
        return;
    }
    char *got = prompt_text(&c);
    /* skip the system message */
    const char *p = got ? strstr(got, "<|end|>") : NULL;
    p = p ? p + 7 : "";
    CHECK(STREQ(p, want), "%s:\n%s\nwant:\n%s", what, p, want);
    free(got);
    api_call_free(&c);
}

static void expect_error(const char *body, int status, const char *param) {
    api_call c;
    api_error e;
    int rc = api_parse_responses(body, strlen(body), T, &CFG, &c, &e);
    CHECK(rc == -1 && e.status == status && STREQ(e.param, param),
          "%s: rc %d status %d param '%s' (%s)", body, rc, e.status, e.param, e.message);
    if (rc == 0) api_call_free(&c);
}

static void test_input(void) {
    expect_prompt("{\"model\":\"gpt-oss-20b\",\"input\":\"What is 2 + 2?\"}",
                  "<|start|>user<|message|>What is 2 + 2?<|end|><|start|>assistant",
                  "string input");
    expect_prompt(
        "{\"input\":\"hi\",\"instructions\":\"Be terse.\",\"reasoning\":{\"effort\":\"high\"}}",
        "<|start|>developer<|message|># Instructions\n\nBe terse.<|end|>"
        "<|start|>user<|message|>hi<|end|><|start|>assistant",
        "instructions");
    /* A full tool round trip: reasoning item, function_call, function_call_output. */
    expect_prompt(
        "{\"input\":[{\"role\":\"developer\",\"content\":\"Dev.\"},"
        "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":"
        "\"Weather in SF?\"}]},"
        "{\"type\":\"reasoning\",\"id\":\"rs_1\",\"summary\":[],\"content\":[{\"type\":\"reasoning_"
        "text\",\"text\":\"Use the tool.\"}]},"
        "{\"type\":\"function_call\",\"call_id\":\"call_9\",\"name\":\"get_weather\",\"arguments\":"
        "\"{\\\"city\\\":\\\"SF\\\"}\"},"
        "{\"type\":\"function_call_output\",\"call_id\":\"call_9\",\"output\":\"sunny\"}],"
        "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"description\":\"Weather.\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},"
        "\"required\":[\"city\"]}},"
        "{\"type\":\"web_search_preview\"}]}",
        "<|start|>developer<|message|># Instructions\n\nDev.\n\n# Tools\n\n## "
        "functions\n\nnamespace functions {\n\n"
        "// Weather.\ntype get_weather = (_: {\ncity: string,\n}) => any;\n\n} // namespace "
        "functions<|end|>"
        "<|start|>user<|message|>Weather in SF?<|end|>"
        "<|start|>assistant<|channel|>analysis<|message|>Use the tool.<|end|>"
        "<|start|>assistant to=functions.get_weather<|channel|>commentary "
        "<|constrain|>json<|message|>{\"city\":\"SF\"}<|call|>"
        "<|start|>functions.get_weather "
        "to=assistant<|channel|>commentary<|message|>sunny<|end|><|start|>assistant",
        "tool round trip");
    /* An earlier answer drops the reasoning before it; assistant output_text goes back as final. */
    expect_prompt(
        "{\"input\":[{\"role\":\"user\",\"content\":\"a\"},"
        "{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"s\"}]},"
        "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
        "\"text\":\"b\",\"annotations\":[]}]},"
        "{\"role\":\"user\",\"content\":\"c\"}]}",
        "<|start|>user<|message|>a<|end|><|start|>assistant<|channel|>final<|message|>b<|end|>"
        "<|start|>user<|message|>c<|end|><|start|>assistant",
        "dropped reasoning");
    /* Parameters. */
    api_call c;
    api_error e;
    if (parse("{\"input\":\"hi\",\"max_output_tokens\":50,\"temperature\":0.2,\"top_p\":0.5,"
              "\"stream\":true,"
              "\"store\":true,\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":\"r\","
              "\"schema\":{\"type\":\"object\"}}}}",
              &c, &e) == 0) {
        CHECK(c.req.max_tokens == 50 && c.req.params.temperature == 0.2f &&
                  c.req.params.top_p == 0.5f,
              "sampling");
        CHECK(c.stream && c.kind == API_RESPONSES, "stream");
        char *got = prompt_text(&c);
        CHECK(got && strstr(got, "# Response Formats\n\n## r\n\n{\"type\":\"object\"}<|end|>"),
              "format: %s", NN(got));
        free(got);
        api_call_free(&c);
    }
    expect_error("{\"input\":\"hi\",\"previous_response_id\":\"resp_1\"}", 400,
                 "previous_response_id");
    expect_error("{\"input\":\"hi\",\"background\":true}", 400, "background");
    expect_error("{\"input\":\"hi\",\"top_logprobs\":2}", 400, "top_logprobs");
    expect_error("{}", 400, "input");
    expect_error("{\"input\":[]}", 400, "input");
    expect_error("{\"input\":5}", 400, "input");
    expect_error("{\"input\":[{\"role\":\"robot\",\"content\":\"x\"}]}", 400, "input[0].role");
    expect_error("{\"input\":[{\"content\":\"x\"}]}", 400, "input[0].role");
    expect_error("{\"input\":[{\"type\":\"item_reference\",\"id\":\"x\"}]}", 400, "input[0].id");
    expect_error(
        "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"nope\",\"output\":\"x\"}]}",
        400, "input[0].call_id");
    expect_error("{\"input\":[{\"role\":\"user\",\"content\":[{\"type\":\"input_image\",\"image_"
                 "url\":\"x\"}]}]}",
                 400, "input[0].content[0].type");
    expect_error("{\"input\":[{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"bad "
                 "name\",\"arguments\":\"{}\"}]}",
                 400, "input[0].name");
    expect_error("{\"input\":\"hi\",\"reasoning\":{\"effort\":\"none\"}}", 400, "reasoning.effort");
    expect_error("{\"input\":\"hi\",\"max_output_tokens\":-1}", 400, "max_output_tokens");
    expect_error("{\"input\":\"hi\",\"tools\":[{\"name\":\"f\"}]}", 400, "tools[0].type");
    expect_error("{\"input\":\"hi\",\"tools\":[{\"type\":\"function\"}]}", 400, "tools[0].name");
    expect_error("{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"xml\"}}}", 400,
                 "text.format.type");
    expect_error("{\"input\":\"hi\",\"text\":{\"format\":{}}}", 400, "text.format.type");
    expect_error("{\"input\":\"hi\",\"text\":5}", 400, "text");
    expect_error("{\"input\":\"hi\",\"text\":{\"format\":\"json\"}}", 400, "text.format");
    expect_error("{\"input\":\"hi\",\"reasoning\":\"high\"}", 400, "reasoning");
    expect_error("{\"input\":\"hi\",\"stream_options\":[]}", 400, "stream_options");
    expect_error("{\"input\":\"hi\",\"tool_choice\":\"sometimes\"}", 400, "tool_choice");
    expect_error("{\"input\":\"hi\",\"tool_choice\":5}", 400, "tool_choice");
    /* tool_choice "none" hides the tools; a named function is accepted (and not enforced). */
    expect_prompt("{\"input\":\"hi\",\"tool_choice\":\"none\",\"tools\":[{\"type\":\"function\","
                  "\"name\":\"f\"}]}",
                  "<|start|>user<|message|>hi<|end|><|start|>assistant", "tool_choice none");
    expect_prompt(
        "{\"input\":\"hi\",\"tool_choice\":{\"type\":\"function\",\"name\":\"f\"},"
        "\"tools\":[{\"type\":\"function\",\"name\":\"f\"}]}",
        "<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
        "type f = () => any;\n\n} // namespace functions<|end|>"
        "<|start|>user<|message|>hi<|end|><|start|>assistant",
        "tool_choice names a function");
    expect_error("{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"name\":5}}}",
                 400, "text.format.name");
    expect_error(
        "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"description\":[]}}}",
        400, "text.format.description");
    expect_error(
        "{\"input\":\"hi\",\"text\":{\"format\":{\"type\":\"json_schema\",\"schema\":[]}}}", 400,
        "text.format.schema");
    expect_error("{\"input\":\"hi\",\"model\":\"other\"}", 404, "model");
}

/* ---- output ------------------------------------------------------------------------------------
 */

static const char *TOOL_OUT =
    "<|channel|>analysis<|message|>Need "
    "weather.<|end|><|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>"
    "<|start|>assistant to=functions.get_weather<|channel|>commentary "
    "<|constrain|>json<|message|>{\"city\": \"SF\"}<|call|>";

static const char *ANSWER =
    "<|channel|>analysis<|message|>Simple "
    "math.<|end|><|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>";

typedef struct {
    char *raw;
    json_t *data, *names, *body;
    int status;
} result;

static result run(const char *req, const char *text, run_opts ro) {
    result r = {0};
    api_call c;
    api_error e;
    if (parse(req, &c, &e) != 0) return r;
    api_stream *s = api_stream_new(&c, T, "resp_abc", 1700000001);
    api_call_free(&c);
    ivec t = ids_of(text);
    r.raw = run_stream(s, &t, &ro, NULL);
    r.status = api_stream_status(s);
    if (!strncmp(r.raw, "event: ", 7))
        r.data = sse_parse(r.raw, &r.names);
    else
        r.body = json_loads(r.raw, 0, NULL);
    api_stream_free(s);
    ivec_free(&t);
    return r;
}

static void result_free(result *r) {
    free(r->raw);
    json_decref(r->data);
    json_decref(r->names);
    json_decref(r->body);
}

static void test_body(void) {
    result r =
        run("{\"input\":\"What is 2 + 2?\",\"instructions\":\"Math.\"}", ANSWER, stop_run(200002));
    json_t *b = r.body;
    CHECK_STR(jstr(b, "id"), "resp_abc");
    CHECK_STR(jstr(b, "object"), "response");
    CHECK(jint(b, "created_at") == 1700000001, "created_at");
    CHECK_STR(jstr(b, "status"), "completed");
    CHECK_STR(jstr(b, "model"), "gpt-oss-20b");
    CHECK_STR(jstr(b, "instructions"), "Math.");
    CHECK(json_is_null(jpath(b, "incomplete_details")) && json_is_null(jpath(b, "error")), "nulls");
    CHECK(json_array_size(jpath(b, "output")) == 2, "two items: %s", r.raw);
    CHECK_STR(jstr(b, "output.0.type"), "reasoning");
    CHECK(!strncmp(jstr(b, "output.0.id") ? jstr(b, "output.0.id") : "", "rs_", 3), "rs id");
    CHECK(json_array_size(jpath(b, "output.0.summary")) == 0, "summary []");
    CHECK_STR(jstr(b, "output.0.content.0.type"), "reasoning_text");
    CHECK_STR(jstr(b, "output.0.content.0.text"), "Simple math.");
    CHECK_STR(jstr(b, "output.1.type"), "message");
    CHECK(!strncmp(jstr(b, "output.1.id") ? jstr(b, "output.1.id") : "", "msg_", 4), "msg id");
    CHECK_STR(jstr(b, "output.1.role"), "assistant");
    CHECK_STR(jstr(b, "output.1.status"), "completed");
    CHECK_STR(jstr(b, "output.1.content.0.type"), "output_text");
    CHECK_STR(jstr(b, "output.1.content.0.text"), "2 + 2 = 4.");
    CHECK(json_array_size(jpath(b, "output.1.content.0.annotations")) == 0, "annotations");
    CHECK(jint(b, "usage.input_tokens") == 10, "input_tokens");
    CHECK(jint(b, "usage.output_tokens") > 0 &&
              jint(b, "usage.total_tokens") == 10 + jint(b, "usage.output_tokens"),
          "usage");
    CHECK(jint(b, "usage.output_tokens_details.reasoning_tokens") > 0, "reasoning tokens");
    CHECK(jpath(b, "usage.input_tokens_details.cached_tokens") != NULL, "cached");
    CHECK_STR(jstr(b, "reasoning.effort"), "medium");
    CHECK_STR(jstr(b, "text.format.type"), "text");
    CHECK_STR(jstr(b, "tool_choice"), "auto");
    result_free(&r);

    r = run("{\"input\":\"weather?\",\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\"}]}",
            TOOL_OUT, stop_run(200012));
    b = r.body;
    CHECK(json_array_size(jpath(b, "output")) == 3, "three items: %s", r.raw);
    CHECK_STR(jstr(b, "output.1.content.0.text"), "Checking.");
    CHECK_STR(jstr(b, "output.2.type"), "function_call");
    CHECK(!strncmp(jstr(b, "output.2.id") ? jstr(b, "output.2.id") : "", "fc_", 3), "fc id");
    CHECK(!strncmp(jstr(b, "output.2.call_id") ? jstr(b, "output.2.call_id") : "", "call_", 5),
          "call id");
    CHECK_STR(jstr(b, "output.2.name"), "get_weather");
    CHECK_STR(jstr(b, "output.2.arguments"), "{\"city\": \"SF\"}");
    CHECK_STR(jstr(b, "output.2.status"), "completed");
    CHECK_STR(jstr(b, "tools.0.name"), "get_weather");
    result_free(&r);

    /* Cut by max_output_tokens: incomplete. */
    run_opts len = {"length", -1, -1, 0, 0, 10, 0, 0, -1};
    r = run("{\"input\":\"hi\",\"max_output_tokens\":9}",
            "<|channel|>final<|message|>Long answer that", len);
    CHECK_STR(jstr(r.body, "status"), "incomplete");
    CHECK_STR(jstr(r.body, "incomplete_details.reason"), "max_output_tokens");
    CHECK_STR(jstr(r.body, "output.0.status"), "incomplete");
    CHECK(jint(r.body, "max_output_tokens") == 9, "echo max_output_tokens");
    result_free(&r);

    /* include_reasoning false: no reasoning item. */
    r = run("{\"input\":\"hi\",\"include_reasoning\":false}", ANSWER, stop_run(200002));
    CHECK(json_array_size(jpath(r.body, "output")) == 1 &&
              STREQ(jstr(r.body, "output.0.type"), "message"),
          "no reasoning: %s", r.raw);
    result_free(&r);

    /* Engine failure: 500 with an error. */
    run_opts err = {"error", -1, -1, 0, 0, 10, 0, 0, -1};
    r = run("{\"input\":\"hi\"}", "<|channel|>final<|message|>x", err);
    CHECK(r.status == 500 && jstr(r.body, "error.message"), "error body: %s", r.raw);
    result_free(&r);
}

/* Replays the events like the openai SDK's accumulator does and checks its invariants. */
static void check_events(result *r, const char *what) {
    json_t *output = json_array();
    size_t n = json_array_size(r->data);
    CHECK(n == json_array_size(r->names) && n >= 4, "%s: %zu events", what, n);
    for (size_t i = 0; i < n; i++) {
        json_t *ev = json_array_get(r->data, i);
        const char *name = json_string_value(json_array_get(r->names, i));
        CHECK_STR(jstr(ev, "type"), name);
        CHECK(jint(ev, "sequence_number") == (long long)i, "%s: sequence_number %lld at %zu", what,
              jint(ev, "sequence_number"), i);
        if (!name) continue;
        json_t *item = json_array_get(output, (size_t)jint(ev, "output_index"));
        if (!strcmp(name, "response.output_item.added")) {
            CHECK(jint(ev, "output_index") == (long long)json_array_size(output),
                  "%s: append index", what);
            json_array_append(output, jpath(ev, "item"));
            CHECK(jstr(ev, "item.id") != NULL, "%s: item id", what);
        } else if (!strcmp(name, "response.output_item.done")) {
            CHECK(item && STREQ(jstr(item, "id"), jstr(ev, "item.id")) &&
                      STREQ(jstr(item, "type"), jstr(ev, "item.type")),
                  "%s: done matches added", what);
        } else if (jpath(ev, "item_id")) {
            CHECK(item && STREQ(jstr(item, "id"), jstr(ev, "item_id")), "%s: %s item_id", what,
                  name);
            if (strstr(name, "content_part") || strstr(name, "_text."))
                CHECK(jint(ev, "content_index") == 0, "%s: content_index", what);
        }
    }
    CHECK_STR(jstr(json_array_get(r->data, 0), "type"), "response.created");
    CHECK_STR(jstr(json_array_get(r->data, 0), "response.status"), "in_progress");
    CHECK_STR(jstr(json_array_get(r->data, 1), "type"), "response.in_progress");
    json_decref(output);
}

/* The concatenated deltas of one event type. */
static char *deltas(result *r, const char *type) {
    hsb b = {0};
    hsb_add(&b, "");
    size_t i;
    json_t *ev;
    json_array_foreach(r->data, i, ev) if (STREQ(jstr(ev, "type"), type))
        hsb_add(&b, jstr(ev, "delta"));
    return b.s;
}

static json_t *find(result *r, const char *type, int nth) {
    size_t i;
    json_t *ev;
    json_array_foreach(r->data, i, ev) if (STREQ(jstr(ev, "type"), type) && nth-- == 0) return ev;
    return NULL;
}

static void test_stream(void) {
    result r = run("{\"input\":\"hi\",\"stream\":true}", ANSWER, stop_run(200002));
    check_events(&r, "answer");
    static const char *const order[] = {"response.created", "response.in_progress",
                                        "response.output_item.added", "response.content_part.added",
                                        "response.reasoning_text.delta"};
    for (size_t i = 0; i < 5; i++)
        CHECK_STR(json_string_value(json_array_get(r.names, i)), order[i]);
    char *rt = deltas(&r, "response.reasoning_text.delta"),
         *ot = deltas(&r, "response.output_text.delta");
    CHECK_STR(rt, "Simple math.");
    CHECK_STR(ot, "2 + 2 = 4.");
    free(rt), free(ot);
    CHECK_STR(jstr(find(&r, "response.reasoning_text.done", 0), "text"), "Simple math.");
    CHECK_STR(jstr(find(&r, "response.output_text.done", 0), "text"), "2 + 2 = 4.");
    CHECK_STR(jstr(find(&r, "response.content_part.added", 1), "part.type"), "output_text");
    CHECK_STR(jstr(find(&r, "response.content_part.done", 1), "part.text"), "2 + 2 = 4.");
    CHECK(json_array_size(jpath(find(&r, "response.output_text.delta", 0), "logprobs")) == 0,
          "logprobs []");
    CHECK_STR(jstr(find(&r, "response.output_item.added", 1), "item.status"), "in_progress");
    CHECK_STR(jstr(find(&r, "response.output_item.done", 1), "item.status"), "completed");
    CHECK_STR(jstr(find(&r, "response.output_item.done", 1), "item.content.0.text"), "2 + 2 = 4.");
    size_t n = json_array_size(r.data);
    json_t *last = json_array_get(r.data, n - 1);
    CHECK_STR(jstr(last, "type"), "response.completed");
    CHECK_STR(jstr(last, "response.status"), "completed");
    CHECK_STR(jstr(last, "response.output.1.content.0.text"), "2 + 2 = 4.");
    CHECK(jint(last, "response.usage.output_tokens") > 0, "usage");
    CHECK(!strstr(r.raw, "[DONE]") && !strstr(r.raw, "<|"), "no [DONE], no markup");
    result_free(&r);

    r = run("{\"input\":\"weather?\",\"stream\":true,\"tools\":[{\"type\":\"function\",\"name\":"
            "\"get_weather\"}]}",
            TOOL_OUT, stop_run(200012));
    check_events(&r, "tool");
    char *args = deltas(&r, "response.function_call_arguments.delta");
    CHECK_STR(args, "{\"city\": \"SF\"}");
    free(args);
    json_t *added = find(&r, "response.output_item.added", 2);
    CHECK_STR(jstr(added, "item.type"), "function_call");
    CHECK_STR(jstr(added, "item.name"), "get_weather");
    CHECK_STR(jstr(added, "item.arguments"), "");
    json_t *done = find(&r, "response.function_call_arguments.done", 0);
    CHECK_STR(jstr(done, "arguments"), "{\"city\": \"SF\"}");
    CHECK_STR(jstr(done, "name"), "get_weather");
    CHECK_STR(jstr(find(&r, "response.output_item.done", 2), "item.call_id"),
              jstr(added, "item.call_id"));
    CHECK(find(&r, "response.content_part.added", 2) == NULL,
          "no content part for a function call");
    result_free(&r);

    run_opts len = {"length", -1, -1, 0, 0, 10, 0, 0, -1};
    r = run("{\"input\":\"hi\",\"stream\":true}", "<|channel|>final<|message|>Long answer that",
            len);
    check_events(&r, "incomplete");
    CHECK_STR(jstr(json_array_get(r.data, json_array_size(r.data) - 1), "type"),
              "response.incomplete");
    result_free(&r);

    /* A stop string is cut before it reaches a delta or the done text. */
    ivec t = ids_of("<|channel|>final<|message|>Answer: yes. STOP");
    size_t nb;
    tokenizer_token_bytes(T, t.v[t.len - 1], &nb);
    run_opts ro = {"stop", -1, 0, (int)nb, 0, 10, 0, 0, 1};
    r = run("{\"input\":\"hi\",\"stream\":true,\"stop\":[\" STOP\"]}",
            "<|channel|>final<|message|>Answer: yes. STOP", ro);
    ot = deltas(&r, "response.output_text.delta");
    CHECK(nb == 5 && STREQ(ot, "Answer: yes."), "trimmed: '%s' (%zu)", ot, nb);
    CHECK_STR(jstr(find(&r, "response.output_text.done", 0), "text"), "Answer: yes.");
    free(ot);
    ivec_free(&t);
    result_free(&r);
}

int main(void) {
    api_test_load_tokenizer();
    test_input();
    test_body();
    test_stream();
    tokenizer_free(T);
    return check_report("test_api_responses");
}
