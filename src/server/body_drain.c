/* Reading what is left of a refused body, so that the client reads our 413 instead of a reset.
 *
 * evhttp refuses a body over --max-request-bytes with 413 and then closes the connection. With
 * EVHTTP_SERVER_LINGERING_CLOSE it first drains what it believes is left of the body, but for a
 * chunked body that is only the chunk it is reading: the client is still sending the next chunks
 * when the socket closes, and a socket closed with unread bytes in its receive queue sends a reset
 * (RFC 9293 §3.6.1's "abort"), which may reach the client before it has read the 413. The client then
 * sees a dropped connection instead of an answer (tests/node/server_bad_input.mjs, '40 MB chunked':
 * seen in CI in session 39).
 *
 * So when the 413 is written (wire.c sees it pass), the loop duplicates the connection's descriptor:
 * the socket then outlives evhttp's close of its own descriptor, and this file reads and discards
 * from the duplicate until the client closes its side, or until a cap — --max-request-bytes more
 * bytes, --timeout-keep-alive without a byte, or DRAIN_MAX_SECONDS in all — after which it closes
 * (a reset then only reaches a client that kept sending past every bound). evhttp has stopped
 * reading the connection before it writes the 413, so the two never read the same bytes; its write
 * of the answer goes through its own descriptor, untouched by this one.
 *
 * Without a descriptor to spare (dup fails at the limit), the connection is left to evhttp as
 * before. */
#include "server/server_internal.h"

#include "base/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

enum { DRAIN_MAX_SECONDS = 30 };

struct body_drain {
    srv_loop *l;
    struct body_drain *prev, *next; /* the loop's live drains */
    evutil_socket_t fd;             /* our duplicate of the connection's descriptor */
    struct event *ev;
    size_t left;    /* bytes still to be read before giving up */
    time_t give_up; /* the loop's clock: DRAIN_MAX_SECONDS after the 413 */
};

static void drain_close(body_drain *d) {
    if (d->prev)
        d->prev->next = d->next;
    else
        d->l->drains = d->next;
    if (d->next) d->next->prev = d->prev;
    event_free(d->ev);
    close(d->fd);
    free(d);
}

static void on_readable(evutil_socket_t fd, short what, void *arg) {
    body_drain *d = arg;
    struct timeval now;
    event_base_gettimeofday_cached(d->l->base, &now);
    if ((what & EV_TIMEOUT) || now.tv_sec >= d->give_up) {
        drain_close(d);
        return;
    }
    char buf[16384];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n > 0) {
            if ((size_t)n >= d->left) break; /* past the cap */
            d->left -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return; /* wait for more */
        break; /* the client closed its side (0), or the socket failed */
    }
    drain_close(d);
}

void body_drain_start(srv_loop *l, evutil_socket_t conn_fd) {
    if (!l || !l->base || conn_fd < 0) return;
    int fd = fcntl(conn_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return;
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        close(fd);
        return;
    }
    body_drain *d = xcalloc(1, sizeof *d);
    d->l = l, d->fd = fd;
    size_t cap = l->srv->opt.max_request_bytes;
    d->left = cap > 0 ? cap : 1;
    struct timeval now;
    event_base_gettimeofday_cached(l->base, &now);
    d->give_up = now.tv_sec + DRAIN_MAX_SECONDS;
    d->ev = event_new(l->base, fd, EV_READ | EV_PERSIST, on_readable, d);
    int idle = l->srv->opt.idle_timeout > 0 ? l->srv->opt.idle_timeout : DRAIN_MAX_SECONDS;
    const struct timeval tv = {idle < DRAIN_MAX_SECONDS ? idle : DRAIN_MAX_SECONDS, 0};
    if (!d->ev || event_add(d->ev, &tv) != 0) {
        if (d->ev) event_free(d->ev);
        close(fd);
        free(d);
        return;
    }
    d->next = l->drains;
    if (l->drains) l->drains->prev = d;
    l->drains = d;
}

void body_drain_free_all(srv_loop *l) {
    while (l->drains) drain_close(l->drains);
}
