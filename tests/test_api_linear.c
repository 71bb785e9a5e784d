/* Collections in a request cost linear time (issue 18): one tool with tens of thousands of required
 * properties, tens of thousands of chat tool-call ids and tool results (by id and by position), and
 * as many responses function_call / function_call_output pairs. Before the hash maps each of these
 * was quadratic (32k required properties took 3.9 s, 32k call ids 2.6 s; 64k would take 10-15 s),
 * so each shape must parse within a bound a quadratic parse cannot meet, and name every result
 * right. Skipped (77) without tokenizer.json. */
#include "test_api_util.h"

#include "base/timeutil.h"
#include "base/xalloc.h"

#include <time.h>

enum { N = 65536 };
/* Generous (a linear parse takes well under a second); a quadratic one at N took 17-28 s. A
 * sanitizer build runs several times slower, and a quadratic parse there far more. The time is the
 * thread's CPU time, so a loaded machine (other builds, a fuzz run) does not count. */
#if defined(__SANITIZE_ADDRESS__)
static const double BOUND_S = 12.0;
#else
static const double BOUND_S = 3.0;
#endif

static const api_config BIG = {
    .served_model_name = "gpt-oss-20b",
    .max_model_len = 1 << 24, /* the prompts here are long: keep context_length_exceeded away */
    .current_date = "",
};

static double thread_cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef int (*parse_fn)(const char *, size_t, const tokenizer *, const api_config *, api_call *,
                        api_error *);

/* Parses body, checks it succeeds within BOUND_S, and returns the prompt's text (heap, or NULL). */
static char *parse_timed(const char *what, parse_fn fn, const hsb *body) {
    api_call c;
    api_error e;
    double t0 = thread_cpu_seconds();
    int rc = fn(body->s, body->len, T, &BIG, &c, &e);
    double dt = thread_cpu_seconds() - t0;
    fprintf(stderr, "%s: %zu bytes parsed in %.3f s of CPU time\n", what, body->len, dt);
    CHECK(rc == 0, "%s: %d %s", what, e.status, e.message);
    CHECK(dt < BOUND_S, "%s: %.3f s, bound %.1f s", what, dt, BOUND_S);
    if (rc != 0) return NULL;
    char *text = prompt_text(&c);
    api_call_free(&c);
    return text;
}

static void test_required(void) {
    hsb b = {0};
    hsb_add(&b, "{\"model\":\"gpt-oss-20b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],"
                "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":"
                "{\"type\":\"object\",\"properties\":{");
    for (int i = 0; i < N; i++) hsb_printf(&b, "%s\"p%d\":{\"type\":\"string\"}", i ? "," : "", i);
    /* Every other property is required, listed in reverse order. */
    hsb_add(&b, "},\"required\":[");
    for (int i = N - 2, first = 1; i >= 0; i -= 2, first = 0)
        hsb_printf(&b, "%s\"p%d\"", first ? "" : ",", i);
    hsb_add(&b, "]}}}]}");
    char *text = parse_timed("required", api_parse_chat, &b);
    if (text) {
        CHECK(strstr(text, "p0: string,") && strstr(text, "p65534: string,"),
              "required properties lack their mark");
        CHECK(strstr(text, "p1?: string,") && strstr(text, "p65535?: string,"),
              "optional properties lack '?'");
    }
    free(text);
    hsb_free(&b);
}

/* One assistant turn with N calls (ids c0.., functions f0..); the first half answered by id in
 * reverse order, the second half by position (no id, no name). */
