/* The generation endpoints: /v1/completions, /v1/chat/completions, /v1/responses.
 *
 * On the loop thread: the api layer parses and tokenises the body into an engine request, which we
 * submit with handover_on_output as its callback. The engine's outputs come back to this loop
 * (handover.c) and go through api_stream_feed, which gives the SSE events (streaming) or, at the
 * end, the whole JSON body. A client that goes away (closed socket, write error or timeout) aborts
 * its request at once, so its KV blocks return to the pool within a step. */
#include "server/server_internal.h"

#include "base/error.h"
#include "base/log.h"
#include "base/rng.h"
#include "base/xalloc.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static void live_link(srv_loop *l, srv_req *r) {
    r->prev = NULL;
    r->next = l->live;
    if (l->live) l->live->prev = r;
    l->live = r;
    atomic_fetch_add(&l->srv->inflight, 1);
}

static void live_unlink_free(srv_req *r) {
    srv_loop *l = r->loop;
    if (r->prev)
        r->prev->next = r->next;
    else
        l->live = r->next;
    if (r->next) r->next->prev = r->prev;
    if (r->watch) event_free(r->watch);
    if (r->background) background_remove(l->srv, r->resp_id);
    if (r->stream) api_stream_free(r->stream);
    api_call_free(&r->call);
    atomic_fetch_sub(&l->srv->inflight, 1);
    free(r);
}

/* Frees the request once the engine has finished every sequence and the HTTP side is done. */
static void maybe_free(srv_req *r) {
    if (r->http_done && r->n_final >= r->n_seqs) live_unlink_free(r);
}

/* While we owe a response, the connection has no read timeout. evhttp re-enables reading (for
 * close detection) with the connection's read timeout on every write of a streamed reply, so a
 * stream waiting longer than --timeout-keep-alive for its next token (queued behind a full batch, a
 * long prefill) would be cut as if it were an idle client. on_watch notices a client that hangs
 * up; the write timeout stays, so a client that stops reading is still dropped. Once the response
 * is done the idle keep-alive timeout applies again. */
static void set_read_timeout(srv_req *r, bool on) {
    struct bufferevent *bev = r->evcon ? evhttp_connection_get_bufferevent(r->evcon) : NULL;
    if (!bev) return;
    struct timeval tv = {.tv_sec = r->loop->srv->opt.idle_timeout};
    bufferevent_set_timeouts(bev, on ? &tv : NULL, &tv);
}

/* The HTTP side is over (response finished or client gone): stop watching the connection. */
static void detach_http(srv_req *r) {
    if (r->watch) {
        event_free(r->watch);
        r->watch = NULL;
    }
    set_read_timeout(r, true);
    if (r->evcon) evhttp_connection_set_closecb(r->evcon, NULL, NULL);
    r->evcon = NULL;
    r->req = NULL;
    r->http_done = true;
}

static void abort_engine(srv_req *r) {
    if (r->aborted || r->n_final >= r->n_seqs) return;
    r->aborted = true;
    for (int p = 0; p < r->n_submitted; p++) engine_abort(r->loop->srv->eng, r->id + (uint64_t)p);
}

/* Called by evhttp when the connection goes down while we still owe it a response. */
static void on_close(struct evhttp_connection *evcon, void *arg) {
    (void)evcon;
    srv_req *r = arg;
    /* After a network error evhttp detaches a request the user still owns (its connection becomes
     * NULL) and leaves freeing it to us; one still attached is freed with the connection. */
    if (r->req && evhttp_request_get_connection(r->req) == NULL) evhttp_request_free(r->req);
    r->evcon = NULL; /* going away: do not touch its close callback */
    detach_http(r);
    abort_engine(r);
    maybe_free(r);
}

/* evhttp stops reading a connection while a request is being answered, so on its own it would
 * notice a client that hung up only at the next write (never, for a non-streamed request until
 * the end). This watcher peeks at the socket: end of file means the client is gone. */
static void on_watch(evutil_socket_t fd, short what, void *arg) {
    (void)what;
    srv_req *r = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) {
        /* The client sent more (a pipelined request): it is alive; stop watching so we do not
         * spin on the unread bytes. evhttp reads them after this response. */
        event_free(r->watch);
        r->watch = NULL;
        return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    /* EOF or a reset: free the connection; its close callback (on_close) does the rest. */
    evhttp_connection_free(r->evcon);
}

static void finish_stream(srv_req *r) {
    struct evhttp_request *req = r->req;
    detach_http(r);
    evhttp_send_reply_end(req);
}

