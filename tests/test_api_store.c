/* The responses store: its bounds (count, bytes, idle expiry, least recently used first), item ids
 * shared between entries, deletion under churn and concurrent use; then the API over it without
 * HTTP: a finished response is kept with its conversation, previous_response_id and item_reference
 * give the same prompt as the items sent inline, store: false keeps nothing, and unknown ids get
 * vLLM's 404. Skipped (77) without tokenizer.json (the API part needs it). */
#include "api/response_store.h"
#include "test_api_util.h"

#include <pthread.h>
#include <time.h>

static json_t *resp_obj(const char *id) {
    return json_pack("{ssss}", "id", id, "object", "response");
}

/* A conversation of one input message and one output message with the given item id. */
static json_t *conv(const char *item_id, size_t pad) {
    char *text = calloc(pad + 1, 1);
    memset(text, 'x', pad);
    json_t *a = json_pack("[{ssss}{ssssss}]", "role", "user", "content", text, "type", "message",
                          "id", item_id, "role", "assistant");
    free(text);
    return a;
}

static bool has(resp_store *st, const char *id) {
    json_t *v = resp_store_get(st, id);
    bool ok = v && STREQ(json_string_value(json_object_get(v, "id")), id);
    json_decref(v);
    return ok;
}

static int put(resp_store *st, const char *id, const char *item_id, size_t pad) {
    json_t *r = resp_obj(id), *c = conv(item_id, pad);
    int rc = resp_store_put(st, id, r, c, 1);
    json_decref(r);
    json_decref(c);
    return rc;
}

