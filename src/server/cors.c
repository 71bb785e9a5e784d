/* CORS, as vLLM serves it (Starlette's CORSMiddleware behind --allowed-origins, --allowed-methods,
 * --allowed-headers, --allow-credentials; all origins, methods and headers by default), so a page
 * from another origin can call the API from a browser.
 *
 * A preflight (OPTIONS with Origin and Access-Control-Request-Method) is answered here, before
 * authentication: browsers never send credentials with a preflight, so requiring the API key would
 * make every cross-origin call with a key fail. It reveals nothing but the CORS policy; the request
 * that follows it still needs the key. Any other request with an allowed Origin gets
 * Access-Control-Allow-Origin on whatever answers it, the 401 included (unlike vLLM, whose
 * authentication answers outside CORS, so a browser page cannot even read why it was refused). A
 * request from an origin that is not allowed is served without the header: the browser, not the
 * server, withholds the answer from the page, as with Starlette. */
#include "server/server_internal.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* What "*" stands for in --allowed-methods (Starlette's list). */
static const char ALL_METHODS[] = "DELETE, GET, HEAD, OPTIONS, PATCH, POST, PUT";
/* Request headers a preflight may always name (Fetch's CORS-safelisted request headers). */
static const char *const SAFELISTED[] = {"accept", "accept-language", "content-language",
                                         "content-type"};
/* How long a browser may cache a preflight's answer (Starlette's default). */
static const char MAX_AGE[] = "600";

void server_list_free(server_list *l) {
    for (int i = 0; i < l->n; i++) free(l->v[i]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

int server_list_parse(const char *flag, const char *json, server_list *out) {
    json_error_t jerr;
    json_t *a = json_loads(json, JSON_DECODE_ANY, &jerr);
    if (!json_is_array(a)) {
        json_decref(a);
        return err_set("option %s: expected a JSON list of strings such as '[\"*\"]' or "
                       "'[\"https://app.example\"]', got '%.60s'",
                       flag, json);
    }
    server_list l = {xcalloc(json_array_size(a) + 1, sizeof(char *)), 0};
    for (size_t i = 0; i < json_array_size(a); i++) {
        const char *v = json_string_value(json_array_get(a, i));
        bool ok = v && v[0];
        for (const char *p = v; ok && *p; p++) ok = (unsigned char)*p >= 0x20 && *p != 0x7f;
        if (!ok) {
            server_list_free(&l);
            json_decref(a);
            return err_set("option %s: entry %zu must be a non-empty string without control "
                           "characters",
                           flag, i);
        }
        l.v[l.n++] = xstrdup(v);
    }
    json_decref(a);
    server_list_free(out);
    *out = l;
    return 0;
}

static bool has_all(const server_list *l) {
    if (!l->v) return true; /* the flag was not given; "[]" (v set, n 0) allows none */
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->v[i], "*") == 0) return true;
    return false;
}

/* Origins and methods compare exactly (both are case-sensitive); header names do not. */
static bool in_list(const server_list *l, const char *x, size_t len, bool nocase) {
    for (int i = 0; i < l->n; i++)
        if (strlen(l->v[i]) == len &&
            (nocase ? strncasecmp(l->v[i], x, len) : strncmp(l->v[i], x, len)) == 0)
            return true;
    return false;
}

static bool origin_allowed(const server_options *o, const char *origin) {
    return has_all(&o->allowed_origins) || in_list(&o->allowed_origins, origin, strlen(origin), 0);
}

/* Access-Control-Allow-Origin for an allowed origin: "*" when any origin may read without
 * credentials, else the origin itself (a browser refuses "*" on a credentialed request), and then
 * the answer depends on Origin, which caches must know (Vary). */
static void allow_origin(const server_options *o, struct evkeyvalq *h, const char *origin) {
    if (has_all(&o->allowed_origins) && !o->allow_credentials) {
        evhttp_add_header(h, "Access-Control-Allow-Origin", "*");
    } else {
        evhttp_add_header(h, "Access-Control-Allow-Origin", origin);
        evhttp_add_header(h, "Vary", "Origin");
    }
    if (o->allow_credentials) evhttp_add_header(h, "Access-Control-Allow-Credentials", "true");
}

static bool header_allowed(const server_options *o, const char *name, size_t len) {
    for (size_t i = 0; i < sizeof SAFELISTED / sizeof SAFELISTED[0]; i++)
        if (strlen(SAFELISTED[i]) == len && strncasecmp(SAFELISTED[i], name, len) == 0) return true;
    return in_list(&o->allowed_headers, name, len, 1);
}

