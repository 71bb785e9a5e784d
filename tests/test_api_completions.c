/* /v1/completions without HTTP: prompts (text, token ids, one-element arrays), parameters, and
 * synthetic engine outputs → text_completion bodies and SSE chunks (echo, logprobs, stop strings,
 * UTF-8 split across tokens, prompt_logprobs). Skipped (77) without tokenizer.json. */
#include "test_api_util.h"

static int parse(const char *body, api_call *c, api_error *e) {
    int rc = api_parse_completions(body, strlen(body), T, &CFG, c, e);
    if (rc != 0)
        fprintf(stderr, "parse failed: %d %s (param %s)\n", e->status, e->message, e->param);
    return rc;
}

static void expect_error(const char *body, int status, const char *param) {
    api_call c;
    api_error e;
    int rc = api_parse_completions(body, strlen(body), T, &CFG, &c, &e);
    CHECK(rc == -1 && e.status == status && STREQ(e.param, param),
          "%s: rc %d status %d param '%s' (%s)", body, rc, e.status, e.param, e.message);
    if (rc == 0) api_call_free(&c);
}

static void test_prompts(void) {
    api_call c;
    api_error e;
    ivec want = {0};
    tokenizer_encode_ordinary(T, "Hello <|end|> world", 19, &want);
    if (parse("{\"model\":\"gpt-oss-20b\",\"prompt\":\"Hello <|end|> world\"}", &c, &e) == 0) {
        CHECK(c.req.n_prompt == (int)want.len, "n_prompt %d", c.req.n_prompt);
        for (int i = 0; i < c.req.n_prompt && i < (int)want.len; i++)
            CHECK(c.req.prompt[i] == want.v[i] && c.req.prompt[i] != 200007, "token %d", i);
        CHECK(c.req.max_tokens == 4096 - c.req.n_prompt, "default max_tokens %d", c.req.max_tokens);
        CHECK(c.kind == API_COMPLETIONS && !c.echo && c.req.params.logprobs == 0, "defaults");
        api_call_free(&c);
    }
    ivec_free(&want);
    if (parse("{\"prompt\":[200006,1428,200008],\"max_tokens\":5}", &c, &e) == 0) {
        CHECK(c.req.n_prompt == 3 && c.req.prompt[0] == 200006 && c.req.prompt[2] == 200008, "ids");
        CHECK(c.req.max_tokens == 5, "max_tokens");
        api_call_free(&c);
    }
    if (parse("{\"prompt\":[\"one\"]}", &c, &e) == 0) {
        CHECK(c.req.n_prompt == 1, "one string in an array");
        api_call_free(&c);
    }
    if (parse("{\"prompt\":[[1,2,3]]}", &c, &e) == 0) {
        CHECK(c.req.n_prompt == 3 && c.req.prompt[2] == 3, "one id list in an array");
        api_call_free(&c);
    }
    /* A list of prompts (vLLM): one engine request each, max_tokens checked per prompt. */
    if (parse("{\"prompt\":[\"a\",[1,2,3],\"Say hi\"],\"n\":2}", &c, &e) == 0) {
        CHECK(api_call_n_prompts(&c) == 3, "3 prompts: %d", api_call_n_prompts(&c));
        engine_request rq;
        api_call_request(&c, 0, &rq);
        CHECK(rq.n_prompt == 1 && rq.max_tokens == 4095 && rq.n == 2, "prompt 0: %d %d",
              rq.n_prompt, rq.max_tokens);
        api_call_request(&c, 1, &rq);
        CHECK(rq.n_prompt == 3 && rq.prompt[2] == 3 && rq.max_tokens == 4093 && rq.n == 2,
              "prompt 1: %d %d", rq.n_prompt, rq.max_tokens);
        api_call_request(&c, 2, &rq);
        CHECK(rq.n_prompt == 2 && rq.max_tokens == 4094, "prompt 2: %d", rq.n_prompt);
        api_call_free(&c);
    }
    if (parse("{\"prompt\":[[1],[2]],\"max_tokens\":7}", &c, &e) == 0) {
        engine_request rq;
        api_call_request(&c, 1, &rq);
        CHECK(api_call_n_prompts(&c) == 2 && rq.prompt[0] == 2 && rq.max_tokens == 7, "id lists");
        api_call_free(&c);
    }
    if (parse("{\"prompt\":\"a\"}", &c, &e) == 0) {
        CHECK(api_call_n_prompts(&c) == 1, "one prompt");
        api_call_free(&c);
    }
    expect_error("{\"prompt\":[\"a\",5]}", 400, "prompt[1]");
    expect_error("{\"prompt\":[\"a\",[1,-2]]}", 400, "prompt[1][1]");
    expect_error("{\"prompt\":[\"a\",\"\"]}", 400, "prompt[1]");
    expect_error("{\"prompt\":[\"a\",[]]}", 400, "prompt[1]");
    expect_error("{\"prompt\":[\"a\",[1,2]],\"max_tokens\":4095}", 400, "max_tokens");
    hsb many = {0};
    hsb_add(&many, "{\"prompt\":[");
    for (int i = 0; i < 1025; i++) hsb_add(&many, i ? ",\"a\"" : "\"a\"");
    hsb_add(&many, "]}");
    expect_error(many.s, 400, "prompt");
    hsb_free(&many);
    expect_error("{\"prompt\":[1,-2]}", 400, "prompt[1]");
    expect_error("{\"prompt\":[1,201088]}", 400, "prompt[1]");
    expect_error("{\"prompt\":[1,\"x\"]}", 400, "prompt[1]");
    expect_error("{\"prompt\":\"\"}", 400, "prompt");
    expect_error("{\"prompt\":[]}", 400, "prompt");
    expect_error("{\"prompt\":{}}", 400, "prompt");
    expect_error("{\"max_tokens\":3}", 400, "prompt");
    expect_error("{\"prompt\":\"hi\",\"suffix\":\"x\"}", 400, "suffix");
    expect_error("{\"prompt\":\"hi\",\"logprobs\":6}", 400, "logprobs");
    expect_error("{\"prompt\":\"hi\",\"logprobs\":true}", 400, "logprobs");
    expect_error("{\"prompt\":\"hi\",\"max_tokens\":4096}", 400, "max_tokens");
    expect_error("{\"prompt\":\"hi\",\"max_tokens\":0}", 400, "max_tokens");
    expect_error("{\"prompt\":\"hi\",\"echo\":1}", 400, "echo");
    expect_error("{\"prompt\":\"hi\",\"prompt_logprobs\":21}", 400, "prompt_logprobs");
    /* A prompt at the context length: 400 with the counts. */
    hsb big = {0};
    hsb_add(&big, "{\"prompt\":[");
    for (int i = 0; i < 4096; i++) hsb_printf(&big, i ? ",%d" : "%d", 1000 + i % 50);
    hsb_add(&big, "]}");
    api_call c2;
    api_error e2;
    CHECK(api_parse_completions(big.s, big.len, T, &CFG, &c2, &e2) == -1 && e2.status == 400 &&
              strstr(e2.message, "4096") && STREQ(e2.code, "context_length_exceeded"),
          "too long: %s", e2.message);
    hsb_free(&big);
    /* logprobs and echo: the engine is asked for prompt rows to look the echoed tokens up in. */
    if (parse("{\"prompt\":\"hi\",\"logprobs\":0,\"echo\":true}", &c, &e) == 0) {
        CHECK(c.echo && c.req.params.logprobs == 0 && c.req.params.prompt_logprobs == 1,
              "echo rows");
        api_call_free(&c);
    }
    if (parse("{\"prompt\":\"hi\",\"logprobs\":3,\"prompt_logprobs\":5}", &c, &e) == 0) {
        CHECK(c.req.params.logprobs == 3 && c.req.params.prompt_logprobs == 5, "logprobs");
        api_call_free(&c);
    }
}

