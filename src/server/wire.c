/* What evhttp (libevent 2.1) cannot be told: two checks on the raw bytes of each connection.
 *
 * 1. Request heads are scanned as they arrive, before evhttp parses them, for obs-fold (a header
 *    line that starts with a space or tab, RFC 9112 §5.2) and for a head larger than
 *    --max-header-bytes (counted whole: request line, fields and line ends). evhttp joins a folded
 *    line to the field before it with one space, so after parsing a fold looks exactly like a value
 *    with a space in it; only the bytes tell. The router asks wire_check() before anything else
 *    and refuses such a request (400, or 431 for the size) with the connection closed.
 * 2. The error pages evhttp writes itself (a malformed head, a body over --max-request-bytes, an
 *    unknown method) are HTML; the client of an OpenAI API expects {"error": {...}}. Each is
 *    rewritten into that shape in the connection's output buffer, before it is written: evhttp adds
 *    a whole error response to an empty buffer in one call, so the buffer holds exactly it. A 413
 *    also starts body_drain.c, which reads the rest of the refused body (evhttp's lingering close
 *    stops at the end of a chunk).
 *
 * State: evhttp gives us each connection's bufferevent before its socket exists and never says when
 * it frees one, so the state lives in a per-loop table indexed by descriptor, claimed by the
 * connection's first bytes (a descriptor number is reused only after its connection is gone). The
 * hooks are evbuffer callbacks, which run on the loop thread as the bytes are added, before
 * bufferevent hands them to evhttp. A head is scanned from the connection's first byte and, after
 * each request is routed, from the first byte after it (the next pipelined request); a body is never
 * scanned, and scanning stops at the blank line that ends the head.
 *
 * Why not a stricter HTTP library (issue 18 asked to decide by measurement): H2O's libh2o is packaged
 * (Debian 2.2.5) and its parser, picohttpparser, refuses these shapes itself, but moving would redo
 * the whole server side (chunked streaming, close detection, timeouts, drain) for the same result:
 * with framing.c and this file every shape of the issue is refused (tests/test_server_framing.sh),
 * and the scan costs nothing measurable: pipelined GET /health, 4 connections × 5000, 5 alternating
 * runs on the shared 2-core build machine: 14-27k requests/s before, 9-21k after, the spread of
 * the machine's load either way. */
#include "server/server_internal.h"

#include "base/xalloc.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct wire_conn {
    const struct bufferevent *bev; /* the connection that claimed this descriptor */
    size_t head_bytes;             /* of the head being scanned */
    bool scanning;                 /* inside a head (false: in a body, or between requests) */
    bool at_line_start, line_empty, seen_line;
    bool obs_fold, too_large; /* what the scan found; read by wire_check and the error rewrite */
} wire_conn;

static wire_conn *slot(srv_loop *l, evutil_socket_t fd) {
    if (fd < 0) return NULL;
    if ((size_t)fd >= l->n_wire) {
        size_t n = l->n_wire ? l->n_wire : 256;
        while (n <= (size_t)fd) n *= 2;
        l->wire = xrealloc(l->wire, n * sizeof *l->wire);
        memset(l->wire + l->n_wire, 0, (n - l->n_wire) * sizeof *l->wire);
        l->n_wire = n;
    }
    return &l->wire[fd];
}

static void arm(wire_conn *c) {
    c->head_bytes = 0;
    c->scanning = true;
    c->at_line_start = true;
    c->line_empty = true;
    c->seen_line = false;
}

/* Advances the head scan over p[0..n). */
static void scan(wire_conn *c, const unsigned char *p, size_t n, size_t max_head) {
    for (size_t i = 0; i < n && c->scanning; i++) {
        unsigned char ch = p[i];
        if (++c->head_bytes > max_head) {
            c->too_large = true;
            return;
        }
        if (c->at_line_start && (ch == ' ' || ch == '\t') && c->seen_line) c->obs_fold = true;
        if (ch == '\n') {
            if (c->line_empty && c->seen_line) {
                c->scanning = false; /* the blank line: the head is complete */
                break;
            }
            /* Empty lines before the request line are tolerated (RFC 9112 §2.2). */
            if (!c->line_empty) c->seen_line = true;
            c->at_line_start = true;
            c->line_empty = true;
        } else {
            c->at_line_start = false;
            if (ch != '\r') c->line_empty = false;
        }
    }
}