static void test_bounds(void) {
    resp_store_limits lim = {3, 1 << 20, 0};
    resp_store *st = resp_store_new(&lim);
    put(st, "resp_1", "msg_1", 10);
    put(st, "resp_2", "msg_2", 10);
    put(st, "resp_3", "msg_3", 10);
    CHECK(has(st, "resp_1"), "resp_1 kept"); /* now the most recently used */
    put(st, "resp_4", "msg_4", 10);
    CHECK(!has(st, "resp_2"), "the least recently used (resp_2) goes first");
    CHECK(has(st, "resp_1") && has(st, "resp_3") && has(st, "resp_4"), "the others stay");
    CHECK(resp_store_stat(st).entries == 3, "3 entries, got %d", resp_store_stat(st).entries);
    /* Items by id, conversation and input items. */
    json_t *it = resp_store_item(st, "msg_3");
    CHECK(STREQ(jstr(it, "role"), "assistant"), "item msg_3");
    json_decref(it);
    CHECK(resp_store_item(st, "msg_2") == NULL, "an evicted response's items go with it");
    json_t *cv = resp_store_conversation(st, "resp_4"), *in = resp_store_input_items(st, "resp_4");
    CHECK(json_array_size(cv) == 2 && json_array_size(in) == 1, "conversation 2, input 1");
    json_decref(cv);
    json_decref(in);
    /* Delete. */
    CHECK(resp_store_delete(st, "resp_3"), "delete resp_3");
    CHECK(!resp_store_delete(st, "resp_3"), "a second delete finds nothing");
    CHECK(!has(st, "resp_3") && resp_store_item(st, "msg_3") == NULL, "resp_3 gone");
    resp_store_free(st);

    /* Bytes: about 4 entries of 1000 bytes fit in 5000; one bigger than the bound is refused. */
    resp_store_limits lb = {100, 5000, 0};
    st = resp_store_new(&lb);
    for (int i = 0; i < 10; i++) {
        char id[32], item[32];
        snprintf(id, sizeof id, "resp_%d", i);
        snprintf(item, sizeof item, "msg_%d", i);
        CHECK(put(st, id, item, 1000) == 0, "put %s", id);
        CHECK(resp_store_stat(st).bytes <= 5000, "bytes %zu over the bound",
              resp_store_stat(st).bytes);
    }
    CHECK(has(st, "resp_9") && !has(st, "resp_0"), "the newest kept, the oldest dropped");
    CHECK(resp_store_stat(st).entries >= 3, "entries %d", resp_store_stat(st).entries);
    CHECK(put(st, "resp_big", "msg_big", 6000) == -1, "an entry over the bound is refused");
    CHECK(!has(st, "resp_big"), "and not kept");
    resp_store_free(st);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static void test_ttl(void) {
    resp_store_limits lim = {10, 1 << 20, 0.3};
    resp_store *st = resp_store_new(&lim);
    put(st, "resp_a", "msg_a", 1);
    put(st, "resp_b", "msg_b", 1);
    sleep_s(0.2);
    CHECK(has(st, "resp_a"), "used within the TTL: kept (and its clock restarts)");
    sleep_s(0.2);
    CHECK(has(st, "resp_a"), "resp_a was used 0.2 s ago");
    CHECK(!has(st, "resp_b"), "resp_b unused for 0.4 s: expired");
    CHECK(resp_store_item(st, "msg_b") == NULL, "its items too");
    resp_store_free(st);
}

/* Two responses holding the same item id (a conversation continued by previous_response_id holds
 * the earlier output items): the newest owns the id; dropping either never leaves the map with a
 * key freed with the other (ASan would see it). */
static void test_shared_items(void) {
    resp_store_limits lim = {10, 1 << 20, 0};
    resp_store *st = resp_store_new(&lim);
    put(st, "resp_a", "msg_x", 1);
    put(st, "resp_b", "msg_x", 2);
    CHECK(resp_store_delete(st, "resp_a"), "delete a");
    json_t *it = resp_store_item(st, "msg_x");
    CHECK(it && json_string_length(jpath(it, "role")) == 9, "msg_x from resp_b");
    json_decref(it);
    put(st, "resp_c", "msg_x", 3);
    CHECK(resp_store_delete(st, "resp_c"), "delete c");
    CHECK(resp_store_item(st, "msg_x") == NULL, "msg_x followed the newest owner out");
    CHECK(has(st, "resp_b"), "resp_b stays");
    /* Replacing an entry of the same id. */
    put(st, "resp_b", "msg_y", 1);
    CHECK(resp_store_stat(st).entries == 1, "replaced, not added");
    json_t *y = resp_store_item(st, "msg_y");
    CHECK(y != NULL, "the new items");
    json_decref(y);
    resp_store_free(st);
}

/* Churn through a small store: hash-map deletion must keep every live id findable. */
static void test_churn(void) {
    resp_store_limits lim = {64, 1 << 24, 0};
    resp_store *st = resp_store_new(&lim);
    char id[32], item[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof id, "resp_%d", i);
        snprintf(item, sizeof item, "msg_%d", i);
        put(st, id, item, 1);
        if (i % 7 == 0) {
            snprintf(id, sizeof id, "resp_%d", i / 2);
            resp_store_delete(st, id);
        }
    }
    int found = 0;
    for (int i = 5000 - 64; i < 5000; i++) {
        snprintf(id, sizeof id, "resp_%d", i);
        snprintf(item, sizeof item, "msg_%d", i);
        json_t *v = resp_store_item(st, item);
        found += has(st, id) && v != NULL;
        json_decref(v);
    }
    CHECK(found == 64, "the last 64 responses are all there (%d)", found);
    CHECK(resp_store_stat(st).entries == 64, "64 entries, got %d", resp_store_stat(st).entries);
    resp_store_free(st);
}

typedef struct {
    resp_store *st;
    int t;
} worker_arg;

static void *worker(void *p) {
    worker_arg *a = p;
    char id[32], item[32];
    for (int i = 0; i < 2000; i++) {
        int k = (i * 7 + a->t * 13) % 50;
        snprintf(id, sizeof id, "resp_%d", k);
        snprintf(item, sizeof item, "msg_%d", k);
        switch (i % 4) {
        case 0:
            put(a->st, id, item, (size_t)(i % 300));
            break;
        case 1:
            json_decref(resp_store_conversation(a->st, id));
            break;
        case 2:
            json_decref(resp_store_item(a->st, item));
            break;
        default:
            resp_store_delete(a->st, id);
        }
    }
    return NULL;
}