typedef struct {
    char *raw;
    json_t *events;
    json_t *body;
    int status;
} result;

static result run(const char *req, const char *text, run_opts ro) {
    result r = {0};
    api_call c;
    api_error e;
    if (parse(req, &c, &e) != 0) return r;
    api_stream *s = api_stream_new(&c, T, "cmpl-1", 42);
    api_call_free(&c);
    ivec t = ids_of(text);
    r.raw = run_stream(s, &t, &ro, NULL);
    r.status = api_stream_status(s);
    if (!strncmp(r.raw, "data: ", 6))
        r.events = sse_parse(r.raw, NULL);
    else
        r.body = json_loads(r.raw, 0, NULL);
    api_stream_free(s);
    ivec_free(&t);
    return r;
}

static void result_free(result *r) {
    free(r->raw);
    json_decref(r->events);
    json_decref(r->body);
}

static char *concat_text(json_t *events, int index) {
    hsb b = {0};
    hsb_add(&b, "");
    size_t i;
    json_t *ev;
    json_array_foreach(events, i, ev) {
        json_t *ch = jpath(ev, "choices.0");
        if (ch && jint(ch, "index") == index && jstr(ch, "text")) hsb_add(&b, jstr(ch, "text"));
    }
    return b.s;
}

static void test_output(void) {
    run_opts ro = stop_run(199999);
    result r = run("{\"prompt\":\"Say hi\"}", "Hello world, this is a test.<|endoftext|>", ro);
    CHECK_STR(jstr(r.body, "object"), "text_completion");
    CHECK_STR(jstr(r.body, "id"), "cmpl-1");
    CHECK(jint(r.body, "created") == 42, "created");
    CHECK_STR(jstr(r.body, "choices.0.text"), "Hello world, this is a test.");
    CHECK_STR(jstr(r.body, "choices.0.finish_reason"), "stop");
    CHECK(json_is_null(jpath(r.body, "choices.0.logprobs")), "logprobs null");
    CHECK(jint(r.body, "usage.prompt_tokens") == 10 && jint(r.body, "usage.completion_tokens") > 5,
          "usage: %s", r.raw);
    CHECK(jint(r.body, "usage.total_tokens") ==
              jint(r.body, "usage.prompt_tokens") + jint(r.body, "usage.completion_tokens"),
          "total");
    CHECK(r.status == 200, "status");
    result_free(&r);

    /* Streamed, with usage: texts add up; usage chunk; [DONE]. */
    r = run("{\"prompt\":\"Say hi\",\"stream\":true,\"stream_options\":{\"include_usage\":true}}",
            "Hello world, this is a test.<|endoftext|>", ro);
    char *t = concat_text(r.events, 0);
    CHECK_STR(t, "Hello world, this is a test.");
    free(t);
    size_t n = json_array_size(r.events);
    CHECK_STR(json_string_value(json_array_get(r.events, n - 1)), "[DONE]");
    json_t *u = json_array_get(r.events, n - 2);
    CHECK(json_array_size(jpath(u, "choices")) == 0 && jint(u, "usage.prompt_tokens") == 10,
          "usage chunk");
    CHECK_STR(jstr(json_array_get(r.events, n - 3), "choices.0.finish_reason"), "stop");
    CHECK(json_is_null(jpath(json_array_get(r.events, 0), "choices.0.finish_reason")),
          "first not finished");
    CHECK(!strstr(r.raw, "endoftext"), "stop token text leaked");
    result_free(&r);

    /* Echo puts the prompt first (non-streamed and on the first chunk). */
    r = run("{\"prompt\":\"Say hi\",\"echo\":true}", " there.<|endoftext|>", ro);
    CHECK_STR(jstr(r.body, "choices.0.text"), "Say hi there.");
    result_free(&r);
    r = run("{\"prompt\":[17,18],\"echo\":true,\"stream\":true}", " x<|endoftext|>", ro);
    CHECK_STR(jstr(json_array_get(r.events, 0), "choices.0.text"), "23 x");
    result_free(&r);

    /* skip_special_tokens false spells specials out, but never the stop token. */
    r = run("{\"prompt\":\"x\",\"skip_special_tokens\":false}", "a<|start|>b<|endoftext|>", ro);
    CHECK_STR(jstr(r.body, "choices.0.text"), "a<|start|>b");
    result_free(&r);
    r = run("{\"prompt\":\"x\"}", "a<|start|>b<|endoftext|>", ro);
    CHECK_STR(jstr(r.body, "choices.0.text"), "ab");
    result_free(&r);

    /* An ordinary stop token (stop_token_ids) stays in the text, as in vLLM. */
    ivec nl = ids_of("\n");
    run_opts ord = stop_run(nl.v[0]);
    r = run("{\"prompt\":\"x\",\"stop_token_ids\":[198]}", "line\n", ord);
    CHECK_STR(jstr(r.body, "choices.0.text"), "line\n");
    CHECK(jint(r.body, "choices.0.stop_reason") == nl.v[0], "stop_reason id");
    result_free(&r);
    ivec_free(&nl);

    /* Length. */
    run_opts len = {"length", -1, -1, 0, 0, 10, 0, 0, -1};
    r = run("{\"prompt\":\"x\",\"max_tokens\":3}", "one two three", len);
    CHECK_STR(jstr(r.body, "choices.0.finish_reason"), "length");
    CHECK(json_is_null(jpath(r.body, "choices.0.stop_reason")), "stop_reason null");
    result_free(&r);
}