static void scan_buffer(wire_conn *c, struct evbuffer *buf, struct evbuffer_ptr *from, size_t n,
                        size_t max_head) {
    struct evbuffer_iovec v[16];
    while (n > 0 && c->scanning && !c->too_large) {
        int k = evbuffer_peek(buf, (ev_ssize_t)n, from, v, 16);
        if (k <= 0) return;
        size_t done = 0;
        for (int i = 0; i < k && i < 16 && done < n; i++) {
            size_t m = v[i].iov_len < n - done ? v[i].iov_len : n - done;
            scan(c, v[i].iov_base, m, max_head);
            done += m;
        }
        if (done == 0 || done >= n) return;
        n -= done;
        /* More than 16 chunks: continue from where this pass ended. */
        if (evbuffer_ptr_set(buf, from, done, EVBUFFER_PTR_ADD) != 0) return;
    }
}

static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);

/* A connection's first bytes: claim its descriptor's slot, then scan as usual from now on. */
static void on_first_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    struct bufferevent *bev = arg;
    if (info->n_added == 0) return;
    srv_loop *l = admission_loop_of(bufferevent_get_base(bev));
    wire_conn *c = l ? slot(l, bufferevent_getfd(bev)) : NULL;
    if (c) {
        memset(c, 0, sizeof *c);
        c->bev = bev;
        arm(c);
    }
    /* Safe inside the callback: libevent reads the next entry before calling this one. */
    evbuffer_remove_cb(buf, on_first_input, arg);
    evbuffer_add_cb(buf, on_input, arg);
    on_input(buf, info, arg);
}

static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    struct bufferevent *bev = arg;
    if (info->n_added == 0) return;
    srv_loop *l = admission_loop_of(bufferevent_get_base(bev));
    if (!l) return;
    evutil_socket_t fd = bufferevent_getfd(bev);
    if (fd < 0 || (size_t)fd >= l->n_wire) return;
    wire_conn *c = &l->wire[fd];
    if (c->bev != bev || !c->scanning) return;
    /* The added bytes are the buffer's last n_added. */
    size_t len = evbuffer_get_length(buf);
    struct evbuffer_ptr from;
    if (evbuffer_ptr_set(buf, &from, len - info->n_added, EVBUFFER_PTR_SET) != 0) return;
    scan_buffer(c, buf, &from, info->n_added, l->srv->opt.max_header_bytes);
}

/* ---- evhttp's HTML error pages → OpenAI JSON errors ---- */

static const char ERR_TAIL[] = "</BODY></HTML>\n";
static const char ERR_BODY[] = "\r\n\r\n<HTML><HEAD>\n<TITLE>";

/* A whole error page is at most a few hundred bytes; the buffer may still hold an earlier response
 * of the same connection (pipelining) in front of it, so it is looked for at the end. Buffers
 * larger than this hold a big response being written, never an error page of evhttp's. */
enum { PAGE_SCAN_MAX = 64 << 10 };

static void rewrite_page(struct evbuffer *buf, struct bufferevent *bev, size_t len);

/* The socket bufferevent freezes the front of its output buffer against everyone but itself, which
 * also refuses copying out; the page is looked at and replaced with the front thawed. */
static void on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg) {
    size_t len = evbuffer_get_length(buf);
    if (info->n_added < sizeof ERR_TAIL - 1 || len > PAGE_SCAN_MAX) return;
    evbuffer_unfreeze(buf, 1);
    rewrite_page(buf, arg, len);
    evbuffer_freeze(buf, 1);
}