/* The first header of a comma-separated list of names that is not allowed, or NULL. */
static const char *refused_header(const server_options *o, const char *list, size_t *len) {
    const char *p = list;
    while (*p) {
        while (*p == ' ' || *p == '\t' || *p == ',') p++;
        const char *b = p;
        while (*p && *p != ',') p++;
        const char *e = p;
        while (e > b && (e[-1] == ' ' || e[-1] == '\t')) e--;
        if (e > b && !header_allowed(o, b, (size_t)(e - b))) {
            *len = (size_t)(e - b);
            return b;
        }
    }
    return NULL;
}

static char *join(const server_list *l, bool with_safelisted) {
    size_t cap = 1;
    for (int i = 0; i < l->n; i++) cap += strlen(l->v[i]) + 2;
    for (size_t i = 0; with_safelisted && i < sizeof SAFELISTED / sizeof SAFELISTED[0]; i++)
        cap += strlen(SAFELISTED[i]) + 2;
    char *s = xmalloc(cap);
    s[0] = 0;
    for (size_t i = 0; with_safelisted && i < sizeof SAFELISTED / sizeof SAFELISTED[0]; i++)
        strcat(strcat(s, s[0] ? ", " : ""), SAFELISTED[i]);
    for (int i = 0; i < l->n; i++) strcat(strcat(s, s[0] ? ", " : ""), l->v[i]);
    return s;
}

static void preflight(server *s, struct evhttp_request *req, const char *origin,
                      const char *method) {
    const server_options *o = &s->opt;
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    struct evkeyvalq *h = evhttp_request_get_output_headers(req);
    const char *asked = evhttp_find_header(in, "Access-Control-Request-Headers");
    if (!origin_allowed(o, origin)) {
        reply_error(s, req, 400, "invalid_request_error", "Origin",
                    "CORS preflight: origin '%.200s' is not allowed (--allowed-origins)", origin);
        return;
    }
    bool all_methods = has_all(&o->allowed_methods);
    if (!all_methods && !in_list(&o->allowed_methods, method, strlen(method), 0)) {
        reply_error(s, req, 400, "invalid_request_error", "Access-Control-Request-Method",
                    "CORS preflight: method '%.40s' is not allowed (--allowed-methods)", method);
        return;
    }
    size_t bad_len = 0;
    const char *bad =
        asked && !has_all(&o->allowed_headers) ? refused_header(o, asked, &bad_len) : NULL;
    if (bad) {
        reply_error(s, req, 400, "invalid_request_error", "Access-Control-Request-Headers",
                    "CORS preflight: header '%.*s' is not allowed (--allowed-headers)",
                    (int)(bad_len > 80 ? 80 : bad_len), bad);
        return;
    }
    allow_origin(o, h, origin);
    char *methods = all_methods ? NULL : join(&o->allowed_methods, false);
    evhttp_add_header(h, "Access-Control-Allow-Methods", methods ? methods : ALL_METHODS);
    free(methods);
    if (has_all(&o->allowed_headers)) {
        /* "All headers" answers with exactly the ones asked for: "*" would not cover
         * Authorization (Fetch), which every keyed client sends. */
        if (asked) evhttp_add_header(h, "Access-Control-Allow-Headers", asked);
    } else {
        char *hs = join(&o->allowed_headers, true);
        evhttp_add_header(h, "Access-Control-Allow-Headers", hs);
        free(hs);
    }
    evhttp_add_header(h, "Access-Control-Max-Age", MAX_AGE);
    reply_text(s, req, 200, "text/plain; charset=utf-8", "OK", 2);
}

bool cors_handle(server *s, struct evhttp_request *req) {
    struct evkeyvalq *in = evhttp_request_get_input_headers(req);
    const char *origin = evhttp_find_header(in, "Origin");
    if (!origin) return false; /* not a cross-origin request: nothing to say */
    const char *method = evhttp_find_header(in, "Access-Control-Request-Method");
    if (evhttp_request_get_command(req) == EVHTTP_REQ_OPTIONS && method) {
        preflight(s, req, origin, method);
        return true;
    }
    if (origin_allowed(&s->opt, origin))
        allow_origin(&s->opt, evhttp_request_get_output_headers(req), origin);
    return false;
}