/* Several prompts × n: choices in order (prompt × n + sample), each with its own prompt's echo,
 * usage summed over the prompts and choices; streamed, each chunk names its choice. */
static void test_prompt_list(void) {
    for (int stream = 0; stream < 2; stream++) {
        api_call c;
        api_error e;
        if (parse(stream ? "{\"prompt\":[\"Say hi\",[17,18]],\"n\":2,\"echo\":true,\"stream\":true}"
                         : "{\"prompt\":[\"Say hi\",[17,18]],\"n\":2,\"echo\":true}",
                  &c, &e) != 0)
            continue;
        api_stream *s = api_stream_new(&c, T, "cmpl-l", 1);
        api_call_free(&c);
        hsb raw = {0};
        hsb_add(&raw, "");
        const char *gen[4] = {" a<|endoftext|>", " b<|endoftext|>", " c<|endoftext|>",
                              " d<|endoftext|>"};
        /* Out of order, as the engine may finish them. */
        const int order[4] = {3, 0, 2, 1};
        for (int k = 0; k < 4; k++) {
            run_opts ro = stop_run(199999);
            ro.index = order[k];
            ro.prompt_tokens = 2;
            ivec t = ids_of(gen[order[k]]);
            char *out = run_stream(s, &t, &ro, NULL);
            hsb_add(&raw, out);
            free(out);
            ivec_free(&t);
        }
        if (stream) {
            json_t *ev = sse_parse(raw.s, NULL);
            const char *want[4] = {"Say hi a", "Say hi b", "23 c", "23 d"};
            for (int i = 0; i < 4; i++) {
                char *t = concat_text(ev, i);
                CHECK_STR(t, want[i]);
                free(t);
            }
            CHECK(strstr(raw.s, "data: [DONE]") != NULL, "done");
            json_decref(ev);
        } else {
            json_t *b = json_loads(raw.s, 0, NULL);
            CHECK(json_array_size(jpath(b, "choices")) == 4, "4 choices: %s", raw.s);
            CHECK_STR(jstr(b, "choices.0.text"), "Say hi a");
            CHECK_STR(jstr(b, "choices.1.text"), "Say hi b");
            CHECK_STR(jstr(b, "choices.2.text"), "23 c");
            CHECK_STR(jstr(b, "choices.3.text"), "23 d");
            for (int i = 0; i < 4; i++) {
                char path[32];
                snprintf(path, sizeof path, "choices.%d.index", i);
                CHECK(jint(b, path) == i, "index %d", i);
            }
            CHECK(jint(b, "usage.prompt_tokens") == 4, "prompt tokens summed over prompts: %s",
                  raw.s);
            CHECK(jint(b, "usage.completion_tokens") == 8, "completion tokens summed: %s", raw.s);
            json_decref(b);
        }
        hsb_free(&raw);
        api_stream_free(s);
    }
}