static void test_chat_call_ids(void) {
    hsb b = {0};
    hsb_add(&b, "{\"model\":\"gpt-oss-20b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
                "{\"role\":\"assistant\",\"tool_calls\":[");
    for (int i = 0; i < N; i++)
        hsb_printf(&b,
                   "%s{\"id\":\"c%d\",\"type\":\"function\",\"function\":{\"name\":\"f%d\","
                   "\"arguments\":\"{}\"}}",
                   i ? "," : "", i, i);
    hsb_add(&b, "]}");
    for (int i = N / 2 - 1; i >= 0; i--)
        hsb_printf(&b, ",{\"role\":\"tool\",\"tool_call_id\":\"c%d\",\"content\":\"r%d\"}", i, i);
    for (int i = N / 2; i < N; i++) hsb_printf(&b, ",{\"role\":\"tool\",\"content\":\"r%d\"}", i);
    hsb_add(&b, "]}");
    char *text = parse_timed("chat tool-call ids", api_parse_chat, &b);
    if (text) {
        CHECK(strstr(text,
                     "<|start|>functions.f7 to=assistant<|channel|>commentary<|message|>r7<|end|>"),
              "result r7 not named f7");
        CHECK(strstr(text, "<|start|>functions.f40000 to=assistant<|channel|>commentary<|message|>"
                           "r40000<|end|>"),
              "result r40000 (by position) not named f40000");
    }
    free(text);
    hsb_free(&b);
}

static void test_responses_call_ids(void) {
    hsb b = {0};
    hsb_add(&b, "{\"model\":\"gpt-oss-20b\",\"input\":[{\"role\":\"user\",\"content\":\"hi\"}");
    for (int i = 0; i < N; i++)
        hsb_printf(&b,
                   ",{\"type\":\"function_call\",\"call_id\":\"c%d\",\"name\":\"f%d\","
                   "\"arguments\":\"{}\"}",
                   i, i);
    for (int i = 0; i < N; i++)
        hsb_printf(&b,
                   ",{\"type\":\"function_call_output\",\"call_id\":\"c%d\",\"output\":\"r%d\"}", i,
                   i);
    hsb_add(&b, "]}");
    char *text = parse_timed("responses call ids", api_parse_responses, &b);
    if (text)
        CHECK(strstr(text, "<|start|>functions.f12345 to=assistant<|channel|>commentary<|message|>"
                           "r12345<|end|>"),
              "output r12345 not named f12345");
    free(text);
    hsb_free(&b);
}

/* A duplicate id names the latest call with it, as the scan from the end did; an unknown id is a
 * 400 naming the field. */
static void test_duplicate_id(void) {
    const char *head =
        "{\"model\":\"gpt-oss-20b\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":"
        "{\"name\":\"old\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"a\"},"
        "{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"x\",\"type\":\"function\",\"function\":"
        "{\"name\":\"new\",\"arguments\":\"{}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"x\",\"content\":\"b\"}";
    char *good = xasprintf("%s]}", head);
    char *bad =
        xasprintf("%s,{\"role\":\"tool\",\"tool_call_id\":\"nope\",\"content\":\"c\"}]}", head);
    api_call c;
    api_error e;
    int rc = api_parse_chat(good, strlen(good), T, &BIG, &c, &e);
    CHECK(rc == 0, "duplicate ids: %s", e.message);
    if (rc == 0) {
        char *text = prompt_text(&c);
        CHECK(text && strstr(text, "functions.old to=assistant<|channel|>commentary<|message|>a") &&
                  strstr(text, "functions.new to=assistant<|channel|>commentary<|message|>b"),
              "a duplicate id must name the latest call: %s", text ? text : "(null)");
        free(text);
        api_call_free(&c);
    }
    rc = api_parse_chat(bad, strlen(bad), T, &BIG, &c, &e);
    CHECK(rc != 0 && e.status == 400 && !strcmp(e.param, "messages[5].tool_call_id"),
          "an unknown id must be a 400 naming it (rc %d, param %s)", rc, e.param);
    if (rc == 0) api_call_free(&c);
    free(good);
    free(bad);
}

int main(void) {
    api_test_load_tokenizer();
    test_required();
    test_chat_call_ids();
    test_responses_call_ids();
    test_duplicate_id();
    tokenizer_free(T);
    return check_report("test_api_linear");
}
