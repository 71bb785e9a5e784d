#include "bench/http_client.h"

#include "base/error.h"
#include "base/timeutil.h"
#include "base/xalloc.h"
#include "bench/http_parse.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/util.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct hc_conn hc_conn;

struct hc_conn {
    hc_pool *pool;
    struct bufferevent *bev;
    http_parser hp;
    bool busy;
    int served;          /* responses completed on this connection */
    const hc_handler *h; /* the request in flight */
    void *user;
    char *req; /* its bytes, kept for one resend until the response starts */
    size_t req_len;
    double t_read;        /* when the current read began */
    hc_conn *prev, *next; /* all connections */
    hc_conn *next_idle;
};

struct hc_pool {
    struct event_base *base;
    char *host_header;
    struct sockaddr_storage addr;
    int addr_len;
    struct timeval timeout;
    hc_conn *all;
    hc_conn *idle; /* a stack: the most recently used connection first */
    int opened, open_now;
};

int hc_url_parse(const char *url, hc_url *out) {
    memset(out, 0, sizeof *out);
    if (!strncmp(url, "https://", 8))
        return err_set("--url %s: https is not supported (use http://)", url);
    if (strncmp(url, "http://", 7) != 0)
        return err_set("--url %s: expected http://host[:port][/prefix]", url);
    const char *h = url + 7, *slash = strchr(h, '/');
    const char *end = slash ? slash : h + strlen(h);
    const char *colon = NULL;
    if (*h == '[') { /* [IPv6]:port */
        const char *rb = memchr(h, ']', (size_t)(end - h));
        if (!rb) return err_set("--url %s: unterminated [IPv6 address]", url);
        out->host = xstrndup(h + 1, (size_t)(rb - h - 1));
        colon = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = memchr(h, ':', (size_t)(end - h));
        out->host = xstrndup(h, (size_t)((colon ? colon : end) - h));
    }
    out->port = 80;
    if (colon) {
        char *e;
        long port = strtol(colon + 1, &e, 10);
        if (e != end || port < 1 || port > 65535) {
            hc_url_free(out);
            return err_set("--url %s: bad port", url);
        }
        out->port = (int)port;
    }
    if (!*out->host) {
        hc_url_free(out);
        return err_set("--url %s: no host", url);
    }
    size_t plen = slash ? strlen(slash) : 0;
    while (plen > 0 && slash[plen - 1] == '/') plen--;
    out->prefix = xstrndup(slash ? slash : "", plen);
    return 0;
}

void hc_url_free(hc_url *u) {
    free(u->host);
    free(u->prefix);
    memset(u, 0, sizeof *u);
}

hc_pool *hc_pool_new(struct event_base *base, const char *host, int port, double timeout_s) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    int rc = getaddrinfo(host, ports, &hints, &res);
    if (rc != 0 || !res) {
        err_set("cannot resolve '%s': %s", host, gai_strerror(rc));
        return NULL;
    }
    hc_pool *p = xcalloc(1, sizeof *p);
    p->base = base;
    memcpy(&p->addr, res->ai_addr, res->ai_addrlen);
    p->addr_len = (int)res->ai_addrlen;
    freeaddrinfo(res);
    p->host_header =
        strchr(host, ':') ? xasprintf("[%s]:%d", host, port) : xasprintf("%s:%d", host, port);
    p->timeout.tv_sec = (long)timeout_s;
    p->timeout.tv_usec = (long)((timeout_s - (double)(long)timeout_s) * 1e6);
    return p;
}

int hc_pool_opened(const hc_pool *p) {
    return p->opened;
}
int hc_pool_open_now(const hc_pool *p) {
    return p->open_now;
}

static void idle_remove(hc_pool *p, hc_conn *c) {
    for (hc_conn **pp = &p->idle; *pp; pp = &(*pp)->next_idle)
        if (*pp == c) {
            *pp = c->next_idle;
            break;
        }
    c->next_idle = NULL;
}

static void conn_close(hc_conn *c) {
    hc_pool *p = c->pool;
    if (!c->busy) idle_remove(p, c);
    if (c->prev)
        c->prev->next = c->next;
    else
        p->all = c->next;
    if (c->next) c->next->prev = c->prev;
    bufferevent_free(c->bev);
    free(c->req);
    free(c);
    p->open_now--;
}

void hc_pool_free(hc_pool *p) {
    if (!p) return;
    while (p->all) conn_close(p->all);
    free(p->host_header);
    free(p);
}

static void read_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short events, void *arg);

