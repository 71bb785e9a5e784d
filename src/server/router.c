/* Routing: path and method → handler, with the checks every route shares (authentication, model
 * loaded, draining). Unknown paths get 404, known paths with another method 405 (with Allow). */
#include "server/server_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { M_GET = 1, M_POST = 2 };
enum {
    R_AUTH = 1,  /* needs the API key when one is set (the /v1 routes, as vLLM) */
    R_READY = 2, /* needs the model: 503 while loading or draining */
};

typedef void (*handler_fn)(srv_loop *l, struct evhttp_request *req);

static void h_completions(srv_loop *l, struct evhttp_request *req) {
    generate_handle(l, req, API_COMPLETIONS);
}
static void h_chat(srv_loop *l, struct evhttp_request *req) {
    generate_handle(l, req, API_CHAT);
}
static void h_responses(srv_loop *l, struct evhttp_request *req) {
    generate_handle(l, req, API_RESPONSES);
}

static const struct {
    const char *path;
    int methods, flags;
    handler_fn fn;
} ROUTES[] = {
    {"/v1/completions", M_POST, R_AUTH | R_READY, h_completions},
    {"/v1/chat/completions", M_POST, R_AUTH | R_READY, h_chat},
    {"/v1/responses", M_POST, R_AUTH | R_READY, h_responses},
    {"/v1/models", M_GET, R_AUTH | R_READY, handle_models},
    {"/tokenize", M_POST, R_READY, handle_tokenize},
    {"/detokenize", M_POST, R_READY, handle_detokenize},
    {"/health", M_GET, 0, handle_health},
    {"/ping", M_GET | M_POST, 0, handle_health},
    {"/version", M_GET, 0, handle_version},
    {"/metrics", M_GET, 0, handle_metrics},
};

void router_common_headers(server *s, struct evhttp_request *req) {
    if (atomic_load(&s->state) == SRV_DRAINING)
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
}

/* Constant-time comparison, so the key cannot be guessed byte by byte from response times. */
static bool same_secret(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < la; i++) diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return diff == 0;
}

static bool authorized(server *s, struct evhttp_request *req) {
    if (!s->opt.api_key || !s->opt.api_key[0]) return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    return same_secret(h, s->opt.api_key);
}

void router_handle(struct evhttp_request *req, void *arg) {
    srv_loop *l = arg;
    server *s = l->srv;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (!path || !path[0]) path = "/";
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
    int m = cmd == EVHTTP_REQ_GET || cmd == EVHTTP_REQ_HEAD ? M_GET
            : cmd == EVHTTP_REQ_POST                        ? M_POST
                                                            : 0;
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        if (strcmp(path, ROUTES[i].path) != 0) continue;
        if (!(ROUTES[i].methods & m)) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                              ROUTES[i].methods == M_GET    ? "GET, HEAD"
                              : ROUTES[i].methods == M_POST ? "POST"
                                                            : "GET, HEAD, POST");
            reply_error(s, req, 405, "invalid_request_error", "", "method not allowed for %s",
                        path);
            return;
        }
        if ((ROUTES[i].flags & R_AUTH) && !authorized(s, req)) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
            reply_error(s, req, 401, "authentication_error", "", "invalid or missing API key");
            return;
        }
        if (ROUTES[i].flags & R_READY) {
            int st = atomic_load(&s->state);
            if (st != SRV_READY) {
                reply_error(s, req, 503, "service_unavailable", "", "%s",
                            st == SRV_LOADING ? "the model is loading"
                                              : "the server is shutting down");
                return;
            }
        }
        ROUTES[i].fn(l, req);
        return;
    }
    reply_error(s, req, 404, "invalid_request_error", "", "no route for %s", path);
}
