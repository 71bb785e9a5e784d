/* Work too large for an event loop: parsing, rendering and tokenising a big request body.
 *
 * A loop serves thousands of connections, so no request may hold it for long: every other client of
 * that loop (a /health probe too) waits meanwhile. The work is roughly linear in the body; up to
 * OFFLOAD_MIN_BYTES it takes well under a millisecond and runs inline, larger bodies (up to
 * --max-request-bytes, seconds of tokenising at 32 MB) go to a small pool of worker threads and the
 * loop carries on. The worker's result comes back through the loop's queue (the same hand-over as
 * the engine's outputs: a mutex held for a pointer swap, then event_active), and the answer is sent
 * from there.
 *
 * The connection is safe meanwhile: evhttp does not read from it while a request is being answered
 * and has nothing to write, so no timeout runs, and the keep-alive timeout cannot cut a request
 * whose answer is still being produced. The body is moved out of evhttp's buffer into the job (no
 * copy) and the worker touches nothing else of the request. A job counts as in flight, so a drain
 * waits for it. */
#include "server/server_internal.h"

#include "base/xalloc.h"

#include <event2/buffer.h>
#include <stdlib.h>
#include <string.h>

struct offload_pool {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    offload_job *head, *tail;
    bool stop;
    int n_threads;
    pthread_t *threads;
};

static void *worker_main(void *arg) {
    server *s = arg;
    offload_pool *p = s->offload;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        while (!p->head && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        offload_job *j = p->head;
        if (!j) {
            pthread_mutex_unlock(&p->mu);
            return NULL;
        }
        p->head = j->next;
        if (!p->head) p->tail = NULL;
        pthread_mutex_unlock(&p->mu);

        size_t len = evbuffer_get_length(j->body);
        const char *body = len ? (const char *)evbuffer_pullup(j->body, -1) : "";
        j->work(s, j, body ? body : "", len);

        srv_loop *l = j->loop;
        j->next = NULL;
        pthread_mutex_lock(&l->mu);
        if (l->done_tail)
            l->done_tail->next = j;
        else
            l->done_head = j;
        l->done_tail = j;
        pthread_mutex_unlock(&l->mu);
        if (l->wake) event_active(l->wake, EV_READ, 0);
    }
}

int offload_start(server *s) {
    offload_pool *p = xcalloc(1, sizeof *p);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    s->offload = p;
    /* As many as there are loops: each loop can have one big request worked on at a time without
     * waiting for another loop's. */
    p->threads = xcalloc((size_t)s->n_loops, sizeof *p->threads);
    for (int i = 0; i < s->n_loops; i++) {
        if (pthread_create(&p->threads[i], NULL, worker_main, s) != 0) return -1;
        p->n_threads++;
    }
    return 0;
}

void offload_stop(server *s) {
    offload_pool *p = s->offload;
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n_threads; i++) pthread_join(p->threads[i], NULL);
    /* Jobs never started: their loops are gone (this runs after loops_join). */
    while (p->head) {
        offload_job *j = p->head;
        p->head = j->next;
        j->req = NULL;
        j->done(j->loop, j);
    }
    free(p->threads);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p);
    s->offload = NULL;
}

void offload_submit(srv_loop *l, struct evhttp_request *req, offload_job *j) {
    server *s = l->srv;
    j->loop = l;
    j->req = req;
    j->body = evbuffer_new();
    evbuffer_add_buffer(j->body, evhttp_request_get_input_buffer(req));
    atomic_fetch_add(&s->inflight, 1);
    offload_pool *p = s->offload;
    j->next = NULL;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    pthread_cond_signal(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* Loop thread (from handover_wake): answers the finished jobs. */
void offload_deliver(srv_loop *l) {
    pthread_mutex_lock(&l->mu);
    offload_job *j = l->done_head;
    l->done_head = l->done_tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (j) {
        offload_job *next = j->next;
        server *s = l->srv;
        j->done(l, j);
        atomic_fetch_sub(&s->inflight, 1);
        j = next;
    }
}

/* Teardown, after the workers stopped: finished jobs nobody delivered. */
void offload_discard(srv_loop *l) {
    offload_job *j = l->done_head;
    l->done_head = l->done_tail = NULL;
    while (j) {
        offload_job *next = j->next;
        j->req = NULL;
        j->done(l, j);
        j = next;
    }
}

void offload_job_free(offload_job *j) {
    if (j->body) evbuffer_free(j->body);
    free(j->out);
    free(j);
}

/* ---- bodies answered by a pure function (tokenize, detokenize) ---- */

static void body_fn_work(server *s, offload_job *j, const char *body, size_t len) {
    j->status = j->fn(s, body, len, &j->out, &j->out_len);
}

static void body_fn_done(srv_loop *l, offload_job *j) {
    if (j->req) {
        reply_json_owned(l->srv, j->req, j->status, j->out, j->out_len);
        j->out = NULL;
    }
    offload_job_free(j);
}

void offload_body_fn(srv_loop *l, struct evhttp_request *req, body_fn fn) {
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    if (evbuffer_get_length(in) < OFFLOAD_MIN_BYTES) {
        size_t len;
        const char *body = request_body(req, &len);
        char *out = NULL;
        size_t out_len = 0;
        int status = fn(l->srv, body, len, &out, &out_len);
        reply_json(l->srv, req, status, out, out_len);
        free(out);
        return;
    }
    offload_job *j = xcalloc(1, sizeof *j);
    j->fn = fn;
    j->work = body_fn_work;
    j->done = body_fn_done;
    offload_submit(l, req, j);
}
