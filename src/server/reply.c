/* Writing whole responses: JSON bodies and OpenAI-shaped errors. */
#include "server/server_internal.h"

#include "base/xalloc.h"

#include <event2/buffer.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *reason_phrase(int status) {
    switch (status) {
    case 200:
        return "OK";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 413:
        return "Payload Too Large";
    case 431:
        return "Request Header Fields Too Large";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 503:
        return "Service Unavailable";
    default:
        return status < 400 ? "OK" : "Error";
    }
}

void reply_text(server *s, struct evhttp_request *req, int status, const char *ctype,
                const char *body, size_t len) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", ctype);
    router_common_headers(s, req);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, body, len);
    evhttp_send_reply(req, status, reason_phrase(status), b);
    evbuffer_free(b);
}

void reply_json(server *s, struct evhttp_request *req, int status, const char *body, size_t len) {
    reply_text(s, req, status, "application/json", body, len);
}

static void free_body(const void *data, size_t len, void *arg) {
    (void)len, (void)arg;
    free((void *)data);
}

void reply_json_owned(server *s, struct evhttp_request *req, int status, char *body, size_t len) {
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    evhttp_add_header(h, "Content-Type", "application/json");
    router_common_headers(s, req);
    struct evbuffer *b = evbuffer_new();
    if (!body || evbuffer_add_reference(b, body, len, free_body, NULL) != 0) free(body);
    evhttp_send_reply(req, status, reason_phrase(status), b);
    evbuffer_free(b);
}

void reply_api_error(server *s, struct evhttp_request *req, const api_error *err) {
    char *body = api_error_json(err);
    reply_json(s, req, err->status, body, strlen(body));
    free(body);
}

void reply_error(server *s, struct evhttp_request *req, int status, const char *type,
                 const char *param, const char *fmt, ...) {
    api_error e;
    char msg[sizeof e.message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    api_error_set(&e, status, type, param, "%s", msg);
    reply_api_error(s, req, &e);
}

const char *request_body(struct evhttp_request *req, size_t *len) {
    struct evbuffer *b = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(b);
    /* evhttp already capped the body at --max-request-bytes. */
    const char *p = (const char *)evbuffer_pullup(b, -1);
    return p ? p : "";
}