static void rewrite_page(struct evbuffer *buf, struct bufferevent *bev, size_t len) {
    size_t tail = sizeof ERR_TAIL - 1;
    char end[sizeof ERR_TAIL];
    struct evbuffer_ptr at;
    if (evbuffer_ptr_set(buf, &at, len - tail, EVBUFFER_PTR_SET) != 0 ||
        evbuffer_copyout_from(buf, &at, end, tail) != (ev_ssize_t)tail ||
        memcmp(end, ERR_TAIL, tail) != 0)
        return;
    char *all = malloc(len + 1);
    if (!all) return;
    if (evbuffer_copyout(buf, all, len) != (ev_ssize_t)len) {
        free(all);
        return;
    }
    all[len] = 0;
    /* The page's status line: the last one in the buffer, followed by evhttp's HTML body. */
    char *page = NULL;
    for (char *p = all; (p = strstr(p, "HTTP/1.")) != NULL; p++) page = p;
    if (!page || strlen(page) < 13 || (page[9] != '4' && page[9] != '5') ||
        !strstr(page, ERR_BODY)) {
        free(all);
        return;
    }
    size_t before = (size_t)(page - all);
    int status = atoi(page + 9);
    srv_loop *l = admission_loop_of(bufferevent_get_base(bev));
    evutil_socket_t fd = bufferevent_getfd(bev);
    const wire_conn *c =
        l && fd >= 0 && (size_t)fd < l->n_wire && l->wire[fd].bev == bev ? &l->wire[fd] : NULL;
    size_t max_head = l ? l->srv->opt.max_header_bytes : 0;
    size_t max_body = l ? l->srv->opt.max_request_bytes : 0;
    api_error e;
    char reason[64];
    if (c && c->too_large) {
        status = 431;
        snprintf(reason, sizeof reason, "Request Header Fields Too Large");
        api_error_set(&e, status, "invalid_request_error", "",
                      "the request line and headers exceed %zu bytes (--max-header-bytes)",
                      max_head);
    } else if (status == 413) {
        snprintf(reason, sizeof reason, "Payload Too Large");
        if (l) body_drain_start(l, fd); /* the rest of the body, read to its end */
        api_error_set(&e, status, "invalid_request_error", "",
                      "the request body exceeds %zu bytes (--max-request-bytes)", max_body);
    } else if (status == 400) {
        snprintf(reason, sizeof reason, "Bad Request");
        api_error_set(&e, status, "invalid_request_error", "", "malformed HTTP request");
    } else {
        /* Keep evhttp's reason phrase (501 Not Implemented for an unknown method, ...). */
        size_t rl = strcspn(page + 13, "\r\n");
        snprintf(reason, sizeof reason, "%.*s", (int)(rl < 60 ? rl : 60), page + 13);
        api_error_set(&e, status, "invalid_request_error", "", "%s", reason);
    }
    char *json = api_error_json(&e);
    size_t jlen = strlen(json);
    char hdr[256];
    int hlen = snprintf(hdr, sizeof hdr,
                        "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: "
                        "close\r\nContent-Length: %zu\r\n\r\n",
                        status, reason, jlen);
    /* Nothing of the page has been written yet (it was added just now, in one call of evhttp's);
     * what is in front of it is put back unchanged. */
    evbuffer_drain(buf, len);
    evbuffer_add(buf, all, before);
    evbuffer_add(buf, hdr, (size_t)hlen);
    evbuffer_add(buf, json, jlen);
    free(json);
    free(all);
}

void wire_attach(struct bufferevent *bev) {
    evbuffer_add_cb(bufferevent_get_input(bev), on_first_input, bev);
    evbuffer_add_cb(bufferevent_get_output(bev), on_output, bev);
}

int wire_check(srv_loop *l, struct evhttp_request *req, char *why, size_t why_len) {
    struct evhttp_connection *evcon = evhttp_request_get_connection(req);
    struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0 || (size_t)fd >= l->n_wire || l->wire[fd].bev != bev) return 0;
    wire_conn *c = &l->wire[fd];
    int status = 0;
    if (c->too_large) {
        status = 431;
        snprintf(why, why_len, "the request line and headers exceed %zu bytes (--max-header-bytes)",
                 l->srv->opt.max_header_bytes);
    } else if (c->obs_fold) {
        status = 400;
        snprintf(why, why_len,
                 "obs-fold: a header line starts with whitespace (RFC 9112 §5.2 forbids folding)");
    }
    if (status) return status; /* the connection closes: no next head to scan */
    /* evhttp has taken this request's body out of the connection's buffer: what is left there is
     * the start of the next request. */
    arm(c);
    struct evbuffer *in = bufferevent_get_input(bev);
    size_t n = evbuffer_get_length(in);
    if (n) {
        struct evbuffer_ptr from;
        evbuffer_ptr_set(in, &from, 0, EVBUFFER_PTR_SET);
        scan_buffer(c, in, &from, n, l->srv->opt.max_header_bytes);
    }
    return 0;
}

void wire_free(srv_loop *l) {
    free(l->wire);
    l->wire = NULL;
    l->n_wire = 0;
}