static void send_chunk(srv_req *r, const char *data, size_t len) {
    if (len == 0) return;
    struct evbuffer *b = evbuffer_new();
    evbuffer_add(b, data, len);
    evhttp_send_reply_chunk(r->req, b);
    evbuffer_free(b);
}

static void fail_response(srv_req *r, const char *why) {
    server *s = r->loop->srv;
    log_error("request %llu: %s", (unsigned long long)r->id, why);
    if (r->started) {
        finish_stream(r);
    } else {
        struct evhttp_request *req = r->req;
        detach_http(r);
        reply_error(s, req, 500, "internal_error", "", "%s", why);
    }
    abort_engine(r);
}

/* A background response has no client: the stream still runs (it keeps the response in the store,
 * in progress and at the end); what it would send goes nowhere. */
static void feed_background(srv_req *r, const engine_output *eo) {
    char *out = NULL;
    size_t out_len = 0;
    if (api_stream_feed(r->stream, eo, &out, &out_len) < 0) {
        log_error("request %llu: the background response could not be built",
                  (unsigned long long)r->id);
        abort_engine(r);
    }
    free(out);
}

void generate_on_output(srv_req *r, const engine_output *eo) {
    if (eo->finished) r->n_final++;
    if (r->background) {
        feed_background(r, eo);
    } else if (!r->http_done) {
        /* The stream numbers choices over all prompts: prompt × n + sample. */
        engine_output o = *eo;
        o.index = (int)(eo->request_id - r->id) * r->n_per + eo->index;
        char *out = NULL;
        size_t out_len = 0;
        int done = api_stream_feed(r->stream, &o, &out, &out_len);
        if (done < 0) {
            fail_response(r, "the response could not be built from the engine's output");
        } else if (r->streaming) {
            send_chunk(r, out, out_len);
            if (done) finish_stream(r);
        } else if (done) {
            struct evhttp_request *req = r->req;
            detach_http(r);
            reply_json(r->loop->srv, req, 200, out ? out : "", out_len);
        }
        free(out);
        /* Every sequence finished but the api layer did not complete the response: never leave the
         * client hanging. */
        if (!r->http_done && r->n_final >= r->n_seqs) fail_response(r, "the response ended early");
    }
    maybe_free(r);
}

/* Submission refusals from the engine: a full waiting queue is 429 (the client may retry), the
 * rest are request errors whose message starts with the field's name. */
static void reply_submit_error(server *s, struct evhttp_request *req, const char *msg) {
    if (!strncmp(msg, "too many requests", 17)) {
        reply_error(s, req, 429, "rate_limit_error", "", "%s", msg);
        return;
    }
    char param[64] = "";
    const char *colon = strchr(msg, ':');
    if (colon && (size_t)(colon - msg) < sizeof param && !memchr(msg, ' ', (size_t)(colon - msg)))
        snprintf(param, sizeof param, "%.*s", (int)(colon - msg), msg);
    reply_error(s, req, 400, "invalid_request_error", param, "%s", msg);
}

static void make_id(server *s, api_kind kind, uint64_t id, char *out, size_t cap) {
    const char *prefix = kind == API_COMPLETIONS ? "cmpl-"
                         : kind == API_CHAT      ? "chatcmpl-"
                                                 : "resp_";
    uint64_t a = rng_hash2(s->id_salt, id), b = rng_hash2(a, id ^ 0x5bd1e995u);
    snprintf(out, cap, "%s%016llx%08llx", prefix, (unsigned long long)a,
             (unsigned long long)(b & 0xffffffffu));
}

/* Parsing, rendering and tokenising: a pure function of the body (a worker runs it for large ones). */
static int parse_call(server *s, api_kind kind, const char *body, size_t len, api_call *call,
                      api_error *err) {
    memset(call, 0, sizeof *call);
    memset(err, 0, sizeof *err);
    return kind == API_COMPLETIONS ? api_parse_completions(body, len, s->tok, &s->api, call, err)
           : kind == API_CHAT      ? api_parse_chat(body, len, s->tok, &s->api, call, err)
                                   : api_parse_responses(body, len, s->tok, &s->api, call, err);
}

static void start(srv_loop *l, struct evhttp_request *req, api_kind kind, int rc, api_call call,
                  api_error err);

static void parse_work(server *s, offload_job *j, const char *body, size_t len) {
    j->rc = parse_call(s, j->kind, body, len, &j->call, &j->err);
}

static void parse_done(srv_loop *l, offload_job *j) {
    if (j->req)
        start(l, j->req, j->kind, j->rc, j->call, j->err);
    else
        api_call_free(&j->call);
    offload_job_free(j);
}