static void test_threads(void) {
    resp_store_limits lim = {20, 8000, 0};
    resp_store *st = resp_store_new(&lim);
    pthread_t th[4];
    worker_arg args[4];
    for (int t = 0; t < 4; t++) {
        args[t] = (worker_arg){st, t};
        pthread_create(&th[t], NULL, worker, &args[t]);
    }
    for (int t = 0; t < 4; t++) pthread_join(th[t], NULL);
    resp_store_stats s = resp_store_stat(st);
    CHECK(s.entries <= 20 && s.bytes <= 8000, "bounds held: %d entries, %zu bytes", s.entries,
          s.bytes);
    resp_store_free(st);
}

/* ---- the API over a store ---- */

static api_config store_cfg(resp_store *st) {
    api_config c = CFG;
    c.store = st;
    return c;
}

/* Parses body with cfg; the prompt as text (NULL and *err on failure). */
static char *prompt_of(const char *body, const api_config *cfg, api_error *err) {
    api_call c;
    if (api_parse_responses(body, strlen(body), T, cfg, &c, err) != 0) return NULL;
    char *p = prompt_text(&c);
    api_call_free(&c);
    return p;
}

/* Runs one response through the API (its output is the given harmony text) and returns the body. */
static json_t *respond(const char *body, const api_config *cfg, const char *id, const char *text) {
    api_call c;
    api_error e;
    if (api_parse_responses(body, strlen(body), T, cfg, &c, &e) != 0) {
        CHECK(0, "parse %s: %s", body, e.message);
        return NULL;
    }
    api_stream *s = api_stream_new(&c, T, id, 1700000000);
    api_call_free(&c);
    ivec t = ids_of(text);
    run_opts ro = stop_run(200002); /* <|return|> */
    char *raw = run_stream(s, &t, &ro, NULL);
    json_t *v = json_loads(raw, 0, NULL);
    free(raw);
    ivec_free(&t);
    api_stream_free(s);
    return v;
}