static void test_logprobs(void) {
    run_opts ro = stop_run(199999);
    ro.top_k = 3;
    result r =
        run("{\"prompt\":\"x\",\"logprobs\":2}", "Hello world, this is a test.<|endoftext|>", ro);
    json_t *lp = jpath(r.body, "choices.0.logprobs");
    json_t *tokens = jpath(lp, "tokens");
    size_t n = json_array_size(tokens);
    CHECK(n > 3 && json_array_size(jpath(lp, "token_logprobs")) == n &&
              json_array_size(jpath(lp, "top_logprobs")) == n &&
              json_array_size(jpath(lp, "text_offset")) == n,
          "logprobs shape: %s", r.raw);
    hsb joined = {0};
    hsb_add(&joined, "");
    long long prev = -1;
    for (size_t i = 0; i < n; i++) {
        hsb_add(&joined, json_string_value(json_array_get(tokens, i)));
        json_t *top = json_array_get(jpath(lp, "top_logprobs"), i);
        CHECK(json_object_size(top) >= 1 && json_object_size(top) <= 3, "top %zu: %zu", i,
              json_object_size(top));
        CHECK(json_object_get(top, json_string_value(json_array_get(tokens, i))) != NULL,
              "the sampled token is in top_logprobs");
        long long off = json_integer_value(json_array_get(jpath(lp, "text_offset"), i));
        CHECK(off > prev, "text_offset increases");
        prev = off;
        CHECK(json_real_value(json_array_get(jpath(lp, "token_logprobs"), i)) < 0, "logprob");
    }
    /* The stop token gives no text but has its entry: as many entries as completion_tokens. */
    CHECK_STR(joined.s, "Hello world, this is a test.<|endoftext|>");
    CHECK(json_integer_value(json_array_get(jpath(lp, "text_offset"), 1)) == 5,
          "offset of ' world'");
    CHECK((long long)n == jint(r.body, "usage.completion_tokens"), "entries %zu, tokens %lld", n,
          jint(r.body, "usage.completion_tokens"));
    CHECK(json_integer_value(json_array_get(jpath(lp, "text_offset"), n - 1)) == 28,
          "the stop token's offset is the end of the text");
    hsb_free(&joined);
    result_free(&r);

    /* A special token hidden by skip_special_tokens keeps its entry too (issue 12), streamed or
     * not: the arrays stay as long as completion_tokens, and the text has no trace of it. */
    for (int stream = 0; stream < 2; stream++) {
        r = run(stream ? "{\"prompt\":\"x\",\"logprobs\":1,\"stream\":true}"
                       : "{\"prompt\":\"x\",\"logprobs\":1}",
                "a<|start|>b<|endoftext|>", ro);
        hsb toks = {0}, text = {0};
        hsb_add(&toks, ""), hsb_add(&text, "");
        size_t n_off = 0;
        json_t *bodies = stream ? r.events : json_pack("[O]", r.body);
        size_t i;
        json_t *ev;
        json_array_foreach(bodies, i, ev) {
            json_t *l = jpath(ev, "choices.0.logprobs");
            if (!l || json_is_null(l)) continue;
            hsb_add(&text, jstr(ev, "choices.0.text"));
            size_t j;
            json_t *t;
            json_array_foreach(json_object_get(l, "tokens"), j, t) {
                hsb_printf(&toks, "%s|", json_string_value(t));
            }
            CHECK(json_array_size(json_object_get(l, "token_logprobs")) ==
                      json_array_size(json_object_get(l, "tokens")),
                  "token_logprobs as long as tokens");
            n_off += json_array_size(json_object_get(l, "text_offset"));
        }
        CHECK_STR(toks.s, "a|<|start|>|b|<|endoftext|>|");
        CHECK_STR(text.s, "ab");
        CHECK(n_off == 4, "text_offset entries %zu", n_off);
        if (!stream) json_decref(bodies);
        hsb_free(&toks);
        hsb_free(&text);
        result_free(&r);
    }

    /* Echo with logprobs: the prompt's tokens come first, the first with null. */
    api_call c;
    api_error e;
    if (parse("{\"prompt\":\"Say hi\",\"echo\":true,\"logprobs\":1}", &c, &e) == 0) {
        api_stream *s = api_stream_new(&c, T, "cmpl-e", 1);
        int np = c.req.n_prompt;
        /* prompt rows: row q-1 predicts prompt[q]; put the real token first in odd rows only */
        int32_t *rows = calloc((size_t)np * 2, sizeof *rows);
        float *rl = calloc((size_t)np * 2, sizeof *rl);
        for (int q = 1; q < np; q++) {
            rows[(q - 1) * 2] = q % 2 ? c.req.prompt[q] : 5;
            rows[(q - 1) * 2 + 1] = 6;
            rl[(q - 1) * 2] = -0.25f, rl[(q - 1) * 2 + 1] = -3;
        }
        ivec gen = ids_of(" there<|endoftext|>");
        float lps[2] = {-0.5f, -0.1f};
        engine_output o = {0};
        o.tokens = gen.v;
        o.n_tokens = (int)gen.len;
        o.logprobs = lps;
        o.prompt_top_ids = rows;
        o.prompt_top_logprobs = rl;
        o.n_prompt_rows = np - 1;
        o.prompt_k = 2;
        o.finished = true;
        o.finish_reason = "stop";
        o.stop_token = 199999;
        o.stop_string = -1;
        o.prompt_tokens = np;
        o.completion_tokens = 2;
        char *out = NULL;
        size_t len = 0;
        CHECK(api_stream_feed(s, &o, &out, &len) == 1, "complete");
        json_t *b = json_loads(out, 0, NULL);
        json_t *tl = jpath(b, "choices.0.logprobs.token_logprobs");
        CHECK(json_array_size(tl) == (size_t)np + 2,
              "prompt + 2 generated (with the stop token): %s", out);
        CHECK(json_is_null(json_array_get(tl, 0)), "first prompt token: null");
        CHECK(np < 2 || json_is_real(json_array_get(tl, 1)), "found in its row");
        CHECK(np < 3 || json_is_null(json_array_get(tl, 2)), "not in its row: null");
        CHECK_STR(jstr(b, "choices.0.text"), "Say hi there");
        CHECK(json_integer_value(
                  json_array_get(jpath(b, "choices.0.logprobs.text_offset"), (size_t)np)) == 6,
              "generated token offset after the echo");
        json_decref(b);
        free(out), free(rows), free(rl);
        ivec_free(&gen);
        api_stream_free(s);
        api_call_free(&c);
    }
}