static hc_conn *conn_open(hc_pool *p) {
    struct bufferevent *bev = bufferevent_socket_new(p->base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        err_set("cannot create a socket buffer");
        return NULL;
    }
    hc_conn *c = xcalloc(1, sizeof *c);
    c->pool = p;
    c->bev = bev;
    bufferevent_setcb(bev, read_cb, NULL, event_cb, c);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
    if (bufferevent_socket_connect(bev, (struct sockaddr *)&p->addr, p->addr_len) != 0) {
        err_set("connect to %s: %s", p->host_header,
                evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        bufferevent_free(bev);
        free(c);
        return NULL;
    }
    c->next = p->all;
    if (p->all) p->all->prev = c;
    p->all = c;
    p->opened++;
    p->open_now++;
    return c;
}

/* Puts the request on the connection (busy, parser reset, timeouts armed). */
static void conn_send(hc_conn *c, const hc_handler *h, void *user, char *req, size_t req_len) {
    c->busy = true;
    c->h = h;
    c->user = user;
    c->req = req;
    c->req_len = req_len;
    hp_init(&c->hp);
    bufferevent_set_timeouts(c->bev, &c->pool->timeout, &c->pool->timeout);
    bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    bufferevent_write(c->bev, req, req_len);
}

int hc_request(hc_pool *p, const char *method, const char *path, const char *extra_headers,
               const char *body, size_t body_len, const hc_handler *h, void *user) {
    char *head =
        xasprintf("%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: gptoss-bench\r\nAccept: */*\r\n"
                  "%s%s",
                  method, path, p->host_header, extra_headers ? extra_headers : "",
                  body ? "Content-Type: application/json\r\n" : "");
    char *cl = body ? xasprintf("Content-Length: %zu\r\n\r\n", body_len) : xstrdup("\r\n");
    size_t hl = strlen(head), cll = strlen(cl), n = hl + cll + (body ? body_len : 0);
    char *req = xmalloc(n);
    memcpy(req, head, hl);
    memcpy(req + hl, cl, cll);
    if (body) memcpy(req + hl + cll, body, body_len);
    free(head), free(cl);

    hc_conn *c = p->idle;
    if (c) {
        p->idle = c->next_idle;
        c->next_idle = NULL;
    } else if (!(c = conn_open(p))) {
        free(req);
        return -1;
    }
    conn_send(c, h, user, req, n);
    return 0;
}

/* The request on c ended; c is idle (or closed) before the handler runs, so the handler can reuse
 * it. */
static void conn_finish(hc_conn *c, int status, const char *error, bool keep) {
    const hc_handler *h = c->h;
    void *user = c->user;
    double t = c->t_read > 0 ? c->t_read : now_seconds();
    c->h = NULL;
    c->user = NULL;
    free(c->req);
    c->req = NULL;
    if (keep) {
        c->busy = false;
        c->served++;
        c->t_read = 0;
        bufferevent_set_timeouts(c->bev, NULL, NULL);
        c->next_idle = c->pool->idle;
        c->pool->idle = c;
    } else {
        c->busy = false;
        conn_close(c);
    }
    h->on_done(user, status, error, error ? now_seconds() : t);
}

/* A reused connection that the server closed before answering: send the request again on a fresh
 * one. Returns true when it did. */
static bool try_resend(hc_conn *c) {
    if (c->served == 0 || c->hp.n_bytes > 0 || !c->req) return false;
    hc_conn *n = conn_open(c->pool);
    if (!n) return false;
    const hc_handler *h = c->h;
    void *user = c->user;
    char *req = c->req;
    size_t len = c->req_len;
    c->req = NULL;
    c->busy = false;
    conn_close(c);
    conn_send(n, h, user, req, len);
    return true;
}

static void on_body(void *arg, const char *data, size_t len) {
    hc_conn *c = arg;
    if (c->h->on_body) c->h->on_body(c->user, data, len, c->t_read);
}

static void read_cb(struct bufferevent *bev, void *arg) {
    hc_conn *c = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    if (!c->busy) { /* bytes nobody asked for: the connection cannot be trusted any more */
        conn_close(c);
        return;
    }
    c->t_read = now_seconds();
    if (c->req) { /* the response has started: no resend from here on */
        free(c->req);
        c->req = NULL;
    }
    while (evbuffer_get_length(in) > 0) {
        struct evbuffer_iovec v[8];
        int k = evbuffer_peek(in, -1, NULL, v, 8);
        size_t used = 0;
        for (int i = 0; i < k && i < 8 && !hp_done(&c->hp); i++) {
            long n = hp_feed(&c->hp, v[i].iov_base, v[i].iov_len, on_body, c);
            if (n < 0) {
                char msg[256];
                snprintf(msg, sizeof msg, "bad HTTP response: %s", c->hp.error);
                conn_finish(c, c->hp.status, msg, false);
                return;
            }
            used += (size_t)n;
        }
        evbuffer_drain(in, used);
        if (hp_done(&c->hp)) {
            /* Bytes after the end of the response mean the stream is out of step: do not reuse. */
            bool keep = c->hp.keep_alive && evbuffer_get_length(in) == 0;
            conn_finish(c, c->hp.status, NULL, keep);
            return;
        }
    }
}

static void event_cb(struct bufferevent *bev, short events, void *arg) {
    hc_conn *c = arg;
    if (events & BEV_EVENT_CONNECTED) {
        int one = 1;
        evutil_socket_t fd = bufferevent_getfd(bev);
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        return;
    }
    if (!c->busy) { /* an idle connection closed or failed: forget it */
        conn_close(c);
        return;
    }
    char msg[320];
    if (events & BEV_EVENT_EOF) {
        if (hp_eof(&c->hp) == 0) {
            conn_finish(c, c->hp.status, NULL, false);
            return;
        }
        if (try_resend(c)) return;
        snprintf(msg, sizeof msg, "%s", c->hp.error);
    } else if (events & BEV_EVENT_TIMEOUT) {
        snprintf(msg, sizeof msg, "no data from %s for %ld s (%s)", c->pool->host_header,
                 (long)c->pool->timeout.tv_sec,
                 c->hp.n_bytes ? "in the middle of the response" : "no response");
    } else {
        int err = EVUTIL_SOCKET_ERROR();
        if (try_resend(c)) return;
        snprintf(msg, sizeof msg, "%s %s: %s",
                 c->hp.n_bytes || c->served ? "connection to" : "connect to", c->pool->host_header,
                 err ? evutil_socket_error_to_string(err) : "socket error");
    }
    conn_finish(c, c->hp.status, msg, false);
}
