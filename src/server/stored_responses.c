/* The stored responses by id (the responses store, api/response_store.h):
 *   GET    /v1/responses/{id}               the response object as it was served
 *   GET    /v1/responses/{id}/input_items   {object: "list", data: [input items], first_id,
 *                                           last_id, has_more: false}
 *   DELETE /v1/responses/{id}               {id, object: "response.deleted", deleted: true}
 *   POST   /v1/responses/{id}/cancel        a background response still running: aborted, and
 *                                           answered with status "cancelled" (the store has it a
 *                                           step later, when the engine has stopped it); any
 *                                           other: 400 with vLLM's messages
 * An id that was never stored, was deleted, evicted or expired gets vLLM's 404 ("Response with id
 * '…' not found.", param response_id, code 404); one that does not start with "resp" gets vLLM's
 * 400. Runs on the loop threads; the store has its own lock. */
#include "server/server_internal.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reply_value(server *s, struct evhttp_request *req, json_t *v) {
    char *body = json_dumps(v, JSON_COMPACT);
    json_decref(v);
    reply_json(s, req, 200, body, strlen(body));
    free(body);
}

static void not_found(server *s, struct evhttp_request *req, const char *id) {
    api_error e;
    api_error_set(&e, 404, "invalid_request_error", "response_id",
                  "Response with id '%.100s' not found.", id);
    snprintf(e.code, sizeof e.code, "404");
    reply_api_error(s, req, &e);
}

/* Items with ids in a list answer carry first_id / last_id, as OpenAI's list objects do. */
static json_t *item_list(json_t *items) {
    size_t n = json_array_size(items);
    json_t *first = n ? json_object_get(json_array_get(items, 0), "id") : NULL;
    json_t *last = n ? json_object_get(json_array_get(items, n - 1), "id") : NULL;
    return json_pack("{sssOsOsosb}", "object", "list", "first_id", first ? first : json_null(),
                     "last_id", last ? last : json_null(), "data", items, "has_more", 0);
}

static void cancel(server *s, struct evhttp_request *req, resp_store *st, const char *id) {
    json_t *r = resp_store_get(st, id);
    if (!r) {
        not_found(s, req, id);
        return;
    }
    const char *status = json_string_value(json_object_get(r, "status"));
    bool running = status && (!strcmp(status, "queued") || !strcmp(status, "in_progress"));
    if (!json_is_true(json_object_get(r, "background"))) {
        reply_error(s, req, 400, "invalid_request_error", "response_id",
                    "Cannot cancel a synchronous response.");
    } else if (!running || !background_cancel(s, id)) {
        reply_error(s, req, 400, "invalid_request_error", "response_id",
                    "Cannot cancel a response that has already finished (status '%s').",
                    status ? status : "?");
    } else {
        json_object_set_new(r, "status", json_string("cancelled"));
        reply_value(s, req, json_incref(r));
    }
    json_decref(r);
}

void handle_stored_response(srv_loop *l, struct evhttp_request *req) {
    server *s = l->srv;
    const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
    const char *rest = path + strlen(RESPONSES_PREFIX);
    const char *slash = strchr(rest, '/');
    const char *action = slash ? slash + 1 : "";
    size_t id_len = slash ? (size_t)(slash - rest) : strlen(rest);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    bool get = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD;
    const char *allow = !*action                         ? "GET, HEAD, DELETE"
                        : !strcmp(action, "cancel")      ? "POST"
                        : !strcmp(action, "input_items") ? "GET, HEAD"
                                                         : NULL;
    if (!allow || id_len == 0) {
        reply_error(s, req, 404, "invalid_request_error", "", "no route for %s", path);
        return;
    }
    bool ok = !*action                    ? get || cmd == EVHTTP_REQ_DELETE
              : !strcmp(action, "cancel") ? cmd == EVHTTP_REQ_POST
                                          : get;
    if (!ok) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow", allow);
        reply_error(s, req, 405, "invalid_request_error", "", "method not allowed for %s", path);
        return;
    }
    /* The id segment alone, percent-decoded (an id with a NUL or a slash in it is no id of ours). */
    char enc[256];
    snprintf(enc, sizeof enc, "%.*s", (int)(id_len < sizeof enc ? id_len : sizeof enc - 1), rest);
    size_t len = 0;
    char *id = evhttp_uridecode(enc, 0, &len);
    if (!id || strlen(id) != len || strncmp(id, "resp", 4) != 0 || strchr(id, '/')) {
        reply_error(s, req, 400, "invalid_request_error", "response_id",
                    "Invalid 'response_id': '%.100s'. Expected an ID that begins with 'resp'.",
                    id && strlen(id) == len ? id : "");
        free(id);
        return;
    }
    resp_store *st = s->api.store;
    if (!st) {
        not_found(s, req, id);
    } else if (!strcmp(action, "cancel")) {
        cancel(s, req, st, id);
    } else if (cmd == EVHTTP_REQ_DELETE) {
        if (resp_store_delete(st, id))
            reply_value(
                s, req,
                json_pack("{sssssb}", "id", id, "object", "response.deleted", "deleted", 1));
        else
            not_found(s, req, id);
    } else {
        json_t *v = *action ? resp_store_input_items(st, id) : resp_store_get(st, id);
        if (!v)
            not_found(s, req, id);
        else
            reply_value(s, req, *action ? item_list(v) : v);
    }
    free(id);
}