/* Echo scoring: with the engine's own logprob of every prompt token, each echoed token after the
 * first has a number (in or out of the top-K rows) and its own entry in top_logprobs; max_tokens 0
 * shows the prompt alone, streamed or not. */
static void test_echo_scoring(void) {
    for (int mode = 0; mode < 3; mode++) { /* max_tokens 2; 0; 0 streamed */
        const char *body = mode == 0   ? "{\"prompt\":\"Say hi\",\"echo\":true,\"logprobs\":1}"
                           : mode == 1 ? "{\"prompt\":\"Say hi\",\"echo\":true,\"logprobs\":1,"
                                         "\"max_tokens\":0}"
                                       : "{\"prompt\":\"Say hi\",\"echo\":true,\"logprobs\":1,"
                                         "\"max_tokens\":0,\"stream\":true,\"stream_options\":"
                                         "{\"include_usage\":true}}";
        api_call c;
        api_error e;
        if (parse(body, &c, &e) != 0) continue;
        CHECK(mode == 0 || c.req.max_tokens == 1, "echo only: the engine runs 1 token, got %d",
              c.req.max_tokens);
        api_stream *s = api_stream_new(&c, T, "cmpl-s", 1);
        int np = c.req.n_prompt;
        int32_t *rows = calloc((size_t)np * 2, sizeof *rows);
        float *rl = calloc((size_t)np * 2, sizeof *rl), *own = calloc((size_t)np, sizeof *own);
        for (int q = 1; q < np; q++) {
            rows[(q - 1) * 2] = 5, rows[(q - 1) * 2 + 1] = 6; /* the prompt token in neither */
            rl[(q - 1) * 2] = -0.5f, rl[(q - 1) * 2 + 1] = -1;
            own[q - 1] = -2.0f - (float)q;
        }
        ivec gen = ids_of(" there");
        float lps[1] = {-0.5f};
        engine_output o = {0};
        o.tokens = gen.v;
        o.n_tokens = 1;
        o.logprobs = lps;
        o.prompt_top_ids = rows;
        o.prompt_top_logprobs = rl;
        o.prompt_logprobs = own;
        o.n_prompt_rows = np - 1;
        o.prompt_k = 2;
        o.finished = true;
        o.finish_reason = "length";
        o.stop_token = -1;
        o.stop_string = -1;
        o.prompt_tokens = np;
        o.completion_tokens = 1;
        char *out = NULL;
        size_t len = 0;
        CHECK(api_stream_feed(s, &o, &out, &len) == 1, "complete");
        json_t *b = NULL;
        if (mode == 2) {
            json_t *evs = sse_parse(out, NULL);
            size_t ne = json_array_size(evs);
            CHECK(ne >= 3 && STREQ(json_string_value(json_array_get(evs, ne - 1)), "[DONE]"),
                  "stream ends with [DONE]: %s", out);
            CHECK(ne >= 3 && jint(json_array_get(evs, ne - 2), "usage.completion_tokens") == 0,
                  "streamed usage: 0 completion tokens: %s", out);
            b = json_incref(json_array_get(evs, 0));
            json_decref(evs);
        } else {
            b = json_loads(out, 0, NULL);
            CHECK(jint(b, "usage.completion_tokens") == (mode == 0 ? 1 : 0) &&
                      jint(b, "usage.prompt_tokens") == np,
                  "usage: %s", out);
        }
        json_t *tl = jpath(b, "choices.0.logprobs.token_logprobs");
        json_t *tops = jpath(b, "choices.0.logprobs.top_logprobs");
        size_t want = (size_t)np + (mode == 0 ? 1 : 0);
        CHECK(json_array_size(tl) == want && json_array_size(tops) == want,
              "mode %d: %zu entries, want %zu: %s", mode, json_array_size(tl), want, out);
        CHECK(json_is_null(json_array_get(tl, 0)), "the first prompt token: null");
        for (int q = 1; q < np; q++) {
            CHECK(json_real_value(json_array_get(tl, (size_t)q)) == -2.0 - q,
                  "prompt token %d: its own logprob, outside the top-K: %s", q, out);
            json_t *top = json_array_get(tops, (size_t)q);
            CHECK(json_object_size(top) == 2, "prompt token %d: itself and 1 alternative", q);
        }
        CHECK_STR(jstr(b, "choices.0.text"), mode == 0 ? "Say hi there" : "Say hi");
        CHECK_STR(jstr(b, "choices.0.finish_reason"), "length");
        json_decref(b);
        free(out), free(rows), free(rl), free(own);
        ivec_free(&gen);
        api_stream_free(s);
        api_call_free(&c);
    }
    expect_error("{\"prompt\":\"hi\",\"max_tokens\":0,\"echo\":false}", 400, "max_tokens");
    expect_error("{\"prompt\":\"hi\",\"max_tokens\":-1,\"echo\":true}", 400, "max_tokens");
}

