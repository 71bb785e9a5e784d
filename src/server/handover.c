/* Engine thread → loop thread hand-over.
 *
 * The engine calls handover_on_output on its own thread with pointers that are valid only during
 * the call. We copy the output into one heap message (the arrays follow the header), append it to
 * the loop's queue under the loop's mutex and wake the loop. The engine thread never writes a
 * socket and never waits on the network: the only lock it takes here is held for a pointer swap. */
#include "server/server_internal.h"

#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

struct srv_msg {
    srv_msg *next;
    srv_req *r;
    engine_output o; /* its arrays point into this message */
};

/* The engine's finish reasons are string literals; handing on a literal of our own (not a copy in
 * the message, which is freed after use) keeps the pointer valid for as long as anyone holds it. */
static const char *finish_reason_literal(const char *r) {
    static const char *const known[] = {"stop", "length", "abort", "error"};
    if (!r) return NULL;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (!strcmp(r, known[i])) return known[i];
    return "error";
}

static size_t align8(size_t n) {
    return (n + 7) & ~(size_t)7;
}

/* Copies n elements of `size` bytes to *at (advancing it); NULL stays NULL. */
static void *copy_into(char **at, const void *src, size_t n, size_t size) {
    if (!src || n == 0) return NULL;
    void *dst = *at;
    memcpy(dst, src, n * size);
    *at += align8(n * size);
    return dst;
}

static srv_msg *msg_copy(const engine_output *o, srv_req *r) {
    size_t nt = o->n_tokens > 0 ? (size_t)o->n_tokens : 0;
    size_t ntop = o->top_ids ? nt * (size_t)(o->top_k > 0 ? o->top_k : 0) : 0;
    size_t nprompt = o->prompt_top_ids
                         ? (size_t)o->n_prompt_rows * (size_t)(o->prompt_k > 0 ? o->prompt_k : 0)
                         : 0;
    size_t nrows = o->prompt_logprobs && o->n_prompt_rows > 0 ? (size_t)o->n_prompt_rows : 0;
    size_t bytes = align8(sizeof(srv_msg)) + align8(nt * 4) * 2 + align8(ntop * 4) * 2 +
                   align8(nprompt * 4) * 2 + align8(nrows * 4);
    srv_msg *m = xmalloc(bytes);
    m->next = NULL;
    m->r = r;
    m->o = *o;
    char *at = (char *)m + align8(sizeof(srv_msg));
    m->o.tokens = copy_into(&at, o->tokens, nt, sizeof(int32_t));
    m->o.logprobs = copy_into(&at, o->logprobs, nt, sizeof(float));
    m->o.top_ids = copy_into(&at, o->top_ids, ntop, sizeof(int32_t));
    m->o.top_logprobs = copy_into(&at, o->top_logprobs, ntop, sizeof(float));
    m->o.prompt_top_ids = copy_into(&at, o->prompt_top_ids, nprompt, sizeof(int32_t));
    m->o.prompt_top_logprobs = copy_into(&at, o->prompt_top_logprobs, nprompt, sizeof(float));
    m->o.prompt_logprobs = copy_into(&at, o->prompt_logprobs, nrows, sizeof(float));
    m->o.finish_reason = finish_reason_literal(o->finish_reason);
    return m;
}

void handover_on_output(const engine_output *o, void *user) {
    srv_req *r = user;
    srv_loop *l = r->loop; /* set before submission, never changed: safe to read here */
    srv_msg *m = msg_copy(o, r);
    pthread_mutex_lock(&l->mu);
    bool was_empty = l->head == NULL;
    if (l->tail)
        l->tail->next = m;
    else
        l->head = m;
    l->tail = m;
    pthread_mutex_unlock(&l->mu);
    /* One wake-up per batch: the loop takes the whole queue at once. */
    if (was_empty) event_active(l->wake, EV_READ, 0);
}

void handover_wake(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what;
    srv_loop *l = arg;
    uint64_t t0 = loop_cpu_ns();
    pthread_mutex_lock(&l->mu);
    srv_msg *m = l->head;
    l->head = l->tail = NULL;
    int cmd = l->commands;
    l->commands = 0;
    pthread_mutex_unlock(&l->mu);
    while (m) {
        srv_msg *next = m->next;
        generate_on_output(m->r, &m->o);
        free(m);
        m = next;
    }
    offload_deliver(l);
    if (cmd & CMD_STOP_ACCEPT && l->bound) {
        overflow_stop_listening(l);
        if (l->accept_retry) event_del(l->accept_retry);
        evhttp_del_accept_socket(l->http, l->bound); /* closes the listening socket */
        l->bound = NULL;
        l->listen_fd = -1;
    }
    if (cmd & CMD_ABORT_ALL) generate_abort_all(l);
    if (cmd & CMD_EXIT) {
        /* A moment for the last responses' bytes to leave the socket buffers. */
        struct timeval tv = {0, 200000};
        event_base_loopexit(l->base, &tv);
    }
    loop_note_cpu(l, t0);
}

void handover_discard(srv_loop *l) {
    pthread_mutex_lock(&l->mu);
    srv_msg *m = l->head;
    l->head = l->tail = NULL;
    pthread_mutex_unlock(&l->mu);
    while (m) {
        srv_msg *next = m->next;
        free(m);
        m = next;
    }
}
