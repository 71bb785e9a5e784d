/* Helpers shared by the tests/test_api_*.c tests: the tokenizer, synthetic engine outputs built
 * from real token ids, and reading back what the API layer wrote (SSE events, JSON bodies). */
#ifndef GPTOSS_TESTS_TEST_API_UTIL_H
#define GPTOSS_TESTS_TEST_API_UTIL_H

#include "api/api.h"
#include "base/error.h"
#include "base/vec.h"
#include "check.h"
#include "harmony/harmony_strbuf.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static __attribute__((unused)) tokenizer *T;

/* Loads the tokenizer, or exits 77 (skip) when tokenizer.json is not installed. */
static __attribute__((unused)) void api_test_load_tokenizer(void) {
    char *path = tokenizer_find_json(NULL);
    if (!path) {
        fprintf(stderr, "SKIP: %s\n", err_msg());
        exit(77);
    }
    T = tokenizer_load(path);
    free(path);
    if (!T) {
        fprintf(stderr, "tokenizer: %s\n", err_msg());
        exit(1);
    }
}

static __attribute__((unused)) const api_config CFG = {
    .served_model_name = "gpt-oss-20b",
    .max_model_len = 4096,
    .default_max_tokens = 0,
    .current_date = "", /* no date line: compare with harmony's golden renderings */
};

/* Ids of harmony text written with special-token names. */
static __attribute__((unused)) ivec ids_of(const char *text) {
    ivec v = {0};
    if (tokenizer_encode_with_specials(T, text, strlen(text), &v) != 0)
        fprintf(stderr, "encode: %s\n", err_msg());
    return v;
}

/* The prompt as text (specials spelled out). */
static __attribute__((unused)) char *prompt_text(const api_call *c) {
    char *s = NULL;
    size_t n;
    if (tokenizer_decode(T, c->req.prompt, (size_t)c->req.n_prompt, &s, &n) != 0) return NULL;
    return s;
}

/* A synthetic run of one choice: tokens in outputs of 1, 2, 3, 1, 2, 3, ... tokens (or all at
 * once with chunk = 0), ending with the given finish. Logprobs: token i gets -0.1 * (i + 1), and
 * top_k alternatives (the token itself first, then ids 0, 1, ...). */
typedef struct {
    const char *finish_reason;
    int32_t stop_token;
    int stop_string;
    int trim_bytes;
    int top_k;
    int prompt_tokens, cached_tokens;
    int index;
    int chunk; /* 0: one output; >0: fixed size; -1: 1, 2, 3 cycling */
} run_opts;

/* Feeds the run into s and returns everything written (heap). *complete: the feed that returned 1
 * (or -1 when none did). */
static __attribute__((unused)) char *run_stream(api_stream *s, const ivec *toks, const run_opts *ro,
                                                int *complete) {
    char *out = NULL;
    size_t out_len = 0;
    int n = (int)toks->len, k = ro->top_k;
    float *lps = calloc((size_t)n + 1, sizeof *lps);
    int32_t *top_ids = calloc((size_t)(n * k) + 1, sizeof *top_ids);
    float *top_lps = calloc((size_t)(n * k) + 1, sizeof *top_lps);
    for (int i = 0; i < n; i++) {
        lps[i] = -0.1f * (float)(i + 1);
        for (int j = 0; j < k; j++) {
            top_ids[i * k + j] = j == 0 ? toks->v[i] : j - 1;
            top_lps[i * k + j] = j == 0 ? lps[i] : -5.0f - (float)j;
        }
    }
    if (complete) *complete = -1;
    int at = 0, step = 0, feed = 0;
    do {
        int m = ro->chunk == 0 ? n : ro->chunk > 0 ? ro->chunk : 1 + step % 3;
        if (m > n - at) m = n - at;
        engine_output o = {0};
        o.index = ro->index;
        o.tokens = toks->v + at;
        o.logprobs = lps + at;
        o.n_tokens = m;
        o.top_k = k;
        if (k) o.top_ids = top_ids + at * k, o.top_logprobs = top_lps + at * k;
        o.finished = at + m == n;
        o.finish_reason = o.finished ? ro->finish_reason : NULL;
        o.stop_token = o.finished ? ro->stop_token : -1;
        o.stop_string = o.finished ? ro->stop_string : -1;
        o.trim_bytes = o.finished ? ro->trim_bytes : 0;
        o.prompt_tokens = ro->prompt_tokens;
        o.cached_tokens = ro->cached_tokens;
        o.completion_tokens = at + m;
        int r = api_stream_feed(s, &o, &out, &out_len);
        if (r == 1 && complete && *complete < 0) *complete = feed;
        at += m;
        step++;
        feed++;
    } while (at < n);
    free(lps);
    free(top_ids);
    free(top_lps);
    if (!out) out = calloc(1, 1);
    return out;
}

static __attribute__((unused)) run_opts stop_run(int32_t stop_token) {
    run_opts r = {"stop", stop_token, -1, 0, 0, 10, 0, 0, -1};
    return r;
}

/* SSE "data:" payloads as a JSON array ("[DONE]" becomes the string "[DONE]"); event names, when
 * there are "event:" lines, go into *events (a JSON array of strings) if events is not NULL. */
static __attribute__((unused)) json_t *sse_parse(const char *s, json_t **events) {
    json_t *a = json_array();
    if (events) *events = json_array();
    const char *p = s;
    while (*p) {
        const char *end = strstr(p, "\n\n");
        if (!end) {
            fprintf(stderr, "SSE: unterminated event: %s\n", p);
            json_array_append_new(a, json_string("(unterminated)"));
            break;
        }
        const char *line = p;
        while (line < end) {
            const char *nl = memchr(line, '\n', (size_t)(end - line));
            if (!nl) nl = end;
            if (!strncmp(line, "event: ", 7) && events)
                json_array_append_new(*events, json_stringn(line + 7, (size_t)(nl - line - 7)));
            else if (!strncmp(line, "data: ", 6)) {
                size_t n = (size_t)(nl - line - 6);
                if (n == 6 && !strncmp(line + 6, "[DONE]", 6)) {
                    json_array_append_new(a, json_string("[DONE]"));
                } else {
                    json_error_t je;
                    json_t *v = json_loadb(line + 6, n, 0, &je);
                    if (!v)
                        fprintf(stderr, "SSE: bad JSON (%s): %.*s\n", je.text, (int)n, line + 6);
                    json_array_append_new(a, v ? v : json_string("(bad json)"));
                }
            }
            line = nl + 1;
        }
        p = end + 2;
    }
    return a;
}

/* A string at a path like "choices.0.delta.content" (NULL when absent or not a string). */
static __attribute__((unused)) json_t *jpath(json_t *v, const char *path) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL;
    for (char *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save)) {
        if (json_is_array(v)) {
            char *e;
            long i = strtol(k, &e, 10);
            v = *e ? NULL : json_array_get(v, (size_t)i);
        } else {
            v = json_object_get(v, k);
        }
    }
    return v;
}
static __attribute__((unused)) const char *jstr(json_t *v, const char *path) {
    return json_string_value(jpath(v, path));
}
static __attribute__((unused)) long long jint(json_t *v, const char *path) {
    return json_integer_value(jpath(v, path));
}
#define NN(s)       ((s) ? (s) : "(null)")
#define STREQ(a, b) ((a) && (b) && strcmp((a), (b)) == 0)
#define CHECK_STR(got, want)                                                                       \
    CHECK(STREQ((got), (want)), "got '%s', want '%s'", (got) ? (got) : "(null)", (want))

#endif