static void test_prompt_logprobs(void) {
    api_call c;
    api_error e;
    if (parse("{\"prompt\":[10,11,12],\"prompt_logprobs\":1,\"stream\":true}", &c, &e) != 0) return;
    api_stream *s = api_stream_new(&c, T, "cmpl-p", 1);
    int32_t rows[4] = {11, 3, 4, 12};
    float rl[4] = {-1, -2, -3, -0.5f};
    int32_t tok = 13;
    engine_output o = {0};
    o.tokens = &tok;
    o.n_tokens = 1;
    o.prompt_top_ids = rows;
    o.prompt_top_logprobs = rl;
    o.n_prompt_rows = 2;
    o.prompt_k = 2;
    o.stop_token = -1;
    o.stop_string = -1;
    char *out = NULL;
    size_t len = 0;
    api_stream_feed(s, &o, &out, &len);
    json_t *evs = sse_parse(out, NULL);
    json_t *pl = jpath(json_array_get(evs, 0), "choices.0.prompt_logprobs");
    CHECK(json_array_size(pl) == 3 && json_is_null(json_array_get(pl, 0)), "prompt_logprobs: %s",
          out);
    CHECK(json_real_value(jpath(pl, "1.11.logprob")) == -1 && jint(pl, "1.11.rank") == 1 &&
              STREQ(jstr(pl, "1.11.decoded_token"), ","),
          "row 1: %s", out);
    CHECK(json_object_size(json_array_get(pl, 2)) == 1, "k = 1 of 2");
    json_decref(evs);
    free(out);
    api_stream_free(s);
    api_call_free(&c);
}