static void test_api(void) {
    resp_store_limits lim = {100, 1 << 20, 0};
    resp_store *st = resp_store_new(&lim);
    api_config cfg = store_cfg(st);
    json_t *r = respond("{\"input\":\"Hi\",\"instructions\":\"Be brief.\"}", &cfg, "resp_one",
                        "<|channel|>analysis<|message|>Greet back.<|end|><|start|>assistant"
                        "<|channel|>final<|message|>Hello!<|return|>");
    CHECK(r && json_is_true(json_object_get(r, "store")), "store: true echoed");
    CHECK(json_is_null(json_object_get(r, "previous_response_id")), "no previous id");
    const char *rs = jstr(r, "output.0.id"), *msg = jstr(r, "output.1.id");
    CHECK(rs && !strncmp(rs, "rs_", 3) && msg && !strncmp(msg, "msg_", 4), "output ids");
    json_t *got = resp_store_get(st, "resp_one");
    CHECK(got && json_equal(got, r), "the stored response is the one served");
    json_decref(got);
    json_t *in = resp_store_input_items(st, "resp_one");
    CHECK(json_array_size(in) == 1 && STREQ(jstr(in, "0.content"), "Hi"), "input items: 'Hi'");
    json_decref(in);

    /* The same conversation three ways: inline, by previous_response_id, by item_reference. The
     * earlier instructions are not carried over (OpenAI's rule). */
    char inline_body[512], prev_body[256], ref_body[512];
    snprintf(inline_body, sizeof inline_body,
             "{\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},"
             "{\"type\":\"reasoning\",\"content\":[{\"type\":\"reasoning_text\",\"text\":\"Greet "
             "back.\"}]},"
             "{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\","
             "\"text\":\"Hello!\"}]},{\"role\":\"user\",\"content\":\"Again\"}]}");
    snprintf(prev_body, sizeof prev_body,
             "{\"input\":\"Again\",\"previous_response_id\":\"resp_one\"}");
    snprintf(ref_body, sizeof ref_body,
             "{\"input\":[{\"role\":\"user\",\"content\":\"Hi\"},"
             "{\"type\":\"item_reference\",\"id\":\"%s\"},{\"type\":\"item_reference\",\"id\":"
             "\"%s\"},{\"role\":\"user\",\"content\":\"Again\"}]}",
             rs, msg);
    api_error e;
    char *p_inline = prompt_of(inline_body, &cfg, &e);
    char *p_prev = prompt_of(prev_body, &cfg, &e);
    char *p_ref = prompt_of(ref_body, &cfg, &e);
    CHECK(p_inline && strstr(p_inline, "Hello!") && strstr(p_inline, "Again"), "inline prompt");
    CHECK(STREQ(p_prev, p_inline), "previous_response_id:\n%s\nwant\n%s", NN(p_prev), NN(p_inline));
    CHECK(STREQ(p_ref, p_inline), "item_reference:\n%s\nwant\n%s", NN(p_ref), NN(p_inline));
    CHECK(p_prev && !strstr(p_prev, "Be brief."), "instructions are not carried over");
    free(p_inline), free(p_prev), free(p_ref);

    /* A continued response stores the whole conversation: a third turn sees all of it. */
    json_t *r2 =
        respond(prev_body, &cfg, "resp_two", "<|channel|>final<|message|>Hello again!<|return|>");
    CHECK(STREQ(jstr(r2, "previous_response_id"), "resp_one"), "previous_response_id echoed");
    json_t *c2 = resp_store_conversation(st, "resp_two");
    CHECK(json_array_size(c2) == 5, "conversation of resp_two: 5 items, got %zu",
          json_array_size(c2));
    json_decref(c2);
    char *p3 = prompt_of("{\"input\":\"Third\",\"previous_response_id\":\"resp_two\"}", &cfg, &e);
    CHECK(p3 && strstr(p3, "Hi") && strstr(p3, "Hello!") && strstr(p3, "Hello again!") &&
              strstr(p3, "Third"),
          "third turn: %s", NN(p3));
    free(p3);

    /* A tool call answered in the next request through previous_response_id (the Agents SDK). */
    json_t *r3 = respond(
        "{\"input\":\"Weather?\",\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{}}}]}",
        &cfg, "resp_tool",
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{}"
        "<|call|>");
    const char *call_id = jstr(r3, "output.0.call_id");
    CHECK(call_id && STREQ(jstr(r3, "output.0.type"), "function_call"), "a function call");
    char body[256];
    snprintf(body, sizeof body,
             "{\"input\":[{\"type\":\"function_call_output\",\"call_id\":\"%s\",\"output\":"
             "\"sunny\"}],\"previous_response_id\":\"resp_tool\"}",
             NN(call_id));
    char *p4 = prompt_of(body, &cfg, &e);
    CHECK(p4 && strstr(p4, "functions.get_weather to=assistant") && strstr(p4, "sunny"),
          "the output names the stored call: %s (%s)", NN(p4), p4 ? "" : e.message);
    free(p4);

    /* store: false keeps nothing and says so. */
    json_t *r4 = respond("{\"input\":\"x\",\"store\":false}", &cfg, "resp_nostore",
                         "<|channel|>final<|message|>y<|return|>");
    CHECK(json_is_false(json_object_get(r4, "store")), "store: false echoed");
    CHECK(!has(st, "resp_nostore"), "and nothing kept");

    /* Unknown ids: vLLM's 404; a bad id: 400; no store at all: 400 naming the field. */
    char *none = prompt_of("{\"input\":\"x\",\"previous_response_id\":\"resp_nope\"}", &cfg, &e);
    CHECK(!none && e.status == 404 && STREQ(e.param, "previous_response_id") &&
              STREQ(e.message, "Response with id 'resp_nope' not found."),
          "unknown previous: %d %s", e.status, e.message);
    char *ej = api_error_json(&e);
    CHECK(ej && strstr(ej, "\"code\":404") && strstr(ej, "\"type\":\"invalid_request_error\""),
          "vLLM's shape: %s", NN(ej));
    free(ej);
    none = prompt_of("{\"input\":\"x\",\"previous_response_id\":\"chat_1\"}", &cfg, &e);
    CHECK(!none && e.status == 400 && STREQ(e.param, "previous_response_id"), "bad id: %d",
          e.status);
    none = prompt_of("{\"input\":\"x\",\"previous_response_id\":7}", &cfg, &e);
    CHECK(!none && e.status == 400 && STREQ(e.param, "previous_response_id"), "not a string");
    none = prompt_of("{\"input\":[{\"type\":\"item_reference\",\"id\":\"msg_nope\"}]}", &cfg, &e);
    CHECK(!none && e.status == 404 && STREQ(e.param, "input[0].id"), "unknown item: %d %s",
          e.status, e.message);
    none = prompt_of("{\"input\":[{\"type\":\"item_reference\"}]}", &cfg, &e);
    CHECK(!none && e.status == 400 && STREQ(e.param, "input[0].id"), "reference without id");
    none = prompt_of("{\"input\":\"x\",\"previous_response_id\":\"resp_one\"}", &CFG, &e);
    CHECK(!none && e.status == 400 && strstr(e.message, "--responses-store-size"), "no store: %s",
          e.message);
    /* Without a store nothing claims to be stored. */
    json_t *r5 =
        respond("{\"input\":\"x\"}", &CFG, "resp_five", "<|channel|>final<|message|>y<|return|>");
    CHECK(json_is_false(json_object_get(r5, "store")), "no store: store false");
    json_decref(r), json_decref(r2), json_decref(r3), json_decref(r4), json_decref(r5);

    /* Background: queued in the store at once, in progress from the first output, final at the
     * end; it needs the store and refuses stream. */
    api_call c;
    const char *bg = "{\"input\":\"Hi\",\"background\":true}";
    if (api_parse_responses(bg, strlen(bg), T, &cfg, &c, &e) == 0) {
        CHECK(c.background, "background parsed");
        api_stream *s = api_stream_new(&c, T, "resp_bg", 1700000000);
        api_call_free(&c);
        size_t len = 0;
        char *qbody = api_stream_background_start(s, &len);
        json_t *q = json_loads(qbody, 0, NULL);
        CHECK(STREQ(jstr(q, "status"), "queued") && json_is_true(json_object_get(q, "background")),
              "queued answer: %s", NN(qbody));
        free(qbody);
        json_decref(q);
        json_t *stored = resp_store_get(st, "resp_bg");
        CHECK(STREQ(jstr(stored, "status"), "queued"), "stored queued");
        json_decref(stored);
        ivec t = ids_of("<|channel|>final<|message|>Done.<|return|>");
        run_opts ro = stop_run(200002);
        ro.chunk = 1;
        char *raw = run_stream(s, &t, &ro, NULL);
        stored = resp_store_get(st, "resp_bg");
        CHECK(STREQ(jstr(stored, "status"), "completed") &&
                  STREQ(jstr(stored, "output.0.content.0.text"), "Done."),
              "stored final: %s", raw);
        json_decref(stored);
        free(raw);
        ivec_free(&t);
        api_stream_free(s);
    }
    none = prompt_of("{\"input\":\"x\",\"background\":true,\"store\":false}", &cfg, &e);
    CHECK(!none && e.status == 400 && STREQ(e.param, "background"), "background without store");
    none = prompt_of("{\"input\":\"x\",\"background\":true,\"stream\":true}", &cfg, &e);
    CHECK(!none && e.status == 400 && STREQ(e.param, "stream"), "background with stream");
    none = prompt_of("{\"input\":\"x\",\"background\":true}", &CFG, &e);
    CHECK(!none && e.status == 400 && STREQ(e.param, "background"), "background, no store");
    resp_store_free(st);
}

int main(void) {
    test_bounds();
    test_ttl();
    test_shared_items();
    test_churn();
    test_threads();
    api_test_load_tokenizer();
    test_api();
    tokenizer_free(T);
    return check_report("test_api_store");
}