void generate_handle(srv_loop *l, struct evhttp_request *req, api_kind kind) {
    if (evbuffer_get_length(evhttp_request_get_input_buffer(req)) >= OFFLOAD_MIN_BYTES) {
        offload_job *j = xcalloc(1, sizeof *j);
        j->kind = kind;
        j->work = parse_work;
        j->done = parse_done;
        offload_submit(l, req, j);
        return;
    }
    size_t len;
    const char *body = request_body(req, &len);
    api_call call;
    api_error err;
    int rc = parse_call(l->srv, kind, body, len, &call, &err);
    start(l, req, kind, rc, call, err);
}

/* Loop thread: answers a refused request, or submits the parsed one to the engine. */
static void start(srv_loop *l, struct evhttp_request *req, api_kind kind, int rc, api_call call,
                  api_error err) {
    server *s = l->srv;
    if (rc != 0) {
        api_call_free(&call);
        if (err.status == 0)
            api_error_set(&err, 400, "invalid_request_error", "", "invalid request");
        reply_api_error(s, req, &err);
        return;
    }
    srv_req *r = xcalloc(1, sizeof *r);
    r->loop = l;
    r->req = req;
    r->evcon = evhttp_request_get_connection(req);
    r->call = call;
    r->n_prompts = api_call_n_prompts(&call);
    r->id = atomic_fetch_add(&s->next_id, (uint64_t)r->n_prompts);
    r->n_per = call.req.n > 0 ? call.req.n : 1;
    r->n_seqs = r->n_prompts * r->n_per;
    r->streaming = call.stream;
    char idstr[64];
    make_id(s, kind, r->id, idstr, sizeof idstr);
    r->stream = api_stream_new(&r->call, s->tok, idstr, (long)time(NULL));
    r->call.req.id = r->id;
    r->call.req.on_output = handover_on_output;
    r->call.req.user = r;
    live_link(l, r);
    if (!r->stream) {
        r->n_final = r->n_seqs; /* never submitted */
        fail_response(r, "cannot start the response");
        maybe_free(r);
        return;
    }
    for (int p = 0; p < r->n_prompts; p++) {
        engine_request rq;
        api_call_request(&r->call, p, &rq);
        rq.id = r->id + (uint64_t)p;
        if (engine_submit(s->eng, &rq) != 0) {
            /* The prompts not submitted never report; those that were are aborted and report
             * their final output (the request is freed after it). */
            r->n_final += (r->n_prompts - p) * r->n_per;
            detach_http(r);
            reply_submit_error(s, req, err_msg());
            abort_engine(r);
            maybe_free(r);
            return;
        }
        r->n_submitted = p + 1;
    }
    /* From here the engine may call back at any time, but the outputs are handled on this thread,
     * after this function returns. */
    if (r->call.background) {
        /* Answer now with the queued response; the request lives on without its connection (it
         * is still in flight for the drain, which waits for it or aborts it). */
        size_t blen = 0;
        char *queued = api_stream_background_start(r->stream, &blen);
        r->background = true;
        snprintf(r->resp_id, sizeof r->resp_id, "%s", idstr);
        background_add(s, r->resp_id, r->id, r->n_submitted);
        detach_http(r);
        reply_json(s, req, 200, queued ? queued : "{}", blen);
        free(queued);
        return;
    }
    evhttp_connection_set_closecb(r->evcon, on_close, r);
    set_read_timeout(r, false);
    struct bufferevent *bev = evhttp_connection_get_bufferevent(r->evcon);
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd >= 0) {
        r->watch = event_new(l->base, fd, EV_READ | EV_PERSIST, on_watch, r);
        event_add(r->watch, NULL);
    }
    if (r->streaming) {
        struct evkeyvalq *h = evhttp_request_get_output_headers(req);
        evhttp_add_header(h, "Content-Type", "text/event-stream; charset=utf-8");
        evhttp_add_header(h, "Cache-Control", "no-cache");
        router_common_headers(s, req);
        evhttp_send_reply_start(req, 200, "OK");
        r->started = true;
    }
}

void generate_abort_all(srv_loop *l) {
    for (srv_req *r = l->live; r; r = r->next) abort_engine(r);
}

void generate_free_all(srv_loop *l) {
    while (l->live) {
        srv_req *r = l->live;
        /* The connection (and an attached request) is freed by evhttp_free after this. */
        if (r->evcon) evhttp_connection_set_closecb(r->evcon, NULL, NULL);
        live_unlink_free(r);
    }
}
