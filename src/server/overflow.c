/* Answering at the descriptor limit (admission.c pauses evhttp's accepting there).
 *
 * When every descriptor is taken, new clients would wait in the listen queue until some connection
 * closes: behind idle connections that an attacker holds open, that may be never, and /health would
 * time out just when an orchestrator needs it. So each loop keeps a few spare descriptors (open on
 * /dev/null). While evhttp's accepting is paused, the loop accepts on its own with them, one spare
 * per connection, and gives each a short moment (its request has normally arrived with it): a
 * GET /health is answered as usual, any other request gets 503 with Retry-After and its connection
 * closed, and a connection that sent nothing is closed. The spare is taken back at once. This drains
 * the listen queue fast, so a probe waits behind at most a few idle connections, and it costs
 * nothing while descriptors are free (the spares sit unused). */
#define _GNU_SOURCE /* accept4 */
#include "server/server_internal.h"

#include "api/api.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* How long an accepted connection has to deliver its request line. */
static const struct timeval WAIT = {0, 50000};

typedef struct ov_conn {
    srv_loop *l;
    evutil_socket_t fd;
    struct event *ev;
    size_t len;
    char buf[2048];
} ov_conn;

static void take_spares(srv_loop *l) {
    while (l->n_spares < OVERFLOW_SPARES) {
        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (fd < 0) return;
        l->spares[l->n_spares++] = fd;
    }
}

static void answer(ov_conn *c) {
    server *s = c->l->srv;
    bool health = (!strncmp(c->buf, "GET /health ", 12) || !strncmp(c->buf, "GET /health?", 12));
    char body[512];
    int status;
    if (health && atomic_load(&s->state) == SRV_READY) {
        status = 200;
        snprintf(body, sizeof body, "{\"status\":\"ok\"}");
    } else {
        api_error e;
        status = 503;
        api_error_set(&e, 503, "service_unavailable", "",
                      health ? "not ready"
                             : "the server is at its connection limit (open files or "
                               "--max-connections); retry shortly");
        char *j = api_error_json(&e);
        snprintf(body, sizeof body, "%s", j);
        free(j);
    }
    char out[768];
    int n = snprintf(out, sizeof out,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n"
                     "%sContent-Length: %zu\r\n\r\n%s",
                     status, status == 200 ? "OK" : "Service Unavailable",
                     status == 503 ? "Retry-After: 1\r\n" : "", strlen(body), body);
    /* A few hundred bytes into an empty socket buffer: one non-blocking send suffices. */
    ssize_t ignored = send(c->fd, out, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
}

static void close_conn(ov_conn *c) {
    srv_loop *l = c->l;
    for (int i = 0; i < OVERFLOW_SPARES; i++)
        if (l->ov_live[i] == c) l->ov_live[i] = NULL;
    event_free(c->ev);
    close(c->fd);
    free(c);
    take_spares(l); /* the number just freed */
    if (l->overflow_on && l->overflow_ev && l->n_spares > 0) event_add(l->overflow_ev, NULL);
}

static void on_data(evutil_socket_t fd, short what, void *arg) {
    ov_conn *c = arg;
    if (what & EV_READ) {
        ssize_t n = recv(fd, c->buf + c->len, sizeof c->buf - 1 - c->len, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
        if (n > 0) {
            c->len += (size_t)n;
            c->buf[c->len] = 0;
            /* The request line is all we need; wait for the whole head so that closing does not
             * reset the connection over unread bytes. */
            if (!strstr(c->buf, "\r\n\r\n") && !strstr(c->buf, "\n\n") &&
                c->len < sizeof c->buf - 1)
                return;
            answer(c);
        }
    } else if (c->len > 0) {
        answer(c); /* timed out mid-head: still answer what we have */
    }
    close_conn(c);
}

static void on_listen(evutil_socket_t lfd, short what, void *arg) {
    (void)what;
    srv_loop *l = arg;
    /* One spare per connection: a burst is taken a few at a time, the rest on the next call. */
    while (l->n_spares > 0) {
        close(l->spares[--l->n_spares]);
        evutil_socket_t fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            take_spares(l);
            break;
        }
        ov_conn *c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            take_spares(l);
            break;
        }
        c->l = l;
        c->fd = fd;
        for (int i = 0; i < OVERFLOW_SPARES; i++)
            if (!l->ov_live[i]) {
                l->ov_live[i] = c;
                break;
            }
        c->ev = event_new(l->base, fd, EV_READ | EV_PERSIST, on_data, c);
        event_add(c->ev, &WAIT);
    }
    if (l->n_spares == 0) event_del(l->overflow_ev);
}

int overflow_setup(srv_loop *l) {
    take_spares(l);
    l->overflow_ev = event_new(l->base, l->listen_fd, EV_READ | EV_PERSIST, on_listen, l);
    return l->overflow_ev ? 0 : -1;
}

void overflow_enable(srv_loop *l, bool on) {
    if (on == l->overflow_on || !l->overflow_ev || l->listen_fd < 0) return;
    l->overflow_on = on;
    if (on) take_spares(l); /* some may have been lost to another thread's accept */
    if (on && l->n_spares > 0)
        event_add(l->overflow_ev, NULL);
    else if (!on)
        event_del(l->overflow_ev);
}

/* Before the listening socket closes (a drain): no more accepting here. */
void overflow_stop_listening(srv_loop *l) {
    if (l->overflow_ev) event_free(l->overflow_ev);
    l->overflow_ev = NULL;
    l->overflow_on = false;
}

void overflow_teardown(srv_loop *l) {
    overflow_stop_listening(l);
    for (int i = 0; i < OVERFLOW_SPARES; i++)
        if (l->ov_live[i]) {
            ov_conn *c = l->ov_live[i];
            l->ov_live[i] = NULL;
            event_free(c->ev);
            close(c->fd);
            free(c);
        }
    while (l->n_spares > 0) close(l->spares[--l->n_spares]);
}
