/* Routing: path and method → handler, with the checks every route shares (authentication, model
 * loaded, draining). Unknown paths get 404, known paths with another method 405 (with Allow).
 *
 * Authentication comes first: with --api-key every request needs the key except /health (probes
 * from orchestrators carry no secrets) and /metrics when --metrics-no-auth opens it for scrapers.
 * Even the 404 and 405 answers wait for the key, so an anonymous client learns nothing about the
 * routes, and the only work done for it is what evhttp did to read the request (bounded by
 * --max-header-bytes and --max-request-bytes). The exceptions are a CORS preflight (cors.c) and the
 * static chat page (webui.c), which a browser must load before it can ask for the key. */
#include "server/server_internal.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum { M_GET = 1, M_POST = 2, M_DELETE = 4 };
enum {
    R_OPEN = 1,    /* answers without the API key (/health) */
    R_READY = 2,   /* needs the model: 503 while loading or draining */
    R_METRICS = 4, /* open when --metrics-no-auth */
    R_PREFIX = 8,  /* the path starts with the route's (the rest is an argument, never empty) */
    R_WEBUI = 16,  /* the chat page: absent with --no-webui */
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
    {"/v1/completions", M_POST, R_READY, h_completions},
    {"/v1/chat/completions", M_POST, R_READY, h_chat},
    {"/v1/responses", M_POST, R_READY, h_responses},
    /* The handler checks each sub-path's own methods. */
    {RESPONSES_PREFIX, M_GET | M_POST | M_DELETE, R_READY | R_PREFIX, handle_stored_response},
    {"/v1/models", M_GET, R_READY, handle_models},
    {MODELS_PREFIX, M_GET, R_READY | R_PREFIX, handle_model},
    {"/tokenize", M_POST, R_READY, handle_tokenize},
    {"/detokenize", M_POST, R_READY, handle_detokenize},
    {"/health", M_GET, R_OPEN, handle_health},
    {"/ping", M_GET | M_POST, 0, handle_health},
    {"/version", M_GET, 0, handle_version},
    {"/metrics", M_GET, R_METRICS, handle_metrics},
    {"/", M_GET, R_OPEN | R_WEBUI, handle_webui},
    {"/webui/", M_GET, R_OPEN | R_PREFIX | R_WEBUI, handle_webui},
};

static bool route_matches(const server *s, const char *route, int flags, const char *path) {
    if ((flags & R_WEBUI) && s->opt.no_webui) return false;
    if (!(flags & R_PREFIX)) return strcmp(path, route) == 0;
    size_t n = strlen(route);
    return strncmp(path, route, n) == 0 && path[n] != 0;
}

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
            : cmd == EVHTTP_REQ_DELETE                      ? M_DELETE
                                                            : 0;
    char why[160];
    int wire = wire_check(l, req, why, sizeof why);
    if (wire) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(s, req, wire, "invalid_request_error", "", "%s", why);
        return;
    }
    if (!framing_check(req, why, sizeof why)) {
        /* Nothing after this request can be trusted: answer and close (see framing.c). */
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        reply_error(s, req, 400, "invalid_request_error", "", "%s", why);
        return;
    }
    /* Before authentication: a preflight carries no key (see cors.c). */
    if (cors_handle(s, req)) return;
    size_t r = 0, n_routes = sizeof ROUTES / sizeof ROUTES[0];
    while (r < n_routes && !route_matches(s, ROUTES[r].path, ROUTES[r].flags, path)) r++;
    int flags = r < n_routes ? ROUTES[r].flags : 0;
    bool open = (flags & R_OPEN) || ((flags & R_METRICS) && s->opt.metrics_no_auth);
    if (!open && !authorized(s, req)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate", "Bearer");
        reply_error(s, req, 401, "authentication_error", "", "invalid or missing API key");
        return;
    }
    if (r == n_routes) {
        reply_error(s, req, 404, "invalid_request_error", "", "no route for %s", path);
        return;
    }
    if (!(ROUTES[r].methods & m)) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Allow",
                          ROUTES[r].methods == M_GET     ? "GET, HEAD"
                          : ROUTES[r].methods == M_POST  ? "POST"
                          : ROUTES[r].methods & M_DELETE ? "GET, HEAD, POST, DELETE"
                                                         : "GET, HEAD, POST");
        reply_error(s, req, 405, "invalid_request_error", "", "method not allowed for %s", path);
        return;
    }
    if (flags & R_READY) {
        int st = atomic_load(&s->state);
        if (st != SRV_READY) {
            reply_error(s, req, 503, "service_unavailable", "", "%s",
                        st == SRV_LOADING ? "the model is loading" : "the server is shutting down");
            return;
        }
    }
    ROUTES[r].fn(l, req);
}