static void test_stop_string_and_utf8(void) {
    /* " END" stopped it: trimmed from the text and its token from the logprobs. */
    ivec t = ids_of("The answer is 4. END");
    size_t n;
    tokenizer_token_bytes(T, t.v[t.len - 1], &n);
    CHECK(n == 4, "' END' is one token");
    run_opts ro = {"stop", -1, 0, 4, 1, 10, 0, 0, -1};
    result r =
        run("{\"prompt\":\"x\",\"stop\":\" END\",\"logprobs\":0}", "The answer is 4. END", ro);
    CHECK_STR(jstr(r.body, "choices.0.text"), "The answer is 4.");
    CHECK_STR(jstr(r.body, "choices.0.stop_reason"), " END");
    CHECK(json_array_size(jpath(r.body, "choices.0.logprobs.tokens")) == t.len - 1,
          "trimmed logprobs: %s", r.raw);
    result_free(&r);
    /* The stop string inside the last token: only its bytes go. */
    run_opts ro2 = {"stop", -1, 0, 2, 0, 10, 0, 0, -1};
    r = run("{\"prompt\":\"x\",\"stop\":\"D\",\"stream\":true}", "The answer is 4. END", ro2);
    char *text = concat_text(r.events, 0);
    CHECK_STR(text, "The answer is 4. E");
    free(text);
    result_free(&r);
    ivec_free(&t);

    /* Characters split across tokens never come out half (chunks of one token). */
    const char *s = "Pizza \xF0\x9F\xA6\x9C\xF0\x9F\xAB\xA0 done \xE4\xB8\xAD\xE6\x96\x87";
    char buf[128];
    snprintf(buf, sizeof buf, "%s<|endoftext|>", s);
    run_opts one = stop_run(199999);
    one.chunk = 1;
    r = run("{\"prompt\":\"x\",\"stream\":true}", buf, one);
    text = concat_text(r.events, 0);
    CHECK_STR(text, s);
    free(text);
    size_t i;
    json_t *ev;
    json_array_foreach(r.events, i, ev)
        CHECK(!json_is_string(ev) || STREQ(json_string_value(ev), "[DONE]"), "chunk %zu", i);
    result_free(&r);
}

static void test_n(void) {
    api_call c;
    api_error e;
    if (parse("{\"prompt\":\"x\",\"n\":2}", &c, &e) != 0) return;
    api_stream *s = api_stream_new(&c, T, "cmpl-n", 1);
    ivec a = ids_of("A<|endoftext|>"), b = ids_of("B b<|endoftext|>");
    char *out = NULL;
    size_t len = 0;
    for (int k = 0; k < 2; k++) {
        ivec *v = k ? &b : &a;
        engine_output o = {0};
        o.index = k;
        o.tokens = v->v;
        o.n_tokens = (int)v->len;
        o.finished = true;
        o.finish_reason = "stop";
        o.stop_token = 199999;
        o.stop_string = -1;
        o.prompt_tokens = 1;
        o.completion_tokens = (int)v->len;
        CHECK(api_stream_feed(s, &o, &out, &len) == k, "feed %d", k);
    }
    json_t *body = json_loads(out, 0, NULL);
    CHECK_STR(jstr(body, "choices.0.text"), "A");
    CHECK_STR(jstr(body, "choices.1.text"), "B b");
    CHECK(jint(body, "choices.1.index") == 1, "index");
    CHECK(jint(body, "usage.completion_tokens") == (long long)(a.len + b.len), "usage");
    json_decref(body);
    free(out);
    ivec_free(&a), ivec_free(&b);
    api_stream_free(s);
    api_call_free(&c);
}

/* echo × n × logprobs (issue 18): a 16k-token prompt of the longest token, echoed with logprobs
 * n = 128 times, would be a response of hundreds of MB from a request of about 100 KB: refused
 * before any work with a 400 naming the limit; one copy of it is accepted, and so is echo without
 * the limit set. */
static void test_echo_limit(void) {
    int32_t longest = 0;
    size_t longest_len = 0;
    for (int32_t id = 0; id < 199998; id++) {
        size_t len = 0;
        if (tokenizer_token_bytes(T, id, &len) && len > longest_len)
            longest = id, longest_len = len;
    }
    hsb b = {0};
    hsb_add(&b, "{\"prompt\":[");
    for (int i = 0; i < 16384; i++) hsb_printf(&b, "%s%d", i ? "," : "", longest);
    hsb_add(&b, "],\"echo\":true,\"logprobs\":5,\"max_tokens\":1,\"n\":");
    size_t head = b.len;
    api_config cfg = CFG;
    cfg.max_model_len = 1 << 20;
    cfg.max_echo_bytes = 32u << 20;
    for (int n = 128; n >= 1; n -= 127) {
        b.len = head;
        hsb_printf(&b, "%d}", n);
        api_call c;
        api_error e;
        int rc = api_parse_completions(b.s, b.len, T, &cfg, &c, &e);
        if (n == 128) {
            CHECK(rc != 0 && e.status == 400 && !strcmp(e.param, "echo"),
                  "n = 128: rc %d status %d param '%s'", rc, e.status, e.param);
            if (rc != 0) CHECK_MSG_HAS(e.message, "--max-echo-bytes");
        } else {
            CHECK(rc == 0, "n = 1 (%zu-byte tokens): %s", longest_len, e.message);
        }
        if (rc == 0) api_call_free(&c);
    }
    cfg.max_echo_bytes = 0; /* no limit */
    b.len = head;
    hsb_printf(&b, "128}");
    api_call c;
    api_error e;
    int rc = api_parse_completions(b.s, b.len, T, &cfg, &c, &e);
    CHECK(rc == 0, "without a limit: %s", e.message);
    if (rc == 0) api_call_free(&c);
    hsb_free(&b);
}

int main(void) {
    api_test_load_tokenizer();
    test_echo_limit();
    test_echo_scoring();
    test_prompts();
    test_output();
    test_prompt_list();
    test_logprobs();
    test_prompt_logprobs();
    test_stop_string_and_utf8();
    test_n();
    tokenizer_free(T);
    return check_report("test_api_completions");
}
